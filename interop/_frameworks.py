"""Which framework an object belongs to, found without importing any framework.

Like array-api-compat, we look at the type's module name (and at ``sys.modules``)
instead of importing torch/jax/paddle/cupy to run ``isinstance``.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import numpy as np

FRAMEWORKS = ("numpy", "warp", "torch", "jax", "paddle", "cupy")

_ROOTS = {
    "numpy": "numpy",
    "warp": "warp",
    "torch": "torch",
    "jax": "jax",
    "jaxlib": "jax",
    "paddle": "paddle",
    "cupy": "cupy",
    "cupy_backends": "cupy",
}

_type_cache: dict[type, str | None] = {}
_PY_NUMBERS = (bool, int, float, complex)


def framework_of(x: Any) -> str | None:
    """Name of the framework owning array ``x``, or None for a non-array (a Python scalar...)."""
    t = type(x)
    if t in _PY_NUMBERS:  # first: cheap, and traceable by torch.compile (Dynamo) before any cache entry
        return None
    try:
        return _type_cache[t]
    except KeyError:
        pass
    root = t.__module__.split(".", 1)[0]
    fw = _ROOTS.get(root)
    if fw == "numpy" and (
        isinstance(x, np.generic) or not (t.__name__ == "ndarray" or hasattr(x, "__array_interface__"))
    ):
        fw = None  # numpy scalars (np.float32(2.0)) are scalars, not arrays (they too have __array_interface__)
    if fw == "jax" and not (hasattr(x, "shape") and hasattr(x, "dtype")):
        fw = None
    if fw is None and root not in _ROOTS:
        # other producers of the standard interfaces
        if hasattr(x, "__cuda_array_interface__"):
            fw = "cupy"  # any CAI producer (Numba, ...) is handled by the CuPy adapter
        elif hasattr(x, "__array_interface__") or hasattr(x, "__dlpack__") or _has_buffer(x):
            fw = "unsupported"  # memoryview, array.array, bytes...: say so instead of "got memoryview"
    if fw == "warp" and not hasattr(x, "ptr"):
        fw = None  # wp.vec3 values etc. are scalars
    _type_cache[t] = fw
    return fw


def _has_buffer(x: Any) -> bool:
    """Does ``x`` export the Python buffer protocol (checked once per type by the caller's cache)?"""
    try:
        memoryview(x).release()
    except TypeError:
        return False
    return True


def is_array_like(x: Any) -> bool:
    return framework_of(x) is not None


def adapter(name: str):
    """The adapter module for framework ``name`` (imported on first use)."""
    mod = sys.modules.get(f"adapters.{name}")
    if mod is not None:
        return mod
    if name not in FRAMEWORKS:
        raise ValueError(f"unknown framework {name!r}; expected one of {FRAMEWORKS}")
    try:
        return importlib.import_module(f"adapters.{name}")
    except ImportError as e:
        raise ImportError(
            f"the {name} adapter could not be imported ({e}); install the framework, e.g. "
            f"pip install 'warp-interop[{name}]'"
        ) from e


def data_ptr(x: Any) -> int:
    """Address of the first element of array ``x``, for zero-copy checks."""
    fw = framework_of(x)
    if fw == "numpy":
        return int(x.__array_interface__["data"][0])
    if fw == "warp":
        return int(x.ptr or 0)
    if fw == "torch":
        return int(x.data_ptr())
    if fw == "jax":
        return int(x.unsafe_buffer_pointer())
    if fw == "paddle":
        return int(x.data_ptr())
    if fw == "cupy":
        if hasattr(x, "data") and hasattr(x.data, "ptr"):
            return int(x.data.ptr)
        return int(x.__cuda_array_interface__["data"][0])
    raise TypeError(f"no data pointer for {type(x).__name__}")
