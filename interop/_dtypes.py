"""Warp dtype <-> framework (NumPy-style) dtype and trailing-dimension packing.

A Warp array of ``vec3`` is, in every framework, an array with one extra
trailing dimension of size 3; ``mat22`` adds two trailing dimensions ``(2, 2)``.
This module knows those rules and nothing about any framework.
"""

from __future__ import annotations

import typing
from typing import Any

import ml_dtypes  # NumPy's bfloat16 (the dtype JAX uses, and Warp's .numpy() of a bfloat16 array)
import numpy as np
import warp as wp

from . import _warp_compat as _wpt  # Warp's type tables (no public equivalent in 1.19)

# Warp's own generic placeholders: typing.Any, Scalar, Float, Int
GENERIC_TYPES = tuple(_wpt.generic_types)

_PY_SCALARS = {float: wp.float32, int: wp.int32, bool: wp.bool}

# Warp scalar type -> NumPy dtype. NumPy has no bfloat16 of its own: ml_dtypes.bfloat16 stands
# for it (Warp's own table maps it to uint16, the storage type, which would pass for an integer)
_WP_TO_NP: dict[Any, np.dtype] = {
    k: np.dtype(v) for k, v in _wpt.warp_type_to_np_dtype.items() if k not in (_wpt.handle, _wpt.bfloat16)
}
_WP_TO_NP[wp.bfloat16] = np.dtype(ml_dtypes.bfloat16)
_NP_TO_WP: dict[np.dtype, Any] = {v: k for k, v in _WP_TO_NP.items()}

BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
FLOAT_TYPES = (wp.float16, wp.bfloat16, wp.float32, wp.float64)


def normalize(t: Any) -> Any:
    """Map Python ``float``/``int``/``bool`` annotations to Warp scalar types."""
    return _PY_SCALARS.get(t, t)


def is_generic(t: Any) -> bool:
    return _wpt.type_is_generic(t)


def split(dtype: Any) -> tuple[Any, tuple[int, ...]]:
    """Split a Warp element dtype into (scalar type, trailing inner shape)."""
    dtype = normalize(dtype)
    shape = getattr(dtype, "_shape_", None)
    if shape is not None and hasattr(dtype, "_wp_scalar_type_"):
        return normalize(dtype._wp_scalar_type_), tuple(int(s) for s in shape)
    return dtype, ()


def np_dtype(scalar: Any) -> np.dtype:
    """NumPy dtype of a concrete Warp scalar type."""
    try:
        return _WP_TO_NP[scalar]
    except KeyError:
        if _wpt.is_struct(scalar):
            return _wpt.struct_numpy_dtype(scalar)  # an array of structs: NumPy's structured dtype
        raise TypeError(f"Warp scalar type {type_name(scalar)} has no array-framework equivalent") from None


def wp_scalar(dtype: Any) -> Any | None:
    """Warp scalar type of a NumPy dtype, or None."""
    return _NP_TO_WP.get(np.dtype(dtype))


def compose(scalar: Any, inner: tuple[int, ...]) -> Any:
    """Warp element dtype made of a scalar type and an inner shape."""
    if not inner:
        return scalar
    if len(inner) == 1:
        return wp.types.vector(inner[0], scalar)
    if len(inner) == 2:
        return wp.types.matrix(inner, scalar)
    raise TypeError(f"cannot build a Warp element type with inner shape {inner}")


def is_float(scalar: Any) -> bool:
    return scalar in FLOAT_TYPES


def finfo_max(scalar: Any) -> float:
    """The largest finite value of a Warp float scalar type (bfloat16 through ``ml_dtypes``)."""
    dtype = np_dtype(scalar)
    info = ml_dtypes.finfo(dtype) if dtype == BFLOAT16 else np.finfo(dtype)
    return float(info.max)


def is_float_dtype(dtype: Any) -> bool:
    """A NumPy float dtype, bfloat16 included (whose NumPy kind is 'V', not 'f')."""
    return is_float(wp_scalar(dtype))


def type_name(t: Any) -> str:
    if t is typing.Any:
        return "Any"
    t = normalize(t)
    scalar, inner = split(t)
    name = getattr(t, "__name__", repr(t))
    if inner and name in ("vec_t", "mat_t"):
        # a type made by wp.types.vector/matrix (a generic overload's) is named vec_t/mat_t: say
        # which, as Warp's own aliases do (vec3f, mat22d), or with its scalar type in full
        kind = "vec" if len(inner) == 1 else "mat"
        suffix = _SUFFIX.get(scalar)
        sname = getattr(scalar, "__name__", repr(scalar))
        return f"{kind}{''.join(map(str, inner))}{suffix}" if suffix else f"{kind}{''.join(map(str, inner))}({sname})"
    return name


_SUFFIX = {wp.float16: "h", wp.float32: "f", wp.float64: "d"}


def describe_element(scalar: Any, inner: tuple[int, ...], dtype: Any) -> str:
    """Human text for an element type: 'float32', 'vec3 of float32 (trailing dims (3,))'."""
    if not inner:
        return type_name(scalar)
    return f"{type_name(dtype)} (trailing dims {inner} of {type_name(scalar)})"
