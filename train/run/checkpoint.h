// Training checkpoints: the fp32 tensors of a run (master weights, AdamW moments; the names are
// the caller's) plus a small JSON state (step, tokens, seeds, schedule, config), saved so that a
// run killed at any moment resumes from its last completed checkpoint, and a corrupt checkpoint
// is refused with an error instead of being half-loaded.
//
// On disk, a run directory holds
//   step_00000120/tensors.safetensors   every tensor as F32 (formats/io/safetensors.h)
//   step_00000120/state.json            {"format": "blockscale-checkpoint", "version": 1,
//                                         "step": 120, "tensors_bytes": <file size>,
//                                         "tensors_xxh64": "<16 hex digits>", "state": {...}}
//   latest                              "step_00000120\n": the newest committed checkpoint
// The checksum is XXH64 (xxHash's 64-bit hash, seed 0) of the whole tensors file.
//
// A save writes into step_XXXXXXXX.tmp-<pid>/, fsyncs files and directory, renames it to
// step_XXXXXXXX (swapping atomically with an older save of the same step), fsyncs the run
// directory, then replaces `latest` (temporary file, fsync, rename). The rename of `latest` is
// the commit point: a save killed before it leaves `latest` on the previous checkpoint and a
// *.tmp-* directory that loads ignore and the next save removes. A run directory has one writer.
//
//   defines: TensorRef, TensorSlot, save_checkpoint, load_checkpoint, read_checkpoint_state, latest_checkpoint,
//            prune_checkpoints, detail::Xxh64
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "formats/status.h"

namespace blockscale::train {

inline constexpr int kCheckpointVersion = 1;

// A tensor to save: row-major fp32 `data` of `shape` (empty shape: a scalar), owned by the caller.
struct TensorRef {
  std::string name;
  std::vector<int64_t> shape;
  const float* data = nullptr;
};

// Where to load a tensor: the file's tensor `name` must be F32 of exactly `shape`.
struct TensorSlot {
  std::string name;
  std::vector<int64_t> shape;
  float* data = nullptr;
};

// Writes <dir>/step_<step, 8 digits>/{tensors.safetensors,state.json} (creating `dir` if needed),
// then points <dir>/latest at it. `state` is stored as given. Tensors stream from the caller's
// memory into the file; nothing is copied. Re-saving an existing step replaces it.
Status save_checkpoint(const std::string& dir, int64_t step, const std::vector<TensorRef>& tensors,
                       const nlohmann::json& state);

// Loads a checkpoint: `path` is a checkpoint directory (it holds state.json) or a run directory
// (its `latest` is followed). Every slot must match a tensor of the file and every tensor of the
// file must have a slot. Everything is checked (format, version, size, checksum, names, dtypes,
// shapes) before the first byte is copied: on error the slots are untouched. `state` receives
// the caller's state as saved; `resolved_dir`, if given, the checkpoint directory used.
Status load_checkpoint(const std::string& path, const std::vector<TensorSlot>& slots,
                       nlohmann::json* state, std::string* resolved_dir = nullptr);

// The caller's state of the checkpoint `path` names (as load_checkpoint resolves it), read and
// checked without touching its tensors: what a resume compares before it loads them.
Status read_checkpoint_state(const std::string& path, nlohmann::json* state, std::string* resolved_dir = nullptr);

// The checkpoint directory <dir>/latest names; an error if there is none or it is missing.
Status latest_checkpoint(const std::string& dir, std::string* checkpoint_dir);

// Deletes all but the newest `keep` (>= 1) complete checkpoints (step_* directories with a
// state.json) of run directory `dir`; the one `latest` names is always kept.
Status prune_checkpoints(const std::string& dir, int keep);

namespace detail {

// XXH64 with seed 0 (https://github.com/Cyan4973/xxHash, doc/xxhash_spec.md), fed in chunks of
// any size: the same digest as hashing the concatenation at once.
class Xxh64 {
 public:
  void update(const void* data, size_t n);
  uint64_t digest() const;

 private:
  // Seed 0: the lanes start at P1 + P2, P2, 0 and -P1 (mod 2^64).
  uint64_t acc_[4] = {0x60EA27EEADC0B5D6ULL, 0xC2B2AE3D27D4EB4FULL, 0, 0x61C8864E7A143579ULL};
  unsigned char stripe_[32] = {};
  size_t stripe_len_ = 0;
  uint64_t total_ = 0;
};

}  // namespace detail
}  // namespace blockscale::train
