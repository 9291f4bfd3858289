"""Which framework an object belongs to, found without importing any framework.

Like array-api-compat, we look at the type's module name (and at ``sys.modules``)
instead of importing torch/jax/paddle/cupy to run ``isinstance``; a class defined elsewhere
(a user's ``torch.Tensor`` or ``np.ndarray`` subclass) belongs to the framework of the array
type in its MRO.
"""

from __future__ import annotations

import ctypes
import importlib
import importlib.abc
import importlib.util
import sys
import threading
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

#: the array types a user's class may derive from, by (module root, class name): a subclass is
#: its base's framework's array (found by walking the MRO: no framework import, no isinstance)
_ARRAY_BASES = {
    ("numpy", "ndarray"): "numpy",
    ("torch", "Tensor"): "torch",
    ("paddle", "Tensor"): "paddle",
    ("cupy", "ndarray"): "cupy",
    ("warp", "array"): "warp",
}

_type_cache: dict[type, str | None] = {}
#: Python values that are never arrays, answered before the type cache: torch.compile (Dynamo)
#: traces this test at a cold first call, where reading a builtin type's ``__module__`` is untraceable
#: (a vector parameter given as a tuple or a list: ``op(x, (0.0, -9.8, 0.0))``)
_PY_VALUES = (bool, int, float, complex, tuple, list)


def _module_root(t: type) -> str:
    return (getattr(t, "__module__", None) or "").split(".", 1)[0]


def _array_base_root(t: type) -> str | None:
    """The module root of the framework array type ``t`` derives from (``class MyTensor(torch.Tensor)``
    defined in user code), or None."""
    for base in t.__mro__[1:]:
        root = _module_root(base)
        if (root, base.__name__) in _ARRAY_BASES:
            return root
    return None


def framework_of(x: Any) -> str | None:
    """Name of the framework owning array ``x``, or None for a non-array (a Python scalar...)."""
    t = type(x)
    if t in _PY_VALUES:  # first: cheap, and traceable by torch.compile (Dynamo) before any cache entry
        return None
    try:
        return _type_cache[t]
    except KeyError:
        pass
    root = _module_root(t)
    if root not in _ROOTS:
        root = _array_base_root(t) or root
    fw = _ROOTS.get(root)
    if fw == "numpy" and (
        isinstance(x, np.generic) or not (t.__name__ == "ndarray" or hasattr(x, "__array_interface__"))
    ):
        fw = None  # numpy scalars (np.float32(2.0)) are scalars, not arrays (they too have __array_interface__)
    if fw == "jax" and not (hasattr(x, "shape") and hasattr(x, "dtype")):
        fw = None
    if root == "ml_dtypes" and isinstance(x, np.generic):
        pass  # a NumPy scalar of an ml_dtypes type (bfloat16): a number, like np.float32(2.0)
    elif fw is None and root not in _ROOTS:
        # other producers of the standard interfaces
        if hasattr(x, "__cuda_array_interface__"):
            fw = "cupy"  # any CAI producer (Numba, ...) is handled by the CuPy adapter
        elif hasattr(x, "__array_interface__") or hasattr(x, "__dlpack__") or _has_buffer(x):
            fw = "unsupported"  # memoryview, array.array, bytes...: say so instead of "got memoryview"
    if fw == "warp" and (issubclass(t, ctypes.Array) or not hasattr(x, "ptr")):
        # wp.vec3 values etc. are scalars: told by their type first (Warp's vector and matrix types
        # are ctypes arrays), since under torch.compile (Dynamo) getattr on one is untraceable
        fw = None
    _type_cache[t] = fw
    return fw


def seed_warp_values() -> None:
    """Enter Warp's named value types (``wp.vec3``, ``wp.mat22``, ``wp.quat``, ...: ctypes arrays) in the
    type cache as scalars. Adapters that trace (torch.compile) call it before anything is traced: a
    first trace that fills the cache is guarded on it, and the next call would trace again."""
    import warp

    for v in vars(warp).values():
        if isinstance(v, type) and issubclass(v, ctypes.Array):
            _type_cache.setdefault(v, None)


def _has_buffer(x: Any) -> bool:
    """Does ``x`` export the Python buffer protocol (checked once per type by the caller's cache)?"""
    try:
        memoryview(x).release()
    except TypeError:
        return False
    return True


_adapters: dict[str, Any] = {}  # fully imported adapters (sys.modules also holds half-imported ones)
_adapter_lock = threading.RLock()


def adapter(name: str):
    """The adapter module for framework ``name``, imported and Warp initialised once, under a lock.

    Another thread may be importing the adapter right now: ``sys.modules`` already holds that
    partially initialised module, so only modules recorded here after their import finished
    are returned without the lock.
    """
    mod = _adapters.get(name)
    if mod is not None:
        return mod
    mod = sys.modules.get(f"adapters.{name}")
    if mod is not None and not getattr(getattr(mod, "__spec__", None), "_initializing", True):
        return mod  # imported by the import hook below (Warp initialised there); no lock inside a trace
    if name not in FRAMEWORKS:
        raise ValueError(f"unknown framework {name!r}; expected one of {FRAMEWORKS}")
    with _adapter_lock:
        mod = _adapters.get(name)
        if mod is not None:
            return mod
        from ._runtime import ensure_init

        ensure_init()  # before any adapter can launch
        try:
            mod = importlib.import_module(f"adapters.{name}")
        except ImportError as e:
            raise ImportError(
                f"the {name} adapter could not be imported ({e}); install the framework, e.g. "
                f"pip install 'warp-interop[{name}]'"
            ) from e
        _adapters[name] = mod
        return mod


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


# ---------------------------------------------------------------------------------------
# Registering ops with a framework imported *after* they were described.
#
# PyTorch must see an op's custom operator before tracing reaches it (importing the adapter
# inside torch.compile breaks the graph), Paddle's SOT must know the op is a graph break, and
# XLA must find an op's FFI targets when a deserialized ``jax.export`` module is compiled
# (before any call of the op). When ops exist and such a framework is not imported yet, a
# one-shot import hook loads the adapter right after the framework module finishes
# importing. The core still never imports a framework itself.
# ---------------------------------------------------------------------------------------
_EAGER_ADAPTERS = ("torch", "paddle", "jax")
_watching: set[str] = set()


class _AfterImport(importlib.abc.MetaPathFinder):
    def __init__(self, name: str):
        self.name = name
        self._looking = threading.local()  # this thread is inside the find_spec below

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name or getattr(self._looking, "on", False):
            return None
        # the hook stays until the module is executed: a lookup alone (importlib.util.find_spec(name),
        # as libraries check what is installed) returns a spec that is never executed, and must not
        # use up the one shot (the framework's real import would then load no adapter)
        self._looking.on = True
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._looking.on = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader_exec = spec.loader.exec_module
        name = self.name

        def exec_module(module):
            loader_exec(module)
            try:
                sys.meta_path.remove(self)  # one shot: the framework is imported
            except ValueError:
                pass
            try:
                from ._runtime import ensure_init

                ensure_init()
                importlib.import_module(f"adapters.{name}")
            except Exception:  # never break the user's import; the adapter loads on first use instead
                pass

        spec.loader.exec_module = exec_module
        return spec


def watch_framework_imports() -> None:
    """Load the torch/paddle/jax adapter as soon as that framework is imported (see above)."""
    for name in _EAGER_ADAPTERS:
        if name in sys.modules or name in _watching:
            continue
        _watching.add(name)
        sys.meta_path.insert(0, _AfterImport(name))
