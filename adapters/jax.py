"""JAX adapter: an op called with JAX arrays (or tracers) is an XLA FFI call.

How one call becomes XLA work:

- The call's static configuration (argument shapes and dtypes, Python-number scalars,
  ``launch_dims``, ``output_dims``, ``vmap_method``, the x64 mode) is frozen into a hashable
  key; static floats by their bits, dims with their types. Each
  key gets, once, a :class:`_Entry`: the resolved plan, a ``jax.custom_vjp`` function of
  the dynamic operands (arrays and traced scalars), and its ``jax.jit`` for eager calls.
- The forward and the adjoint are each a :class:`_Launch`, called through one of the op's
  two FFI targets (``interop.<op name>.fwd`` / ``.bwd``, named from the description only and
  registered for ``cpu`` and ``CUDA`` when the op is described). Each call carries its
  configuration as a JSON ``config`` attribute; the handler for it is built at trace time, or
  rebuilt from the attribute in a process that only described the op (``jax.export``). The
  handler reads XLA's buffers in place (zero-copy), zero-fills the outputs and launches on
  XLA's stream. In-out arrays are aliased
  operand -> result; only then is the call marked as having a side effect, so unused
  outputs of a pure op are dead-code-eliminated.
- Batching (``jax.vmap``) is a ``custom_vmap`` rule on each launch:
  ``"loop"`` (default) makes one FFI call that launches the unbatched kernel once per batch
  element on offset pointers (correct for every kernel, unbatched operands are not
  copied); ``"sequential"`` uses ``lax.map``; ``"fold"`` (opt-in) folds the batch into the
  first launch dimension (one launch; valid only for row-independent kernels).
- Sharding: batched ("loop") launches, and launches of ``partition="rows"`` ops, are
  ``custom_partitioning`` calls that XLA splits along their first dimension; inside
  ``shard_map`` results vary over the mesh axes of their operands (``check_vma=True``).
- Gradients: ``custom_vjp`` with symbolic zeros, so the backward launch computes only the
  gradients asked for. Inside ``shard_map`` it is called through its own ``jax.jit``: an eager
  ``shard_map`` (not under jit) refuses a ``custom_vjp`` with symbolic zeros, but runs a jit. Traced scalars reach the kernel as one-element arrays, so their
  gradient is Warp's adjoint, summed over threads. A hand-written backward op is called
  through this same adapter.
"""

from __future__ import annotations

import ctypes
import hashlib
import itertools
import json
import math
import threading
import weakref
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.custom_batching import custom_vmap
from jax.errors import JaxRuntimeError as _JaxRuntimeError

from interop import _cache, _dtypes
from interop._codegen import compile_functions
from interop._description import IN_OUT, INPUT, OUTPUT, VMAP_METHODS
from interop._errors import ArgumentError, UnsupportedError
from interop._launch import direct_lines, external_stream, get_device
from interop._op import NOT_EAGER
from interop._plan import ArraySpec, ScalarSpec, check_scalar_value, number_type, vector_components

from . import _jax_compat, _jax_ffi
from ._common import unexpected_keywords
from ._jax_ffi import _interrupt

DEFAULT_VMAP_METHOD = "loop"

_ArrayImpl = _jax_compat.array_impl_type()  # concrete (not traced) arrays

_SCALAR_NP = {t: d for t, d in _dtypes._WP_TO_NP.items() if d.itemsize <= 4 or d.kind == "f"}

_JVP_MARKER = "forward-mode autodiff"


# ---------------------------------------------------------------------------------------
# Entry points (see adapters/__init__.py)
# ---------------------------------------------------------------------------------------
def call(op, args, launch_dims, output_dims, kwargs):
    """Run ``op`` on JAX arrays or tracers (see :meth:`interop.Op.__call__`)."""
    return op.bound("jax")(*args, launch_dims=launch_dims, output_dims=output_dims, **kwargs)


def bind(op) -> JaxOp:
    """``op`` bound to JAX: a callable taking JAX arrays, returning JAX arrays."""
    return JaxOp(op)


