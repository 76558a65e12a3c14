// `blockscale train`: trains the MoE transformer of train/ on the built-in synthetic corpus, a
// token file or raw text, in one precision recipe or several compared against each other.
#include <cstdlib>
#include <iostream>
#include <memory>
#include <new>
#include <sstream>
#include <string>
#include <vector>

#include "tools/cli.h"                          // defines: fail, check
#include "train/parallel/distributed_env.h"  // defines: read_distributed_env
#include "train/trainer.h"                     // defines: TrainConfig, train, compare_recipes
#ifdef BLOCKSCALE_HAVE_NCCL
#include "train/parallel/gpu_nccl.h"  // defines: make_nccl_communicator
#endif

namespace blockscale::tools {
namespace {

struct TrainArgs {
  train::TrainConfig config;
  std::string recipe = "bf16";
  std::string compare;
  const CLI::Option* compare_option = nullptr;  // given (possibly as ""), or not
  std::string gemm_route = "auto";
  std::string grad_reduce = "fp32";
  std::string collectives = "auto";
};

constexpr const char* kFooter = R"(
The model: token + position embeddings, then per layer RMSNorm -> causal attention (bf16) ->
residual, RMSNorm -> MoE (softmax top-k router with a load-balancing loss, SwiGLU experts) or a
dense SwiGLU FFN (--experts 0) -> residual; final RMSNorm, LM head, cross-entropy. Recipes set
how the attention projections and the experts multiply (fprop, dgrad, wgrad): bf16, fp8_block,
mxfp8, nvfp4, or fp32 (the CPU reference's exact mode). Master weights and AdamW state are fp32.

Outputs in --out: train.csv (every step), eval.csv, summary.json, checkpoints step_*/ with
`latest` (resume with --resume <out>); with --compare, one such directory per recipe plus
compare.svg (eval loss curves) and a table of each recipe against the first.
Run directories: one run uses a directory at a time (it locks <out>/.lock; a second run there is
refused). A new run refuses a directory that holds a run unless given --resume (continue it) or
--overwrite (delete its files first). Outputs are never written through a symbolic link or over
a read-only file. A run that needs more memory than the machine has is refused before it starts.
Devices: --device auto uses the GPU when the build has CUDA and a GPU is present, else the CPU
(the CPU runs the reference model: fine for tiny models, slow for anything else).
Exit status: 0 success, 1 failure (bad data or checkpoint file, I/O error, a run directory in use
or holding a run, too little memory), 2 bad usage.)";

std::vector<train::Recipe> parse_recipe_list(const std::string& list) {
  std::vector<train::Recipe> out;
  std::stringstream ss(list);
  std::string name;
  while (std::getline(ss, name, ',')) {
    train::Recipe r;
    check_usage("train", train::parse_recipe(name, &r));
    out.push_back(r);
  }
  return out;
}

// Under a launcher (torchrun, srun) this process is one rank of several, one per GPU, joined
// through NCCL; started on its own it is the only one.
std::unique_ptr<train::Communicator> join_ranks(train::DeviceCollectives collectives) {
  train::DistributedEnv env;
  check("train", train::read_distributed_env(&env));
  if (!env.distributed() && std::getenv("WORLD_SIZE") == nullptr) return nullptr;
#ifdef BLOCKSCALE_HAVE_NCCL
  std::unique_ptr<train::Communicator> comm;
  check("train", train::make_nccl_communicator(env, collectives, &comm));
  return comm;
#else
  (void)collectives;
  if (env.distributed()) fail("train", "WORLD_SIZE > 1 needs a build with CUDA and NCCL");
  return nullptr;
#endif
}

void run_train(TrainArgs& args) {
  train::TrainConfig& c = args.config;
  // Usage errors (exit 2), before anything runs: an empty --compare would otherwise train the
  // default recipe, and a file source without its file fail later as "cannot open ''".
  if (args.compare_option->count() > 0 && args.compare.empty())
    throw CLI::ValidationError("--compare", "give one or more recipes, comma-separated (e.g. bf16,fp8_block)");
  if (c.data.source != "synthetic" && c.data.path.empty())
    throw CLI::ValidationError("--data-path", "--data " + c.data.source + " reads a file: give it with --data-path");
  check_usage("train", train::parse_recipe(args.recipe, &c.recipe));
  check_usage("train", gemm::parse_gemm_route("--gemm-route", args.gemm_route, &c.gemm_route));
  check_usage("train", train::parse_grad_reduce(args.grad_reduce, &c.grad_reduce));
  train::DeviceCollectives collectives;
  check_usage("train", train::parse_device_collectives(args.collectives, &collectives));
  if (c.optimizer.total_steps <= 0) c.optimizer.total_steps = c.steps;
  // Every option's range for every recipe the run trains, before any work (train() checks again).
  const std::vector<train::Recipe> recipes =
      args.compare.empty() ? std::vector<train::Recipe>{c.recipe} : parse_recipe_list(args.compare);
  for (train::Recipe r : recipes) {
    train::TrainConfig each = c;
    each.recipe = r;
    check_usage("train", train::validate(each));
  }
  const std::unique_ptr<train::Communicator> comm = join_ranks(collectives);
  const bool leader = comm == nullptr || comm->rank() == 0;  // rank 0 prints the results
  if (!args.compare.empty()) {
    std::vector<train::TrainSummary> summaries;
    check("train", train::compare_recipes(c, recipes, std::cerr, &summaries, comm.get()));
    for (const train::TrainSummary& s : summaries) {
      if (leader)
        std::printf("%s: final eval loss %.4f, %.1f tokens/s (%s)\n", s.out_dir.c_str(), s.final_eval_loss,
                    s.tokens_per_s, s.device.c_str());
    }
    return;
  }
  train::TrainSummary s;
  check("train", train::train(c, std::cerr, &s, comm.get()));
  if (leader)
    std::printf("%s: %lld steps, final eval loss %.4f, train loss %.4f, %.1f tokens/s (%s)\n", s.out_dir.c_str(),
                static_cast<long long>(s.steps), s.final_eval_loss, s.final_train_loss, s.tokens_per_s,
                s.device.c_str());
}

}  // namespace

void add_train_command(CLI::App& app) {
  auto args = std::make_shared<TrainArgs>();
  train::TrainConfig& c = args->config;
  c.optimizer.total_steps = 0;  // default: --steps
  CLI::App* cmd = app.add_subcommand("train", "train the MoE transformer of train/ in a precision recipe");
  cmd->footer(kFooter);
  cmd->add_option("--recipe", args->recipe, "bf16, fp8_block, mxfp8, nvfp4 or fp32")->capture_default_str();
  args->compare_option =
      cmd->add_option("--compare", args->compare, "comma-separated recipes trained one after another, e.g. bf16,mxfp8");
  cmd->add_option("--device", c.device, "auto, cpu or gpu")->capture_default_str();
  // The option `blockscale gemm` takes too; --fp8-route, --fp8-gemm and --mx-gemm are earlier
  // spellings, still accepted (one route per run).
  cmd->add_option("--gemm-route,--fp8-route,--fp8-gemm,--mx-gemm", args->gemm_route,
                  "which engine multiplies the quantized recipes, the same sums on each: auto (default: fp8_block on "
                  "gemm/'s kernels, the experts' sizes read on the GPU, cuBLASLt for dense products of at most 512 "
                  "rows; mxfp8 and nvfp4 as bf16 on Hopper, on gemm/'s kernels elsewhere), kernel (every product on "
                  "gemm/'s kernels), cublaslt (fp8_block: every product on cuBLASLt, the experts one each with their "
                  "sizes read back to the host per MoE layer: a synchronisation) or bf16 (mxfp8, nvfp4: the block "
                  "values as bf16, cuBLASLt)")
      ->capture_default_str();
  cmd->add_flag("--expert-parallel", c.expert_parallel,
                "split each MoE layer's experts across the ranks (all-to-all token exchange; GPU, under a launcher)");
  cmd->add_option("--attention", c.attention,
                  "the GPU step's attention: auto (cuDNN's fused SDPA where it runs the shape, else the reference) or "
                  "reference (cuBLAS products with the CPU model's rounding points)")
      ->capture_default_str();
  cmd->add_flag("--shard-optimizer", c.shard_optimizer,
                "each data-parallel rank keeps AdamW's state for 1/N of the parameters: gradients reduce-scattered "
                "during the backward, the updated parameters all-gathered (under a launcher; not with "
                "--expert-parallel)");
  cmd->add_option("--grad-reduce", args->grad_reduce,
                  "the type data-parallel gradient sums travel and add in: fp32 (the sum of the ranks' gradients "
                  "to fp32 rounding) or bf16 (half the bytes, each partial sum rounded to bf16; GPU)")
      ->capture_default_str();
  cmd->add_option("--collectives", args->collectives,
                  "what moves the fp32 gradient sums between GPUs: copy-engines (peer copies, no SMs taken from the "
                  "step; every rank's GPU on one host with peer access), nccl (NCCL's kernels), or auto (copy "
                  "engines where they work, else NCCL)")
      ->capture_default_str();
  cmd->add_option("--out", c.out_dir,
                  "run directory (logs, checkpoints). One run at a time: a second run on a directory in use is "
                  "refused. A new run refuses a directory that already holds a run unless --resume or --overwrite")
      ->capture_default_str();
  CLI::Option* resume =
      cmd->add_option("--resume", c.resume,
                      "continue the run of this checkpoint or run directory (usually --out itself): its logs "
                      "after the checkpoint's step are dropped and the run appends from there");
  cmd->add_flag("--overwrite", c.overwrite,
                "start afresh in an --out that holds a run: first delete that run's train.csv, eval.csv, "
                "summary.json, latest, step_*/ checkpoints and compare.svg (nothing else in the directory)")
      ->excludes(resume);
  // model
  cmd->add_option("--layers", c.model.n_layers, "transformer layers")->capture_default_str();
  cmd->add_option("--d-model", c.model.d_model, "model width")->capture_default_str();
  cmd->add_option("--heads", c.model.n_heads, "attention heads")->capture_default_str();
  cmd->add_option("--experts", c.model.n_experts, "experts per MoE layer (0: dense FFN)")->capture_default_str();
  cmd->add_option("--top-k", c.model.top_k, "experts per token")->capture_default_str();
  cmd->add_option("--d-ff", c.model.d_ff, "expert (or dense FFN) hidden width")->capture_default_str();
  cmd->add_option("--seq-len", c.model.seq_len, "tokens per sequence")->capture_default_str();
  cmd->add_option("--vocab", c.model.vocab, "vocabulary size (synthetic data: its vocabulary)")->capture_default_str();
  cmd->add_option("--aux-loss-coef", c.model.aux_loss_coef, "load-balancing loss weight")->capture_default_str();
  // data
  cmd->add_option("--data", c.data.source, "synthetic, tokens or text")->capture_default_str();
  cmd->add_option("--data-path", c.data.path, "token file (--data tokens) or text file (--data text)");
  cmd->add_option("--token-dtype", c.data.dtype, "token file element type: uint16 or uint32")->capture_default_str();
  cmd->add_option("--synthetic-tokens", c.data.synthetic_tokens, "length of the synthetic corpus")->capture_default_str();
  cmd->add_option("--eval-fraction", c.data.eval_fraction, "held-out share of the data")->capture_default_str();
  // loop
  cmd->add_option("--steps", c.steps, "optimizer steps")->capture_default_str();
  cmd->add_option("--batch", c.batch, "sequences per micro-batch")->capture_default_str();
  cmd->add_option("--grad-accum", c.grad_accum, "micro-batches per step")->capture_default_str();
  cmd->add_option("--eval-every", c.eval_every, "steps between evaluations (0: at the end)")->capture_default_str();
  cmd->add_option("--eval-batches", c.eval_batches, "batches per evaluation")->capture_default_str();
  cmd->add_option("--log-every", c.log_every, "steps between progress lines")->capture_default_str();
  cmd->add_option("--checkpoint-every", c.checkpoint_every, "steps between checkpoints (0: at the end only, -1: none)")
      ->capture_default_str();
  cmd->add_option("--keep-checkpoints", c.keep_checkpoints, "checkpoints kept")->capture_default_str();
  cmd->add_option("--seed", c.seed, "data, initialisation and rounding seed")
      ->check(seed_validator())
      ->capture_default_str();
  // optimizer
  cmd->add_option("--lr", c.optimizer.lr, "peak learning rate")->capture_default_str();
  cmd->add_option("--min-lr-ratio", c.optimizer.min_lr_ratio, "final lr / peak lr (cosine)")->capture_default_str();
  cmd->add_option("--warmup", c.optimizer.warmup_steps, "linear warmup steps")->capture_default_str();
  cmd->add_option("--schedule-steps", c.optimizer.total_steps, "cosine length (default: --steps)");
  cmd->add_option("--weight-decay", c.optimizer.weight_decay, "AdamW decoupled weight decay")->capture_default_str();
  cmd->add_option("--beta1", c.optimizer.beta1, "AdamW beta1")->capture_default_str();
  cmd->add_option("--beta2", c.optimizer.beta2, "AdamW beta2")->capture_default_str();
  cmd->add_option("--clip", c.optimizer.clip_norm, "global gradient-norm clip (0: off)")->capture_default_str();
  cmd->add_option("--stop-after", c.stop_after, "stop after this many steps, as if killed (tests resume)");
  cmd->callback([args] {
    // The memory plan refuses a run too large for the machine before it allocates; this is the
    // last resort for what the plan does not count (the data, another process taking memory).
    try {
      run_train(*args);
    } catch (const std::bad_alloc&) {
      fail("train", "out of host memory: an allocation failed (a smaller model, --batch or data set needs less)");
    }
  });
}

}  // namespace blockscale::tools
