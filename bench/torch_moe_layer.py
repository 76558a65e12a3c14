#!/usr/bin/env python3
"""A MoE FFN layer with blockscale.torch.GroupedLinear (fp8_block, mxfp8, nvfp4) against torch bf16, on one Hopper GPU.

1. Training: the same top-2 SwiGLU MoE layer (router in plain torch, experts' w1 and w2 grouped)
   trained with AdamW on the same seeded synthetic regression, once with GroupedLinear in each
   recipe of --recipes and once with bf16 expert GEMMs in torch (torch._grouped_mm, else a loop
   over experts), from identical weights. Prints the loss curves and, per recipe, PASS/FAIL:
   |recipe - bf16| / bf16 of the last 20 steps' mean loss within 1%.
2. Timing: forward + backward (fprop, dgrad, wgrad) of one grouped linear layer: GroupedLinear,
   torch._grouped_mm bf16, torch._scaled_grouped_mm with rowwise FP8 scales. CUDA events, median.

    PYTHONPATH=build/python python3 bench/torch_moe_layer.py [--recipes fp8_block,mxfp8,nvfp4] [--steps N] [--quick]

Exit code: 0; 1 when blockscale raised (or no GPU); 2 when the loss comparison FAILs. A torch
peer that is missing or raises is reported and skipped.
"""
import argparse
import math
import statistics
import sys
import traceback

import torch
import torch.nn.functional as F

from cuda_events import median_ms

FP8_MAX = 448.0  # largest E4M3 value


# ---- the layer --------------------------------------------------------------------------------

def _loop_mm(x, w_t, ends):
    """Per-expert bf16 matmuls: x [T, K] sorted by expert, w_t [G, K, N]. Reads the ends on the host
    (a sync): only the fallback reference when torch._grouped_mm is unusable."""
    bounds = [0] + ends.tolist()
    return torch.cat([x[bounds[g]:bounds[g + 1]] @ w_t[g] for g in range(w_t.shape[0])])


class Bf16GroupedLinear(torch.nn.Module):
    """GroupedLinear's interface and parameter (fp32 master weight [G, out, in]), GEMMs in bf16."""

    def __init__(self, num_experts, in_features, out_features, use_grouped_mm, device=None):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.empty(num_experts, out_features, in_features, device=device))
        self.use_grouped_mm = use_grouped_mm

    def forward(self, x, tokens_per_expert):
        ends = torch.cumsum(tokens_per_expert, 0, dtype=torch.int32)
        w_t = self.weight.to(torch.bfloat16).transpose(-2, -1)  # [G, in, out]: a view, as _grouped_mm takes it
        if self.use_grouped_mm:
            return torch._grouped_mm(x, w_t, offs=ends)
        return _loop_mm(x, w_t, ends)


class MoE(torch.nn.Module):
    """Top-k router (fp32, plain torch) + SwiGLU experts: w1 [G, 2*ffn, hidden], w2 [G, hidden, ffn]."""

    def __init__(self, grouped, hidden, ffn, experts, topk, device):
        super().__init__()
        self.topk, self.experts, self.ffn = topk, experts, ffn
        self.router = torch.nn.Linear(hidden, experts, bias=False, device=device)
        self.w1 = grouped(experts, hidden, 2 * ffn)
        self.w2 = grouped(experts, ffn, hidden)

    def forward(self, x):  # x [T, hidden] fp32
        probs = self.router(x).softmax(-1)
        topw, topi = probs.topk(self.topk, dim=-1)
        topw = topw / topw.sum(-1, keepdim=True)
        flat = topi.reshape(-1)                           # routed row i = (token i // k, choice i % k)
        order = torch.argsort(flat, stable=True)          # rows sorted by expert, as the grouped GEMMs need
        token = order // self.topk
        counts = torch.bincount(flat, minlength=self.experts)  # stays on the device: no sync
        h = self.w1(x[token].to(torch.bfloat16), counts)
        act = (F.silu(h[:, :self.ffn]) * h[:, self.ffn:]).contiguous()
        y = self.w2(act, counts)
        y = y.float() * topw.reshape(-1)[order, None]
        return torch.zeros_like(x).index_add_(0, token, y)


# ---- 1. training ------------------------------------------------------------------------------