class JaxOp:
    """An op bound to JAX. Call it like the op; ``vmap_method=`` may be given per call.

    Works inside ``jax.jit``, ``jax.vmap``, ``jax.grad``, ``jax.checkpoint`` and
    ``shard_map``; called eagerly it runs a cached ``jax.jit`` of itself.
    """

    def __init__(self, op):
        # weakly (the op holds this binding): nothing of an op is in a reference cycle with it, so
        # a dropped op is freed at once with its entries, their jitted calls and XLA programs
        self._op = weakref.ref(op)
        self.desc = op.description
        self._entries: dict[tuple, _Entry] = {}
        # eager signature -> (entry, scalar operand dtypes, float limits), one dict per x64 mode
        # (index: jax_enable_x64): the mode decides the dtype a Python number's operand gets
        self._eager: tuple[dict[tuple, tuple], dict[tuple, tuple]] = ({}, {})
        # per x64 mode: (each argument's aval or number type, its fast entry) of the last eager call
        self._last: list[tuple | None] = [None, None]
        self._lock = threading.Lock()
        self._by_config: dict[str, _Entry] = {}  # an entry's configuration (JSON) -> the entry
        self._consts: dict[tuple, Any] = {}  # (dtype, Python number) -> its 0-d JAX array (eager calls)
        # the op's FFI targets by direction, and its hand-written backward's op: held here, so they
        # live as long as the op (the registered callbacks and _targets hold them weakly)
        self.targets: dict[str, _Target] = {}
        self.backward_op = None
        _register_targets(self)
        # an eager call whose first argument is a JAX array comes here straight from Op.__call__
        op.eager_paths[_ArrayImpl] = self._eager_call

    def __repr__(self) -> str:
        return f"<interop JAX op {self.desc.name}>"

    @property
    def op(self):
        """The op (a binding kept without its op cannot trace new calls)."""
        op = self._op()
        if op is None:
            raise _dropped(self.desc.label)
        return op

    def __call__(self, *args, launch_dims=None, output_dims=None, vmap_method=None, **kwargs):
        if launch_dims is None and output_dims is None and vmap_method is None and not kwargs:
            res = self._eager_call(args)
            if res is not NOT_EAGER:
                return res
        return self._call(args, launch_dims, output_dims, vmap_method, kwargs)

    def _eager_call(self, args):
        """An eager call with concrete arrays and Python numbers whose signature was seen before: one
        dict lookup to the jitted call. NOT_EAGER for any other call (also ``Op.eager_paths``'s hook)."""
        x64 = jax.config.jax_enable_x64
        # the signature used last, compared by identity: JAX shares one aval object among the arrays
        # of a shape, dtype and weak type (those a jitted call returns, jnp's constructors), and an
        # aval holds all that the key below reads; else the key's lookup
        fast = None
        last = self._last[x64]
        if last is not None and len(args) == len(last[0]):
            for x, m in zip(args, last[0]):
                if (x.aval if type(x) is _ArrayImpl else type(x)) is not m:
                    break
            else:
                fast = last[1]
        if fast is None:
            fast = self._eager[x64].get(
                tuple([((a := x.aval).shape, a.dtype, a.weak_type) if type(x) is _ArrayImpl else type(x) for x in args])
            )
            if fast is None:
                return NOT_EAGER
            self._last[x64] = (tuple([x.aval if type(x) is _ArrayImpl else type(x) for x in args]), fast)
        entry, numbers = fast
        if numbers:  # the Python numbers: their 0-d operands, kept per value
            operands = list(args)
            consts = self._consts
            for i, dt, top in numbers:
                x = args[i]
                if top is not None and (x > top or x < -top):
                    return NOT_EAGER  # it would become inf: the full path names it
                c = consts.get((dt, x))
                if c is None:
                    try:
                        c = _scalar_operand(consts, x, dt)
                    except OverflowError:  # a number its parameter cannot hold: the full path names it
                        return NOT_EAGER
                operands[i] = c
        else:
            operands = args
        seen = _interrupt.count
        try:
            outs = entry.jitted(*operands)
        except Exception as e:
            if _interrupt.count != seen:
                raise KeyboardInterrupt from None  # Ctrl-C during the launch failed the XLA call
            original_exc = _jax_ffi.original_error(e) if isinstance(e, _JaxRuntimeError) else None
            if original_exc is not None and not isinstance(original_exc, KeyboardInterrupt):
                raise original_exc from original_exc.__cause__  # the handler's exception
            raise
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _call(self, args, launch_dims, output_dims, vmap_method, kwargs):
        desc = self.desc
        if kwargs:
            raise TypeError(unexpected_keywords(desc, kwargs, ("vmap_method",)))
        params = desc.call_params
        if len(args) != len(params):
            raise ArgumentError(
                f"op {desc.label!r} takes {len(params)} argument(s) {[p.name for p in params]} "
                f"(outputs are returned, not passed), got {len(args)}"
            )
        args0 = args
        key_parts = []
        operands = []
        traced = False
        if any(p.inner and isinstance(x, (list, tuple)) for p, x in zip(params, args)):
            # a vec/mat value given as components, some of them JAX values (e.g. traced): one operand
            args = tuple(_vector_operand(desc, p, x, args) for p, x in zip(params, args))
        original = args
        if not any(map(_jax_compat.is_tracer, args)):
            # Eager call: a Python number for a scalar parameter becomes a 0-d operand of the
            # cached jitted call (as jax.jit does with Python scalars), so a new value does
            # not compile a new call. Under tracing, Python numbers stay static constants.
            args = tuple(_eager_scalar(p, x) for p, x in zip(params, args))
        if any(_is_weak_scalar(p, x) for p, x in zip(params, args)):
            args = tuple(
                _typed_weak_scalar(desc, p, x, args) if _is_weak_scalar(p, x) else x for p, x in zip(params, args)
            )
        for p, x in zip(params, args):
            if _is_jax(x) or _is_scalar_operand(p, x):
                key_parts.append((x.shape, x.dtype))
                operands.append(x)
                traced = traced or _jax_compat.is_tracer(x)
            elif p.is_array:
                raise ArgumentError(
                    f"op {desc.label!r}, parameter {p.name!r}: expected {p.expected_text()} as a JAX array, "
                    f"got {type(x).__module__}.{type(x).__qualname__}"
                )
            else:
                key_parts.append(_static_scalar_key(desc, p, x))
        key = (
            tuple(key_parts),
            _dims_key(desc, "launch_dims", launch_dims),
            _dims_key(desc, "output_dims", output_dims),
            vmap_method,
            _x64(),  # decides the dtypes XLA gives NumPy operands and the entry's 64-bit checks
        )
        entry = self._entries.get(key)
        if entry is None:
            with self._lock:
                entry = self._entries.get(key)
                if entry is None:
                    entry = _Entry(self, args, launch_dims, output_dims, vmap_method)
                    _cache.put(self._entries, key, entry, _cache.PLANS_PER_OP)
        if (
            not traced
            and launch_dims is None
            and output_dims is None
            and vmap_method is None
            and len(operands) == len(args)
            and all(
                type(x) is _ArrayImpl or (_is_scalar_operand(p, x) and type(x0) in (int, float))
                for p, x, x0 in zip(params, args, original)
            )
            and original is args0
        ):
            # only Python numbers are keyed by their type: the fast path converts them to the dtype
            # this call gave them (a NumPy array passed in is keyed by nothing else, so never cached)
            fast_key = tuple(
                (x.shape, x.dtype, x.weak_type) if type(x) is _ArrayImpl else type(x0) for x, x0 in zip(args, original)
            )
            # each Python number: (position, its operand's dtype, the largest finite value a float may have)
            numbers = tuple(
                (i, x.dtype, _dtypes.finfo_max(_dtypes.wp_scalar(x.dtype)) if _float_np(x.dtype) else None)
                for i, x in enumerate(args)
                if type(x) is not _ArrayImpl
            )
            fast = (entry, numbers)
            _cache.put(self._eager[_x64()], fast_key, fast, _cache.FAST_PATHS_PER_OP)
        interrupts = _jax_ffi.interrupts()
        try:
            outs = entry.jitted(*operands) if not traced or _jax_compat.manual_axes() else entry.fn(*operands)
        except KeyboardInterrupt:
            raise
        except Exception as e:
            if _jax_ffi.interrupts() != interrupts:
                # Ctrl-C during the launch failed the XLA call: hand the interrupt to the user
                raise KeyboardInterrupt from None
            if isinstance(e, _JaxRuntimeError):
                original_exc = _jax_ffi.original_error(e)
                if original_exc is None or isinstance(original_exc, KeyboardInterrupt):
                    raise
                raise original_exc from original_exc.__cause__  # the handler's exception, not XLA's report
            if not isinstance(e, TypeError):
                raise
            if _JVP_MARKER in str(e):
                raise TypeError(
                    f"op {desc.label!r}: forward-mode differentiation (jax.jvp, jax.jacfwd, jax.linearize, "
                    "jax.hessian) is not supported: the op has a reverse-mode rule only (Warp's adjoint). "
                    "Use jax.grad, jax.vjp or jax.jacrev."
                ) from None
            raise
        return outs[0] if len(outs) == 1 else tuple(outs)


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


# ---------------------------------------------------------------------------------------
# One static configuration of one op
# ---------------------------------------------------------------------------------------
def _py_spec(desc, p, x) -> ScalarSpec:
    import numbers

    if isinstance(x, bool):
        return ScalarSpec("py", bool)
    if isinstance(x, numbers.Integral):
        return ScalarSpec("py", np.dtype(x.dtype) if isinstance(x, np.generic) else int)
    if isinstance(x, numbers.Real) or (isinstance(x, np.generic) and x.dtype == _dtypes.BFLOAT16):
        return ScalarSpec("py", np.dtype(x.dtype) if isinstance(x, np.generic) else float)
    if p.inner and isinstance(x, (tuple, list)) or hasattr(x, "_wp_scalar_type_"):
        return ScalarSpec("py", tuple)
    raise TypeError(
        f"op {desc.label!r}, parameter {p.name!r}: expected {p.expected_text()} (a number or a JAX array), "
        f"got {type(x).__name__}"
    )


def _x64() -> bool:
    return bool(jax.config.jax_enable_x64)


_X64_HINT = (
    "; JAX's 64-bit types are disabled (it makes float32/int32 arrays): enable them with "
    "jax.config.update('jax_enable_x64', True) or `with jax.enable_x64(True):`"
)


