// The memory a training run needs, against what the machine has (memory_plan.h).
#include "train/run/memory_plan.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>

#ifdef BLOCKSCALE_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace blockscale::train {
namespace {

// The larger of the two uses of a linear layer's working copies on the CPU (train/cpu/cpu_linear.cpp:
// each operand after the recipe's rounding as an fp64 matrix): `groups` stacked weights of n x k
// (all experts at once), one expert's copy and its rounded values (2nk), the input and output of
// `rows` rows, each also once as the rounded values a copy is made from (2 rows (n + k)).
double cpu_linear_workspace(double n, double k, double groups, double rows) {
  return 8.0 * (groups * n * k + 2.0 * n * k + 2.0 * rows * (n + k));
}

// Bytes per element of a matmul operand's low-precision copies on the GPU (train/gpu/gpu_linear_route.h):
// fp32 multiplies the tensors themselves; bf16 keeps one bf16 copy; fp8_block and mxfp8 on gemm/'s
// kernels a rowwise and a columnwise 8-bit copy; nvfp4 two 4-bit ones; on the bf16-values route
// (--gemm-route bf16) mxfp8 keeps two bf16 copies instead and nvfp4 two more beside its 4-bit ones.
// Scales (1/16 of an element at most) are left out: the figure is a floor, not a ceiling.
double gpu_copy_bytes(Recipe r, gemm::GemmRoute route) {
  const bool bf16_values = route == gemm::GemmRoute::kBf16Values;
  switch (r) {
    case Recipe::kFp32: return 0;
    case Recipe::kBf16: return 2;
    case Recipe::kFp8Block: return 2;
    case Recipe::kMxfp8: return bf16_values ? 4 : 2;
    case Recipe::kNvfp4: return bf16_values ? 5 : 1;
  }
  return 0;
}

bool read_number(const std::string& path, double* v) {
  std::ifstream f(path);
  std::string word;
  if (!(f >> word) || word.find_first_not_of("0123456789") != std::string::npos) return false;  // e.g. "max"
  *v = std::stod(word);
  return true;
}

// The value of `key` in a "key value" file (memory.stat).
bool read_keyed(const std::string& path, const std::string& key, double* v) {
  std::ifstream f(path);
  std::string k;
  double x = 0;
  while (f >> k >> x) {
    if (k == key) {
      *v = x;
      return true;
    }
  }
  return false;
}

// What the process's memory cgroup still lets it use: its limit less its usage, the page cache
// it can drop (inactive files) counted as free; -1 without a limit. cgroup v2 first (the
// process's own group, else the root of the namespace), then v1.
double cgroup_memory_left() {
  std::string group;
  std::ifstream self("/proc/self/cgroup");
  for (std::string line; std::getline(self, line);) {
    if (line.rfind("0::", 0) == 0) group = line.substr(3);
  }
  struct Layout {
    std::string dir, limit, usage, inactive;
  };
  const Layout layouts[] = {
      {"/sys/fs/cgroup" + group, "memory.max", "memory.current", "inactive_file"},
      {"/sys/fs/cgroup", "memory.max", "memory.current", "inactive_file"},
      {"/sys/fs/cgroup/memory", "memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file"},
  };
  for (const Layout& l : layouts) {
    double limit = 0, usage = 0, inactive = 0;
    if (!read_number(l.dir + "/" + l.limit, &limit) || !read_number(l.dir + "/" + l.usage, &usage)) continue;
    if (limit >= 0x1p60) return -1;  // v1 writes "no limit" as a number near 2^63
    read_keyed(l.dir + "/memory.stat", l.inactive, &inactive);
    return std::max(0.0, limit - usage + inactive);
  }
  return -1;
}

}  // namespace

double MemoryNeed::total() const {
  double sum = 0;
  for (const auto& part : parts) sum += part.second;
  return sum;
}

