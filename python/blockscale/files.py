"""Quantized tensors in files: the safetensors schema ``blockscale quantize`` writes (docs/file-format.md).

``save`` writes through the CLI's own code, so a file saved here is the CLI's byte for byte for
the same entries; ``load`` reads a file either wrote, checking every key, dtype, shape and scale.
"""
from __future__ import annotations

from typing import Dict, Mapping, Tuple, Union

from . import _core
from .emulator import QuantizedTensor, _from_core, _parts

Entry = Union[QuantizedTensor, Tuple[QuantizedTensor, QuantizedTensor]]


def save(path: str, tensors: Mapping[str, Entry]) -> None:
    """Writes ``tensors`` (name -> QuantizedTensor, or the (rowwise, columnwise) pair of
    ``quantize(..., direction="both")``) to the .safetensors file ``path``.

    A pair is stored as the CLI stores ``--direction both``: entry ``name`` (rowwise) and
    ``name.columnwise``. The file is written to a temporary name and renamed at the end.
    """
    if not isinstance(tensors, Mapping):
        raise ValueError(f"tensors: a mapping of names to QuantizedTensors, not {type(tensors).__name__}")
    entries = []
    for name, entry in tensors.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"tensors: the name {name!r} is not a non-empty string")
        if isinstance(entry, tuple):
            if len(entry) != 2 or not all(isinstance(q, QuantizedTensor) for q in entry):
                raise ValueError(f"tensors['{name}']: a QuantizedTensor or a (rowwise, columnwise) pair")
            if (entry[0].direction, entry[1].direction) != ("rowwise", "columnwise"):
                raise ValueError(f"tensors['{name}']: a pair is (rowwise, columnwise), not "
                                 f"({entry[0].direction}, {entry[1].direction})")
            named = [(name, entry[0]), (name + ".columnwise", entry[1])]
        else:
            named = [(name, entry)]
        for entry_name, q in named:
            parts = _parts(q, f"tensors['{name}']")
            parts.update(name=entry_name, shape=list(q.shape), direction=q.direction, rounding=q.rounding,
                         hadamard=q.hadamard)
            entries.append(parts)
    _core.save(str(path), entries)


def load(path: str) -> Dict[str, QuantizedTensor]:
    """Every quantized entry of the .safetensors file ``path``, by entry name (a ``--direction
    both`` copy gives ``name`` and ``name.columnwise``). Other tensors in the file are ignored.

    ``nonfinite_seen`` is not stored: it reads False (a NaN scale marks a block that held NaN/Inf).
    """
    return {d["name"]: _from_core(d, d["shape"], d["direction"], d["rounding"], d["hadamard"])
            for d in _core.load(str(path))}