class _Entry:
    """Plan, launches and the differentiable function for one static call configuration."""

    def __init__(self, jop: JaxOp, args, launch_dims, output_dims, vmap_method):
        self._jop = weakref.ref(jop)  # weakly: the op's binding holds its entries
        op = jop.op
        desc = self.desc = op.description
        vm = vmap_method if vmap_method is not None else (desc.vmap_method or DEFAULT_VMAP_METHOD)
        if vm not in VMAP_METHODS:
            raise ValueError(f"op {desc.label!r}: vmap_method must be one of {VMAP_METHODS}, got {vm!r}")
        if vm == "fold" and desc.kind != "kernel":
            raise ValueError(
                f"op {desc.label!r}: vmap_method='fold' applies to kernels only (it changes the launch "
                "dimensions); a Python-function op is batched with 'loop' or 'sequential'"
            )
        self.vmap_method = vm
        specs = []
        self.static: dict[int, Any] = {}
        self.dyn: list = []  # the call parameters passed as operands, in order
        for p, x in zip(desc.call_params, args):
            if _is_jax(x) or _is_scalar_operand(p, x) or isinstance(x, jax.ShapeDtypeStruct):
                if p.is_array:
                    specs.append(ArraySpec(tuple(x.shape), np.dtype(x.dtype)))
                else:
                    specs.append(ScalarSpec("ref", _operand_dtype(x), tuple(x.shape)))
                self.dyn.append(p)
            else:
                specs.append(_py_spec(desc, p, x))
                self.static[p.index] = x
        self.specs = tuple(specs)
        self.launch_dims = None if launch_dims is None else _static_dims(desc, "launch_dims", launch_dims)
        self.output_dims = output_dims
        try:
            plan = op.plan(self.specs, self.launch_dims, output_dims)
        except TypeError as e:
            if not _x64() and ("float64" in str(e) or "int64" in str(e)):
                raise type(e)(str(e) + _X64_HINT) from None  # (an ArgumentError stays one)
            raise
        if not _x64():
            for p, spec in zip(desc.returned_params, plan.out_specs):
                if spec.dtype.itemsize == 8:
                    raise ArgumentError(
                        f"op {desc.label!r}, output {p.name!r}: the kernel writes {spec.dtype.name}, which JAX "
                        f"would silently make a 32-bit array" + _X64_HINT
                    )
        for i, v in self.static.items():
            # at trace time: a static number the parameter's type cannot hold (Warp would wrap it)
            check_scalar_value(desc, desc.params[i], plan.types[i], v)
            if desc.params[i].inner:
                vector_components(desc, desc.params[i], v)
        self.plan = plan
        self.config = _entry_config(self, args, output_dims)
        jop._by_config.setdefault(self.config, self)
        self.fwd = _forward_launch(self, plan)
        self._bwd: dict[tuple, Any] = {}
        self._bwd_fns: dict[Any, Any] = {}  # adjoint launch -> its custom_vjp (no second order)
        self._folded: dict[int, Any] = {}
        self.fn = self._make_vjp()
        self.jitted = jax.jit(self.fn)
        self._eager_jits: dict[tuple, Any] = {}

    def eager_jit(self, key: tuple, make):
        """The jit of ``make()`` (a launch's function), for launches called with concrete operands.

        An eager ``jax.grad`` or ``jax.vmap`` runs the launches' FFI calls with concrete values, and
        JAX dispatches such a primitive through a process-wide cache holding it strongly (4096
        entries, each with its compiled program and the op's target name). Called through a jit
        held here instead, they are compiled once per entry and freed with it. ``make()`` returns a
        function made for this jit: JAX caches its traces by that function (weakly), so it must
        be owned by this entry alone.
        """
        fn = self._eager_jits.get(key)
        if fn is None:
            fn = self._eager_jits.setdefault(key, jax.jit(make()))
        return fn

    @property
    def jop(self) -> JaxOp:
        jop = self._jop()
        if jop is None:
            raise _dropped(self.desc.label)
        return jop

    # -- folded plans (vmap_method="fold") ------------------------------------------
    def folded_plan(self, batch: int):
        """The plan of this call with a batch of ``batch`` folded into the first dimension."""
        plan = self._folded.get(batch)
        if plan is None:
            desc = self.desc
            specs = []
            for p, s in zip(desc.call_params, self.specs):
                if p.is_array:
                    specs.append(ArraySpec((batch * s.shape[0],) + tuple(s.shape[1:]), s.dtype))
                else:
                    specs.append(s)
            ld = self.plan.launch_dims
            launch = (batch * ld[0],) + tuple(ld[1:])
            od = {
                p.name: (batch * self.plan.warp_shapes[p.index][0],) + tuple(self.plan.warp_shapes[p.index][1:])
                for p in desc.output_params
            }
            plan = self.jop.op.plan(tuple(specs), launch, od or None)
            self._folded[batch] = plan
        return plan

    # -- autodiff -------------------------------------------------------------------
    def _make_vjp(self):
        desc = self.desc
        fwd_launch = self.fwd
        out_mask = tuple(p.role == OUTPUT for p in desc.returned_params)
        # outputs the backward never reads (OpDescription.adjoint_unread) are not residuals: the
        # adjoint launch gets their cotangent in their place (same shape and dtype, never read)
        unread = self._unread_outputs()
        # the rules reach this entry weakly: they sit in jaxprs that JAX caches by weak keys, among
        # them fn (jax.jit(fn)) and the op; a strong path from a cached value to its key never frees
        label, ref = desc.label, weakref.ref(self)

        def me() -> _Entry:
            entry = ref()
            if entry is None:
                raise _dropped(label)
            return entry

        @jax.custom_vjp
        def fn(*xs):
            return tuple(fwd_launch(*xs))

        def fn_fwd(*pxs):
            xs = [p.value for p in pxs]
            want = tuple(i for i, p in enumerate(pxs) if p.perturbed)
            entry = me()
            entry._check_differentiable(want)
            # through fn itself, not the raw launch: when this rule is differentiated again (grad of
            # grad), the forward call meets fn's own rule instead of an FFI call JAX cannot differentiate
            outs = tuple(entry.fn(*xs))
            # which operands need a gradient is static: carry it in the residuals' tree structure
            # the adjoint launch takes the pure outputs (in kernel order, wherever in-out ones sit)
            pure = tuple(None if k in unread else o for k, (o, is_out) in enumerate(zip(outs, out_mask)) if is_out)
            return outs, (tuple(xs), pure, {str(i): None for i in want})

        def fn_bwd(res, cts):
            xs, outs, want = res
            want = tuple(sorted(int(k) for k in want))
            return me()._backward(xs, outs, want, cts)

        fn.defvjp(fn_fwd, fn_bwd, symbolic_zeros=True)
        return fn

    def _unread_outputs(self) -> frozenset:
        """Positions among the returned arrays of the differentiable outputs the backward never
        reads: ones the kernel only stores into or adds into atomically, every output of an op
        with a hand-written backward (``OpDescription.adjoint_unread``)."""
        unread = set(self.desc.adjoint_unread)
        return frozenset(
            k
            for k, p in enumerate(self.desc.returned_params)
            if p.role == OUTPUT and p.name in unread and self.plan.differentiable[p.index]
        )

    def _check_differentiable(self, want):
        desc = self.desc
        for i in want:
            p = self.dyn[i]
            if p.is_array or not self.plan.differentiable[p.index]:
                continue
            if desc.backward is not None:
                raise NotImplementedError(
                    f"op {desc.label!r}: the gradient with respect to the traced scalar {p.name!r} is not available: "
                    "the op's hand-written backward returns gradients of array inputs only; pass the scalar as "
                    "a Python number (static), or wrap the computation in jax.lax.stop_gradient"
                )
            if desc.kind == "function":
                raise NotImplementedError(
                    f"op {desc.label!r}: the gradient with respect to the traced scalar {p.name!r} of a "
                    "Python-function op is not supported (wp.Tape does not record scalar adjoints); pass the "
                    "scalar as a 1-element array parameter, or as a Python number (static)"
                )

    def _backward(self, xs, outs, want, cts):
        desc = self.desc
        plan = self.plan
        ret = desc.returned_params
        ct_vals = []
        any_ct = False
        for p, spec, ct in zip(ret, plan.out_specs, cts):
            if not plan.differentiable[p.index]:
                ct_vals.append(None)
                continue
            if isinstance(ct, jax.custom_derivatives.SymbolicZero):
                ct_vals.append(jnp.zeros(spec.shape, spec.dtype))
            else:
                any_ct = True
                ct_vals.append(ct)
        grads: list[Any] = [None] * len(xs)
        if not any_ct or not want:
            return tuple(grads)
        if desc.backward is not None:
            return self._handwritten_backward(xs, want, ct_vals)
        if not desc.has_adjoint and any(
            self.dyn[i].role != IN_OUT and plan.differentiable[self.dyn[i].index] for i in want
        ):
            raise desc.no_adjoint_error()  # at trace time, not as an XLA runtime error
        launch = self.adjoint(want)
        # an output that is not a residual (see _make_vjp): its cotangent stands in
        stand_in = [ct for ct, p in zip(ct_vals, ret) if p.role == OUTPUT]
        outs = [o if o is not None else c for o, c in zip(outs, stand_in)]
        operands = list(xs) + outs + [c for c in ct_vals if c is not None]
        results = self._no_second_order(launch)(*operands) if launch.results else ()
        for i, r in zip(launch.grad_for, results):
            grads[i] = r
        for i, k in launch.ct_passthrough:
            grads[i] = ct_vals[k]
        return _like_inputs(grads, xs)

    def _no_second_order(self, launch: _Launch):
        """The adjoint launch, whose own derivative (grad of grad) raises an error naming the op."""
        fn = self._bwd_fns.get(launch)
        if fn is None:
            label = self.desc.label

            @jax.custom_vjp
            def fn(*operands):
                return tuple(launch(*operands))

            def fn_fwd(*operands):
                f = me()  # (fn holds this rule: fn itself weakly, no cycle)
                if f is None:
                    raise _dropped(label)
                return f(*operands), None

            def fn_bwd(_res, _cts):
                raise UnsupportedError(
                    f"op {label!r}: second derivatives are not available: its backward is Warp's generated "
                    "adjoint, which has no derivative of its own. For second order (jax.grad of jax.grad), "
                    "describe the op with a hand-written backward: interop.op(..., backward=<kernel or op>)"
                )

            fn.defvjp(fn_fwd, fn_bwd)
            me = weakref.ref(fn)
            fn = self._bwd_fns.setdefault(launch, fn)
        return fn

    def adjoint(self, want: tuple) -> _Launch:
        """The adjoint launch computing the gradients of operands ``want``."""
        launch = self._bwd.get(want)
        if launch is None:
            launch = self._bwd.setdefault(want, _adjoint_launch(self, self.plan, want))
        return launch

    def _handwritten_backward(self, xs, want, ct_vals):
        desc = self.desc
        plan = self.plan
        bop = _op_for(desc.backward)
        args = []
        it = iter(xs)
        for p in desc.call_params:
            args.append(next(it) if p.index not in self.static else self.static[p.index])
        for spec, ct in zip(plan.out_specs, ct_vals):
            args.append(ct if ct is not None else jnp.zeros(spec.shape, spec.dtype))
        od = {}
        for bp, p in zip(desc.backward.output_params, desc.diff_array_inputs):
            od[bp.name] = plan.framework_shape(p)
        ld = plan.launch_dims if desc.backward.kind == "kernel" else None
        res = bop.bound("jax")(*args, launch_dims=ld, output_dims=od)
        res = res if isinstance(res, tuple) else (res,)
        by_param = {p.index: g for p, g in zip(desc.diff_array_inputs, res)}
        grads: list[Any] = [None] * len(xs)
        for i in want:
            p = self.dyn[i]
            if p.role == IN_OUT:
                k = [q.index for q in desc.returned_params].index(p.index)
                grads[i] = ct_vals[k]
            elif p.index in by_param:
                grads[i] = by_param[p.index]
        return _like_inputs(grads, xs)


