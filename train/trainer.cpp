#include "train/trainer.h"

#include <chrono>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <ostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "train/model/phase_bytes.h"  // defines: step_phase_bytes (the phases' floors)
#include "train/run/checkpoint.h"
#include "train/run/data.h"
#include "train/run/memory_plan.h"  // defines: plan_memory, check_memory, host/gpu_memory_available
#include "train/run/printf_string.h"
#include "train/run/run_dir.h"      // defines: RunDirLock, check_run_dir, clear_run_dir
#include "train/run/run_log.h"
#include "train/run/svg_plot.h"
#include "train/step_backend.h"
#ifdef BLOCKSCALE_HAVE_CUDA
#include "train/gpu/gpu_backend.h"
#include "train/gpu/gpu_sdpa.h"  // defines: FusedAttention (the memory plan)
#endif

namespace blockscale::train {
namespace {

using nlohmann::json;

json model_json(const ModelConfig& m) {
  return {{"vocab", m.vocab},     {"d_model", m.d_model}, {"layers", m.n_layers}, {"heads", m.n_heads},
          {"experts", m.n_experts}, {"top_k", m.top_k},   {"d_ff", m.d_ff},       {"seq_len", m.seq_len},
          {"aux_loss_coef", m.aux_loss_coef}};
}

// How the run split its sequences per step (informational: a resume may split them otherwise).
json split_json(const TrainConfig& c, int world) {
  return {{"ranks", world}, {"batch", c.batch}, {"grad_accum", c.grad_accum}};
}
// A split worth printing: three positive whole numbers (a damaged one is left unsaid: the
// sequences per step, which decide the resume, were checked).
bool well_formed_split(const json& split) {
  if (!split.is_object()) return false;
  for (const char* key : {"ranks", "batch", "grad_accum"}) {
    const auto it = split.find(key);
    if (it == split.end() || !it->is_number_integer() || it->get<int64_t>() < 1) return false;
  }
  return true;
}
std::string split_text(const json& split) {
  const bool one = split["ranks"].get<int64_t>() == 1;
  return split["ranks"].dump() + (one ? " rank" : " ranks") + " x --batch " + split["batch"].dump() +
         " x --grad-accum " + split["grad_accum"].dump();
}

// A checkpoint's options as resume_json writes them. Checkpoints of earlier versions record the
// batch, the accumulation and the ranks apart: their product is the sequences per step.
json saved_resume_json(json saved) {
  if (saved.is_object() && !saved.contains("sequences_per_step") && saved.contains("batch") &&
      saved.contains("grad_accum") && saved.contains("ranks") && saved["batch"].is_number_integer() &&
      saved["grad_accum"].is_number_integer() && saved["ranks"].is_number_integer()) {
    saved["sequences_per_step"] =
        saved["batch"].get<int64_t>() * saved["grad_accum"].get<int64_t>() * saved["ranks"].get<int64_t>();
    saved.erase("batch"), saved.erase("grad_accum"), saved.erase("ranks");
  }
  return saved;
}

// What a checkpoint must agree on to be resumed (the run's length and logging may change). The
// batch enters as the sequences per optimizer step only: a step's samples, its learning rate and
// its data order depend on that alone (sample (micro x ranks + rank) x batch + i of the step), so
// a run saved on N ranks resumes on any number whose --batch x --grad-accum x ranks is the same
// (bit-identically when all three are; otherwise to float summation order).
json resume_json(const TrainConfig& c, int world) {
  const OptimizerConfig& o = c.optimizer;
  return {{"model", model_json(c.model)},
          {"recipe", recipe_name(c.recipe)},
          {"sequences_per_step", int64_t{c.batch} * c.grad_accum * world},
          {"seed", c.seed},
          {"data", {{"source", c.data.source}, {"path", c.data.path}, {"dtype", c.data.dtype},
                    {"synthetic_tokens", c.data.synthetic_tokens}, {"eval_fraction", c.data.eval_fraction}}},
          {"optimizer", {{"lr", o.lr}, {"min_lr_ratio", o.min_lr_ratio}, {"warmup_steps", o.warmup_steps},
                         {"total_steps", o.total_steps}, {"beta1", o.beta1}, {"beta2", o.beta2}, {"eps", o.eps},
                         {"weight_decay", o.weight_decay}, {"clip_norm", o.clip_norm}}}};
}

// "--lr 0.001 (this run: 0.002), --seed 1 (this run: 2)": the options whose values in `saved`
// (a checkpoint's resume_json) differ from `now`'s, by the names the command line gives them.
std::string config_differences(const json& saved, const json& now) {
  static const std::pair<const char*, const char*> kOptions[] = {
      {"/model/vocab", "--vocab"}, {"/model/d_model", "--d-model"}, {"/model/layers", "--layers"},
      {"/model/heads", "--heads"}, {"/model/experts", "--experts"}, {"/model/top_k", "--top-k"},
      {"/model/d_ff", "--d-ff"}, {"/model/seq_len", "--seq-len"}, {"/model/aux_loss_coef", "--aux-loss-coef"},
      {"/recipe", "--recipe"}, {"/sequences_per_step", "the sequences per step (--batch x --grad-accum x ranks)"},
      {"/seed", "--seed"}, {"/data/source", "--data"},
      {"/data/path", "--data-path"}, {"/data/dtype", "--token-dtype"},
      {"/data/synthetic_tokens", "--synthetic-tokens"}, {"/data/eval_fraction", "--eval-fraction"},
      {"/optimizer/lr", "--lr"}, {"/optimizer/min_lr_ratio", "--min-lr-ratio"},
      {"/optimizer/warmup_steps", "--warmup"}, {"/optimizer/total_steps", "--schedule-steps"},
      {"/optimizer/beta1", "--beta1"}, {"/optimizer/beta2", "--beta2"}, {"/optimizer/eps", "AdamW's epsilon"},
      {"/optimizer/weight_decay", "--weight-decay"}, {"/optimizer/clip_norm", "--clip"}};
  const json flat_saved = saved.is_object() ? saved.flatten() : json::object();
  const json flat_now = now.flatten();
  // Numbers with the fewest digits that tell the two values apart (an fp32 --lr 0.003 is stored
  // as the double 0.003000000026077032).
  auto text = [](const json& flat, const std::string& key, int digits) {
    if (!flat.contains(key)) return std::string("none");
    const json& v = flat[key];
    if (v.is_string()) return "'" + v.get<std::string>() + "'";
    if (!v.is_number_float()) return v.dump();
    char buf[40];
    std::snprintf(buf, sizeof buf, "%.*g", digits, v.get<double>());
    return std::string(buf);
  };
  std::string out;
  for (const auto& [key, option] : kOptions) {
    if (flat_saved.contains(key) && flat_now.contains(key) && flat_saved[key] == flat_now[key]) continue;
    int digits = 6;
    while (digits < 17 && text(flat_saved, key, digits) == text(flat_now, key, digits)) ++digits;
    out += (out.empty() ? "" : ", ") + std::string(option) + " " + text(flat_saved, key, digits) +
           " (this run: " + text(flat_now, key, digits) + ")";
  }
  return out.empty() ? "the checkpoint records no options this build knows" : out;
}

Status load_corpus(const TrainConfig& c, TokenCorpus* all) {
  const DataConfig& d = c.data;
  if (d.source == "synthetic") return make_synthetic_corpus(c.model.vocab, d.synthetic_tokens, c.seed, all);
  if (d.source == "text") return load_text_bytes(d.path, all);
  if (d.source == "tokens") {
    TokenDtype dtype;
    BS_RETURN_IF_ERROR(parse_token_dtype(d.dtype, &dtype));
    return load_token_file(d.path, dtype, c.model.vocab, all);
  }
  return Status::error("--data: unknown source '" + d.source + "' (expected synthetic, tokens or text)");
}

// Where the step runs: the GPU unless --device cpu, where the build has CUDA and a GPU is present.
bool runs_on_gpu(const TrainConfig& c) {
#ifdef BLOCKSCALE_HAVE_CUDA
  return c.device != "cpu" && gpu_available();
#else
  (void)c;
  return false;
#endif
}

Status make_backend(const TrainConfig& c, std::unique_ptr<StepBackend>* out) {
#ifdef BLOCKSCALE_HAVE_CUDA
  if (runs_on_gpu(c)) return make_gpu_backend(c.model, c.recipe, c.seed, out, c.gemm_route);
#endif
  if (c.device == "gpu") return Status::error("--device gpu: no CUDA device (or a build without CUDA)");
  *out = make_cpu_backend(c.model, c.recipe, c.seed);
  return Status::ok();
}

// The run's memory against the machine's, before the model is allocated.
Status check_run_memory(const TrainConfig& c, const Communicator* comm) {
  const bool gpu = runs_on_gpu(c);
#ifdef BLOCKSCALE_HAVE_CUDA
  const bool fused = gpu && gpu::FusedAttention::built();  // the step's attention where cuDNN runs the shape
#else
  const bool fused = false;
#endif
  const int peers = comm != nullptr && comm->on_copy_engines() ? comm->world_size() - 1 : 0;
  return check_memory(plan_memory(c, gpu, fused, peers), host_memory_available(),
                      gpu ? gpu_memory_available() : -1.0);
}

// Checkpoint tensor names: param/<name>, adam_m/<name>, adam_v/<name>.
template <typename Entry, typename Ptr>
std::vector<Entry> checkpoint_entries(const ParamLayout& layout, Ptr params, Ptr m, Ptr v) {
  std::vector<Entry> entries;
  for (const char* kind : {"param/", "adam_m/", "adam_v/"}) {
    Ptr base = kind[0] == 'p' ? params : (kind[5] == 'm' ? m : v);
    for (const ParamTensor& t : layout.tensors) entries.push_back({kind + t.name, t.shape, base + t.offset});
  }
  return entries;
}

// Rank 0 writes; the others read the state only where that is a collective (expert parallelism
// gathers the experts).
Status save(const TrainConfig& c, bool leader, int world, StepBackend& backend, const ParamLayout& layout,
            int64_t step, int64_t tokens) {
  if (!leader && !backend.state_needs_every_rank()) return Status::ok();
  std::vector<float> p, m, v;
  BS_RETURN_IF_ERROR(backend.read_state(&p, &m, &v));
  if (!leader) return Status::ok();
  const json state = {{"step", step},
                      {"tokens", tokens},
                      {"config", resume_json(c, world)},
                      {"split", split_json(c, world)}};
  BS_RETURN_IF_ERROR(save_checkpoint(c.out_dir, step, checkpoint_entries<TensorRef, const float*>(
                                                          layout, p.data(), m.data(), v.data()),
                                     state));
  return prune_checkpoints(c.out_dir, c.keep_checkpoints);
}

Status resume(const TrainConfig& c, int world, StepBackend& backend, const ParamLayout& layout, int64_t* step,
              int64_t* tokens, std::ostream& progress) {
  // The options first: a run of another shape would otherwise be refused by a tensor's shape.
  json state;
  std::string dir;
  if (const Status read = read_checkpoint_state(c.resume, &state, &dir); !read)
    return Status::error("--resume: " + read.message());
  const json saved = saved_resume_json(state.contains("config") ? state["config"] : json());
  if (saved != resume_json(c, world))
    return Status::error("--resume: " + dir + " was saved with other options: " +
                         config_differences(saved, resume_json(c, world)));
  // Another split of the same sequences per step continues the run to float summation order.
  json split = state.contains("split") ? state["split"] : json();
  if (!split.is_object() && state.contains("config") && state["config"].is_object()) {  // an earlier version's
    const json& old = state["config"];
    split = {{"ranks", old.value("ranks", json())}, {"batch", old.value("batch", json())},
             {"grad_accum", old.value("grad_accum", json())}};
  }
  const std::string resplit =
      well_formed_split(split) && split != split_json(c, world)
          ? " (saved as " + split_text(split) + ", now " + split_text(split_json(c, world)) +
                ": the same sequences per step, summed in another order)"
          : "";
  std::vector<float> p(layout.total), m(layout.total), v(layout.total);
  const Status loaded =
      load_checkpoint(dir, checkpoint_entries<TensorSlot, float*>(layout, p.data(), m.data(), v.data()), &state, &dir);
  if (!loaded) return Status::error("--resume: " + loaded.message());
  // Counters of another type are a damaged file, not a reason to abort.
  const auto counter = [&](const char* key, int64_t fallback) {
    const auto it = state.find(key);
    return it == state.end() ? fallback : it->is_number_integer() ? it->get<int64_t>() : int64_t{-1};
  };
  *step = counter("step", -1);
  *tokens = counter("tokens", 0);
  if (*step < 0) return Status::error("--resume: " + dir + "/state.json has no step (a whole number >= 0)");
  if (*tokens < 0) return Status::error("--resume: " + dir + "/state.json has no token count (a whole number >= 0)");
  progress << "resumed from " << dir << " at step " << *step << resplit << "\n";
  return backend.write_state(p, m, v);
}

// This process's place among the data-parallel ranks.
struct Ranks {
  Communicator* comm = nullptr;
  int rank = 0, world = 1;
  explicit Ranks(Communicator* c) : comm(c), rank(c ? c->rank() : 0), world(c ? c->world_size() : 1) {}
  bool leader() const { return rank == 0; }
  Status sum(double* v, int n) const { return comm ? comm->all_reduce_host(v, n) : Status::ok(); }
  // Every rank learns whether all ranks succeeded (rank 0 alone writes files): an error on one
  // stops all, instead of leaving the others waiting in their next sum.
  Status agree(const Status& mine) const {
    if (comm == nullptr) return mine;
    double failed = mine.is_ok() ? 0.0 : 1.0;
    BS_RETURN_IF_ERROR(comm->all_reduce_host(&failed, 1));
    if (!mine.is_ok()) return mine;
    return failed > 0 ? Status::error("another rank failed (its error is in its own output)") : Status::ok();
  }
};

// The GPU step records an event at every change of phase, which slows it a little (~0.3 ms of
// 11 ms at width 2048), so phases are timed on every kPhaseEvery-th step and the step time is the
// mean of the other steps (of those, where a run has no others). Neither counts the warm-up steps:
// the first steps allocate, and the cuBLAS recipes meet new expert sizes there, each a heuristic
// query with the GPU idle (bf16's second step took 22 ms against its 11; timed as a phase step it
// doubled bf16's GEMM phase in a 30-step average).
int64_t warmup_steps(int64_t steps_to_run) { return std::clamp<int64_t>(steps_to_run / 6, 1, 5); }
constexpr int64_t kPhaseEvery = 5;

// " quantize 1.20 ms (10%, floor 0.80), gemm ... (every 5th step: 3 steps of 12.50 ms)" from
// per-step phase times, their floors where known, and the mean time of the steps that recorded them.
std::string format_phases(const std::vector<std::pair<std::string, double>>& phases,
                          const std::vector<std::pair<std::string, double>>& floors, int64_t steps, double step_ms) {
  double total = 0;
  for (const auto& p : phases) total += p.second;
  std::string out;
  for (const auto& [name, ms] : phases) {
    if (ms == 0) continue;  // e.g. communication on one GPU
    const auto floor = std::find_if(floors.begin(), floors.end(), [&](const auto& f) { return f.first == name; });
    char part[128];
    if (floor != floors.end() && floor->second > 0)
      std::snprintf(part, sizeof(part), " %s %.2f ms (%.0f%%, floor %.2f)", name.c_str(), ms,
                    total > 0 ? 100.0 * ms / total : 0.0, floor->second);
    else
      std::snprintf(part, sizeof(part), " %s %.2f ms (%.0f%%)", name.c_str(), ms, total > 0 ? 100.0 * ms / total : 0.0);
    out += part;
  }
  char tail[96];
  std::snprintf(tail, sizeof(tail), " (every %lldth step: %lld steps of %.2f ms)", (long long)kPhaseEvery,
                (long long)steps, step_ms);
  return out + tail;
}

// Mean loss over the eval batches. Eval batch b of the whole run is `batch x world` windows; rank
// r takes its r-th slice (make_eval_batch's batch b * world + r of `batch` windows), so any
// number of ranks evaluates the same windows as one rank with world x batch.
double evaluate(const TrainConfig& c, StepBackend& backend, const TokenCorpus& eval, const Ranks& ranks,
                Status* status) {
  const int64_t n = int64_t{c.batch} * c.model.seq_len;
  std::vector<int32_t> in(n), tg(n);
  double sum = 0;
  Status mine = Status::ok();
  for (int b = 0; b < c.eval_batches && mine.is_ok(); ++b) {
    StepLosses l;
    mine = make_eval_batch(eval, c.model.seq_len, int64_t{b} * ranks.world + ranks.rank, c.batch, in.data(),
                           tg.data());
    if (mine.is_ok()) mine = backend.evaluate(in.data(), tg.data(), c.batch, &l);
    sum += l.loss;
  }
  *status = ranks.agree(mine);  // a failure on one rank must not leave the others in the sum
  if (!status->is_ok()) return NAN;
  *status = ranks.sum(&sum, 1);
  return sum / (double(c.eval_batches) * ranks.world);
}

}  // namespace

Status validate(const TrainConfig& c) {
  BS_RETURN_IF_ERROR(validate(c.model, c.recipe, int64_t{c.batch} * c.model.seq_len));
  BS_RETURN_IF_ERROR(check_gemm_route(c.recipe, c.gemm_route));
  auto require = [](bool ok, const char* message) { return ok ? Status::ok() : Status::error(message); };
  BS_RETURN_IF_ERROR(require(c.batch >= 1, "--batch must be >= 1"));
  BS_RETURN_IF_ERROR(require(c.grad_accum >= 1, "--grad-accum must be >= 1"));
  BS_RETURN_IF_ERROR(require(c.steps >= 1, "--steps must be >= 1"));
  BS_RETURN_IF_ERROR(require(c.eval_every >= 0, "--eval-every must be >= 0"));
  BS_RETURN_IF_ERROR(require(c.eval_batches >= 1, "--eval-batches must be >= 1"));
  BS_RETURN_IF_ERROR(require(c.log_every >= 1, "--log-every must be >= 1"));
  BS_RETURN_IF_ERROR(require(c.checkpoint_every >= -1, "--checkpoint-every must be >= -1"));
  BS_RETURN_IF_ERROR(require(c.keep_checkpoints >= 1, "--keep-checkpoints must be >= 1"));
  BS_RETURN_IF_ERROR(require(!c.out_dir.empty(), "--out must not be empty"));
  BS_RETURN_IF_ERROR(require(!(c.overwrite && !c.resume.empty()),
                             "--overwrite and --resume exclude each other: --resume continues the run in --out, "
                             "--overwrite deletes it"));
  if (c.device != "auto" && c.device != "cpu" && c.device != "gpu")
    return Status::error("--device: expected auto, cpu or gpu (got '" + c.device + "')");
  if (c.attention != "auto" && c.attention != "reference")
    return Status::error("--attention: expected auto or reference (got '" + c.attention + "')");
  BS_RETURN_IF_ERROR(require(!(c.expert_parallel && c.device == "cpu"),
                             "--expert-parallel: needs the GPU step (--device gpu or auto), not --device cpu"));
  BS_RETURN_IF_ERROR(require(!(c.grad_reduce == GradReduce::kBf16 && c.device == "cpu"),
                             "--grad-reduce bf16: needs the GPU step (--device gpu or auto), not --device cpu"));
  BS_RETURN_IF_ERROR(require(!(c.expert_parallel && c.shard_optimizer),
                             "--shard-optimizer: not with --expert-parallel (each rank's experts are its own)"));
  const OptimizerConfig& o = c.optimizer;
  BS_RETURN_IF_ERROR(require(o.lr > 0 && std::isfinite(o.lr), "--lr must be a finite value > 0"));
  BS_RETURN_IF_ERROR(require(o.warmup_steps >= 0, "--warmup must be >= 0"));
  BS_RETURN_IF_ERROR(require(o.min_lr_ratio >= 0 && o.min_lr_ratio <= 1, "--min-lr-ratio must be in [0, 1]"));
  BS_RETURN_IF_ERROR(require(o.beta1 >= 0 && o.beta1 < 1, "--beta1 must be in [0, 1)"));
  BS_RETURN_IF_ERROR(require(o.beta2 >= 0 && o.beta2 < 1, "--beta2 must be in [0, 1)"));
  BS_RETURN_IF_ERROR(require(o.weight_decay >= 0 && std::isfinite(o.weight_decay),
                             "--weight-decay must be a finite value >= 0"));
  BS_RETURN_IF_ERROR(require(o.clip_norm >= 0 && std::isfinite(o.clip_norm), "--clip must be a finite value >= 0"));
  BS_RETURN_IF_ERROR(require(c.data.eval_fraction > 0 && c.data.eval_fraction <= 0.5,
                             "--eval-fraction must be in (0, 0.5]"));
  const DataConfig& d = c.data;
  if (d.source != "synthetic" && d.source != "tokens" && d.source != "text")
    return Status::error("--data: expected synthetic, tokens or text (got '" + d.source + "')");
  if (d.source == "tokens" && d.dtype != "uint16" && d.dtype != "uint32")
    return Status::error("--token-dtype: expected uint16 or uint32 (got '" + d.dtype + "')");
  if (d.source == "synthetic") {
    BS_RETURN_IF_ERROR(require(d.synthetic_tokens >= 2, "--synthetic-tokens must be >= 2"));
    if (c.model.vocab < kSyntheticMinVocab || c.model.vocab > kSyntheticMaxVocab)
      return Status::error("--vocab must be in [" + std::to_string(kSyntheticMinVocab) + ", " +
                           std::to_string(kSyntheticMaxVocab) + "] with --data synthetic");
  }
  return Status::ok();
}

Status train(const TrainConfig& c, std::ostream& progress_out, TrainSummary* summary, Communicator* comm) {
  BS_RETURN_IF_ERROR(validate(c));
  const Ranks ranks(comm);
  std::ostringstream quiet;  // ranks other than 0 print nothing
  std::ostream& progress = ranks.leader() ? progress_out : quiet;
  BS_RETURN_IF_ERROR(ranks.agree(check_run_memory(c, comm)));
  // Rank 0 writes out_dir: it holds the directory's lock from here to the end of the run (a run
  // that fails before writing removes the directories the lock made), and checks, before the data
  // is read and the model built, that the run may write there.
  RunDirLock lock;
  BS_RETURN_IF_ERROR(ranks.agree(ranks.leader() ? RunDirLock::acquire(c.out_dir, &lock) : Status::ok()));
  BS_RETURN_IF_ERROR(
      ranks.agree(ranks.leader() ? check_run_dir(c.out_dir, !c.resume.empty(), c.overwrite) : Status::ok()));
  TokenCorpus all, train_data, eval_data;
  BS_RETURN_IF_ERROR(load_corpus(c, &all));
  if (all.vocab_size > c.model.vocab)
    return Status::error("--vocab (" + std::to_string(c.model.vocab) + ") is below the data's vocabulary (" +
                         std::to_string(all.vocab_size) + ")");
  BS_RETURN_IF_ERROR(split_corpus(all, c.data.eval_fraction, &train_data, &eval_data));
  if (eval_windows(eval_data, c.model.seq_len) < 1 || int64_t(train_data.tokens.size()) <= c.model.seq_len)
    return Status::error("--data: too few tokens for --seq-len " + std::to_string(c.model.seq_len));

  std::unique_ptr<StepBackend> backend;
  BS_RETURN_IF_ERROR(make_backend(c, &backend));
#ifdef BLOCKSCALE_HAVE_CUDA
  if (c.attention == "reference" && runs_on_gpu(c)) BS_RETURN_IF_ERROR(gpu_backend_use_reference_attention(*backend));
#endif
  if (comm != nullptr) backend->set_communicator(comm);  // one rank too: torchrun with one GPU
  if (c.expert_parallel) BS_RETURN_IF_ERROR(backend->set_expert_parallel());
  if (c.shard_optimizer) BS_RETURN_IF_ERROR(backend->set_sharded_optimizer());
  BS_RETURN_IF_ERROR(backend->set_grad_reduce(c.grad_reduce));
  const ParamLayout layout = make_param_layout(c.model);
  int64_t step = 0, tokens = 0;
  if (!c.resume.empty())
    BS_RETURN_IF_ERROR(ranks.agree(resume(c, ranks.world, *backend, layout, &step, &tokens, progress)));
  // A finished run has nothing to train: refused before its logs are opened, so its summary and
  // CSVs stay as they were (a resume there used to rewrite summary.json from no steps).
  if (step >= c.steps)
    return Status::error("--resume: the run is already at step " + std::to_string(step) + " and --steps is " +
                         std::to_string(c.steps) + ": give a larger --steps to train on");
  // The old run's files (--overwrite) and the temporaries of killed writes go only now, once the
  // model is built and any checkpoint read.
  BS_RETURN_IF_ERROR(ranks.agree(ranks.leader() ? clear_run_dir(c.out_dir, c.overwrite) : Status::ok()));
  RunLog log;  // rank 0 writes the logs
  BS_RETURN_IF_ERROR(
      ranks.agree(ranks.leader() ? RunLog::open(c.out_dir, c.resume.empty() ? -1 : step, &log) : Status::ok()));

  // A step takes batch x grad_accum sequences on each rank: sample (micro * world + rank) * batch
  // + i, so any number of ranks sees the samples of one rank with world x batch.
  const int64_t tokens_per_step = int64_t{c.batch} * c.grad_accum * c.model.seq_len * ranks.world;
  const double flops_per_step = train_flops_per_token(c.model) * tokens_per_step;
  const std::string route = backend->gemm_route();
  progress << "train: " << recipe_name(c.recipe) << (route.empty() ? "" : " (GEMMs: " + route + ")") << " on "
           << backend->device_name()
           << (backend->attention().empty() ? std::string() : " (attention: " + backend->attention() + ")") << ", "
           << parameter_count(c.model) / 1e6 << "M parameters (" << active_parameter_count(c.model) / 1e6
           << "M active), " << tokens_per_step << " tokens/step"
           << (ranks.world > 1 ? " over " + std::to_string(ranks.world) + " ranks" : std::string())
           << (ranks.world > 1 && c.grad_reduce == GradReduce::kBf16 ? " (gradient sums in bf16)" : "")
           << (ranks.world > 1 && c.grad_reduce == GradReduce::kFp32 && !comm->device_collectives().empty()
                   ? " (gradient sums through " + comm->device_collectives() + ")"
                   : std::string())
           << (c.shard_optimizer ? ", AdamW state " + printf_string("%.1f", backend->optimizer_state_bytes() / 1048576.0) +
                                       " MiB per rank (sharded)"
                                 : std::string())
           << ", data: " << all.description << "\n";

  const int64_t n = int64_t{c.batch} * c.model.seq_len;
  std::vector<int32_t> in(n), tg(n);
  const bool times_phases = !backend->phase_ms().empty();
  double timed_ms = 0, phase_step_ms = 0;
  int64_t timed_steps = 0, phase_steps = 0, run_steps = 0;
  const int64_t warmup = warmup_steps(c.steps - step);
  StepRecord last{};
  double last_eval = NAN;
  while (step < c.steps && run_steps != c.stop_after) {
    // Only a backend that times phases (the GPU's) gives up steps to it.
    const bool phase_step = times_phases && run_steps >= warmup && (run_steps - warmup) % kPhaseEvery == 0;
    backend->time_phases(phase_step);
    const auto start = std::chrono::steady_clock::now();
    BS_RETURN_IF_ERROR(backend->zero_grads());
    double loss = 0, aux = 0;
    for (int micro = 0; micro < c.grad_accum; ++micro) {
      const int64_t first_sample = (int64_t{micro} * ranks.world + ranks.rank) * c.batch;
      BS_RETURN_IF_ERROR(make_batch(train_data, c.model.seq_len, c.seed, step, first_sample, c.batch, in.data(),
                                    tg.data()));
      StepLosses l;
      if (micro == c.grad_accum - 1) backend->reduce_in_next_backward();
      // The micro-batch's index over all ranks keys the gradients' stochastic rounding: each rank
      // draws its own stream (as one GPU accumulating the same micro-batches would), not a copy.
      const int64_t micro_index = (step * c.grad_accum + micro) * ranks.world + ranks.rank;
      BS_RETURN_IF_ERROR(backend->forward_backward(in.data(), tg.data(), c.batch,
                                                   1.0f / float(c.grad_accum * ranks.world), c.seed, micro_index,
                                                   &l));
      loss += l.loss / c.grad_accum;
      aux += l.aux_loss / c.grad_accum;
    }
    const float lr = learning_rate(c.optimizer, step);
    double grad_norm = 0;
    BS_RETURN_IF_ERROR(backend->optimizer_step(c.optimizer, lr, step + 1, &grad_norm));
    // The step's mean loss over all ranks' tokens (a host sum: it does not wait for the sharded
    // optimizer's parameter gathers, which overlap the next forward).
    double losses[2] = {loss, aux};
    BS_RETURN_IF_ERROR(ranks.sum(losses, 2));
    loss = losses[0] / ranks.world, aux = losses[1] / ranks.world;
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    ++step;
    ++run_steps;
    tokens += tokens_per_step;
    if (phase_step) {
      phase_step_ms += ms;
      ++phase_steps;
    } else if (run_steps > warmup) {
      timed_ms += ms;
      ++timed_steps;
    } else {
      backend->reset_phase_ms();
    }
    const double peak = backend->peak_flops() * ranks.world;
    last = {step, tokens, lr, loss, aux, grad_norm, ms, tokens_per_step / (ms / 1e3),
            peak > 0 ? flops_per_step / (ms / 1e3) / peak : NAN};
    BS_RETURN_IF_ERROR(ranks.agree(ranks.leader() ? log.add_step(last) : Status::ok()));
    // Divergence: a non-finite loss or gradient norm (the same on every rank: both are reduced
    // over the ranks) stops the run before this step is evaluated or saved, so the checkpoints on
    // disk are all from finite steps; the step stays in train.csv as the record of it.
    const bool diverged = !std::isfinite(loss) || !std::isfinite(grad_norm);
    if (ranks.leader() && (step == 1 || step % c.log_every == 0 || step == c.steps || diverged))
      progress << format_progress(last, c.steps, estimate_seconds_remaining(log.steps(), c.steps)) << "\n";
    if (diverged) {
      std::ostringstream why;
      why << "the run diverged at step " << step << " (loss " << loss << ", gradient norm " << grad_norm
          << ": not finite) and stopped; the checkpoints before it are kept (--lr " << c.optimizer.lr
          << ": try a lower one)";
      return Status::error(why.str());
    }
    if ((c.eval_every > 0 && step % c.eval_every == 0) || step == c.steps) {
      Status s = Status::ok();
      last_eval = evaluate(c, *backend, eval_data, ranks, &s);
      const double eval_loss = last_eval;
      BS_RETURN_IF_ERROR(s);
      BS_RETURN_IF_ERROR(ranks.agree(ranks.leader() ? log.add_eval({step, tokens, eval_loss}) : Status::ok()));
      progress << "eval step " << step << ": loss " << eval_loss << "\n";
    }
    if (c.checkpoint_every >= 0 && ((c.checkpoint_every > 0 && step % c.checkpoint_every == 0) || step == c.steps))
      BS_RETURN_IF_ERROR(
          ranks.agree(save(c, ranks.leader(), ranks.world, *backend, layout, step, tokens)));
  }
  std::vector<std::pair<std::string, double>> phases = backend->phase_ms();
  for (auto& [name, ms] : phases) ms /= std::max<int64_t>(phase_steps, 1);
  if (timed_steps == 0) timed_ms = phase_step_ms, timed_steps = phase_steps;
  json config = resume_json(c, ranks.world);
  config["steps"] = c.steps;
  config["device"] = backend->device_name();
  if (!backend->gemm_route().empty()) config["gemm_route"] = backend->gemm_route();
  if (!backend->attention().empty()) config["attention"] = backend->attention();
  config["ranks"] = ranks.world;
  config["grad_reduce"] = grad_reduce_name(c.grad_reduce);
  if (ranks.world > 1 && !ranks.comm->device_collectives().empty())
    config["collectives"] = ranks.comm->device_collectives();
  config["batch"] = c.batch;
  config["grad_accum"] = c.grad_accum;
  config["parameters"] = parameter_count(c.model);
  // AdamW's two fp32 moments: for every parameter, or the rank's share when sharded.
  config["optimizer_state_bytes_per_rank"] =
      backend->optimizer_state_bytes() >= 0 ? backend->optimizer_state_bytes() : 8 * parameter_count(c.model);
  if (timed_steps > 0) {  // steps after the warm-up (warmup_steps)
    config["mean_step_ms"] = timed_ms / timed_steps;
    config["mean_tokens_per_s"] = tokens_per_step / (timed_ms / timed_steps / 1e3);
  }
  std::vector<std::pair<std::string, double>> floors;  // ms per step, where the bandwidth is known
  if (backend->copy_bandwidth() > 0) {
    config["copy_bandwidth_gb_per_s"] = backend->copy_bandwidth() / 1e9;
    for (const auto& [name, bytes] : step_phase_bytes(c.model, c.recipe, c.batch, c.grad_accum))
      floors.emplace_back(name, bytes / backend->copy_bandwidth() * 1e3);
  }
  if (!phases.empty() && phase_steps > 0) {
    config["phase_ms_per_step"] = json::object();
    for (const auto& [name, ms] : phases) config["phase_ms_per_step"][name] = ms;
    config["phase_floor_ms_per_step"] = json::object();
    for (const auto& [name, ms] : floors) config["phase_floor_ms_per_step"][name] = ms;
    config["phase_timed_step_ms"] = phase_step_ms / phase_steps;
    progress << "GPU time per step:" << format_phases(phases, floors, phase_steps, phase_step_ms / phase_steps)
             << "\n";
  }
  BS_RETURN_IF_ERROR(ranks.agree(ranks.leader() ? log.write_summary(config) : Status::ok()));
  if (summary != nullptr) {
    summary->out_dir = c.out_dir;
    summary->device = backend->device_name();
    summary->steps = step;
    summary->final_train_loss = run_steps > 0 ? last.train_loss : NAN;
    summary->final_eval_loss = last_eval;
    summary->mean_step_ms = timed_steps > 0 ? timed_ms / timed_steps : last.step_ms;
    summary->tokens_per_s = tokens_per_step / (summary->mean_step_ms / 1e3);
    summary->phase_ms = phase_steps > 0 ? phases : decltype(phases){};
    summary->phase_step_ms = phase_steps > 0 ? phase_step_ms / phase_steps : 0.0;
    summary->phase_steps = phase_steps;
    summary->phase_floor_ms = floors;
  }
  return Status::ok();
}

Status compare_recipes(const TrainConfig& base, const std::vector<Recipe>& recipes, std::ostream& progress_out,
                       std::vector<TrainSummary>* summaries, Communicator* comm) {
  const Ranks ranks(comm);
  std::ostringstream quiet;
  std::ostream& progress = ranks.leader() ? progress_out : quiet;
  if (recipes.empty()) return Status::error("--compare: needs at least one recipe");
  BS_RETURN_IF_ERROR(validate(base));
  // The comparison holds its directory (compare.svg) for its whole length, and checks every
  // recipe's directory before the first trains: a refusal comes before hours of training, not after.
  RunDirLock lock;
  Status s = ranks.leader() ? RunDirLock::acquire(base.out_dir, &lock) : Status::ok();
  if (s && ranks.leader()) s = check_run_dir(base.out_dir, !base.resume.empty(), base.overwrite);
  for (Recipe r : recipes) {
    if (s && ranks.leader()) s = check_run_dir(base.out_dir + "/" + recipe_name(r), !base.resume.empty(), base.overwrite);
  }
  if (s && ranks.leader()) s = clear_run_dir(base.out_dir, base.overwrite);
  BS_RETURN_IF_ERROR(ranks.agree(s));
  std::vector<PlotSeries> curves;
  summaries->clear();
  for (Recipe r : recipes) {
    TrainConfig c = base;
    c.recipe = r;
    c.out_dir = base.out_dir + "/" + recipe_name(r);
    TrainSummary s;
    BS_RETURN_IF_ERROR(train(c, progress_out, &s, comm));
    summaries->push_back(s);
    if (!ranks.leader()) continue;  // rank 0 writes the plot and the table
    std::vector<EvalRecord> evals;
    BS_RETURN_IF_ERROR(read_eval_csv(c.out_dir + "/eval.csv", &evals));  // rank 0 only (see above)
    PlotSeries curve{recipe_name(r), {}, {}};
    for (const EvalRecord& e : evals) {
      curve.x.push_back(double(e.step));
      curve.y.push_back(e.eval_loss);
    }
    curves.push_back(curve);
  }
  if (!ranks.leader()) return Status::ok();
  PlotOptions options;
  options.title = "eval loss by recipe (" + std::to_string(parameter_count(base.model) / 1000) + "k parameters, " +
                  (*summaries)[0].device + ")";
  options.y_label = "eval loss (nats)";
  BS_RETURN_IF_ERROR(write_svg(base.out_dir + "/compare.svg", curves, options));
  const TrainSummary& ref = (*summaries)[0];
  progress << "\nrecipe      eval loss   vs " << recipe_name(recipes[0]) << "   step ms   vs "
           << recipe_name(recipes[0]) << "\n";
  for (size_t i = 0; i < recipes.size(); ++i) {
    const TrainSummary& s = (*summaries)[i];
    char line[160];
    std::snprintf(line, sizeof(line), "%-10s %10.4f  %+7.2f%%  %8.2f  %6.3fx\n", recipe_name(recipes[i]),
                  s.final_eval_loss, 100.0 * (s.final_eval_loss / ref.final_eval_loss - 1.0), s.mean_step_ms,
                  s.mean_step_ms / ref.mean_step_ms);
    progress << line;
  }
  for (size_t i = 0; i < recipes.size(); ++i)
    if (!(*summaries)[i].phase_ms.empty())
      progress << recipe_name(recipes[i]) << " GPU time per step:"
               << format_phases((*summaries)[i].phase_ms, (*summaries)[i].phase_floor_ms, (*summaries)[i].phase_steps,
                                (*summaries)[i].phase_step_ms)
               << "\n";
  progress << "plot: " << base.out_dir << "/compare.svg\n";
  return Status::ok();
}

}  // namespace blockscale::train
