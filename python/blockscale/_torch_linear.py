"""blockscale.torch's layers: Linear and GroupedLinear (MoE experts) in a block-scaled recipe on the
GPU kernels, or in bf16 on torch's.

Per GEMM, with the operand formats of the training driver's recipes (train/model/recipe_policy.h):
    fprop  Y  = X W^T    X rowwise            x W rowwise                    -> bf16
    dgrad  dX = dY W     dY rowwise           x W columnwise (W^T's blocks)  -> bf16
    wgrad  dW = dY^T X   dY columnwise        x X columnwise (along tokens)  -> fp32
    fp8_block  X, dY 1x128; W 128x128 (fp32 scales)
    mxfp8      every operand E4M3 in 1x32 blocks, E8M0 scales rounded up
    nvfp4      X, dY 1x16; W 16x16 (2D); dY with stochastic rounding; both wgrad operands (the
               columnwise copies of X and dY) through the 16-point random Hadamard transform
Each tensor is quantized once, both copies from one read (X and W in forward, dY in backward);
the columnwise copies are what backward keeps. Linear and GroupedLinear keep the weight's copies
until the weight changes (_QuantizedWeight). The weight is the fp32 master (torch optimizers
update it); its gradient comes back fp32. in_features and out_features must be multiples of 128
(they are a GEMM's reduction length); any token count works (Linear pads the tokens to 128 with
zero rows, which change no sum; GroupedLinear's grouped quantize pads each expert itself).
nvfp4's stochastic rounding: each layer draws a Philox seed from torch's CPU generator when it
is made (torch.manual_seed makes runs repeat) and counts its calls as the offset, so every
backward rounds with fresh bits; a CUDA graph's replays reuse the key of the captured call.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Optional

import torch
import torch.nn.functional as F

from . import torch as bst


@dataclass(frozen=True)
class _Formats:
    """One recipe's operand formats and quantize options."""

    x: str
    w: str
    dy: str
    w_options: dict = field(default_factory=dict)
    wgrad_rht: bool = False  # nvfp4: the columnwise copies of X and dY through the RHT
    sr: bool = False         # nvfp4: dY with stochastic rounding


_FORMATS = {
    "fp8_block": _Formats("fp8_block128", "fp8_block128x128", "fp8_block128"),
    "mxfp8": _Formats("mxfp8", "mxfp8", "mxfp8"),
    "nvfp4": _Formats("nvfp4", "nvfp4", "nvfp4", {"block_2d": True}, wgrad_rht=True, sr=True),
}
_RECIPES = tuple(_FORMATS) + ("bf16",)


def _check_recipe(recipe: str) -> None:
    if recipe not in _RECIPES:
        raise ValueError(f"recipe: '{recipe}' is not one of {', '.join(_RECIPES)}")


def _check_features(name: str, value: int, recipe: str) -> None:
    if value <= 0 or value % 128 != 0:
        raise ValueError(f"{name}: must be a positive multiple of 128 for the {recipe} recipe (got {value}): "
                         "it is the reduction length of fprop or dgrad")


def _weight_direction(x: torch.Tensor, weight: torch.Tensor) -> str:
    """The weight copies a call needs: the columnwise one too when a backward may follow (dgrad)."""
    both = torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad)
    return "both" if both else "rowwise"


def _direction(columnwise: bool) -> str:
    return "both" if columnwise else "rowwise"


def _activation_options(f: _Formats, columnwise: bool) -> dict:
    return {"rht": True} if f.wgrad_rht and columnwise else {}


def _gradient_options(f: _Formats, columnwise: bool, sr) -> dict:
    o = _activation_options(f, columnwise)
    if f.sr:
        o["sr_seed"], o["sr_offset"] = sr
    return o


class _SrKeys:
    """nvfp4's stochastic-rounding keys of one layer: (seed, calls so far)."""

    def __init__(self) -> None:
        self.seed = int(torch.randint(0, 2 ** 62, (), dtype=torch.int64))
        self._calls = itertools.count()

    def next(self):
        return self.seed, next(self._calls)