class Task:
    """target = c * gelu(x A) B + noise: a fixed random teacher the layer can learn, plus unit
    Gaussian noise, so the loss has a floor near 1.0 that it approaches and never goes under (a
    loss near 0 would make the 1% check a test of FP8 rounding noise against nothing)."""

    def __init__(self, hidden, tokens, seed, device):
        g = torch.Generator(device=device).manual_seed(seed + 1)
        self.a = torch.randn(hidden, 2 * hidden, device=device, generator=g) / hidden ** 0.5
        self.b = torch.randn(2 * hidden, hidden, device=device, generator=g) / (2 * hidden) ** 0.5
        self.tokens, self.seed, self.device, self.scale = tokens, seed, device, 1.0
        x, _ = self.batch(-1)
        self.scale = 1.0 / self.teacher(x).std().item()  # the teacher's part of the target: unit variance

    def teacher(self, x):
        return self.scale * (F.gelu(x @ self.a) @ self.b)

    def batch(self, step):
        """The same (x, target) for a step in every run: its own seeded generator."""
        g = torch.Generator(device=self.device).manual_seed(self.seed * 100003 + step + 7)
        x = torch.randn(self.tokens, self.a.shape[0], device=self.device, generator=g)
        noise = torch.randn(self.tokens, self.a.shape[0], device=self.device, generator=g)
        return x, self.teacher(x) + noise


def train(model, task, steps, lr):
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    losses = torch.empty(steps, device=task.device)
    for s in range(steps):
        x, target = task.batch(s)
        loss = F.mse_loss(model(x), target)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses[s] = loss.detach()  # no per-step sync: read once at the end
    return losses.tolist()


def probe_grouped_mm(device):
    """(usable, why): torch._grouped_mm forward and backward on uneven experts (an empty one
    included) against the per-expert loop, so a wrong or missing op falls back before training."""
    if not hasattr(torch, "_grouped_mm"):
        return False, f"torch {torch.__version__} has no torch._grouped_mm"
    try:
        g = torch.Generator(device=device).manual_seed(0)
        counts = torch.tensor([0, 5, 123, 16], device=device)
        ends = torch.cumsum(counts, 0, dtype=torch.int32)
        x = torch.randn(144, 128, device=device, generator=g).bfloat16().requires_grad_()
        w = torch.randn(4, 256, 128, device=device, generator=g).bfloat16().requires_grad_()
        dy = torch.randn(144, 256, device=device, generator=g).bfloat16()
        got = [torch._grouped_mm(x, w.transpose(-2, -1), offs=ends)]
        got += torch.autograd.grad(got[0], (x, w), dy)
        ref = [_loop_mm(x, w.transpose(-2, -1), ends)]
        ref += torch.autograd.grad(ref[0], (x, w), dy)
        for name, a, b in zip(("y", "dx", "dw"), got, ref):
            err = rel_err(a, b)
            if not err < 1e-2:
                return False, f"torch._grouped_mm's {name} differs from the per-expert loop (rel err {err:.2e})"
        return True, "torch._grouped_mm (offs: int32 expert ends on the device)"
    except Exception as e:  # noqa: BLE001  (any failure of the peer: fall back and say why)
        return False, f"torch._grouped_mm raised {type(e).__name__}: {e}"