// Symbols: V vocab, D d_model, L layers, H heads, E experts (0: dense), K top_k, F d_ff, T seq_len,
// B --batch; M = B T tokens of a micro-batch, R = M K rows routed to the experts (dense: R = M),
// G = max(E, 1) stacked FFN weights per layer. Parameters (model_config.h's parameter_count):
//   P = 2 V D + T D + D + L (2 D + 4 D^2 + FFN),   FFN = E (3 D F + D)  or, dense, 3 D F.
// CPU (train/cpu/cpu_backend.cpp, cpu_model.cpp, cpu_linear.cpp), bytes:
//   state       = 17 P : fp32 weights, gradients, AdamW m and v, and a 1-byte weight-decay mask
//   activations = 4 (L A + 4 M D + M V + S): A per layer kept for the backward
//                 A = 8 M D (x_in, h, qkv, att, x_mid, h2) + 2 M (rstd) + B H T^2 (probabilities)
//                     + MoE: M E (router) + 3 M K (gates, ids, slots) + R (sources) + R (2 D + 3 F) (xs, y, u, a)
//                     + dense: 3 M F (u, a);
//                 4 M D + M V: the residual stream, the final norm, their gradients and the logits;
//                 S = the backward's largest temporaries: M D + max(5 M D, MoE: R (2 D + 3 F) + M (D + K + E),
//                     dense: 3 M F)
//   workspace   = the largest linear layer's fp64 working copies (cpu_linear_workspace) of wqkv, wo,
//                 w13, w2, the router and the LM head
//   checkpoint  = 12 P while a checkpoint is saved or loaded (host copies of weights, m and v), when
//                 the run saves (--checkpoint-every >= 0) or resumes
// GPU (train/gpu/gpu_backend.cpp, gpu_layers.h), device bytes; c = gpu_copy_bytes:
//   state       = 17 P
//   copies      = c L (4 D^2 + 3 G D F) + 2 V D (the LM head's bf16 copy; fp32: none); bf16: 2 P,
//                 the bf16 copy of every parameter the optimizer writes with the weights
//   activations = 4 (L A' + W) + c L (2 M D + R D + R F) + 2 M D: A' per layer as A, but bf16
//                 probabilities (B H T^2 / 2) and, MoE, 4 M K + E indices and M K D routed outputs;
//                 W = 12 M D + M V + MoE: 2 M E + M K + 2.5 R D + 3 R F (dense: 3 M F), the whole
//                 step's buffers; the operands' copies kept for the backward; the LM head input's
//   workspace   = 20 M D + 6 B H T^2 (attention: bf16 and fp32 head-major copies, scores)
//   bf16 sums   = 2 P with --grad-reduce bf16 (the gradients' bf16 copy the ranks sum)
//   staging     = 4 P per other rank when fp32 sums go through the copy engines (their chunks land there)
//   fused attention (cuDNN): per layer B H T softmax statistics instead of the probabilities, and
//                 a workspace of 16 M D (bf16 copies of qkv, O, dO and dqkv; cuDNN's own is left out)
//   host        = max(5 P (the initial weights and the mask), 12 P when checkpoints are saved or loaded)
// Left out: the data (loaded before the model, sized by its file), CUDA and cuBLAS's own memory,
// and expert parallelism's larger receive buffers; each part is what the step allocates, so the
// estimate is a little below the peak, never far above it.
MemoryPlan plan_memory(const TrainConfig& c, bool on_gpu, bool fused_attention, int copy_engine_peers) {
  const ModelConfig& m = c.model;
  const double V = m.vocab, D = m.d_model, L = m.n_layers, H = m.n_heads, E = m.moe() ? m.n_experts : 0,
               K = m.moe() ? m.top_k : 1, F = m.d_ff, T = m.seq_len, B = c.batch;
  const double M = B * T, R = M * K, G = std::max(E, 1.0), probs = B * H * T * T;
  const double ffn_params = m.moe() ? E * (3 * D * F + D) : 3 * D * F;
  const double P = 2 * V * D + T * D + D + L * (2 * D + 4 * D * D + ffn_params);
  const bool checkpoints = c.checkpoint_every >= 0 || !c.resume.empty();
  const double ffn_kept = m.moe() ? M * E + 3 * M * K + R + R * (2 * D + 3 * F) : 3 * M * F;
  MemoryPlan plan;
  plan.gpu = on_gpu;
  if (!on_gpu) {
    const double kept = 8 * M * D + 2 * M + probs + ffn_kept;
    const double ffn_temps = m.moe() ? R * (2 * D + 3 * F) + M * (D + K + E) : 3 * M * F;
    const double temps = M * D + std::max(5 * M * D, ffn_temps);
    double workspace = std::max({cpu_linear_workspace(3 * D, D, 1, M), cpu_linear_workspace(D, D, 1, M),
                                 cpu_linear_workspace(2 * F, D, G, R), cpu_linear_workspace(D, F, G, R),
                                 cpu_linear_workspace(V, D, 1, M)});
    if (m.moe()) workspace = std::max(workspace, cpu_linear_workspace(E, D, 1, M));
    plan.host.parts = {{"parameters, gradients and AdamW state", 17 * P},
                       {"activations", 4 * (L * kept + 4 * M * D + M * V + temps)},
                       {"matmul workspace", workspace},
                       {"checkpoint copies", checkpoints ? 12 * P : 0.0}};
    return plan;
  }
  const double cb = gpu_copy_bytes(c.recipe, c.gemm_route);
  const double lm_copy = c.recipe == Recipe::kFp32 ? 0.0 : 2.0;
  const double attention_kept = fused_attention ? B * H * T : probs / 2;
  const double kept = 8 * M * D + 2 * M + attention_kept + 3 * R * F +
                      (m.moe() ? M * E + 4 * M * K + E + R * D + M * K * D : 0.0);
  const double step = 12 * M * D + M * V + (m.moe() ? 2 * M * E + M * K + 2.5 * R * D + 3 * R * F : 3 * M * F);
  plan.device.parts = {
      {"parameters, gradients and AdamW state", 17 * P},
      {"weight copies", c.recipe == Recipe::kBf16 ? 2 * P : cb * L * (4 * D * D + 3 * G * D * F) + lm_copy * V * D},
      {"activations", 4 * (L * kept + step) + cb * L * (2 * M * D + R * D + R * F) + lm_copy * M * D},
      {"attention workspace", fused_attention ? 16 * M * D : 20 * M * D + 6 * probs},
      {"bf16 gradient sums", c.grad_reduce == GradReduce::kBf16 ? 2 * P : 0.0},
      {"copy-engine staging", c.grad_reduce == GradReduce::kFp32 ? 4 * P * copy_engine_peers : 0.0}};
  plan.host.parts = {{"host copies of the weights and AdamW state", std::max(5 * P, checkpoints ? 12 * P : 0.0)}};
  return plan;
}

