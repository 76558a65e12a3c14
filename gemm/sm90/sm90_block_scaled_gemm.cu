// The sm_90a block-scaled GEMM's entry points: the recipe pair -> kernel instance dispatch.
#include "gemm/sm90/sm90_block_scaled_launch.cuh"

namespace blockscale::gemm::detail {
namespace {

using formats::Format;

// Calls fn.template run<FmtA, FmtB>() for p's recipe pair (gemm.cpp has checked the pair).
template <class FmtA, class Fn>
Status with_b_format(const GemmProblem& p, const Fn& fn) {
  switch (p.b_recipe) {
    case Format::kMxfp8E4M3: return fn.template run<FmtA, sm90::Mxfp8E4M3>();
    case Format::kMxfp8E5M2: return fn.template run<FmtA, sm90::Mxfp8E5M2>();
    case Format::kMxfp4: return fn.template run<FmtA, sm90::Mxfp4>();
    case Format::kNvfp4: return fn.template run<FmtA, sm90::Nvfp4>();
    default: return Status::error("b_recipe: not a block-scaled recipe");
  }
}

template <class Fn>
Status with_formats(const GemmProblem& p, const Fn& fn) {
  switch (p.a_recipe) {
    case Format::kMxfp8E4M3: return with_b_format<sm90::Mxfp8E4M3>(p, fn);
    case Format::kMxfp8E5M2: return with_b_format<sm90::Mxfp8E5M2>(p, fn);
    case Format::kMxfp4: return fn.template run<sm90::Mxfp4, sm90::Mxfp4>();
    case Format::kNvfp4: return fn.template run<sm90::Nvfp4, sm90::Nvfp4>();
    default: return Status::error("a_recipe: not a block-scaled recipe");
  }
}

struct Prepare {
  template <class FmtA, class FmtB>
  Status run() const {
    int sms = 0;
    BS_RETURN_IF_ERROR((prepare_block_scaled<FmtA, FmtB, GroupMode::kDense>(&sms)));
    BS_RETURN_IF_ERROR((prepare_block_scaled<FmtA, FmtB, GroupMode::kM>(&sms)));
    return prepare_block_scaled<FmtA, FmtB, GroupMode::kK>(&sms);
  }
};

struct Launch {
  const GemmProblem& p;
  const GemmArguments& args;
  cudaStream_t stream;
  const Grouping* grouping;
  template <class FmtA, class FmtB>
  Status run() const {
    if (grouping == nullptr) return launch_block_scaled<FmtA, FmtB, GroupMode::kDense>(p, args, stream, nullptr);
    return grouping->mode == GroupMode::kK ? launch_block_scaled<FmtA, FmtB, GroupMode::kK>(p, args, stream, grouping)
                                           : launch_block_scaled<FmtA, FmtB, GroupMode::kM>(p, args, stream, grouping);
  }
};

}  // namespace

Status sm90_block_scaled_gemm_loadable(const GemmProblem& p) { return with_formats(p, Prepare{}); }

Status launch_sm90_block_scaled_gemm(const GemmProblem& p, const GemmArguments& args, cudaStream_t stream,
                                     const Grouping* grouping) {
  return with_formats(p, Launch{p, args, stream, grouping});
}

}  // namespace blockscale::gemm::detail