# a hand-written backward's op, when the user did not describe it (its op holds it: JaxOp.backward_op)
_backward_ops: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


def _dropped(label: str) -> RuntimeError:
    """The error of a binding, jaxpr or compiled call used after its op was dropped (its entries and
    launches are freed with it)."""
    return RuntimeError(
        f"op {label!r} was dropped (no reference to it was left, so its JAX launches were freed with it) "
        "while something still called it (its JAX binding, a traced or compiled function); keep the op "
        "alive as long as anything calls it"
    )


def _op_for(bdesc):
    from interop._op import Op, _ops

    o = _ops.get(bdesc) or _backward_ops.get(bdesc)
    if o is None:
        o = _backward_ops.setdefault(bdesc, Op(bdesc))
    return o


# ---------------------------------------------------------------------------------------
# Launches: one FFI target family each (forward, or adjoint for a set of wanted gradients)
# ---------------------------------------------------------------------------------------
def _target(desc, direction: str) -> str:
    """The FFI target of an op's forward (``fwd``) or adjoint (``bwd``) launches: derived from the
    description only, so the same op described in another process has the same targets."""
    return f"interop.{desc.name.replace('::', '.')}.{direction}"


class _Binding:
    """Where one FFI buffer goes in the launch: parameter ``index``, into ``values`` or ``adj``."""

    __slots__ = ("index", "slot", "spec", "zero")

    def __init__(self, index: int, slot: str, spec: ArraySpec, zero: bool = False):
        self.index = index
        self.slot = slot
        self.spec = spec
        self.zero = zero


def _nbytes(spec: ArraySpec) -> int:
    return int(math.prod(spec.shape)) * np.dtype(spec.dtype).itemsize


def _forward_launch(entry: _Entry, plan) -> _Launch:
    desc = entry.desc
    ops = []
    for p in entry.dyn:
        spec = entry.specs[desc.call_params.index(p)]
        shape = tuple(spec.shape)
        ops.append(_Binding(p.index, "values" if p.role == INPUT else None, ArraySpec(shape, np.dtype(spec.dtype))))
    res = []
    aliases = {}
    for p, spec in zip(desc.returned_params, plan.out_specs):
        res.append(_Binding(p.index, "values", spec, zero=(p.role == OUTPUT and desc.zero_outputs)))
        if p.role == IN_OUT:
            aliases[[b.index for b in ops].index(p.index)] = len(res) - 1
    return _Launch(entry, plan, "fwd", ops, res, aliases, side_effect=bool(aliases))


def _adjoint_launch(entry: _Entry, plan, want: tuple) -> _Launch:
    """Operands: the forward operands, the forward outputs, the cotangents; results: the gradients."""
    desc = entry.desc
    ops = []
    for p in entry.dyn:
        spec = entry.specs[desc.call_params.index(p)]
        ops.append(_Binding(p.index, "values", ArraySpec(tuple(spec.shape), np.dtype(spec.dtype))))
    for p, spec in zip(desc.returned_params, plan.out_specs):
        if p.role == OUTPUT:
            ops.append(_Binding(p.index, "values", spec))
    res = []
    grad_for = []
    for i in want:
        p = entry.dyn[i]
        if p.role == IN_OUT or not plan.differentiable[p.index]:
            continue
        res.append(_Binding(p.index, "adj", ops[i].spec, zero=True))
        grad_for.append(i)
    aliases = {}
    inout_results = {}
    inout_cts = {}
    for k, (p, spec) in enumerate(zip(desc.returned_params, plan.out_specs)):
        if not plan.differentiable[p.index]:
            continue
        if desc.kind == "function" or p.name in desc.reads_returned:
            # the kernel reads this array, so its adjoint may accumulate into the upstream
            # gradient: hand it over as an aliased result (XLA's operands are never written)
            ops.append(_Binding(p.index, None, spec))
            res.append(_Binding(p.index, "adj", spec))
            aliases[len(ops) - 1] = len(res) - 1
            if p.role == IN_OUT:
                inout_results[p.index] = len(res) - 1
        else:
            # write-only in the kernel: the adjoint only reads the upstream gradient
            ops.append(_Binding(p.index, "adj", spec))
            if p.role == IN_OUT:
                inout_cts[p.index] = k
    launch = _Launch(entry, plan, "bwd", ops, res, aliases, side_effect=False)
    # in-out gradients pass through (the kernel only accumulates into them)
    launch.ct_passthrough = []
    for i in want:
        p = entry.dyn[i]
        if p.role == IN_OUT and p.index in inout_results:
            grad_for.append(i)
            launch.result_for.append(inout_results[p.index])
        elif p.role == IN_OUT and p.index in inout_cts:
            launch.ct_passthrough.append((i, inout_cts[p.index]))
    launch.grad_for = grad_for
    launch.want = want
    return launch


