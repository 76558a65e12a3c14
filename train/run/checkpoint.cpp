// Checkpoint save / load / prune (checkpoint.h): the crash-safe directory protocol, the
// state.json wrapper and its checks, and the XXH64 checksum of the tensors file.
#include "train/run/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <unordered_map>

#include "formats/io/safetensors.h"  // defines: SafetensorsFile, SafetensorsWriter
#include "formats/io/tensor_view.h"  // defines: shape_nbytes, detail::write_file_atomically, detail::printable

namespace blockscale::train {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using io::detail::printable;

constexpr const char* kFormat = "blockscale-checkpoint";
constexpr const char* kTensorsFile = "tensors.safetensors";
constexpr const char* kStateFile = "state.json";
constexpr const char* kLatestFile = "latest";
constexpr size_t kMaxStateBytes = 64u << 20;  // a corrupt size must not become a huge allocation

std::string in_quotes(const fs::path& p) { return "'" + p.string() + "'"; }

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t k = 0; k < shape.size(); ++k) s += (k ? "," : "") + std::to_string(shape[k]);
  return s + "]";
}

std::string step_dir_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step_%08lld", static_cast<long long>(step));
  return buf;
}

// "step_" and 8 to 18 digits, nothing else: a committed checkpoint directory's name.
bool parse_step_dir_name(const std::string& name, int64_t* step) {
  if (name.size() < 13 || name.size() > 23 || name.compare(0, 5, "step_") != 0) return false;
  int64_t v = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return false;
    v = v * 10 + (name[i] - '0');
  }
  *step = v;
  return true;
}

// fsync a file or directory. Directories on file systems that cannot sync them are fine.
Status fsync_path(const fs::path& p, bool is_dir) {
  const int fd = ::open(p.c_str(), (is_dir ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
  if (fd < 0) return Status::error("cannot open " + in_quotes(p) + " to fsync it: " + std::strerror(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0 && !(is_dir && (err == EINVAL || err == EROFS))) {
    return Status::error("fsync of " + in_quotes(p) + " failed: " + std::strerror(err));
  }
  return Status::ok();
}

// XXH64 and the size of a whole regular file, read in 1 MiB chunks up to `max_bytes` (a device or
// a FIFO in its place never ends, and a file longer than the state records is wrong anyway).
Status hash_file(const fs::path& p, uint64_t max_bytes, uint64_t* hash, uint64_t* size) {
  std::error_code ec;
  if (!fs::is_regular_file(p, ec)) return Status::error(in_quotes(p) + " is not a regular file");
  std::ifstream f(p, std::ios::binary);
  if (!f) return Status::error("cannot open " + in_quotes(p) + ": " + std::strerror(errno));
  std::vector<char> buf(1u << 20);
  detail::Xxh64 h;
  *size = 0;
  while (f) {
    f.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    h.update(buf.data(), static_cast<size_t>(f.gcount()));
    *size += static_cast<uint64_t>(f.gcount());
    if (*size > max_bytes) {
      return Status::error(in_quotes(p) + " has more than the " + std::to_string(max_bytes) + " bytes " +
                           "expected (overwritten?)");
    }
  }
  if (f.bad()) return Status::error("reading " + in_quotes(p) + " failed");
  *hash = h.digest();
  return Status::ok();
}

Status read_small_file(const fs::path& p, size_t max_bytes, std::string* out) {
  std::error_code ec;
  const uintmax_t size = fs::file_size(p, ec);
  if (ec) return Status::error("cannot read " + in_quotes(p) + ": " + ec.message());
  if (size > max_bytes) {
    return Status::error(in_quotes(p) + " has " + std::to_string(size) + " bytes, more than the " +
                         std::to_string(max_bytes) + " it may have");
  }
  std::ifstream f(p, std::ios::binary);
  out->assign(size, '\0');
  if (!f.read(out->data(), static_cast<std::streamsize>(size))) return Status::error("reading " + in_quotes(p) + " failed");
  return Status::ok();
}

// io::detail::write_file_atomically (temporary file, fsync, rename, fsync of the directory), its
// error naming the checkpoint's file.
Status write_file_atomic(const fs::path& p, const std::string& text) {
  const Status s = io::detail::write_file_atomically(p.string(), text);
  return s ? s : Status::error("writing " + in_quotes(p) + " failed: " + s.message());
}

// Leftovers of killed saves: step_*.tmp-* directories and the temporaries of `latest`. Only
// the one writer of a run directory calls this, so none of them is in use.
void remove_leftovers(const fs::path& dir) {
  std::error_code ec;
  std::vector<fs::path> doomed;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string n = it->path().filename().string();
    const bool tmp_dir = n.compare(0, 5, "step_") == 0 && n.find(".tmp-") != std::string::npos;
    const bool tmp_latest = n.compare(0, 12, ".latest.tmp.") == 0;
    if (tmp_dir || tmp_latest) doomed.push_back(it->path());
  }
  for (const fs::path& p : doomed) fs::remove_all(p, ec);  // best effort: loads ignore them
}

// Moves the complete directory `tmp` to `final`. An existing `final` (a re-save of the same
// step) is swapped out atomically where the file system can (RENAME_EXCHANGE), else moved
// aside first; either way it ends under a *.tmp-* name and is then deleted.
Status move_into_place(const fs::path& tmp, const fs::path& final_dir) {
  std::error_code ec;
  if (!fs::exists(final_dir, ec)) {
    if (::rename(tmp.c_str(), final_dir.c_str()) == 0) return Status::ok();
    return Status::error("renaming " + in_quotes(tmp) + " to " + in_quotes(final_dir) + " failed: " + std::strerror(errno));
  }
  if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, final_dir.c_str(), RENAME_EXCHANGE) == 0) {
    fs::remove_all(tmp, ec);
    return Status::ok();
  }
  const fs::path old = final_dir.string() + ".tmp-" + std::to_string(::getpid()) + "-old";
  fs::remove_all(old, ec);
  if (::rename(final_dir.c_str(), old.c_str()) != 0) {
    return Status::error("moving " + in_quotes(final_dir) + " aside failed: " + std::strerror(errno));
  }
  if (::rename(tmp.c_str(), final_dir.c_str()) != 0) {
    const int err = errno;
    ::rename(old.c_str(), final_dir.c_str());  // put the old checkpoint back: `latest` may name it
    return Status::error("renaming " + in_quotes(tmp) + " to " + in_quotes(final_dir) + " failed: " + std::strerror(err));
  }
  fs::remove_all(old, ec);
  return Status::ok();
}