def run_training(bst, args, device):
    hidden, ffn, experts, topk, tokens = 1024, 2816, 8, 2, 4096  # ffn: 22 x 128 (K multiple of 128)
    use_gmm, why = probe_grouped_mm(device)
    print(f"## Training: {experts} experts top-{topk}, hidden {hidden}, ffn {ffn} (SwiGLU), {tokens} tokens/step, "
          f"AdamW lr {args.lr}, {args.steps} steps, seed {args.seed}")
    print(f"bf16 reference experts: {why if use_gmm else why + '; using a loop over experts'}\n")
    task = Task(hidden, tokens, args.seed, device)

    torch.manual_seed(args.seed)  # the initial weights: GroupedLinear's initialisation (Bf16GroupedLinear has none)
    first = MoE(lambda g, i, o: bst.GroupedLinear(g, i, o, device=device), hidden, ffn, experts, topk, device)
    init = {k: v.clone() for k, v in first.state_dict().items()}
    del first
    ref = MoE(lambda g, i, o: Bf16GroupedLinear(g, i, o, use_gmm, device=device), hidden, ffn, experts, topk, device)
    ref.load_state_dict(init)
    curves = {}
    for recipe in args.recipes:  # blockscale: an exception here is its failure
        model = MoE(lambda g, i, o: bst.GroupedLinear(g, i, o, recipe=recipe, device=device),
                    hidden, ffn, experts, topk, device)
        model.load_state_dict(init)  # identical initial weights (router, w1, w2)
        curves[recipe] = train(model, task, args.steps, args.lr)
    try:
        loss_ref = train(ref, task, args.steps, args.lr)
    except Exception as e:  # noqa: BLE001  (the torch peer: fall back to the loop once, else no comparison)
        if not use_gmm:
            print(f"bf16 reference raised {type(e).__name__}: {e}; no comparison")
            return True
        print(f"torch._grouped_mm raised {type(e).__name__} in training: {e}; retrying with a loop over experts")
        ref = MoE(lambda g, i, o: Bf16GroupedLinear(g, i, o, False, device=device), hidden, ffn, experts, topk, device)
        ref.load_state_dict(init)
        loss_ref = train(ref, task, args.steps, args.lr)

    print("| step | " + " | ".join(f"{r} GroupedLinear" for r in curves) + " | bf16 torch |")
    print("|---:|" + "---:|" * (len(curves) + 1))
    for s in range(args.steps):
        if s == 0 or (s + 1) % 20 == 0 or s == args.steps - 1:
            print(f"| {s + 1} | " + " | ".join(f"{c[s]:.5f}" for c in curves.values()) + f" | {loss_ref[s]:.5f} |")
    last = min(20, args.steps)
    m_ref = statistics.fmean(loss_ref[-last:])
    print(f"\nmean loss, last {last} steps: bf16 {m_ref:.5f} (first step {loss_ref[0]:.5f}; the noise floor is ~1.0)")
    ok = True
    for recipe, curve in curves.items():
        m = statistics.fmean(curve[-last:])
        rel = abs(m - m_ref) / m_ref
        passed = rel < 0.01 and math.isfinite(m) and math.isfinite(m_ref)  # NaN compares False: FAIL
        ok = ok and passed
        print(f"{recipe}: {m:.5f}, |{recipe} - bf16| / bf16 = {rel:.3e}  ->  {'PASS' if passed else 'FAIL'} (limit 1e-2)")
    print()
    return ok


# ---- 2. timing --------------------------------------------------------------------------------

def rel_err(a, b):
    b = b.float()
    return ((a.float() - b).norm() / b.norm().clamp(min=1e-30)).item()


def _fp8_rows(t):
    """E4M3 codes of t with one fp32 scale per row (the last dim reduced): the rowwise recipe.
    Returns the codes and the dequantization scale the GEMM multiplies by."""
    amax = t.abs().amax(dim=-1, keepdim=True).float().clamp(min=1e-12)
    q = (t.float() * (FP8_MAX / amax)).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return q, (amax / FP8_MAX).squeeze(-1).contiguous()


