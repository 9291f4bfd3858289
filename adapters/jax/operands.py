"""JAX adapter: a call's arguments as operands, and its static configuration as a cache key.

What :meth:`adapters.jax.JaxOp._call` does to the arguments before it finds the call's entry: in
an eager call a Python number for a scalar parameter becomes a 0-d operand (:func:`_eager_scalar`;
:func:`_scalar_operand` keeps one JAX array per value for the eager fast path); a vec/mat value
given as components, some of them JAX values, becomes one operand (:func:`_vector_operand`); a
weakly typed JAX value takes the type its parameter gives a Python number
(:func:`_typed_weak_scalar`). What stays static is frozen into the entry's key: Python scalars by
type and exact value (:func:`_static_scalar_key`), ``launch_dims``/``output_dims`` with the type of
every value (:func:`_dims_key`).

The bottom of the adapter: it imports none of its other modules but :mod:`adapters.jax.compat`.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from interop import _cache, _dtypes
from interop._errors import ArgumentError
from interop._plan import number_type
from interop._values import check_scalar_value

from . import compat as _jax_compat

_SCALAR_NP = {t: d for t, d in _dtypes._WP_TO_NP.items() if d.itemsize <= 4 or d.kind == "f"}


def _scalar_operand(consts: dict, x, dt):
    """The 0-d operand of Python number ``x`` for a parameter of NumPy dtype ``dt``: a JAX array kept
    for the number (passing a NumPy scalar copies it to the device on every call), or a NumPy
    scalar for zeros (0.0 and -0.0 are one key) and 8-byte types (what JAX makes of them depends
    on the x64 mode)."""
    if dt.itemsize > 4 or not x:
        return np.asarray(x, dt)
    key = (dt, x)
    c = consts.get(key)
    if c is None:
        c = jax.device_put(np.asarray(x, dt))
        _cache.put(consts, key, c, _cache.FAST_PATHS_PER_OP)
    return c


def _eager_scalar(p, x):
    """``x`` as a 0-d NumPy operand of the parameter's own dtype, where that is exact."""
    if p.is_array or p.generic or p.inner or isinstance(x, bool) or type(x) not in (int, float):
        return x
    dt = _SCALAR_NP.get(p.scalar)
    if dt is None or (type(x) is float and not _dtypes.is_float_dtype(dt)):
        return x  # let the plan report the mismatch
    if dt.itemsize == 8 and not _x64():
        return x  # JAX would make a float64 operand float32 (the kernel would read 8 bytes of 4): stays static
    if dt.kind in "iu" and not np.iinfo(dt).min <= x <= np.iinfo(dt).max:
        return x  # stays static: the plan names the parameter and the range
    if _float_np(dt):
        try:
            number = float(x)
        except OverflowError:
            return x  # an int no float holds: stays static, the plan names the parameter and the range
        if math.isfinite(number) and not abs(number) <= _dtypes.finfo_max(_dtypes.wp_scalar(dt)):
            return x  # it would become inf: likewise
    return np.asarray(x, dt)


def _operand_dtype(x) -> np.dtype:
    """The dtype of the buffer XLA hands the launch for operand ``x``: a NumPy array's is
    canonicalized (with 64-bit types off, a float64 array becomes a float32 operand), a JAX
    value's is its own."""
    if type(x) is np.ndarray:
        return np.dtype(jax.dtypes.canonicalize_dtype(x.dtype))
    return np.dtype(x.dtype)


def _float_np(dt) -> bool:
    return dt is not None and _dtypes.is_float_dtype(dt)


def _is_scalar_operand(p, x) -> bool:
    return not p.is_array and type(x) is np.ndarray and x.ndim == 0


def _is_weak_scalar(p, x) -> bool:
    """A weakly typed JAX value (a Python number under tracing) for a scalar, vector or matrix
    parameter, of the parameter's shape.

    With ``jax_enable_x64`` a traced Python float is a weak float64; like ``jnp`` ops, the
    op gives it the parameter's type instead of refusing it (a strong float64 is refused).
    """
    return not p.is_array and _is_jax(x) and tuple(x.shape) == tuple(p.inner) and bool(jax.typeof(x).weak_type)


def _generic_scalar(desc, args):
    """The scalar type the call's first generic array argument gives generic parameters (or None)."""
    for q, a in zip(desc.call_params, args):
        if q.is_array and q.generic and hasattr(a, "dtype"):
            return _dtypes.wp_scalar(a.dtype)
    return None


