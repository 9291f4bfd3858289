"""Zero-copy array exchange between NumPy, Warp, PyTorch, JAX, Paddle and CuPy."""

from __future__ import annotations

import importlib
from typing import Any

from ._errors import ArgumentError
from ._frameworks import FRAMEWORKS, data_ptr, framework_of
from ._launch import ensure_init


def _size(x: Any) -> int:
    s = getattr(x, "size", None)
    if callable(s):  # torch: size() is the shape
        s = x.numel()
    if s is None:
        return 1
    try:
        return int(s)
    except TypeError:
        n = 1
        for d in x.shape:
            n *= int(d)
        return n


def _detach(x: Any, fw: str) -> Any:
    if fw == "torch" and x.requires_grad:
        return x.detach()  # DLPack refuses tensors that require grad; the view shares memory
    return x


def _to_numpy(x: Any, fw: str):
    import numpy as np

    if fw == "numpy":
        return x
    if fw == "warp":
        if not x.device.is_cpu:
            raise ArgumentError("array is on " + str(x.device))
        return x.numpy()
    if fw == "torch":
        return x.detach().numpy()
    return np.from_dlpack(x)


def _to_torch(x: Any, fw: str):
    import torch

    if fw == "torch":
        return x
    if fw == "numpy":
        return torch.from_numpy(x)
    return torch.from_dlpack(x)


def _to_jax(x: Any, fw: str):
    import jax.numpy as jnp

    if fw == "jax":
        return x
    return jnp.from_dlpack(x)


def _to_paddle(x: Any, fw: str):
    import paddle

    if fw == "paddle":
        return x
    return paddle.from_dlpack(x) if hasattr(paddle, "from_dlpack") else paddle.utils.dlpack.from_dlpack(x)


def _to_cupy(x: Any, fw: str):
    import cupy

    if fw == "cupy":
        return x
    if hasattr(x, "__cuda_array_interface__") and fw not in ("torch", "jax", "paddle"):
        return cupy.asarray(x)
    return cupy.from_dlpack(x)


def _to_warp(x: Any, fw: str, dtype: Any):
    import warp as wp

    ensure_init()
    if fw == "warp":
        if dtype is None or dtype == x.dtype:
            return x
        return x.view(dtype) if hasattr(x, "view") else wp.from_dlpack(x, dtype=dtype)
    if fw == "numpy":
        return wp.array(
            x, dtype=dtype if dtype is not None else wp.types.np_dtype_to_warp_type[x.dtype], device="cpu", copy=False
        )
    return wp.from_dlpack(x, dtype=dtype) if dtype is not None else wp.from_dlpack(x)


_TARGETS = {
    "numpy": _to_numpy,
    "torch": _to_torch,
    "jax": _to_jax,
    "paddle": _to_paddle,
    "cupy": _to_cupy,
}


def convert(x: Any, to: str, *, dtype: Any = None, copy: bool = False) -> Any:
    """Hand array ``x`` to another framework without copying it.

    Uses DLPack (``__dlpack__`` with the consumer's stream, so CUDA work stays ordered),
    ``__array_interface__`` or ``__cuda_array_interface__``. The result shares memory
    with ``x`` and lives on the same device. A PyTorch tensor that requires grad is
    detached (the view shares memory; autograd history does not cross frameworks).

    Args:
        x: a NumPy, Warp, PyTorch, JAX, Paddle or CuPy array.
        to: ``"numpy"``, ``"warp"``, ``"torch"``, ``"jax"``, ``"paddle"`` or ``"cupy"``.
        dtype: only with ``to="warp"``: the Warp element type to view the data as, e.g.
            ``wp.vec3`` for an ``(n, 3)`` float32 array (gives an ``(n,)`` array of vec3).
        copy: allow a copy when a zero-copy exchange is impossible (e.g. a CUDA array to
            NumPy, or an array XLA cannot alias). Default False: raise instead.

    Returns:
        The array in framework ``to``.

    Raises:
        ValueError: ``to`` is unknown, or the exchange would copy and ``copy`` is False.
        TypeError: ``x`` is not a supported array, or ``dtype`` is given for a target other than Warp.

    Example:
        >>> import numpy as np, warp as wp, interop
        >>> b = np.zeros((4, 3), np.float32)
        >>> w = interop.convert(b, to="warp", dtype=wp.vec3)
        >>> w.shape, w.dtype is wp.vec3
        ((4,), True)
    """
    if to not in FRAMEWORKS:
        raise ArgumentError(f"convert: to must be one of {FRAMEWORKS}, got {to!r}")
    fw = framework_of(x)
    if fw is None or fw == "unsupported":
        raise ArgumentError(
            f"convert: x must be a NumPy, Warp, PyTorch, JAX, Paddle or CuPy array, got {type(x).__module__}."
            f"{type(x).__qualname__}"
        )
    if dtype is not None and to != "warp":
        raise ArgumentError(f"convert: dtype= applies only to to='warp' (a Warp element type), got to={to!r}")
    try:
        importlib.import_module(to if to != "paddle" else "paddle")
    except ImportError as e:
        raise ImportError(f"convert: to={to!r} needs {to} installed ({e})") from e
    src = _detach(x, fw)
    error = None
    try:
        out = _to_warp(src, fw, dtype) if to == "warp" else _TARGETS[to](src, fw)
    except Exception as e:  # the framework refused a zero-copy exchange
        out, error = None, e
    if out is not None and _size(src) > 0 and data_ptr(out) != data_ptr(src):
        error = ValueError("the target framework made a copy")
    if error is None:
        return out
    if not copy:
        raise ArgumentError(
            f"convert: a {fw} array of shape {tuple(x.shape)} cannot be handed to {to} without a copy "
            f"({error}); pass copy=True to allow one"
        ) from (error if not isinstance(error, ValueError) else None)
    host = _to_numpy(src, fw) if fw in ("numpy", "warp", "torch") else None
    if host is None:
        import numpy as np

        host = np.asarray(src)
    host = host.copy()
    return _to_warp(host, "numpy", dtype) if to == "warp" else _TARGETS[to](host, "numpy")