class _Launch:
    """A forward or adjoint launch of one plan as an FFI call; batched by a ``custom_vmap`` rule."""

    def __init__(self, entry: _Entry, plan, direction: str, operands, results, aliases, side_effect: bool):
        # weakly: the launch's custom_vmap rule and partitioning callbacks sit in jaxprs that JAX's
        # caches keep as long as their keys live, and the keys include the entry's own functions
        # (a strong path would keep the entry, its op, and so those jaxprs, for good)
        self._entry = weakref.ref(entry)
        self.label = entry.desc.label
        self.plan = plan
        self.direction = direction
        self.operands = operands
        self.results = results
        self.aliases = aliases
        self.side_effect = side_effect
        self.grad_for: list[int] = []
        self.result_for: list[int] = [k for k, b in enumerate(results) if b.zero and b.slot == "adj"]
        self.name = _target(entry.desc, direction)
        self.want: tuple | None = None  # the adjoint's wanted gradients (set by _adjoint_launch)
        self.fold = 0  # batch folded into the first dimension (vmap_method="fold"), else 0
        self._fns: dict[tuple, Any] = {}
        self._lock = threading.Lock()
        self._folded: dict[int, _Launch] = {}
        # vmap_method="fold": the unbatched launch this one folds, and how many batch elements
        # each of its rows holds (nested vmaps fold again, multiplying the factor)
        self._base: Any = None  # a weak reference to the unfolded launch, for a folded one
        self.factor = 1

    @property
    def base(self) -> _Launch:
        """The unbatched launch this one folds (itself when not folded)."""
        base = self._base() if self._base is not None else self
        if base is None:
            raise _dropped(self.label)
        return base

    @property
    def entry(self) -> _Entry:
        entry = self._entry()
        if entry is None:
            raise _dropped(self.label)
        return entry

    def __call__(self, *xs):
        if any(map(_jax_compat.is_tracer, xs)):
            outs = self._fn(())(*xs)
        else:  # concrete operands (an eager jax.grad's forward and backward): see _Entry.eager_jit
            fn = self._fn(())
            outs = self.entry.eager_jit((self, ()), lambda: lambda *ys: fn(*ys))(*xs)
        vary = frozenset().union(*map(_jax_compat.varying_axes, xs)) if xs else frozenset()
        if vary:  # inside shard_map: results vary over the mesh axes their operands vary over
            outs = tuple(_jax_compat.cast_varying(o, vary) for o in outs)
        if self.direction == "bwd":
            return [outs[k] for k in self.result_for]
        return outs

    # -- one custom_vmap function per batch configuration ------------------------------
    def _fn(self, levels: tuple):
        f = self._fns.get(levels)
        if f is not None:
            return f
        with self._lock:
            f = self._fns.get(levels)
            if f is None:
                f = self._build(levels)
                self._fns[levels] = f
        return f

    def config(self, levels: tuple) -> str:
        """Everything the handler needs to rebuild this launch from the description (JSON): the
        entry's configuration, the wanted gradients, the folded batch and the vmap levels."""
        return json.dumps(
            {
                "e": json.loads(self.entry.config),
                "w": None if self.want is None else list(self.want),
                "f": self.fold,
                "l": [[size, list(flags)] for size, flags in levels],
            },
            sort_keys=True,
            separators=(",", ":"),
        )

    def _ffi(self, levels: tuple):
        """The bare FFI call of this launch at batch ``levels``; the configuration travels as attribute."""
        batch = tuple(size for size, _ in reversed(levels))
        config = self.config(levels)
        handler, cid = self.entry.jop.targets[self.direction].handler(self, levels, config)
        backend = jax.default_backend()
        if backend == "gpu":
            # load the Warp module now: XLA may run the handler first while recording a CUDA graph
            handler.prepare(_gpu_ordinals())
        elif backend == "cpu":
            handler.prepare_cpu()  # the module loads here, not inside XLA's call
        out_types = [jax.ShapeDtypeStruct(batch + tuple(b.spec.shape), b.spec.dtype) for b in self.results]
        ffi = jax.ffi.ffi_call(
            self.name,
            out_types,
            has_side_effect=self.side_effect,
            input_output_aliases=self.aliases or None,
            vmap_method="sequential",  # never used: custom_vmap batches the call
        )
        config_id = np.int64(cid)
        return lambda *xs: tuple(ffi(*xs, config=config, config_id=config_id))

    def _build(self, levels: tuple):
        ffi = _partitioned(self, levels) or self._ffi(levels)
        me, label = weakref.ref(self), self.label  # (the rule is held by this launch: no cycle)

        @custom_vmap
        def launch(*xs):
            return tuple(ffi(*xs))

        @launch.def_vmap
        def rule(axis_size, in_batched, *xs):
            launch = me()
            if launch is None:
                raise _dropped(label)
            if any(map(_jax_compat.is_tracer, xs)):
                return launch._batch(levels, axis_size, in_batched, xs)
            # concrete operands (an eager jax.vmap): the batched launch through a jit (_Entry.eager_jit)
            flags = tuple(in_batched)
            fn = launch.entry.eager_jit(
                (launch, levels, axis_size, flags),
                lambda: lambda *ys: launch._batch(levels, axis_size, flags, ys)[0],
            )
            return fn(*xs), (any(flags),) * len(launch.results)

        return launch

    def _batch(self, levels, axis_size, in_batched, xs):
        n_out = len(self.results)
        if not any(in_batched):
            return self._fn(levels)(*xs), (False,) * n_out
        method = self.entry.vmap_method
        if method == "sequential":
            flags = list(in_batched)
            fn = self._fn(levels)

            def body(batched):
                it = iter(batched)
                return fn(*[next(it) if b else x for x, b in zip(xs, flags)])

            outs = jax.lax.map(body, [x for x, b in zip(xs, flags) if b])
            return tuple(outs), (True,) * n_out
        if method == "fold" and not levels and all(b.spec.shape for b in self.operands) and self._foldable():
            return self._fold(axis_size, in_batched, xs), (True,) * n_out
        # loop: aliased operands must be batched like their results
        xs = list(xs)
        flags = list(in_batched)
        for k in self.aliases:
            if not flags[k]:
                xs[k] = jnp.broadcast_to(xs[k], (axis_size,) + tuple(xs[k].shape))
                flags[k] = True
        return self._fn(levels + ((axis_size, tuple(flags)),))(*xs), (True,) * n_out

    # -- vmap_method="fold" ------------------------------------------------------------
    def _foldable(self) -> bool:
        desc = self.entry.desc
        return all(desc.params[b.index].is_array for b in self.operands + self.results)

    def folded(self, batch: int) -> _Launch:
        """This launch with a batch of ``batch`` folded into the first dimension.

        Sized from the unbatched launch: under nested vmaps ``self`` is already folded.
        """
        total = self.factor * batch
        base = self.base
        folded = base._folded.get(total)
        if folded is None:
            folded = base._folded.setdefault(total, base._refold(self.entry.folded_plan(total), total))
        return folded

    def _fold(self, axis_size, in_batched, xs):
        folded = self.folded(axis_size)
        args = []
        for x, b in zip(xs, in_batched):
            if not b:
                x = jnp.broadcast_to(x, (axis_size,) + tuple(x.shape))
            args.append(x.reshape((axis_size * x.shape[1],) + tuple(x.shape[2:])))
        outs = folded._fn(())(*args)
        return tuple(o.reshape((axis_size, o.shape[0] // axis_size) + tuple(o.shape[1:])) for o in outs)

    def _refold(self, plan, batch: int) -> _Launch:
        def fold(b):
            shape = (batch * b.spec.shape[0],) + tuple(b.spec.shape[1:])
            return _Binding(b.index, b.slot, ArraySpec(shape, b.spec.dtype), b.zero)

        launch = _Launch(
            self.entry,
            plan,
            self.direction,
            [fold(b) for b in self.operands],
            [fold(b) for b in self.results],
            self.aliases,
            self.side_effect,
        )
        launch.want, launch.fold = self.want, batch
        launch.grad_for, launch.result_for = self.grad_for, self.result_for
        launch.ct_passthrough = getattr(self, "ct_passthrough", [])
        launch._base, launch.factor = weakref.ref(self), batch
        return launch


def _offsets(levels: tuple, bindings, flags_of) -> list[tuple[int, ...]]:
    """Byte offset of each buffer for every batch index (outermost batch dimension first)."""
    outer = list(reversed(levels))  # buffers hold batch dims outermost first
    per_buffer = []
    for k, b in enumerate(bindings):
        core = _nbytes(b.spec)
        strides = [0] * len(outer)
        acc = core
        for j in range(len(outer) - 1, -1, -1):
            if flags_of(outer[j], k):
                strides[j] = acc
                acc *= outer[j][0]
        per_buffer.append(strides)
    combos = itertools.product(*[range(size) for size, _ in outer])
    return [tuple(sum(i * s for i, s in zip(idx, strides)) for strides in per_buffer) for idx in combos]


def _as_fwd(go):
    return lambda values, adj, stream: go(values, stream)


def _gpu_ordinals() -> list[int]:
    """The CUDA ordinals of this process's JAX GPU devices."""
    return [getattr(d, "local_hardware_id", d.id) for d in jax.local_devices(backend="gpu")]


# Warp's module loading is not thread-safe, and XLA runs handlers from several threads at
# once (shard_map, pmap): the first launch of each handler on each device is serialized.
_first_run_lock = threading.Lock()


class _Handler:
    """The Python side of one launch configuration: XLA buffers -> launch values -> Warp launch.

    Everything that depends only on the configuration is resolved here, once; per call the handler
    reads the buffers' pointers from the call frame and replays a recorded launch. On the CPU a
    kernel without batch levels runs through generated straight-line code (:meth:`_make_cpu`):
    pointers read with ``_jax_ffi.MEM``, outputs zeroed with one ``memset`` each, the recorded
    launch's argument struct updated field by field and the kernel's entry point called.
    """

    def __init__(self, launch: _Launch, levels: tuple, config: str):
        import warp as wp  # noqa: F401  (Warp is initialised by the core on first use)

        self.launch = launch
        self.config = config
        plan = launch.plan
        self.runner = plan.runner
        self.adjoint = launch.direction == "bwd"
        n = len(plan.desc.params)
        self.template_values = [None] * n
        for i, v in launch.entry.static.items():
            self.template_values[i] = v
        self.ops = [(b.index, b.slot) for b in launch.operands]
        self.res = [(b.index, b.slot) for b in launch.results]
        self.zero = [(k, _nbytes(b.spec)) for k, b in enumerate(launch.results) if b.zero]
        self.levels = levels
        self.batch = int(math.prod(size for size, _ in levels)) if levels else 1
        if levels:
            self.op_offsets = _offsets(levels, launch.operands, lambda lvl, k: lvl[1][k])
            self.res_offsets = _offsets(levels, launch.results, lambda lvl, k: True)
        else:
            self.op_offsets = [(0,) * len(self.ops)]
            self.res_offsets = [(0,) * len(self.res)]
        self._warm: set = set()
        self._go: dict[str, Any] = {}
        self.cpu = self._first_cpu  # replaced by the per-call function once built

    def prepare(self, ordinals) -> None:
        """Build the launch records of CUDA devices ``ordinals`` (loads the module) ahead of any call."""
        with _first_run_lock:
            for k in ordinals:
                device = get_device(f"cuda:{k}")
                if device.alias not in self._go:
                    fast = self.runner.fast_adjoint if self.adjoint else self.runner.fast_forward
                    self._go[device.alias] = fast(device) if self.adjoint else _as_fwd(fast(device))

    def prepare_cpu(self) -> None:
        """Build the CPU call path (loads the module) ahead of any call."""
        if self.cpu == self._first_cpu:
            with _first_run_lock:
                if self.cpu == self._first_cpu:
                    self.cpu = self._make_cpu()

    def _first_cpu(self, p: int) -> None:
        self.prepare_cpu()
        self.cpu(p)

    def _make_cpu(self):
        """The per-call function of the CPU: generated straight-line code where the launch allows
        it (a kernel, no batch levels, a direct CPU record), else the general path."""
        device = get_device("cpu")
        runner = self.runner
        if self.levels or not runner.can_direct(device):
            self._generic(device)  # builds the launch record now, outside any call

            def run(p: int) -> None:
                self._run(p, "cpu")

            return run
        # one record per thread (XLA may run a handler on several threads at once); static
        # scalars are set once in each
        static = self.launch.entry.static
        env: dict[str, Any] = {
            "M": _jax_ffi.MEM,
            "B": _jax_ffi.BYTES,
            "memset": ctypes.memset,
            "slow": lambda p: self._run(p, "cpu"),
        }
        d_name = "DA" if self.adjoint else "DF"
        local = threading.local()

        def make():
            d = local.d = runner.direct(device, self.adjoint, {})
            for i, v in static.items():
                d.set(i, v)
            return d

        env[d_name], env[f"make_{d_name}"] = local, make
        d = make()  # this thread's record now (loads the module): its fields decide the code below
        lines = ["def run(p):"]
        if self.ops:
            lines.append(f"    a = M[(p + {_jax_ffi.ARGS_ITEMS}) >> 3] >> 3")
        if self.res:
            lines.append(f"    r = M[(p + {_jax_ffi.RETS_ITEMS}) >> 3] >> 3")
        values: dict[int, str] = {}
        adj: dict[int, str] = {}
        for k, (i, slot) in enumerate(self.ops):
            lines.append(f"    o{k} = M[(M[a + {k}] + {_jax_ffi.DATA}) >> 3]")
            if slot == "values":
                values[i] = f"o{k}"
            elif slot == "adj":
                adj[i] = f"o{k}"
        for k, (i, slot) in enumerate(self.res):
            lines.append(f"    r{k} = M[(M[r + {k}] + {_jax_ffi.DATA}) >> 3]")
            if slot == "values":
                values[i] = f"r{k}"
            else:
                adj[i] = f"r{k}"
        for k, nbytes in self.zero:
            if not nbytes:
                continue
            z = _jax_ffi.zeros(nbytes)
            if z is None:
                lines.append(f"    memset(r{k}, 0, {nbytes})")
            else:
                env[f"Z{k}"] = z
                lines.append(f"    B[r{k} : r{k} + {nbytes}] = Z{k}")
        # every descriptor is set on every call: one a configuration leaves out points nowhere
        for i in range(len(self.template_values)):
            if hasattr(d, f"v{i}"):
                values.setdefault(i, "0")
            if self.adjoint and hasattr(d, f"w{i}"):
                adj.setdefault(i, "0")
        lines += direct_lines(runner, device, d_name, values, adj if self.adjoint else None, "slow(p)")
        (run,) = compile_functions("\n".join(lines) + "\n", env, ("run",), "<interop jax handler>")
        return run

    def _generic(self, device):
        go = self._go.get(device.alias)
        if go is None:
            # a cached launch record per device, replayed with this call's pointers
            go = self.runner.fast_adjoint(device) if self.adjoint else _as_fwd(self.runner.fast_forward(device))
            self._go[device.alias] = go
        return go

    def cuda(self, p: int) -> None:
        frame = _jax_ffi.frame(p)
        key = _jax_ffi.device_ordinal(frame)
        if key in self._warm:
            self._run(p, "CUDA")
            return
        with _first_run_lock:
            self._run(p, "CUDA")
            self._warm.add(key)

    def _run(self, p: int, platform: str) -> None:
        ins = _jax_ffi.pointers(p, _jax_ffi.ARGS_ITEMS, _jax_ffi.ARGS_SIZE)
        outs = _jax_ffi.pointers(p, _jax_ffi.RETS_ITEMS, _jax_ffi.RETS_SIZE)
        if platform == "cpu":
            device = get_device("cpu")
            stream = None
            for k, nbytes in self.zero:
                if nbytes:
                    _jax_ffi.zero_fill(outs[k], nbytes * self.batch)
        else:
            frame = _jax_ffi.frame(p)
            device = get_device(f"cuda:{_jax_ffi.device_ordinal(frame)}")
            ptr = _jax_ffi.cuda_stream(frame)
            stream = external_stream(device, ptr)
            for k, nbytes in self.zero:
                if nbytes:
                    _jax_compat.cuda_memset_async(device, outs[k], nbytes * self.batch, ptr)
        go = self._generic(device)
        for op_off, res_off in zip(self.op_offsets, self.res_offsets):
            values = list(self.template_values)
            adj = [None] * len(values) if self.adjoint else None
            for (i, slot), ptr, off in zip(self.ops, ins, op_off):
                if slot == "values":
                    values[i] = (ptr + off, None)
                elif slot == "adj":
                    adj[i] = (ptr + off, None)
            for (i, slot), ptr, off in zip(self.res, outs, res_off):
                if slot == "values":
                    values[i] = (ptr + off, None)
                else:
                    adj[i] = (ptr + off, None)
            go(values, adj, stream)


# ---------------------------------------------------------------------------------------
# Stable FFI targets: one per op and direction; the call's configuration is an attribute
# ---------------------------------------------------------------------------------------
def _jsonable(v):
    """A static value (scalar argument, output_dims) as JSON that :func:`_unjson` restores exactly."""
    if isinstance(v, bool):
        return {"b": v}
    if isinstance(v, np.generic):
        return {"n": [v.dtype.name, v.item()]}
    if isinstance(v, int):
        return {"i": v}
    if isinstance(v, float):
        return {"f": v.hex()}
    if isinstance(v, dict):
        return {"d": [[k, _jsonable(x)] for k, x in sorted(v.items())]}
    if hasattr(v, "_wp_scalar_type_"):  # a Warp vector/matrix value: its components
        return _jsonable(np.asarray(v).tolist())
    if isinstance(v, (list, tuple)):
        return {"t": [_jsonable(x) for x in v]}
    if v is None:
        return None
    raise TypeError(f"cannot record the static value {v!r} ({type(v).__name__}) in an FFI call's configuration")


def _unjson(v):
    if v is None:
        return None
    ((tag, x),) = v.items()
    if tag == "b":
        return bool(x)
    if tag == "n":
        return np.dtype(x[0]).type(x[1])
    if tag == "i":
        return int(x)
    if tag == "f":
        return float.fromhex(x)
    if tag == "d":
        return {k: _unjson(y) for k, y in x}
    return tuple(_unjson(y) for y in x)


def _entry_config(entry: _Entry, args, output_dims) -> str:
    """The static configuration of an entry as canonical JSON (see :func:`_entry_from_config`)."""
    a = []
    for p, spec in zip(entry.desc.call_params, entry.specs):
        if p.index in entry.static:
            try:
                a.append(["s", _jsonable(entry.static[p.index])])
            except TypeError as e:
                raise TypeError(f"op {entry.desc.label!r}, parameter {p.name!r}: {e}") from None
        else:
            a.append(["d", list(spec.shape), np.dtype(spec.dtype).name])
    od = None if output_dims is None else _jsonable(_thaw(_static_dims(entry.desc, "output_dims", output_dims)))
    ld = None if entry.launch_dims is None else _jsonable(entry.launch_dims)
    cfg = {"a": a, "ld": ld, "od": od, "vm": entry.vmap_method}
    return json.dumps(cfg, sort_keys=True, separators=(",", ":"))


def _thaw(v):
    if isinstance(v, tuple) and len(v) == 2 and v[0] == "dict":
        return {k: _thaw(x) for k, x in v[1]}
    return v


def _entry_from_config(jop: JaxOp, config: str) -> _Entry:
    """The entry of a configuration, built from the description if this process has not seen it."""
    entry = jop._by_config.get(config)
    if entry is not None:
        return entry
    cfg = json.loads(config)
    args = []
    for kind, *rest in cfg["a"]:
        if kind == "s":
            args.append(_unjson(rest[0]))
        else:
            args.append(jax.ShapeDtypeStruct(tuple(rest[0]), np.dtype(rest[1])))
    with jop._lock:
        entry = jop._by_config.get(config)
        if entry is None:
            entry = _Entry(jop, args, _unjson(cfg["ld"]), _unjson(cfg["od"]), cfg["vm"])
            jop._by_config[config] = entry
    return entry


def _config_id(config: str) -> int:
    """The configuration's id: 63 bits of its BLAKE2b hash (an int64 attribute of each call, the
    same in every process). Handlers are found by it; a module deserialized in a process that has
    not seen the configuration finds none and builds the handler from the ``config`` string."""
    return int.from_bytes(hashlib.blake2b(config.encode(), digest_size=8).digest(), "little") >> 1


# the attributes of each call, sorted by name as XLA passes them: "config" (JSON), "config_id"
_CONFIG_ID_ATTR = 1


class _Target:
    """One registered FFI target (an op's forward or adjoint): finds the handler of each call by
    its configuration id (one dictionary lookup), building it from the description the first
    time an id is seen (a module deserialized with ``jax.export``)."""

    def __init__(self, jop: JaxOp, direction: str):
        # weakly: the ops holding this target (JaxOp.targets; several Op objects of one description
        # share it), the first one alive builds handlers
        self.label = jop.desc.label
        self._jops = [weakref.ref(jop)]
        self.direction = direction
        self.handlers: dict[int, _Handler] = {}  # by configuration id
        self._lock = threading.Lock()
        mem, k = _jax_ffi.MEM, _CONFIG_ID_ATTR
        mem32, handlers = _jax_ffi.MEM32, self.handlers
        size, types, values = _jax_ffi.ATTRS_SIZE, _jax_ffi.ATTRS_TYPES, _jax_ffi.ATTRS_VALUES
        scalar_kind, s64, value_at = _jax_ffi._ATTR_SCALAR, _jax_ffi._DTYPE_S64, _jax_ffi._SCALAR_VALUE
        me = weakref.ref(self)  # (run is held by this target: a strong self would make a cycle)

        # (the registered callbacks hold run and at_instantiate weakly: the target keeps them)
        def run(p: int, platform: str) -> None:
            # _jax_ffi.int64_attr(p, k), written out: this runs on every call
            handler = None
            if mem[(p + size) >> 3] > k and mem32[(mem[(p + types) >> 3] >> 2) + k] == scalar_kind:
                scalar = mem[(mem[(p + values) >> 3] >> 3) + k]
                if mem32[scalar >> 2] == s64:
                    handler = handlers.get(mem[mem[(scalar + value_at) >> 3] >> 3])
            if handler is None:
                handler = me()._rebuild(p)
            if platform == "cpu":
                handler.cpu(p)
            else:
                handler.cuda(p)

        self.run = run
        self.at_instantiate = lambda p, platform: me().instantiate(p, platform)

    @property
    def jop(self) -> JaxOp:
        for ref in self._jops:
            jop = ref()
            if jop is not None:
                return jop
        raise _dropped(self.label)

    def share(self, jop: JaxOp) -> None:
        """``jop`` (another Op object of this target's description) uses this target too."""
        self._jops = [r for r in self._jops if r() is not None] + [weakref.ref(jop)]

    def instantiate(self, p: int, platform: str) -> None:
        """XLA's instantiate stage (an executable compiled or deserialized, before any run): build
        the handler of the call's configuration and, on CUDA, load the Warp module on every GPU.
        The first run may be recorded into a CUDA graph (command buffers), and loading a module
        during a capture needs a CUDA 12.3 driver; a process that only deserialized an exported
        function never traced the op, so nothing else has loaded it."""
        cid = _jax_ffi.int64_attr(p, _CONFIG_ID_ATTR)
        handler = self.handlers.get(cid) if cid is not None else None
        if handler is None:
            handler = self._rebuild(p)
        if platform != "cpu":
            handler.prepare(_gpu_ordinals())

    def _rebuild(self, p: int) -> _Handler:
        config_bytes = _jax_ffi.string_attr(_jax_ffi.frame(p), b"config")
        if config_bytes is None:
            raise RuntimeError(f"FFI target of op {self.label!r} called without its 'config' attribute")
        config = config_bytes.decode()
        cid = _config_id(config)
        given = _jax_ffi.int64_attr(p, _CONFIG_ID_ATTR)
        if given is not None and given != cid:
            raise RuntimeError(
                f"FFI target of op {self.label!r}: the call's config_id {given} is not its configuration's "
                f"({cid}); the module was not made by this package's version"
            )
        with self._lock:
            handler = self.handlers.get(cid)
            if handler is None:
                cfg = json.loads(config)
                entry = _entry_from_config(self.jop, json.dumps(cfg["e"], sort_keys=True, separators=(",", ":")))
                launch = entry.fwd if self.direction == "fwd" else entry.adjoint(tuple(cfg["w"]))
                if cfg["f"]:
                    launch = launch.folded(cfg["f"])
                levels = tuple((size, tuple(flags)) for size, flags in cfg["l"])
                handler = self.handlers[cid] = _Handler(launch, levels, config)
        return handler

    def handler(self, launch: _Launch, levels: tuple, config: str) -> tuple[_Handler, int]:
        """The handler of ``launch`` at ``levels`` and its configuration id (made at lowering)."""
        cid = _config_id(config)
        handler = self.handlers.get(cid)
        if handler is None:
            with self._lock:
                handler = self.handlers.get(cid)
                if handler is None:
                    handler = self.handlers[cid] = _Handler(launch, levels, config)
        if handler.config != config:  # two configurations with one 63-bit id: never seen, but never served
            raise RuntimeError(f"op {self.label!r}: configuration id {cid} collides; please report this")
        return handler, cid


#: target name -> the live op's target (JaxOp.targets holds it): a dropped op's is freed
_targets: weakref.WeakValueDictionary[str, _Target] = weakref.WeakValueDictionary()
_targets_lock = threading.Lock()


def _register_targets(jop: JaxOp) -> None:
    """Give ``jop`` its FFI targets: those of a live op of the same description (two Op objects of
    one description: a hand-written backward's op and the same kernel described by the user), else
    new ones, which the registered callbacks then call (XLA keeps a name's callbacks for good)."""
    desc = jop.desc
    for direction in ("fwd", "bwd"):
        name = _target(desc, direction)
        with _targets_lock:
            target = _targets.get(name)
            alive = target is not None and any(r() is not None for r in target._jops)
            if alive and target.jop.desc == desc:
                target.share(jop)
            elif alive:  # (interop.op refuses this; an Op made otherwise must not take over the name)
                raise ArgumentError(
                    f"op name {desc.name!r} is already used by a live op with other options "
                    f"({target.jop.desc.key!r}); pick another name="
                )
            else:
                target = _targets[name] = _Target(jop, direction)
                # CUDA graphs: a kernel's handler only zero-fills and launches on XLA's stream (capturable);
                # a Python-function op may allocate or synchronize, and so does Warp's deterministic mode
                # (scratch buffers per launch): neither is declared compatible
                _jax_ffi.register(
                    name,
                    target.run,
                    command_buffer=desc.kind == "kernel" and not _jax_compat.deterministic(desc.fn),
                    instantiate=target.at_instantiate,
                    label=desc.label,
                )
        jop.targets[direction] = target
    if desc.backward is not None:
        jop.backward_op = _op_for(desc.backward)
        jop.backward_op.bound("jax")


def on_describe(op) -> None:
    """Register the op's FFI targets as soon as it is described (a deserialized ``jax.export``
    module finds them by name)."""
    op.bound("jax")


def _register_described() -> None:
    """Register the FFI targets of the ops described before this module was imported (``jax``
    imported after them: the core's import hook imports this module right after ``jax``)."""
    from interop import _op as core

    with core._ops_lock:
        ops = list(core._ops.values())
    for o in ops:
        on_describe(o)


def targets(*ops) -> list[str]:
    """The FFI target names of ``ops`` (forward, adjoint, and those of a hand-written backward).

    They depend only on each op's description, so they are the same in every process.
    """
    out: list[str] = []
    for op in ops:
        desc = op.description
        while desc is not None:
            for direction in ("fwd", "bwd"):
                name = _target(desc, direction)
                if name not in out:
                    out.append(name)
            desc = desc.backward
    return out


def disabled_checks(*ops) -> list:
    """``disabled_checks=`` for :func:`jax.export.export` of a function calling ``ops``.

    JAX refuses to serialize custom calls it does not know to be stable; these targets are:
    their names come from the op descriptions and each call carries its own configuration,
    so a process that describes the same ops again runs the deserialized function.

    Example: ``jax.export.export(jax.jit(f), disabled_checks=adapters.jax.disabled_checks(op))(x)``
    """
    from jax.export import DisabledSafetyCheck

    return [DisabledSafetyCheck.custom_call(t) for t in targets(*ops)]


def _like_inputs(grads, xs) -> tuple:
    """Gradients typed like their primal inputs inside ``shard_map`` (varying over the same axes)."""
    out = []
    for g, x in zip(grads, xs):
        if g is not None and not isinstance(g, jax.custom_derivatives.SymbolicZero):
            want = _jax_compat.varying_axes(x)
            if want != _jax_compat.varying_axes(g):
                g = _jax_compat.cast_varying(g, want)
        out.append(g)
    return tuple(out)


# ---------------------------------------------------------------------------------------
# Partitioning under jax.jit: batched (vmap "loop") launches, and ops with partition="rows"
# ---------------------------------------------------------------------------------------
def _split_flags(launch: _Launch, levels: tuple):
    """Which operands/results split along their leading dimensions when the launch is partitioned,
    and the sizes of those dimensions (one for a batch or ``partition="rows"``, every launch
    dimension for ``partition="elementwise"``); None when the launch is not partitionable."""
    if levels:
        # one launch per element of the outermost batch: split it; unbatched operands replicate
        size, flags = levels[-1]
        return tuple(bool(f) for f in flags), (True,) * len(launch.results), (size,)
    entry = launch.entry
    partition = entry.desc.partition
    if partition is None or launch.fold:
        return None
    ld = tuple(launch.plan.launch_dims)
    lead = ld[:1] if partition == "rows" else ld
    nd = len(lead)
    ops = []
    for b in launch.operands:
        p = entry.desc.params[b.index]
        if p.is_array:
            if tuple(b.spec.shape[:nd]) != lead:
                return None
            ops.append(True)
        else:
            ops.append(False)  # a traced scalar: the same on every shard
    for b in launch.results:
        if not entry.desc.params[b.index].is_array or tuple(b.spec.shape[:nd]) != lead:
            return None  # e.g. the gradient of a traced scalar is a sum over all rows
    return tuple(ops), (True,) * len(launch.results), lead


def _local_launch(launch: _Launch, levels: tuple, sizes: tuple):
    """The bare FFI call of ``launch`` on one shard holding ``sizes`` of its leading dimensions."""
    if levels:
        return launch._ffi(levels[:-1] + ((sizes[0], levels[-1][1]),))
    entry = launch.entry
    nd = len(sizes)
    args = []
    for p, spec in zip(entry.desc.call_params, entry.specs):
        if p.index in entry.static:
            args.append(entry.static[p.index])
        elif p.is_array:
            args.append(jax.ShapeDtypeStruct(tuple(sizes) + tuple(spec.shape[nd:]), spec.dtype))
        else:
            args.append(jax.ShapeDtypeStruct(tuple(spec.shape), spec.dtype))
    plan = launch.plan
    ld = tuple(sizes) + tuple(plan.launch_dims[nd:])
    od = {p.name: tuple(sizes) + tuple(plan.warp_shapes[p.index][nd:]) for p in entry.desc.output_params}
    jop = entry.jop
    local = _Entry(jop, args, ld, od or None, entry.vmap_method)
    local = jop._by_config.setdefault(local.config, local)
    local_launch = local.fwd if launch.direction == "fwd" else local.adjoint(launch.want)
    return local_launch._ffi(())


def _partitioned(launch: _Launch, levels: tuple):
    """The launch as a ``custom_partitioning`` call that XLA splits along the leading dimensions of
    its split operands and results (each shard runs the launch on its part); None if not partitionable."""
    split = _split_flags(launch, levels)
    if split is None:
        return None
    op_split, res_split, sizes = split
    if not any(op_split):
        return None
    nd = len(sizes)
    custom_partitioning, SdyShardingRule = _jax_compat.custom_partitioning()
    batch = tuple(s for s, _ in reversed(levels))
    op_ranks = [len(batch_shape(levels, b, k)) for k, b in enumerate(launch.operands)]
    res_ranks = [len(batch) + len(b.spec.shape) for b in launch.results]
    counter = itertools.count()

    def mapping(rank, split):
        # the split leading dims are factors shared by every split operand and result
        return tuple((f"r{d}" if (split and d < nd) else f"d{next(counter)}") for d in range(rank))

    rule = SdyShardingRule(
        tuple(mapping(r, s) for r, s in zip(op_ranks, op_split)),
        tuple(mapping(r, s) for r, s in zip(res_ranks, res_split)),
    )
    ffi = launch._ffi(levels)

    @custom_partitioning
    def call(*xs):
        return ffi(*xs)

    def axes_of(arg_shapes):
        """The mesh axes of each split dimension, from the first split operand that is sharded."""
        from jax.sharding import NamedSharding

        for a, s in zip(arg_shapes, op_split):
            sh = a.sharding
            if s and isinstance(sh, NamedSharding) and any(x is not None for x in tuple(sh.spec)[:nd]):
                spec = tuple(sh.spec)[:nd]
                return spec + (None,) * (nd - len(spec))
        return (None,) * nd

    def count(mesh, axes):
        if axes is None:
            return 1
        names = axes if isinstance(axes, tuple) else (axes,)
        return int(math.prod(mesh.shape[n] for n in names))

    def usable(mesh, axes):
        # a dimension not divisible by its shard count stays whole
        return tuple(a if size % count(mesh, a) == 0 else None for a, size in zip(axes, sizes))

    def shardings(mesh, axes, flags, ranks):
        from jax.sharding import NamedSharding
        from jax.sharding import PartitionSpec as P

        return tuple(NamedSharding(mesh, P(*axes[:r]) if f and r else P()) for f, r in zip(flags, ranks))

    def infer(mesh, arg_shapes, result_shape):
        return shardings(mesh, usable(mesh, axes_of(arg_shapes)), res_split, res_ranks)

    def partition(mesh, arg_shapes, result_shape):
        axes = usable(mesh, axes_of(arg_shapes))
        local_sizes = tuple(size // count(mesh, a) for a, size in zip(axes, sizes))
        local = _local_launch(launch, levels, local_sizes) if local_sizes != tuple(sizes) else ffi
        return (
            mesh,
            local,
            shardings(mesh, axes, res_split, res_ranks),
            shardings(mesh, axes, op_split, op_ranks),
        )

    call.def_partition(partition=partition, infer_sharding_from_operands=infer, sharding_rule=rule)

    def run(*xs):
        if _jax_compat.manual_axes():  # inside shard_map the call already runs per shard
            return ffi(*xs)
        return tuple(call(*xs))

    return run


def batch_shape(levels: tuple, binding: _Binding, k: int) -> tuple:
    """The shape of operand ``k`` of a launch at batch ``levels`` (batched dims outermost first)."""
    dims = tuple(size for size, flags in reversed(levels) if flags[k])
    return dims + tuple(binding.spec.shape)


_register_described()