def _vector_operand(desc, p, x, args):
    """A vec/mat value ``x`` given as a (nested) tuple or list of components, some of which are JAX
    values (traced, or concrete arrays): one JAX array of the parameter's shape (``(3,)`` for a
    ``vec3``), passed like a traced scalar (an operand, differentiable). Python numbers among the
    components get the parameter's scalar type, as a Python number would; a JAX component must
    have it already (nothing is cast silently). Anything else is returned unchanged (static).
    """
    if not p.inner or not isinstance(x, (list, tuple)):
        return x
    flat: list = []

    def walk(v):
        if isinstance(v, (list, tuple)):
            for c in v:
                walk(c)
        else:
            flat.append(v)

    walk(x)
    if not any(_is_jax(c) for c in flat):
        return x  # static: Python numbers (checked by the plan)
    n = int(math.prod(p.inner))
    sizes = [int(math.prod(c.shape)) if _is_jax(c) else 1 for c in flat]
    if sum(sizes) != n:
        raise ArgumentError(
            f"op {desc.label!r}, parameter {p.name!r}: expected {p.expected_text()}: {n} numbers (JAX values "
            f"or Python numbers), got {sum(sizes)} component(s) in {type(x).__name__} of {len(flat)} item(s)"
        )
    scalar = _generic_scalar(desc, args) if p.generic else p.scalar
    if scalar is None:  # generic, no generic array: the strong JAX components decide
        strong = [c for c in flat if _is_jax(c) and not jax.typeof(c).weak_type]
        scalar = _dtypes.wp_scalar(strong[0].dtype) if strong else None
    parts = []
    for k, c in enumerate(flat):
        if _is_jax(c):
            if bool(jax.typeof(c).weak_type):
                number = {"b": bool, "i": int, "u": int}.get(np.dtype(c.dtype).kind, float)
                c = jax.lax.convert_element_type(c, _component_dtype(desc, p, number, scalar))
            elif scalar is not None and np.dtype(c.dtype) != _dtypes.np_dtype(scalar):
                raise ArgumentError(
                    f"op {desc.label!r}, parameter {p.name!r}: expected {p.expected_text()}: components of "
                    f"dtype {np.dtype(_dtypes.np_dtype(scalar)).name}, got component {k} of dtype "
                    f"{np.dtype(c.dtype).name}"
                )
            parts.append(jnp.ravel(c))
        elif isinstance(c, (bool, int, float, np.number, np.bool_)):
            number = bool if isinstance(c, (bool, np.bool_)) else int if isinstance(c, (int, np.integer)) else float
            dt = _component_dtype(desc, p, number, scalar)
            if scalar is not None:
                check_scalar_value(desc, p, scalar, c)
            parts.append(jnp.asarray([c], dt))
        else:
            raise ArgumentError(
                f"op {desc.label!r}, parameter {p.name!r}: expected {p.expected_text()}: numbers or JAX values, "
                f"got component {k} of type {type(c).__module__}.{type(c).__qualname__}"
            )
    return jnp.concatenate(parts).reshape(p.inner)


def _component_dtype(desc, p, number: type, scalar) -> np.dtype:
    """The dtype a Python ``number`` (or a weakly typed JAX value of its kind) takes as a component of
    vec/mat parameter ``p``; a float for an integer vector is refused, as for a static value."""
    target = number_type(desc, p, number, scalar)
    return np.dtype(_dtypes.np_dtype(_dtypes.split(target)[0]))


def _typed_weak_scalar(desc, p, x, args):
    """Weakly typed ``x`` cast to the type a Python number gets for ``p`` (checked like one).

    A generic parameter takes the scalar type of the first generic array argument, as in the
    plan. The cast is part of the traced computation, so the gradient flows back to ``x``.
    """
    kind = np.dtype(x.dtype).kind
    number = bool if kind == "b" else int if kind in "iu" else float
    generic_scalar = _generic_scalar(desc, args) if p.generic else None
    target = number_type(desc, p, number, generic_scalar)
    return jax.lax.convert_element_type(x, _dtypes.np_dtype(_dtypes.split(target)[0]))


def _is_jax(x) -> bool:
    return isinstance(x, (jax.Array, jax.core.Tracer))


def _static_scalar_key(desc, p, x):
    """The cache key of a static (Python) scalar argument: its type and exact value.

    Floats are keyed by their bits (``float.hex``): ``-0.0 == 0.0`` and ``nan != nan``, so keying
    them by value would serve a call with ``-0.0`` the launch recorded for ``0.0``.
    """
    if isinstance(x, (list, tuple)):
        return ("py", type(x), tuple(_static_scalar_key(desc, p, v) for v in x))
    if hasattr(x, "_wp_scalar_type_"):  # a Warp vector/matrix value
        return ("py", type(x), tuple(_static_scalar_key(desc, p, v) for v in np.asarray(x).ravel().tolist()))
    if isinstance(x, float) or (isinstance(x, np.generic) and not isinstance(x, (np.integer, np.bool_))):
        try:
            return ("py", type(x), float(x).hex())
        except (TypeError, ValueError, OverflowError):
            pass
    try:
        hash(x)
    except TypeError:
        raise TypeError(
            f"op {desc.label!r}, parameter {p.name!r}: expected {p.expected_text()} (a number, a JAX value, "
            f"or for a vector/matrix a tuple of them), got an unhashable {type(x).__module__}.{type(x).__qualname__}"
        ) from None
    return ("py", type(x), x)


def _static_dims(desc, what: str, value):
    """Freeze launch_dims/output_dims for the cache key; refuse traced values with a clear error."""
    if value is None:
        return None
    if isinstance(value, dict):
        return ("dict", tuple(sorted((k, _static_dims(desc, f"{what}[{k!r}]", v)) for k, v in value.items())))
    if isinstance(value, (list, tuple)):
        return tuple(_static_dims(desc, what, v) for v in value)
    if _jax_compat.is_tracer(value):
        raise TypeError(
            f"op {desc.label!r}: {what} must be known when the call is traced (Python ints or a tuple of "
            f"them, e.g. x.shape), got a traced JAX value {value!r}; pass it as a static argument "
            "(jax.jit(..., static_argnums=...)) or compute it from shapes"
        )
    if isinstance(value, (jax.Array, np.ndarray)):
        # as Python values of their own kind: the plan refuses floats (never truncated to ints)
        def frozen(v):
            return tuple(map(frozen, v)) if isinstance(v, list) else v

        return frozen(np.asarray(value).tolist())
    return value


def _dims_key(desc, what: str, value):
    """launch_dims/output_dims frozen for an entry's key, with the type of every value: ``True == 1``
    and ``2.0 == 2``, and the plan refuses the first of each, so keying by value alone would serve
    such a call the entry of the value it equals."""
    frozen = _static_dims(desc, what, value)

    def types(v):
        return tuple(types(x) for x in v) if isinstance(v, tuple) else type(v)

    return frozen, types(frozen)


def _x64() -> bool:
    return bool(jax.config.jax_enable_x64)  # type: ignore[attr-defined]