std::string format_bytes(double bytes) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  while (bytes >= 1024 && u + 1 < int(std::size(units))) bytes /= 1024, ++u;
  char text[64];
  std::snprintf(text, sizeof text, u == 0 ? "%.0f %s" : "%.1f %s", bytes, units[u]);
  return text;
}

namespace {

// "the run needs about 412.3 GiB of host memory (parameters ... 390.1 GiB, activations 22.2 GiB)"
std::string describe_need(const MemoryNeed& need, const char* where) {
  std::string parts;
  for (const auto& [what, bytes] : need.parts) {
    if (bytes <= 0) continue;
    parts += (parts.empty() ? "" : ", ") + what + " " + format_bytes(bytes);
  }
  return "the run needs about " + format_bytes(need.total()) + " of " + where + " (" + parts + ")";
}

}  // namespace

Status check_memory(const MemoryPlan& plan, double host_available, double device_available) {
  if (plan.gpu && device_available >= 0 && plan.device.total() > device_available)
    return Status::error(describe_need(plan.device, "GPU memory") + "; the GPU has " + format_bytes(device_available) +
                         " free");
  if (host_available >= 0 && plan.host.total() > host_available)
    return Status::error(describe_need(plan.host, "host memory") + "; this machine has " +
                         format_bytes(host_available) + " available");
  return Status::ok();
}

double host_memory_available() {
  double available = -1;
  std::ifstream meminfo("/proc/meminfo");
  for (std::string line; std::getline(meminfo, line);) {
    std::istringstream fields(line);
    std::string key;
    double kib = 0;
    if (fields >> key >> kib && key == "MemAvailable:") available = kib * 1024;
  }
  if (available < 0) {
    const long pages = ::sysconf(_SC_AVPHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0) available = double(pages) * double(page);
  }
  const double left = cgroup_memory_left();
  if (left >= 0) available = available < 0 ? left : std::min(available, left);
  return available;
}

double gpu_memory_available() {
#ifdef BLOCKSCALE_HAVE_CUDA
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) return double(free_bytes);
  cudaGetLastError();  // not sticky: leave no error for the next CUDA call to report
#endif
  return -1;
}

}  // namespace blockscale::train