// Writes tensors.safetensors and state.json into the (new, empty) directory `tmp`.
Status write_checkpoint_files(const fs::path& tmp, int64_t step, const std::vector<TensorRef>& tensors,
                              const json& state) {
  std::vector<io::TensorSpec> specs;
  std::unordered_map<std::string, const TensorRef*> by_name;
  for (const TensorRef& t : tensors) {
    specs.push_back(io::TensorSpec{t.name, formats::DType::kF32, t.shape});
    by_name.emplace(t.name, &t);
  }
  const fs::path tensors_path = tmp / kTensorsFile;
  io::SafetensorsWriter w;
  BS_RETURN_IF_ERROR(w.open(tensors_path.string(), std::move(specs)));
  for (const io::TensorSpec& spec : w.order()) {  // streamed from the caller's memory, file order
    const TensorRef& t = *by_name.at(spec.name);
    uint64_t nbytes = 0;
    BS_RETURN_IF_ERROR(io::shape_nbytes(t.shape, formats::DType::kF32, &nbytes));
    BS_RETURN_IF_ERROR(w.write(t.name, t.data, static_cast<size_t>(nbytes)));
  }
  BS_RETURN_IF_ERROR(w.finish());

  // Hash what reached the file (read back from the page cache), not what we meant to write.
  uint64_t hash = 0, size = 0;
  BS_RETURN_IF_ERROR(hash_file(tensors_path, UINT64_MAX, &hash, &size));
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(hash));
  json wrapper = {{"format", kFormat},   {"version", kCheckpointVersion}, {"step", step},
                  {"tensors_bytes", size}, {"tensors_xxh64", hex},        {"state", state}};
  std::string text;
  try {
    text = wrapper.dump(2) + "\n";
  } catch (const json::exception& e) {  // invalid UTF-8 in a string of the caller's state
    return Status::error("state: cannot be written as JSON: " + std::string(e.what()));
  }
  return write_file_atomic(tmp / kStateFile, text);
}

