"""Threads per block: the ``block_dim`` option and a tile kernel's launch geometry (the block's
lanes as the launch's last dimension, as ``wp.launch_tiled`` launches; docs/contract.md, "Devices").
Imported by the description (checks when an op is described) and the plan (a call's launch)."""

from __future__ import annotations

import operator
from typing import Any

from ._errors import ArgumentError

MAX_BLOCK_DIM = 1024  # CUDA's limit of threads per block, and Warp's limit on the CPU


#: threads per block of a launch that names none on CUDA (Warp's default there; the CPU's is 1)
CUDA_BLOCK_DIM = 256


def _why(desc: Any, bd: int) -> str:
    return f"block_dim={desc.block_dim}" if desc.block_dim else f"block_dim unset: Warp's CUDA default {bd}"


def tile_grid_rank(desc: Any) -> int:
    """The dimensions of a ``wp.launch_tiled`` kernel's tile grid as its thread indices read it:
    one per value of ``wp.tid()``, less the block's lane where the last one is (``i, lane = wp.tid()``)."""
    _, nt, lane = desc.tile_form
    return nt - 1 if lane else nt


def tile_launch_given(desc: Any, ld: tuple) -> tuple:
    """A tile kernel's full launch dims from the ``launch_dims`` given (see ``_plan.tile_launch``),
    taken as ``wp.launch_tiled(kernel, dim=launch_dims, block_dim=b)`` takes its ``dim``: the tile
    grid, the block's lanes appended. A kernel that reads its lane (``i, lane = wp.tid()``) may be
    given the full launch instead, ending with the lanes; one whose grid has more dimensions than
    it reads may too (``(*grid, b)``: ``wp.launch_tiled``'s own launch). Raises ArgumentError
    naming the op, ``launch_dims`` and ``block_dim`` where a CUDA block would span several tiles
    (only the first computed) or the grid has fewer dimensions than the tile coordinates read."""
    bd = desc.block_dim or CUDA_BLOCK_DIM
    form, nt, lane = desc.tile_form
    ld = tuple(ld)
    g = tile_grid_rank(desc)
    if form == "none" and ld:
        return ld + (bd,)
    if lane:
        if g >= 1 and len(ld) == g:
            return ld + (bd,)
        if len(ld) == nt and type(ld[-1]) is int and ld[-1] == bd:
            return ld
        grid = f"the tile grid ({g} dim(s)) or " if g else ""
        raise ArgumentError(
            f"op {desc.label!r}: a tile kernel launches whole blocks, as wp.launch_tiled does, and this one "
            f"reads its lane (the last of its {nt} wp.tid() values): launch_dims must be {grid}the full "
            f"launch, which must end with the block's {bd} threads ({_why(desc, bd)}), got launch_dims={ld}; pass "
            + (f"launch_dims=(*tile_grid, {bd}) or the tile grid alone" if g else f"launch_dims=({bd},)")
        )
    if len(ld) >= max(g, 1):
        if len(ld) == g + 1 and type(ld[-1]) is int and ld[-1] == bd:
            return ld  # the full launch, as wp.launch_tiled makes it
        return ld + (bd,)
    raise ArgumentError(
        f"op {desc.label!r}: launch_dims is the tile grid, as wp.launch_tiled's dim, and the kernel reads "
        f"{g} tile coordinate(s) from wp.tid(): launch_dims must have at least {g} dim(s), got "
        f"launch_dims={ld}; pass launch_dims=(" + ", ".join(f"tiles_{k}" for k in range(g)) + ",)"
    )


def check_block_dim(value: Any, opname: str, kind: str = "kernel") -> int | None:
    """``block_dim`` as an int in 1..1024 (or None), else a clear error naming the op."""
    if value is None:
        return None
    if kind != "kernel":
        raise ArgumentError(
            f"op {opname!r}: block_dim does not apply to a Python-function op (it launches its own kernels); "
            "pass block_dim to the wp.launch calls inside it"
        )
    if isinstance(value, bool) or not isinstance(value, int):
        try:
            if isinstance(value, bool) or type(value).__name__ == "bool_":  # (a bool is no thread count)
                raise TypeError
            value = operator.index(value)
        except TypeError:
            raise ArgumentError(
                f"op {opname!r}: block_dim must be an int from 1 to {MAX_BLOCK_DIM}, got {type(value).__name__} {value!r}"
            ) from None
    if not 1 <= value <= MAX_BLOCK_DIM:
        raise ArgumentError(f"op {opname!r}: block_dim must be an int from 1 to {MAX_BLOCK_DIM}, got {value}")
    return int(value)
