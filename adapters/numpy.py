"""NumPy adapter: NumPy arrays in, NumPy arrays out, on the CPU.

NumPy has no autograd, so a call is a plain forward launch on Warp's ``cpu`` device,
zero-copy on the caller's arrays.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from interop._plan import ArraySpec

from ._common import EagerFramework


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

    def alloc(self, spec: ArraySpec, device: str, zero: bool, elem: Any = None) -> np.ndarray:
        return np.zeros(spec.shape, spec.dtype) if zero else np.empty(spec.shape, spec.dtype)


FRAMEWORK = _NumPy()


def call(op, args, launch_dims, output_dims, kwargs):
    """Run ``op`` on NumPy arrays (see :meth:`interop.Op.__call__`)."""
    return FRAMEWORK.call(op, args, launch_dims, output_dims, kwargs)


def bind(op):
    """A callable that runs ``op`` with NumPy arrays (outputs are NumPy even with no array input)."""

    def run(*args, launch_dims=None, output_dims=None):
        return FRAMEWORK.call(op, args, launch_dims, output_dims, {})

    return run
