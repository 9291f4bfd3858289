"""``torch.vmap`` of an op's torch operators (``register_vmap``): a loop over the batch."""

from __future__ import annotations

import torch

from interop._errors import ArgumentError

from .binding import _OVERLOADS, _Binding


def _make_vmap(b: _Binding, mask: tuple, kind: str):
    """A loop over the batch: correct for every kernel (a kernel's threads may read any element)."""
    n = b.ncall

    def vmap_rule(info, in_dims, *args):
        qual = b.qualname(mask, "primary" if kind == b.primary_kind() else kind)
        ovl = _OVERLOADS[qual]
        if kind == "mutable":
            for i in b.inout_pos:
                if in_dims[i] is None:
                    raise ArgumentError(
                        f"op {b.label!r}: torch.vmap over a call whose in-out parameter {b.call_params[i].name!r} "
                        "is not batched: it would be updated once per batch element; batch it too"
                    )
        inout = set(b.inout_pos) if kind == "mutable" else set()
        for i in inout:
            a, d = args[i], in_dims[i]
            if a.size(d) > 1 and a.stride(d) == 0:
                # the batch elements are one memory: each would accumulate into the others' values
                raise ArgumentError(
                    f"op {b.label!r}, parameter {b.call_params[i].name!r}: torch.vmap over an in-out array whose "
                    "batch elements share memory (stride 0 along the batched dimension, e.g. an expanded "
                    "tensor); pass an array that owns its elements (.clone())"
                )
        per = []
        for j in range(info.batch_size):
            sl = []
            for i, (a, d) in enumerate(zip(args, in_dims)):
                if isinstance(a, torch.Tensor) and d is not None:
                    a = a.select(d, j)
                    if i not in inout:
                        a = a.contiguous()  # vec/mat components of a slice along an inner dim
                sl.append(a)
            per.append(ovl(*sl))
        if kind == "backward":
            m = len(per[0])
            return [torch.stack([r[q] for r in per]) for q in range(m)], [0] * m
        first = per[0]
        if first is None:
            return None, None
        if isinstance(first, tuple):
            outs = tuple(torch.stack([r[q] for r in per]) for q in range(len(first)))
            return outs, tuple(0 for _ in outs)
        return torch.stack(per), 0

    del n
    return vmap_rule
