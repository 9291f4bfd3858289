"""NumPy adapter: NumPy arrays in, NumPy arrays out, on the CPU.

NumPy has no autograd, so a call is a plain forward launch on Warp's ``cpu`` device,
zero-copy on the caller's arrays.
"""

from __future__ import annotations

import ctypes
import sys
from typing import Any

import numpy as np

from interop._errors import ArgumentError
from interop._plan import ArraySpec

from ._common import EagerFramework

_c_char = ctypes.c_char
_addressof = ctypes.addressof


class _NumPy(EagerFramework):
    name = "numpy"

    def is_array(self, x: Any) -> bool:
        return isinstance(x, np.ndarray)

    def spec(self, x: np.ndarray) -> ArraySpec:
        return ArraySpec(x.shape, x.dtype)

    def layout(self, x: np.ndarray):
        return x.__array_interface__["data"][0], x.strides, x.itemsize

    def device(self, x: np.ndarray) -> str:
        return "cpu"

    def writable(self, x: np.ndarray) -> bool:
        return bool(x.flags.writeable)

    def refuse(self, op, p, x) -> None:
        ma = _masked()
        if ma is not None and isinstance(x, ma.MaskedArray) and ma.getmask(x) is not ma.nomask and ma.getmask(x).any():
            raise ArgumentError(
                f"op {op.description.label!r}, parameter {p.name!r}: a masked array with masked elements; a Warp "
                "kernel reads every element and would ignore the mask: pass x.filled(value) (or x.data)"
            )

    def fast_key(self, args):
        # any ndarray (subclasses too: masked arrays, memmaps) is keyed on its layout, never on its type alone
        return tuple((type(a), a.shape, a.dtype, a.strides) if isinstance(a, np.ndarray) else type(a) for a in args)

    def cache_fast(self, args) -> bool:
        # a masked array's mask may change between calls: its calls always take the full path (refuse)
        ma = _masked()
        return ma is None or not any(isinstance(a, ma.MaskedArray) for a in args)

    def ptr(self, x: np.ndarray) -> int:
        try:
            return _addressof(_c_char.from_buffer(x))
        except (TypeError, ValueError, BufferError):  # read-only or non-contiguous: slower but general
            return x.__array_interface__["data"][0]

    def alloc(self, spec: ArraySpec, device: str, zero: bool, elem: Any = None) -> np.ndarray:
        return np.zeros(spec.shape, spec.dtype) if zero else np.empty(spec.shape, spec.dtype)


def _masked():
    """``numpy.ma`` where it is imported, else None: no masked array can exist before it is, and
    ``np.ma`` imports it (about 0.1 s, a NumPy op's whole first call otherwise)."""
    return sys.modules.get("numpy.ma")


FRAMEWORK = _NumPy()


def call(op, args, launch_dims, output_dims, kwargs):
    """Run ``op`` on NumPy arrays (see :meth:`interop.Op.__call__`)."""
    return FRAMEWORK.call(op, args, launch_dims, output_dims, kwargs)


def bind(op):
    """A callable that runs ``op`` with NumPy arrays (outputs are NumPy even with no array input)."""

    def run(*args, launch_dims=None, output_dims=None):
        return FRAMEWORK.call(op, args, launch_dims, output_dims, {})

    return run