def _fp8_group_rows(t, groups):
    """t [R, T] with the T columns in `groups` equal groups: one scale per row per group, laid out
    [groups * R] group-major (the 2d x 2d _scaled_grouped_mm's scale). Equal groups only: the
    timing's uniform split."""
    r, cols = t.shape
    q, s = _fp8_rows(t.view(r, groups, cols // groups))
    return q.view(r, cols), s.t().contiguous().view(-1)


def scaled_rowwise_operands(x, w, dy, groups):
    """What each GEMM needs: A row-major, B column-major (a transposed view), fp32 scales."""
    xq, xs = _fp8_rows(x)                                       # fprop A [T, K]
    wq, ws = _fp8_rows(w)                                       # fprop B: [G, N, K] -> view [G, K, N]
    dyq, dys = _fp8_rows(dy)                                    # dgrad A [T, N]
    wtq, wts = _fp8_rows(w.transpose(-2, -1).contiguous())      # dgrad B: scales along N; view [G, N, K]
    dytq, dyts = _fp8_group_rows(dy.t().contiguous(), groups)   # wgrad A [N, T], per expert
    xtq, xts = _fp8_group_rows(x.t().contiguous(), groups)      # wgrad B: [K, T] -> view [T, K]
    return ((xq, wq.transpose(-2, -1), xs, ws), (dyq, wtq.transpose(-2, -1), dys, wts),
            (dytq, xtq.t(), dyts, xts))


def scaled_gemms(ops, ends):
    # use_fast_accum=True: the setting torchao's rowwise MoE training uses (its fast configuration).
    return [torch._scaled_grouped_mm(a, b, sa, sb, offs=ends, out_dtype=torch.bfloat16, use_fast_accum=True)
            for a, b, sa, sb in ops]  # y [T, N], dx [T, K], dw [G, N, K]


def run_timing(bst, args, device):
    tokens, groups, k, n = args.shape
    warmup, iters = (2, 5) if args.quick else (5, 20)
    flops = 3 * 2 * tokens * n * k  # fprop, dgrad, wgrad
    print(f"## Timing: one grouped linear layer, forward + backward (fprop, dgrad, wgrad): {tokens} tokens in "
          f"{groups} equal experts, K {k} -> N {n}; warm-up {warmup}, median of {iters}")
    g = torch.Generator(device=device).manual_seed(args.seed)
    x = torch.randn(tokens, k, device=device, generator=g).bfloat16()
    w = torch.randn(groups, n, k, device=device, generator=g) / k ** 0.5  # fp32 master
    dy = torch.randn(tokens, n, device=device, generator=g).bfloat16()
    counts_host = [tokens // groups] * groups
    counts = torch.tensor(counts_host, device=device)
    ends = torch.cumsum(counts, 0, dtype=torch.int32)

    # fp32 reference of the three products, to show each implementation computes the layer.
    xs, dys = x.float().split(counts_host), dy.float().split(counts_host)
    ref = (torch.cat([a @ w[e].t() for e, a in enumerate(xs)]), torch.cat([d @ w[e] for e, d in enumerate(dys)]),
           torch.stack([d.t() @ a for d, a in zip(dys, xs)]))
    del xs, dys
    rows = []  # (name, ms or None, errors or why)

    def record(name, step):
        """Times step (it returns y, dx, dw) and checks its outputs against the fp32 products."""
        try:
            ms = median_ms(step, iters, 'queued', warmup)
            errs = "/".join(f"{rel_err(o, r):.1e}" for o, r in zip(step(), ref))
            rows.append((name, ms, errs))
        except Exception as e:  # noqa: BLE001  (reported in the table; blockscale's also in the exit code)
            if name.startswith("blockscale"):
                traceback.print_exc()
            rows.append((name, None, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"))
            print(f"{name}: skipped, {type(e).__name__}: {e}")

    # blockscale: quantize (fused kernels) + the three GEMMs, as GroupedLinear runs them.
    xg = x.clone().requires_grad_()
    for recipe in args.recipes:
        layer = bst.GroupedLinear(groups, k, n, recipe=recipe, device=device)
        layer.weight.data.copy_(w)
        layer.weight_changed()

        def bs_step(layer=layer):
            y = layer(xg, counts)
            return (y, *torch.autograd.grad(y, (xg, layer.weight), dy))
        record(f"blockscale GroupedLinear {recipe} (incl. quantize)", bs_step)

        # The same with the fp32 master weight quantized on every call (one micro-batch per
        # optimizer step); above, the weight does not change between calls, so its copies are reused.
        def bs_step_requantize(layer=layer, bs_step=bs_step):
            layer.weight_changed()
            return bs_step()
        record(f"blockscale GroupedLinear {recipe} (incl. quantize, weight quantized every call)", bs_step_requantize)

    # torch bf16: the weights already bf16 (no per-step cast: the peer's best case).
    if hasattr(torch, "_grouped_mm"):
        wb = w.bfloat16().requires_grad_()

        def bf16_step():
            y = torch._grouped_mm(xg, wb.transpose(-2, -1), offs=ends)
            return (y, *torch.autograd.grad(y, (xg, wb), dy))
        record("torch._grouped_mm bf16", bf16_step)
    else:
        rows.append(("torch._grouped_mm bf16", None, f"torch {torch.__version__} has no torch._grouped_mm"))

    # torch rowwise FP8: quantize in plain torch ops (unfused), then three _scaled_grouped_mm calls.
    if hasattr(torch, "_scaled_grouped_mm") and hasattr(torch, "float8_e4m3fn"):
        wb16 = w.bfloat16()
        record("torch._scaled_grouped_mm rowwise (incl. torch-op quantize)",
               lambda: scaled_gemms(scaled_rowwise_operands(x, wb16, dy, groups), ends))
        if rows[-1][1] is not None:  # the operands quantize and the GEMMs run: time the GEMMs alone too
            ops = scaled_rowwise_operands(x, wb16, dy, groups)
            record("torch._scaled_grouped_mm rowwise (GEMMs only)", lambda: scaled_gemms(ops, ends))
    else:
        rows.append(("torch._scaled_grouped_mm rowwise", None, f"torch {torch.__version__} has no _scaled_grouped_mm"))

    bf16_ms = next((ms for name, ms, _ in rows if name.startswith("torch._grouped_mm") and ms), None)
    print("\n| implementation | ms | TFLOP/s | vs bf16 (bf16 ms / ms) | rel err y/dx/dW vs fp32 |")
    print("|---|---:|---:|---:|---|")
    for name, ms, note in rows:
        if ms is None:
            print(f"| {name} | - | - | - | not run: {note} |")
        else:
            ratio = f"{bf16_ms / ms:.2f}x" if bf16_ms else "n/a"
            print(f"| {name} | {ms:.3f} | {flops / ms / 1e9:.0f} | {ratio} | {note} |")
    print("\nTFLOP/s counts 3 GEMMs of 2*T*N*K. blockscale's dW is fp32, the torch peers' bf16.")
    return all(ms is not None for name, ms, _ in rows if name.startswith("blockscale"))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=None, help="training steps (default 200; 60 with --quick)")
    p.add_argument("--quick", action="store_true", help="fewer training steps and timing iterations")
    p.add_argument("--lr", type=float, default=5e-4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shape", type=lambda s: tuple(int(v) for v in s.split(",")), default=(8192, 8, 4096, 4096),
                   help="timing shape tokens,experts,K,N (default 8192,8,4096,4096)")
    p.add_argument("--recipes", type=lambda s: s.split(","), default=["fp8_block"],
                   help="GroupedLinear recipes, comma-separated: fp8_block, mxfp8, nvfp4 (default fp8_block)")
    p.add_argument("--skip-train", action="store_true")
    p.add_argument("--skip-timing", action="store_true")
    args = p.parse_args()
    if args.steps is None:
        args.steps = 60 if args.quick else 200
    if args.steps < 1:
        p.error("--steps: at least 1")
    tokens, groups, k, n = args.shape if len(args.shape) == 4 else (0, 1, 0, 0)
    if tokens <= 0 or groups <= 0 or tokens % (groups * 128) or k <= 0 or k % 128 or n <= 0 or n % 128:
        # equal experts of a multiple of 128 tokens: aligned for every peer (the rowwise wgrad's groups)
        p.error("--shape: tokens,experts,K,N with tokens = experts x a multiple of 128, K and N multiples of 128")

    bad = [r for r in args.recipes if r not in ("fp8_block", "mxfp8", "nvfp4")]
    if bad or not args.recipes:
        p.error(f"--recipes: fp8_block, mxfp8 or nvfp4, comma-separated (got {','.join(args.recipes)})")

    if not torch.cuda.is_available():
        print("no CUDA device: this benchmark needs a Hopper GPU")
        return 1
    try:
        import blockscale.torch as bst
    except Exception:  # noqa: BLE001
        traceback.print_exc()
        print("blockscale.torch did not import: PYTHONPATH=<build>/python (python/README.md)")
        return 1
    device = torch.device("cuda")
    cap = torch.cuda.get_device_capability()
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()} (sm_{cap[0]}{cap[1]}), "
          f"blockscale from {bst.__file__}\n")

    rc = 0
    if not args.skip_train:
        try:
            if not run_training(bst, args, device):
                rc = 2
        except Exception:  # noqa: BLE001  (the bf16 side never raises: probed; so this is blockscale's)
            traceback.print_exc()
            rc = 1
    if not args.skip_timing:
        try:
            if not run_timing(bst, args, device):
                rc = 1
        except Exception:  # noqa: BLE001  (the torch peers are caught inside: this is blockscale's setup)
            traceback.print_exc()
            rc = 1
    return rc


if __name__ == "__main__":
    sys.exit(main())