// The parsed, checked state.json of checkpoint directory `dir`.
struct StateFile {
  int64_t step = 0;
  uint64_t tensors_bytes = 0;
  uint64_t tensors_xxh64 = 0;
  json state;
};

Status read_state_file(const fs::path& dir, StateFile* out) {
  const fs::path p = dir / kStateFile;
  std::string text;
  BS_RETURN_IF_ERROR(read_small_file(p, kMaxStateBytes, &text));
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    return Status::error(in_quotes(p) + " is not valid JSON: " + e.what());
  }
  const std::string where = in_quotes(p) + ": ";
  if (!j.is_object()) return Status::error(where + "must be a JSON object");
  if (!j.contains("format") || j["format"] != kFormat) {
    return Status::error(where + "'format' must be \"" + kFormat + "\" (not a blockscale checkpoint)");
  }
  if (!j.contains("version") || !j["version"].is_number_integer()) {
    return Status::error(where + "'version' must be an integer");
  }
  if (j["version"] != kCheckpointVersion) {
    return Status::error(where + "version " + j["version"].dump() + " is not supported (this build reads version " +
                         std::to_string(kCheckpointVersion) + ")");
  }
  if (!j.contains("step") || !j["step"].is_number_integer() || j["step"].get<int64_t>() < 0) {
    return Status::error(where + "'step' must be a non-negative integer");
  }
  if (!j.contains("tensors_bytes") || !j["tensors_bytes"].is_number_unsigned()) {
    return Status::error(where + "'tensors_bytes' must be a non-negative integer");
  }
  const json* hash = j.contains("tensors_xxh64") ? &j["tensors_xxh64"] : nullptr;
  const std::string hex = hash && hash->is_string() ? hash->get<std::string>() : "";
  if (hex.size() != 16 || hex.find_first_not_of("0123456789abcdef") != std::string::npos) {
    return Status::error(where + "'tensors_xxh64' must be a string of 16 lowercase hex digits");
  }
  if (!j.contains("state")) return Status::error(where + "'state' is missing");
  out->step = j["step"].get<int64_t>();
  int64_t dir_step = 0;
  if (parse_step_dir_name(dir.filename().string(), &dir_step) && dir_step != out->step) {
    return Status::error(where + "'step' is " + std::to_string(out->step) + " but the directory is " +
                         dir.filename().string());
  }
  out->tensors_bytes = j["tensors_bytes"].get<uint64_t>();
  out->tensors_xxh64 = std::stoull(hex, nullptr, 16);
  out->state = std::move(j["state"]);
  return Status::ok();
}

Status latest_checkpoint_impl(const std::string& dir, std::string* checkpoint_dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return Status::error("dir " + in_quotes(dir) + " does not exist or is not a directory");
  const fs::path latest = fs::path(dir) / kLatestFile;
  if (!fs::exists(latest, ec)) return Status::error("no checkpoint in " + in_quotes(dir) + " (it has no 'latest')");
  std::string name;
  BS_RETURN_IF_ERROR(read_small_file(latest, 256, &name));
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ' || name.back() == '\r')) name.pop_back();
  int64_t step = 0;
  if (!parse_step_dir_name(name, &step)) {
    return Status::error(in_quotes(latest) + " must name a step_XXXXXXXX directory, it holds " + printable(name));
  }
  const fs::path ckpt = fs::path(dir) / name;
  if (!fs::is_regular_file(ckpt / kStateFile, ec)) {
    return Status::error(in_quotes(latest) + " names " + in_quotes(ckpt) + ", which is missing or has no " + kStateFile);
  }
  *checkpoint_dir = ckpt.string();
  return Status::ok();
}

