"""JAX adapter: an op called with JAX arrays (or tracers) is an XLA FFI call.

How one call becomes XLA work:

- The call's static configuration (argument shapes and dtypes, Python-number scalars,
  ``launch_dims``, ``output_dims``, ``vmap_method``, the x64 mode) is frozen into a hashable
  key; static floats by their bits, dims with their types (:mod:`adapters.jax.operands`). Each
  key gets, once, a :class:`_Entry`: the resolved plan, a ``jax.custom_jvp`` function of
  the dynamic operands (arrays and traced scalars), and its ``jax.jit`` for eager calls
  (:mod:`adapters.jax.entry`).
- The forward and the adjoint are each a :class:`_Launch` (:mod:`adapters.jax.launch`), called
  through one of the op's two FFI targets (``interop.<op name>.fwd`` / ``.bwd``, named from the
  description only and registered for ``cpu`` and ``CUDA`` when the op is described:
  :mod:`adapters.jax.targets`, over XLA's FFI C API in :mod:`adapters.jax.ffi`). Each call
  carries its configuration as a JSON ``config`` attribute; the handler for it is built at trace time, or
  rebuilt from the attribute in a process that only described the op (``jax.export``). The
  handler (:class:`_Handler`, :mod:`adapters.jax.launch`) reads XLA's buffers in place
  (zero-copy), zero-fills the outputs and launches on XLA's stream. In-out arrays are aliased
  operand -> result; only then is the call marked as having a side effect, so unused
  outputs of a pure op are dead-code-eliminated.
- Batching (``jax.vmap``) is a ``custom_vmap`` rule on each launch (:mod:`adapters.jax.launch`):
  ``"loop"`` (default) makes one FFI call that launches the unbatched kernel once per batch
  element on offset pointers (correct for every kernel, unbatched operands are not
  copied); ``"sequential"`` uses ``lax.map``; ``"fold"`` (opt-in) folds the batch into the
  first launch dimension (one launch; valid only for row-independent kernels).
- Sharding: batched ("loop") launches, and launches of ``partition="rows"`` ops, are
  ``custom_partitioning`` calls that XLA splits along their first dimension
  (:mod:`adapters.jax.sharding`); inside ``shard_map`` results vary over the mesh axes of
  their operands (``check_vma=True``).
- Forward mode and second order: the kernel op's ``custom_jvp`` tangent is a primitive launching the
  op's generated tangent kernel, transposed to Warp's adjoint; the adjoint's own JVP adds Warp's
  adjoint of the tangent kernel (:mod:`adapters.jax.forward`).
- Gradients: symbolic zeros, so the backward launch computes only the
  gradients asked for (:mod:`adapters.jax.entry`). Inside ``shard_map`` it is called through
  its own ``jax.jit``: an eager ``shard_map`` (not under jit) refuses a ``custom_vjp`` with
  symbolic zeros, but runs a jit. Traced scalars reach the kernel as one-element arrays, so their
  gradient is Warp's adjoint, summed over threads. A hand-written backward op is called
  through this same adapter.

This module is the adapter's front: :func:`call`, :func:`bind`, :func:`on_describe`, the op's
binding :class:`JaxOp` (with the eager fast path, ``JaxOp._eager_call``), :func:`targets` and
:func:`disabled_checks`. The rooms below it import one way, each only from those before it:
``jax/compat.py`` and ``jax/ffi.py`` (JAX internals, XLA's FFI C API), then ``jax/operands.py``,
``jax/sharding.py``, ``jax/launch.py``, ``jax/forward.py``, ``jax/entry.py``, ``jax/targets.py``, then this module. An object
of a room above (the entry of a launch, the binding of an entry or a target) is handed down and
used by its attributes, never imported.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

import jax
from jax.errors import JaxRuntimeError as _JaxRuntimeError

from interop import _cache, _dtypes
from interop._errors import ArgumentError, UnsupportedError
from interop._op import NOT_EAGER

from .._common import unexpected_keywords

# names read through this module but kept in the rooms below are re-exported with ``as``:
# DEFAULT_VMAP_METHOD, and for the tests _jsonable, _unjson, _Handler and _targets
from . import compat as _jax_compat
from . import ffi as _jax_ffi
from .entry import DEFAULT_VMAP_METHOD as DEFAULT_VMAP_METHOD
from .entry import _Entry
from .entry import _jsonable as _jsonable
from .entry import _unjson as _unjson
from .exported import check_exported as check_exported
from .exported import deserialize as deserialize
from .exported import missing_targets as missing_targets
from .ffi import _interrupt
from .launch import _dropped, _target
from .launch import _Handler as _Handler
from .operands import (
    _dims_key,
    _eager_scalar,
    _float_np,
    _is_jax,
    _is_scalar_operand,
    _is_weak_scalar,
    _scalar_operand,
    _static_scalar_key,
    _typed_weak_scalar,
    _vector_operand,
    _x64,
)
from .targets import _register_targets, _Target
from .targets import _targets as _targets

_ArrayImpl: Any = _jax_compat.array_impl_type()  # concrete (not traced) arrays

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
        # an eager call of a Python-function op waits for its results: on a GPU XLA runs the handler
        # after the call returned, and an exception raised in the op would surface only when a result
        # is read, as JAX's runtime error; waiting, the caller gets it at the call, with its own type
        self._wait = self.desc.kind == "function"
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
            if self._wait:
                jax.block_until_ready(outs)
        except Exception as e:
            if _jax_ffi.was_interrupted(e, seen):
                raise KeyboardInterrupt from None  # Ctrl-C during the launch failed the XLA call
            # whichever type JAX reports it as (JaxRuntimeError; ValueError from its C++ fast path,
            # jax-ml/jax#34083): the handler's own exception, found by the token its message carries
            original_exc = _jax_ffi.original_error(e)
            if original_exc is not None and not isinstance(original_exc, KeyboardInterrupt):
                raise original_exc from original_exc.__cause__  # the handler's exception
            raise
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _call(self, args, launch_dims, output_dims, vmap_method, kwargs):
        """One call: the arguments as operands and a cache key (:meth:`_operands`), the entry of
        that static configuration (made once), the eager fast path remembered where it applies
        (:meth:`_remember_fast`), then the entry's jitted call (:meth:`_run`)."""
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
        key_parts, operands, traced = self._operands(args)
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
            and original is args0
        ):
            self._remember_fast(entry, args, original)
        return self._run(entry, operands, traced)

    def _operands(self, args) -> tuple[list, list, bool]:
        """``(key parts, operands, whether any is traced)``: JAX arrays and scalar operands are
        operands keyed by shape and dtype; other scalars are static, keyed by value."""
        desc = self.desc
        key_parts, operands, traced = [], [], False
        for p, x in zip(desc.call_params, args):
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
        return key_parts, operands, traced

    def _remember_fast(self, entry, args, original) -> None:
        """Remember ``entry`` for the eager fast path where every argument is a concrete JAX array or
        a Python number for a scalar operand."""
        params = self.desc.call_params
        if not all(
            type(x) is _ArrayImpl or (_is_scalar_operand(p, x) and type(x0) in (int, float))
            for p, x, x0 in zip(params, args, original)
        ):
            return
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
        _cache.put(self._eager[_x64()], fast_key, (entry, numbers), _cache.FAST_PATHS_PER_OP)

    def _run(self, entry, operands, traced: bool):
        """The entry's call (jitted, or its function while tracing), errors translated: Ctrl-C in a
        handler as KeyboardInterrupt, a handler's exception as itself, forward mode's refusal."""
        desc = self.desc
        seen = _jax_ffi.interrupts()
        try:
            outs = entry.jitted(*operands) if not traced or _jax_compat.manual_axes() else entry.fn(*operands)
            if self._wait and not traced:
                jax.block_until_ready(outs)
        except KeyboardInterrupt:
            raise
        except Exception as e:
            if _jax_ffi.was_interrupted(e, seen):
                # Ctrl-C during the launch failed the XLA call: hand the interrupt to the user
                raise KeyboardInterrupt from None
            original_exc = _jax_ffi.original_error(e)  # whichever type JAX reports it as
            if original_exc is not None:
                if isinstance(original_exc, KeyboardInterrupt):
                    raise
                raise original_exc from original_exc.__cause__  # the handler's exception, not XLA's report
            if isinstance(e, _JaxRuntimeError):
                raise
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
    """The FFI target names of ``ops`` (forward, adjoint, those of a hand-written backward, and those
    of a kernel op's tangent op: forward mode and second order).

    They depend only on each op's description, so they are the same in every process. A process
    that runs a deserialized function taking forward-mode derivatives describes the op and calls
    this (or :meth:`interop.Op.tangent`) first, which registers the tangent op's targets.
    """
    out: list[str] = []
    for op in ops:
        descs = [op.description]
        if op.description.kind == "kernel":
            try:  # forward mode and second order call the tangent op (made now if not yet)
                descs.append(op.tangent().description)
            except UnsupportedError:
                pass
        for desc in descs:
            while desc is not None:
                for direction in ("fwd", "bwd"):
                    name = _target(desc, direction)
                    if name not in out:
                        out.append(name)
                desc = desc.backward
    return out


def disabled_checks(*ops) -> list:
    """``disabled_checks=`` for ``jax.export.export`` of a function calling ``ops``.

    JAX refuses to serialize custom calls it does not know to be stable; these targets are:
    their names come from the op descriptions and each call carries its own configuration,
    so a process that describes the same ops again runs the deserialized function.

    Example: ``jax.export.export(jax.jit(f), disabled_checks=adapters.jax.disabled_checks(op))(x)``
    """
    from jax.export import DisabledSafetyCheck

    return [DisabledSafetyCheck.custom_call(t) for t in targets(*ops)]


_register_described()


def _register_indexed() -> None:
    """``interop.indexed(x, idx)`` views are pytrees (data, then the indices), so they may be the
    arguments of ``jax.jit``, ``jax.vmap`` and ``jax.grad`` functions."""
    from interop._indexed import Indexed

    jax.tree_util.register_pytree_node(
        Indexed, lambda v: ((v.data, v.indices), None), lambda _, c: Indexed(c[0], tuple(c[1]))
    )


_register_indexed()