def _save(op) -> list:
    return [op.data, op.scales, op.scale_dec]


def _load(fmt: str, saved: list):
    return bst.Operand(fmt, saved.pop(0), saved.pop(0), saved.pop(0))


class _QuantizedWeight:
    """A layer's weight in its recipe's format, quantized again only when the weight has changed.

    Micro-batches of one optimizer step (and evaluations) reuse one quantization of the fp32
    master, as the training driver does. A change is seen through the parameter's version
    counter, which every in-place update of the parameter bumps (optimizers, load_state_dict,
    copy_ under no_grad); writes through `weight.data` bypass it: the layer's `weight_changed()`
    is the rule after those. A cached "both" also serves a call that needs the rowwise copy only.
    While a CUDA graph is being captured the weight is quantized on every call and nothing is
    cached: a replay does not run this check, so the quantize must be inside the graph for the
    replays to see the weight's updates."""

    def __init__(self, quantize) -> None:
        self._quantize = quantize  # (weight, direction) -> the quantized copies
        self.forget()

    def get(self, weight: torch.Tensor, direction: str):
        if torch.cuda.is_current_stream_capturing():
            return self._quantize(weight.detach(), direction)
        key = (weight._version, weight.data_ptr())
        if self._key != key or (direction == "both" and self._direction != "both"):
            self._value = self._quantize(weight.detach(), direction)
            self._key, self._direction = key, direction
        return self._value

    def forget(self) -> None:
        self._key, self._direction, self._value = None, None, None


class _QuantizedLinear(torch.autograd.Function):
    """Y = X W^T on x2d [M, K] (M a multiple of 128) and the fp32 master weight [N, K]; wq: the
    weight's copies (the columnwise one too when X needs a gradient); f: the recipe's formats; sr:
    dY's stochastic-rounding key; grad: whether grad mode was on at the call (under
    torch.no_grad, needs_input_grad still follows requires_grad)."""

    @staticmethod
    def forward(ctx, x2d, weight, wq, f: _Formats, sr, grad: bool) -> torch.Tensor:
        need_dx, need_dw = grad and ctx.needs_input_grad[0], grad and ctx.needs_input_grad[1]
        xq = bst.quantize(x2d, f.x, direction=_direction(need_dw), **_activation_options(f, need_dw))
        y = bst.gemm(xq.rowwise, wq.rowwise, out_dtype=torch.bfloat16)
        ctx.save_for_backward(*(_save(xq.columnwise) if need_dw else []), *(_save(wq.columnwise) if need_dx else []))
        ctx.f, ctx.sr, ctx.x_dtype = f, sr, x2d.dtype
        return y

    @staticmethod
    def backward(ctx, dy: torch.Tensor):
        need_dx, need_dw = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        f, saved = ctx.f, list(ctx.saved_tensors)
        dyq = bst.quantize(dy.contiguous(), f.dy, direction=_direction(need_dw),
                           **_gradient_options(f, need_dw, ctx.sr))
        dx = dw = None
        if need_dw:
            dw = bst.gemm(dyq.columnwise, _load(f.x, saved), out_dtype=torch.float32)
        if need_dx:
            dx = bst.gemm(dyq.rowwise, _load(f.w, saved), out_dtype=torch.bfloat16).to(ctx.x_dtype)
        return dx, dw, None, None, None, None


def _weight_quantizer(f: _Formats):
    return lambda weight, direction: bst.quantize(weight, f.w, direction=direction, **f.w_options)


def linear(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None,
           recipe: str = "fp8_block") -> torch.Tensor:
    """y = x weight^T + bias in bf16, the GEMMs (and their backward) in `recipe`. The weight is
    quantized on every call (Linear keeps its copies until the weight changes); nvfp4 draws a
    stochastic-rounding seed per call."""
    return _linear(x, weight, bias, recipe, None, None)