// Checks tensors (TensorRef or TensorSlot) as arguments: names non-empty and unique, shapes
// valid, data set unless empty. `what` names the argument: "tensors" or "slots".
template <typename T>
Status check_tensor_args(const std::vector<T>& tensors, const char* what) {
  std::set<std::string> names;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const T& t = tensors[i];
    const std::string where = what + ("[" + std::to_string(i) + "] (") + printable(t.name) + "): ";
    if (t.name.empty()) return Status::error(where + "name is empty");
    if (!names.insert(t.name).second) return Status::error(where + "duplicate name");
    uint64_t nbytes = 0;
    Status s = io::shape_nbytes(t.shape, formats::DType::kF32, &nbytes);
    if (!s) return Status::error(where + s.message());
    if (nbytes && !t.data) return Status::error(where + "data is null");
  }
  return Status::ok();
}

// The checkpoint directory `path` names: itself (it holds state.json) or its run's `latest`.
Status resolve_checkpoint_dir(const std::string& path, std::string* out) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) return Status::error("path " + in_quotes(path) + " does not exist or is not a directory");
  std::string dir = path;
  if (!fs::is_regular_file(fs::path(path) / kStateFile, ec)) {
    if (!fs::exists(fs::path(path) / kLatestFile, ec)) {
      return Status::error("path " + in_quotes(path) + " is neither a checkpoint directory (no " + kStateFile +
                           ") nor a run directory (no 'latest')");
    }
    BS_RETURN_IF_ERROR(latest_checkpoint_impl(path, &dir));
  }
  *out = dir;
  return Status::ok();
}

Status load_impl(const std::string& path, const std::vector<TensorSlot>& slots, json* state,
                 std::string* resolved_dir) {
  std::string dir;
  BS_RETURN_IF_ERROR(resolve_checkpoint_dir(path, &dir));
  StateFile sf;
  BS_RETURN_IF_ERROR(read_state_file(dir, &sf));

  // The file must be, byte for byte, the one state.json describes.
  const fs::path tensors_path = fs::path(dir) / kTensorsFile;
  uint64_t hash = 0, size = 0;
  BS_RETURN_IF_ERROR(hash_file(tensors_path, sf.tensors_bytes, &hash, &size));
  if (size != sf.tensors_bytes) {
    return Status::error(in_quotes(tensors_path) + " has " + std::to_string(size) + " bytes but " + kStateFile +
                         " records " + std::to_string(sf.tensors_bytes) + " (truncated or overwritten)");
  }
  if (hash != sf.tensors_xxh64) {
    return Status::error(in_quotes(tensors_path) + " fails its checksum (XXH64 recorded in " + kStateFile +
                         " differs): the file is corrupt");
  }
  io::SafetensorsFile file;
  BS_RETURN_IF_ERROR(io::SafetensorsFile::open(tensors_path.string(), &file));

  // Check every slot and every tensor of the file before copying anything.
  std::vector<io::TensorView> views(slots.size());
  std::set<std::string> wanted;
  for (size_t i = 0; i < slots.size(); ++i) {
    const TensorSlot& s = slots[i];
    wanted.insert(s.name);
    const std::string what = "tensor " + printable(s.name) + " of " + in_quotes(tensors_path);
    if (!file.contains(s.name)) return Status::error("tensor " + printable(s.name) + " is not in " + in_quotes(tensors_path));
    BS_RETURN_IF_ERROR(file.tensor(s.name, &views[i]));
    if (views[i].dtype != formats::DType::kF32) {
      return Status::error(what + " is " + formats::dtype_name(views[i].dtype) + ", a checkpoint tensor must be F32");
    }
    if (views[i].shape != s.shape) {
      return Status::error(what + " has shape " + shape_string(views[i].shape) + " but the slot expects " +
                           shape_string(s.shape));
    }
  }
  for (const std::string& name : file.names()) {
    if (!wanted.count(name)) {
      return Status::error(in_quotes(tensors_path) + " holds tensor " + printable(name) +
                           " that no slot asks for (the model or optimizer config differs)");
    }
  }
  for (size_t i = 0; i < slots.size(); ++i) {
    if (views[i].nbytes) std::memcpy(slots[i].data, views[i].data, views[i].nbytes);
  }
  *state = std::move(sf.state);
  if (resolved_dir) *resolved_dir = dir;
  return Status::ok();
}

