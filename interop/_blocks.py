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


def tile_launch_given(desc: Any, ld: tuple) -> tuple:
    """A tile kernel's full launch dims from the ``launch_dims`` given (see ``_plan.tile_launch``):
    the tile grid (one dim fewer than the kernel's thread indices) gets the block's lanes
    appended; full dims must end with them. Raises ArgumentError naming the op, ``launch_dims``
    and ``block_dim``."""
    bd = desc.block_dim or CUDA_BLOCK_DIM
    nd = len(desc.domain)
    ld = tuple(ld)
    if nd >= 2 and len(ld) == nd - 1:
        return ld + (bd,)
    if not ld or type(ld[-1]) is not int or ld[-1] != bd:
        why = f"block_dim={desc.block_dim}" if desc.block_dim else f"block_dim unset: Warp's CUDA default {bd}"
        raise ArgumentError(
            f"op {desc.label!r}: a tile kernel launches whole blocks, as wp.launch_tiled does: launch_dims "
            f"must be the tile grid ({max(nd - 1, 1)} dim(s)) or end with the block's {bd} threads "
            f"({why}), got launch_dims={ld}; pass launch_dims=(*tile_grid, {bd}) or the tile grid alone"
        )
    return ld


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
