"""Warp adapter: ``wp.array`` in, ``wp.array`` out, on the arrays' device and Warp's stream.

Outputs keep Warp's element types (an output of ``vec3`` is a ``wp.array`` of ``vec3``).
No autograd here: use ``wp.Tape`` around the call as with any Warp launch.
"""

from __future__ import annotations

from typing import Any

import warp as wp

from interop import _dtypes
from interop._plan import ArraySpec

from ._common import EagerFramework


class _Warp(EagerFramework):
    name = "warp"

    def is_array(self, x: Any) -> bool:
        return isinstance(x, wp.array)

    def spec(self, x: wp.array) -> ArraySpec:
        scalar, inner = _dtypes.split(x.dtype)
        return ArraySpec(tuple(x.shape) + inner, _dtypes.np_dtype(scalar))

    def layout(self, x: wp.array):
        scalar, inner = _dtypes.split(x.dtype)
        itemsize = wp.types.type_size_in_bytes(scalar)
        inner_strides = []
        acc = itemsize
        for s in reversed(inner):
            inner_strides.append(acc)
            acc *= s
        return int(x.ptr or 0), tuple(x.strides) + tuple(reversed(inner_strides)), itemsize

    def device(self, x: wp.array) -> str:
        return str(x.device)

    def default_device(self) -> str:
        return str(wp.get_device())

    def alloc(self, spec: ArraySpec, device: str, zero: bool, elem: Any = None) -> wp.array:
        inner = _dtypes.split(elem)[1]
        outer = tuple(spec.shape[: len(spec.shape) - len(inner)])
        return wp.zeros(outer, dtype=elem, device=device) if zero else wp.empty(outer, dtype=elem, device=device)

    def stream(self, device: str, arrays) -> Any:
        return None  # Warp's current stream on the device


FRAMEWORK = _Warp()


def call(op, args, launch_dims, output_dims, kwargs):
    """Run ``op`` on Warp arrays (see :meth:`interop.Op.__call__`)."""
    return FRAMEWORK.call(op, args, launch_dims, output_dims, kwargs)


def bind(op):
    """A callable that runs ``op`` with Warp arrays (outputs are Warp arrays even with no array input)."""

    def run(*args, launch_dims=None, output_dims=None):
        return FRAMEWORK.call(op, args, launch_dims, output_dims, {})

    return run