def _linear(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], recipe: str,
            cache: Optional[_QuantizedWeight], sr: Optional[_SrKeys]) -> torch.Tensor:
    _check_recipe(recipe)
    if recipe == "bf16":
        y = F.linear(x.to(torch.bfloat16), weight.to(torch.bfloat16))
    else:
        f = _FORMATS[recipe]
        if x.shape[-1] != weight.shape[-1]:
            raise ValueError(f"x: last dimension ({x.shape[-1]}) must equal weight's in_features ({weight.shape[-1]})")
        x2d = x.reshape(-1, x.shape[-1])
        rows = x2d.shape[0]
        pad = -rows % 128  # wgrad reduces over the tokens: a multiple of 128
        if pad:
            x2d = F.pad(x2d, (0, 0, 0, pad))
        direction = _weight_direction(x, weight)
        wq = cache.get(weight, direction) if cache is not None else _weight_quantizer(f)(weight.detach(), direction)
        key = (sr or _SrKeys()).next() if f.sr else None
        y = _QuantizedLinear.apply(x2d, weight, wq, f, key, torch.is_grad_enabled())
        y = y[:rows].reshape(*x.shape[:-1], weight.shape[0])
    return y if bias is None else y + bias.to(y.dtype)


class Linear(torch.nn.Module):
    """nn.Linear with its GEMMs in a block-scaled recipe ("fp8_block", "mxfp8", "nvfp4") or bf16.

    Input: [..., in_features] bf16 / fp16 / fp32 on a CUDA device; output bf16. The weight (and
    bias) are fp32 masters, initialised as nn.Linear's."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, recipe: str = "fp8_block",
                 device=None) -> None:
        super().__init__()
        _check_recipe(recipe)
        if recipe != "bf16":
            _check_features("in_features", in_features, recipe)
            _check_features("out_features", out_features, recipe)
        self.in_features, self.out_features, self.recipe = in_features, out_features, recipe
        self.weight = torch.nn.Parameter(torch.empty(out_features, in_features, device=device, dtype=torch.float32))
        self.bias = torch.nn.Parameter(torch.empty(out_features, device=device)) if bias else None
        self._wq = _QuantizedWeight(_weight_quantizer(_FORMATS[recipe]) if recipe != "bf16" else None)
        self._sr = _SrKeys()
        self.reset_parameters()

    def reset_parameters(self) -> None:
        torch.nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            bound = 1 / math.sqrt(self.in_features)
            torch.nn.init.uniform_(self.bias, -bound, bound)
        self.weight_changed()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _linear(x, self.weight, self.bias, self.recipe, self._wq, self._sr)

    def weight_changed(self) -> None:
        """Forget the cached quantized copies of the weight (after writing it through `weight.data`)."""
        self._wq.forget()

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, recipe={self.recipe}"


class _QuantizedGroupedLinear(torch.autograd.Function):
    """Y[tokens of g] = X[tokens of g] W_g^T; expert ends (int32, device) never leave the device.
    wq, f, sr and grad: as _QuantizedLinear's."""

    @staticmethod
    def forward(ctx, x, weight, ends, wq, f: _Formats, sr, grad: bool) -> torch.Tensor:
        need_dx, need_dw = grad and ctx.needs_input_grad[0], grad and ctx.needs_input_grad[1]
        xq = bst.quantize_grouped(x, ends, f.x, direction=_direction(need_dw), **_activation_options(f, need_dw))
        y = bst.grouped_gemm(xq.rowwise, wq.rowwise, ends, mode="m", out_dtype=torch.bfloat16)
        ctx.save_for_backward(ends, *(_save(xq.columnwise) if need_dw else []),
                              *(_save(wq.columnwise) if need_dx else []))
        ctx.f, ctx.sr, ctx.x_dtype = f, sr, x.dtype
        return y

    @staticmethod
    def backward(ctx, dy: torch.Tensor):
        need_dx, need_dw = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        f, saved = ctx.f, list(ctx.saved_tensors)
        ends = saved.pop(0)
        dyq = bst.quantize_grouped(dy.contiguous(), ends, f.dy, direction=_direction(need_dw),
                                   **_gradient_options(f, need_dw, ctx.sr))
        dx = dw = None
        if need_dw:
            # Both copies were padded from the same ends with the same block: one set of padded ends.
            dw = bst.grouped_gemm(dyq.columnwise, _load(f.x, saved), dyq.padded_group_ends, mode="k",
                                  out_dtype=torch.float32)
        if need_dx:
            dx = bst.grouped_gemm(dyq.rowwise, _load(f.w, saved), ends, mode="m",
                                  out_dtype=torch.bfloat16).to(ctx.x_dtype)
        return dx, dw, None, None, None, None, None