Status save_impl(const std::string& dir, int64_t step, const std::vector<TensorRef>& tensors, const json& state) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir, ec)) return Status::error("dir: cannot create " + in_quotes(dir));
  remove_leftovers(dir);
  const std::string name = step_dir_name(step);
  const fs::path final_dir = fs::path(dir) / name;
  const fs::path tmp = fs::path(dir) / (name + ".tmp-" + std::to_string(::getpid()));
  if (!fs::create_directory(tmp, ec)) return Status::error("dir: cannot create " + in_quotes(tmp) + ": " + ec.message());
  Status s = write_checkpoint_files(tmp, step, tensors, state);
  if (s) s = fsync_path(tmp, true);
  if (s) s = move_into_place(tmp, final_dir);
  if (!s) {
    fs::remove_all(tmp, ec);
    return s;
  }
  BS_RETURN_IF_ERROR(fsync_path(dir, true));
  return write_file_atomic(fs::path(dir) / kLatestFile, name + "\n");  // the commit point
}

Status prune_impl(const std::string& dir, int keep) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return Status::error("dir " + in_quotes(dir) + " is not a directory");
  std::string latest;
  if (!latest_checkpoint_impl(dir, &latest)) latest.clear();  // none: nothing extra to spare
  std::vector<std::pair<int64_t, fs::path>> complete;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    int64_t step = 0;
    std::error_code ignored;  // not `ec`: a missing state.json must not end the listing
    if (parse_step_dir_name(it->path().filename().string(), &step) &&
        fs::is_regular_file(it->path() / kStateFile, ignored)) {
      complete.emplace_back(step, it->path());
    }
  }
  if (ec) return Status::error("dir: listing " + in_quotes(dir) + " failed: " + ec.message());
  std::sort(complete.begin(), complete.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  for (size_t i = static_cast<size_t>(keep); i < complete.size(); ++i) {
    if (!latest.empty() && complete[i].second.filename() == fs::path(latest).filename()) continue;
    // Rename first: a prune killed halfway leaves a *.tmp-* directory, never a broken step_*.
    const fs::path doomed = complete[i].second.string() + ".tmp-" + std::to_string(::getpid()) + "-pruned";
    if (::rename(complete[i].second.c_str(), doomed.c_str()) != 0) {
      return Status::error("removing " + in_quotes(complete[i].second) + " failed: " + std::strerror(errno));
    }
    fs::remove_all(doomed, ec);
    if (ec) return Status::error("removing " + in_quotes(doomed) + " failed: " + ec.message());
  }
  return fsync_path(dir, true);
}

// Runs `body`, turning an escaping exception (allocation, filesystem) into an error Status that
// says what was being done; the messages name files, not functions (they reach the CLI).
template <typename F>
Status guarded(const char* doing, F&& body) {
  try {
    return body();
  } catch (const std::exception& e) {
    return Status::error(std::string(doing) + " failed: " + e.what());
  }
}

}  // namespace

Status save_checkpoint(const std::string& dir, int64_t step, const std::vector<TensorRef>& tensors,
                       const json& state) {
  return guarded("saving a checkpoint", [&]() -> Status {
    if (dir.empty()) return Status::error("dir is empty");
    if (step < 0) return Status::error("step " + std::to_string(step) + " is negative");
    BS_RETURN_IF_ERROR(check_tensor_args(tensors, "tensors"));
    return save_impl(dir, step, tensors, state);
  });
}

Status load_checkpoint(const std::string& path, const std::vector<TensorSlot>& slots, json* state,
                       std::string* resolved_dir) {
  return guarded("loading a checkpoint", [&]() -> Status {
    if (path.empty()) return Status::error("path is empty");
    if (!state) return Status::error("state is null");
    BS_RETURN_IF_ERROR(check_tensor_args(slots, "slots"));
    return load_impl(path, slots, state, resolved_dir);
  });
}

