"""Scalar and vector values of a call: the ranges a parameter's type holds, the check of a number
against them, and the components of a vec/mat value (a Warp value, a tuple, a nested list, an
array), refused where they do not fit: nothing is wrapped, cast or read as another type."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import warp as wp

from . import _dtypes
from ._description import OpDescription, Param
from ._plan import _err


def int_range(t: Any) -> tuple[int, int] | None:
    """(min, max) of a Warp integer scalar type, or None for every other type."""
    scalar, inner = _dtypes.split(t)
    if inner or scalar is wp.bool or _dtypes.is_float(scalar) or scalar not in _dtypes._WP_TO_NP:
        return None
    info = np.iinfo(_dtypes.np_dtype(scalar))
    return int(info.min), int(info.max)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:18]}...{text[-8:]} ({len(str(value))} characters)"


def value_range(t: Any) -> tuple[int, int] | tuple[float, float] | None:
    """(min, max) of the values a scalar parameter of type ``t`` holds as given: an integer type's
    range, or a float type's finite range (inf and nan pass too; :func:`check_scalar_value`
    decides outside it); None for bool and vectors."""
    rng = int_range(t)
    if rng is not None:
        return rng
    scalar, inner = _dtypes.split(t)
    if inner or not _dtypes.is_float(scalar):
        return None
    top = float(_dtypes.finfo_max(scalar))
    return -top, top


def check_scalar_value(desc: OpDescription, p: Param, t: Any, value: Any) -> None:
    """Refuse a value that the scalar parameter's type cannot hold: an integer out of its range
    (Warp would wrap it), a finite number that would become infinite in a narrower float type."""
    if type(value) is float:  # the common case, per call of a Python-function op: one comparison
        rng = _VALUE_RANGES.get(t)
        if rng is not None and rng[0] <= value <= rng[1]:
            return
    if isinstance(value, bool):
        return
    if isinstance(value, (int, np.integer)):
        rng = int_range(t)
        if rng is not None and not rng[0] <= int(value) <= rng[1]:
            raise _err(
                desc,
                p,
                f"a {_dtypes.type_name(t)} value in [{rng[0]}, {rng[1]}]",
                f"{_short(value)}, out of range (it would wrap)",
            )
    if not isinstance(value, (int, np.integer, float, np.floating)):
        return
    scalar, inner = _dtypes.split(t)
    if inner or not _dtypes.is_float(scalar):
        return
    try:
        number = float(value)  # an integer for a float parameter is checked by its size too
    except OverflowError:
        number = math.inf
    if math.isnan(number) or (math.isinf(number) and isinstance(value, (float, np.floating))):
        return  # nan and +-inf are values of every float type
    with np.errstate(over="ignore"):
        overflows = math.isinf(number) or bool(np.isinf(_dtypes.np_dtype(scalar).type(number)))
    if overflows:
        top = _dtypes.finfo_max(scalar)
        raise _err(
            desc,
            p,
            f"a {_dtypes.type_name(t)} value in [{-top:g}, {top:g}] (or inf/nan)",
            f"{_short(value)}, out of range (it would become inf)",
        )


def vector_components(desc: OpDescription, p: Param, value: Any) -> list:
    """The components of a vec/mat value (a Warp value, tuple, nested list or array), flat, or an error
    naming the op and the parameter when their number or kind does not fit ``p``."""
    n = math.prod(p.inner)
    nested = _python_numbers(value) if isinstance(value, (tuple, list)) else None
    if nested is not None and len(nested) == n and (len(value) == n or _rows_fit(value, p.inner)):
        # plain Python numbers (a matrix as nested rows too), read without NumPy (torch.compile
        # traces this function)
        value = nested
        if not _dtypes.is_float(p.scalar) and not p.generic and any(type(c) is float for c in value):
            raise _err(desc, p, f"{p.expected_text()}: {n} integers", f"floats {tuple(value)}")
        rng = None if p.generic else _VALUE_RANGES.get(p.scalar)
        for c in value:
            if rng is not None and not rng[0] <= c <= rng[1] and c == c and abs(c) != math.inf:
                check_scalar_value(desc, p, p.scalar, c)  # refuses it
        return list(value)
    if isinstance(value, (tuple, list)):
        _refuse_odd_components(desc, p, value)
    own = getattr(type(value), "_wp_scalar_type_", None)  # a Warp vec/mat value: its components' type
    if own is not None and not p.generic and _dtypes.normalize(own) != _dtypes.normalize(p.scalar):
        raise _err(
            desc,
            p,
            p.expected_text(),
            f"a {_dtypes.type_name(type(value))} value (components of {_dtypes.type_name(own)}; values are never cast)",
        )
    flat: np.ndarray | None
    try:
        flat = np.asarray(value).ravel()
        if own is not None and _dtypes.normalize(own) is wp.float16:
            flat = flat.view(np.float16)  # (NumPy reads a Warp half vector as its uint16 bits)
    except (TypeError, ValueError):
        flat = None
    if flat is None or flat.dtype.kind not in "biuf":
        raise _err(desc, p, f"{p.expected_text()}: {n} numbers", f"{type(value).__name__} {value!r}")
    if flat.size != n:
        raise _err(desc, p, f"{p.expected_text()}: {n} numbers", f"{flat.size} component(s) {tuple(flat.tolist())}")
    if flat.dtype.kind == "f" and not _dtypes.is_float(p.scalar) and not p.generic:
        raise _err(desc, p, f"{p.expected_text()}: {n} integers", f"floats {tuple(flat.tolist())}")
    components = flat.tolist()
    if not p.generic:
        for c in components:  # each component as the parameter's scalar type holds it, or an error
            check_scalar_value(desc, p, p.scalar, c)
    return components


def _refuse_odd_components(desc: OpDescription, p: Param, value: tuple | list) -> None:
    """Refuse a component of a tuple or list vector value that NumPy would convert silently: a
    bool (refused as a scalar is), or a framework tensor (a 0-d torch or Paddle tensor) of another
    dtype than the parameter's components (it would be cast) or that wants a gradient (it would get
    none: only JAX differentiates a vector's components; pass a tensor of the vector's shape)."""
    for k, c in enumerate(_flat_components(value)):
        if isinstance(c, (bool, np.bool_)):
            raise _err(desc, p, f"{p.expected_text()}: numbers", f"component {k} {c!r} (a bool)")
        if isinstance(c, (int, float, np.generic)) or not hasattr(c, "dtype") or not hasattr(c, "shape"):
            continue  # (a number, or what NumPy's conversion below refuses)
        grad = getattr(c, "requires_grad", False) is True or getattr(c, "stop_gradient", True) is False
        try:
            dtype = np.asarray(c.detach() if hasattr(c, "detach") else c).dtype
        except Exception:  # (a dtype NumPy has no type for: refused below by the conversion)
            continue
        kind = type(c).__module__.split(".")[0]
        if grad:
            raise _err(
                desc,
                p,
                f"{p.expected_text()}: numbers, or a tensor of the vector's shape for a value that is differentiated",
                f"component {k}, a {kind} tensor that requires a gradient (it would get none)",
            )
        if not p.generic and dtype != _dtypes.np_dtype(p.scalar):
            raise _err(
                desc,
                p,
                f"{p.expected_text()}: numbers or {np.dtype(_dtypes.np_dtype(p.scalar)).name} tensors",
                f"component {k}, a {kind} tensor of dtype {dtype.name} (arrays are never cast)",
            )


def _flat_components(value: tuple | list) -> list:
    out: list = []
    for c in value:
        if isinstance(c, (tuple, list)):
            out.extend(_flat_components(c))
        else:
            out.append(c)
    return out


def _python_numbers(value: tuple | list) -> list | None:
    """The Python ints and floats of a (nested) tuple or list, flat; None if anything else is inside."""
    out: list = []
    for c in value:
        if type(c) in (int, float):
            out.append(c)
        elif isinstance(c, (tuple, list)):
            inner = _python_numbers(c)
            if inner is None:
                return None
            out.extend(inner)
        else:
            return None
    return out


def _rows_fit(value: tuple | list, inner: tuple) -> bool:
    """Whether nested rows have the matrix's shape (a ragged list takes NumPy's path, which refuses it)."""
    return (
        len(inner) == 2
        and len(value) == inner[0]
        and all(isinstance(r, (tuple, list)) and len(r) == inner[1] for r in value)
    )


# (min, max) per scalar type, made once: vector_components reads it under torch.compile's tracing
_VALUE_RANGES = {t: value_range(t) for t in _dtypes._WP_TO_NP if value_range(t) is not None}


#: Warp's scalar types and the NumPy scalar type of each (a ``wp.float64(0.5)`` object is a number of
#: that type, as a ``np.float64(0.5)`` is)
_WARP_NUMBERS = {
    wp.float16: np.float16, wp.float32: np.float32, wp.float64: np.float64,
    wp.int8: np.int8, wp.int16: np.int16, wp.int32: np.int32, wp.int64: np.int64,
    wp.uint8: np.uint8, wp.uint16: np.uint16, wp.uint32: np.uint32, wp.uint64: np.uint64,
}  # fmt: skip


#: the types :func:`plain_number` converts
NUMBER_OBJECTS = frozenset({np.bool_, *_WARP_NUMBERS})


def plain_number(x: Any) -> Any:
    """A scalar argument as the call's checks read it: a ``np.bool_`` as a ``bool`` (``wp.launch``
    takes it for a ``wp.bool``), a Warp scalar object (``wp.float64(0.5)``) as the NumPy scalar of
    its type; anything else as it is."""
    if isinstance(x, np.bool_):
        return bool(x)
    to = _WARP_NUMBERS.get(type(x))
    return x if to is None else to(x.value)


def numpy_value(desc: OpDescription, p: Param, a: np.ndarray) -> list:
    """A NumPy array given for vec/mat value parameter ``p`` in another framework's call (a gravity
    constant ``np.array([0, -9.8, 0])`` beside torch tensors): its numbers, as a list (a matrix's
    rows), checked as a tuple value's are. Its shape must be the value's."""
    if tuple(a.shape) != tuple(p.inner) or a.dtype.kind not in "iuf":
        raise _err(
            desc,
            p,
            f"{p.expected_text()} (numbers; a NumPy array of shape {tuple(p.inner)})",
            f"a NumPy array of shape {tuple(a.shape)} and dtype {a.dtype.name}",
        )
    return a.tolist()


def absent_array(desc: OpDescription, p: Param, fw: str, like: Any) -> Any:
    """The array standing for ``None`` given for input array parameter ``p`` (Warp's idiom for an
    optional array: ``wp.launch`` takes ``None`` as a null array, which a kernel's ``if arr:``
    tells apart): an empty array of ``p``'s dtype in framework ``fw``, on the device of ``like``
    (another array of the call, or None), which reaches the kernel as a null array."""
    if p.role != "input" or p.generic:
        what = "a generic" if p.generic else f"an {p.role}"
        raise _err(desc, p, f"{p.expected_text()} (None stands for an absent input of a concrete dtype only)",
                   f"None for {what} array parameter")  # fmt: skip
    if any(entry[0] == p.name for entry in desc.direct_index):
        # every thread reads it at its thread index (not under an `if`): not an optional array
        raise _err(desc, p, p.expected_text(), "None (an absent array, but the kernel indexes it with wp.tid())")
    shape = (0,) * p.ndim + tuple(p.inner)
    dtype = np.dtype(_dtypes.np_dtype(p.scalar))
    if fw == "warp":
        return wp.empty((0,) * p.ndim, dtype=p.dtype, device=getattr(like, "device", "cpu"))
    if fw == "torch":
        import torch

        from adapters.torch.binding import _NP_TO_TORCH

        return torch.empty(shape, dtype=_NP_TO_TORCH[dtype], device=getattr(like, "device", "cpu"))
    if fw == "jax":
        import jax
        import jax.numpy as jnp

        device = (
            next(iter(like.devices())) if hasattr(like, "devices") and not isinstance(like, jax.core.Tracer) else None
        )
        return jnp.zeros(shape, dtype, device=device) if device is not None else jnp.zeros(shape, dtype)
    if fw == "paddle":
        import paddle

        place = like.place if like is not None else paddle.CPUPlace()
        return paddle.to_tensor(np.empty(shape, dtype), place=place)
    if fw == "cupy":
        import cupy

        with cupy.cuda.Device(like.device.id if like is not None else 0):
            return cupy.empty(shape, dtype)
    return np.empty(shape, dtype)