class GroupedLinear(torch.nn.Module):
    """The experts' linear layer of a MoE block: num_experts weights [out, in], fp32 masters.

    forward(x, tokens_per_expert): x [tokens, in_features] sorted by expert; tokens_per_expert an
    integer tensor [num_experts] on x's device (summing to tokens; any count, 0 included). No host
    synchronisation: the sizes are read on the device. Recipes "fp8_block", "mxfp8", "nvfp4":
    M-grouped fprop and dgrad, K-grouped wgrad on blockscale's kernels (features multiples of
    128); "bf16": the same products in bf16 through torch._grouped_mm (the baseline, on torch's
    own kernels). Output bf16."""

    def __init__(self, num_experts: int, in_features: int, out_features: int, recipe: str = "fp8_block",
                 device=None) -> None:
        super().__init__()
        _check_recipe(recipe)
        if recipe == "bf16" and not hasattr(torch, "_grouped_mm"):
            raise ValueError(f"recipe: 'bf16' needs torch._grouped_mm, which torch {torch.__version__} lacks")
        if num_experts < 1:
            raise ValueError(f"num_experts: must be >= 1 (got {num_experts})")
        if recipe != "bf16":
            _check_features("in_features", in_features, recipe)
            _check_features("out_features", out_features, recipe)
        self.num_experts, self.in_features, self.out_features, self.recipe = num_experts, in_features, out_features, recipe
        self.weight = torch.nn.Parameter(
            torch.empty(num_experts, out_features, in_features, device=device, dtype=torch.float32))
        f = _FORMATS.get(recipe)
        self._wq = _QuantizedWeight(
            (lambda w, direction: bst.quantize_experts(w, f.w, direction=direction, **f.w_options)) if f else None)
        self._sr = _SrKeys()
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for g in range(self.num_experts):
            torch.nn.init.kaiming_uniform_(self.weight.data[g], a=math.sqrt(5))
        self.weight_changed()

    def forward(self, x: torch.Tensor, tokens_per_expert: torch.Tensor) -> torch.Tensor:
        if x.dim() != 2 or x.shape[1] != self.in_features:
            raise ValueError(f"x: shape {tuple(x.shape)} must be (tokens, {self.in_features})")
        if tokens_per_expert.shape != (self.num_experts,):
            raise ValueError(f"tokens_per_expert: shape {tuple(tokens_per_expert.shape)} must be ({self.num_experts},)")
        if tokens_per_expert.device != x.device:
            raise ValueError(f"tokens_per_expert: is on {tokens_per_expert.device}, must be on x's device {x.device}")
        ends = torch.cumsum(tokens_per_expert, 0, dtype=torch.int32)  # on the device: no sync
        if self.recipe == "bf16":  # [G, in, out] as a view: the layout torch._grouped_mm takes
            return torch._grouped_mm(x.to(torch.bfloat16), self.weight.to(torch.bfloat16).transpose(-2, -1), offs=ends)
        wq = self._wq.get(self.weight, _weight_direction(x, self.weight))
        f = _FORMATS[self.recipe]
        return _QuantizedGroupedLinear.apply(x, self.weight, ends, wq, f, self._sr.next() if f.sr else None,
                                             torch.is_grad_enabled())

    def weight_changed(self) -> None:
        """Forget the cached quantized copies of the weight (after writing it through `weight.data`)."""
        self._wq.forget()

    def extra_repr(self) -> str:
        return (f"num_experts={self.num_experts}, in_features={self.in_features}, "
                f"out_features={self.out_features}, recipe={self.recipe}")