Status read_checkpoint_state(const std::string& path, json* state, std::string* resolved_dir) {
  return guarded("reading a checkpoint's state", [&]() -> Status {
    if (path.empty()) return Status::error("path is empty");
    if (!state) return Status::error("state is null");
    std::string dir;
    BS_RETURN_IF_ERROR(resolve_checkpoint_dir(path, &dir));
    StateFile sf;
    BS_RETURN_IF_ERROR(read_state_file(dir, &sf));
    *state = std::move(sf.state);
    if (resolved_dir) *resolved_dir = dir;
    return Status::ok();
  });
}

Status latest_checkpoint(const std::string& dir, std::string* checkpoint_dir) {
  return guarded("finding the latest checkpoint", [&]() -> Status {
    if (dir.empty()) return Status::error("dir is empty");
    if (!checkpoint_dir) return Status::error("checkpoint_dir is null");
    return latest_checkpoint_impl(dir, checkpoint_dir);
  });
}

Status prune_checkpoints(const std::string& dir, int keep) {
  return guarded("pruning checkpoints", [&]() -> Status {
    if (dir.empty()) return Status::error("dir is empty");
    if (keep < 1) return Status::error("keep " + std::to_string(keep) + " must be >= 1");
    return prune_impl(dir, keep);
  });
}

// ---- XXH64 (xxhash_spec.md: 4 lanes over 32-byte stripes, then the tail, then avalanche) -------

namespace detail {
namespace {

constexpr uint64_t kP1 = 0x9E3779B185EBCA87ULL, kP2 = 0xC2B2AE3D27D4EB4FULL, kP3 = 0x165667B19E3779F9ULL,
                   kP4 = 0x85EBCA77C2B2AE63ULL, kP5 = 0x27D4EB2F165667C5ULL;

uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
uint64_t lane_round(uint64_t acc, uint64_t lane) { return rotl(acc + lane * kP2, 31) * kP1; }
uint64_t merge(uint64_t h, uint64_t acc) { return (h ^ lane_round(0, acc)) * kP1 + kP4; }
uint64_t le64(const unsigned char* p) {
  uint64_t v = 0;
  for (int k = 7; k >= 0; --k) v = v << 8 | p[k];
  return v;
}
uint64_t le32(const unsigned char* p) { return uint64_t{p[0]} | uint64_t{p[1]} << 8 | uint64_t{p[2]} << 16 | uint64_t{p[3]} << 24; }

}  // namespace

void Xxh64::update(const void* data, size_t n) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  total_ += n;
  auto consume = [this](const unsigned char* s) {
    for (int k = 0; k < 4; ++k) acc_[k] = lane_round(acc_[k], le64(s + 8 * k));
  };
  if (stripe_len_) {  // finish the stripe an earlier chunk began
    const size_t take = std::min(n, sizeof stripe_ - stripe_len_);
    std::memcpy(stripe_ + stripe_len_, p, take);
    stripe_len_ += take;
    p += take;
    n -= take;
    if (stripe_len_ < sizeof stripe_) return;
    consume(stripe_);
    stripe_len_ = 0;
  }
  for (; n >= 32; p += 32, n -= 32) consume(p);
  if (n) std::memcpy(stripe_, p, n);
  stripe_len_ = n;
}

uint64_t Xxh64::digest() const {
  uint64_t h = kP5;  // seed 0
  if (total_ >= 32) {
    h = rotl(acc_[0], 1) + rotl(acc_[1], 7) + rotl(acc_[2], 12) + rotl(acc_[3], 18);
    for (uint64_t a : acc_) h = merge(h, a);
  }
  h += total_;
  const unsigned char* p = stripe_;
  size_t n = stripe_len_;
  for (; n >= 8; p += 8, n -= 8) h = rotl(h ^ lane_round(0, le64(p)), 27) * kP1 + kP4;
  if (n >= 4) {
    h = rotl(h ^ (le32(p) * kP1), 23) * kP2 + kP3;
    p += 4;
    n -= 4;
  }
  for (; n; ++p, --n) h = rotl(h ^ (*p * kP5), 11) * kP1;
  h ^= h >> 33;
  h *= kP2;
  h ^= h >> 29;
  h *= kP3;
  return h ^ (h >> 32);
}

}  // namespace detail
}  // namespace blockscale::train
