"""JAX adapter: an op called with JAX arrays (or tracers) is an XLA FFI call.

How one call becomes XLA work:

- The call's static configuration (argument shapes and dtypes, Python-number scalars,
  ``launch_dims``, ``output_dims``, ``vmap_method``) is frozen into a hashable key. Each
  key gets, once, a :class:`_Entry`: the resolved plan, a ``jax.custom_vjp`` function of
  the dynamic operands (arrays and traced scalars), and its ``jax.jit`` for eager calls.
- The forward and the adjoint are each a :class:`_Launch`: an FFI target registered once
  (for ``cpu`` and ``CUDA``) whose handler reads XLA's buffers in place (zero-copy),
  zero-fills the outputs and launches on XLA's stream. In-out arrays are aliased
  operand -> result; only then is the call marked as having a side effect, so unused
  outputs of a pure op are dead-code-eliminated.
- Batching (``jax.vmap``) is a ``custom_vmap`` rule on each launch:
  ``"loop"`` (default) makes one FFI call that launches the unbatched kernel once per batch
  element on offset pointers (correct for every kernel, unbatched operands are not
  copied); ``"sequential"`` uses ``lax.map``; ``"fold"`` (opt-in) folds the batch into the
  first launch dimension (one launch; valid only for row-independent kernels).
- Gradients: ``custom_vjp`` with symbolic zeros, so the backward launch computes only the
  gradients asked for. Traced scalars reach the kernel as one-element arrays, so their
  gradient is Warp's adjoint, summed over threads. A hand-written backward op is called
  through this same adapter.
"""

from __future__ import annotations

import ctypes
import itertools
import math
import threading
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.custom_batching import custom_vmap
from jax.errors import JaxRuntimeError as _JaxRuntimeError

from interop import _cache, _dtypes
from interop._description import IN_OUT, INPUT, OUTPUT, VMAP_METHODS
from interop._errors import ArgumentError
from interop._launch import external_stream, get_device
from interop._plan import ArraySpec, ScalarSpec

from . import _jax_compat, _jax_ffi

DEFAULT_VMAP_METHOD = "loop"

_ArrayImpl = type(jnp.zeros(()))  # concrete (not traced) arrays

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
        self.op = op
        self.desc = op.description
        self._entries: dict[tuple, _Entry] = {}
        self._eager: dict[tuple, tuple] = {}  # eager signature -> (entry, scalar operand dtypes)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<interop JAX op {self.desc.name}>"

    def __call__(self, *args, launch_dims=None, output_dims=None, vmap_method=None, **kwargs):
        if launch_dims is None and output_dims is None and vmap_method is None and not kwargs:
            # eager calls with concrete arrays and Python numbers: one dict lookup to the jitted call
            fast = self._eager.get(tuple((x.shape, x.dtype) if type(x) is _ArrayImpl else type(x) for x in args))
            if fast is not None:
                entry, scalar_dtypes = fast
                outs = entry.jitted(*[x if dt is None else np.asarray(x, dt) for x, dt in zip(args, scalar_dtypes)])
                return outs[0] if len(outs) == 1 else tuple(outs)
        return self._call(args, launch_dims, output_dims, vmap_method, kwargs)

    def _call(self, args, launch_dims, output_dims, vmap_method, kwargs):
        desc = self.desc
        if kwargs:
            raise TypeError(f"op {desc.label!r}: unexpected keyword argument(s) {sorted(kwargs)} for JAX arrays")
        params = desc.call_params
        if len(args) != len(params):
            raise ArgumentError(
                f"op {desc.label!r} takes {len(params)} argument(s) {[p.name for p in params]} "
                f"(outputs are returned, not passed), got {len(args)}"
            )
        key_parts = []
        operands = []
        traced = False
        original = args
        if not any(map(_jax_compat.is_tracer, args)):
            # Eager call: a Python number for a scalar parameter becomes a 0-d operand of the
            # cached jitted call (as jax.jit does with Python scalars), so a new value does
            # not compile a new call. Under tracing, Python numbers stay static constants.
            args = tuple(_eager_scalar(p, x) for p, x in zip(params, args))
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
                key_parts.append(_static_scalar_key(x))
        key = (
            tuple(key_parts),
            _static_dims(desc, "launch_dims", launch_dims),
            _static_dims(desc, "output_dims", output_dims),
            vmap_method,
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
            and all(type(x) is _ArrayImpl or _is_scalar_operand(p, x) for p, x in zip(params, args))
        ):
            fast_key = tuple((x.shape, x.dtype) if type(x) is _ArrayImpl else type(x0) for x, x0 in zip(args, original))
            fast = (entry, tuple(None if type(x) is _ArrayImpl else x.dtype for x in args))
            _cache.put(self._eager, fast_key, fast, _cache.FAST_PATHS_PER_OP)
        try:
            outs = entry.fn(*operands) if traced else entry.jitted(*operands)
        except _JaxRuntimeError as e:
            original = _jax_ffi.original_error(e)
            if original is None or isinstance(original, KeyboardInterrupt):
                raise
            raise original from original.__cause__  # the handler's exception, not XLA's report of it
        except TypeError as e:
            if _JVP_MARKER in str(e):
                raise TypeError(
                    f"op {desc.label!r}: forward-mode differentiation (jax.jvp, jax.jacfwd, jax.linearize, "
                    "jax.hessian) is not supported: the op has a reverse-mode rule only (Warp's adjoint). "
                    "Use jax.grad, jax.vjp or jax.jacrev."
                ) from None
            raise
        return outs[0] if len(outs) == 1 else tuple(outs)


def _eager_scalar(p, x):
    """``x`` as a 0-d NumPy operand of the parameter's own dtype, where that is exact."""
    if p.is_array or p.generic or p.inner or isinstance(x, bool) or type(x) not in (int, float):
        return x
    dt = _SCALAR_NP.get(p.scalar)
    if dt is None or (type(x) is float and dt.kind != "f"):
        return x  # let the plan report the mismatch
    return np.asarray(x, dt)


def _is_scalar_operand(p, x) -> bool:
    return not p.is_array and type(x) is np.ndarray and x.ndim == 0


def _is_jax(x) -> bool:
    return isinstance(x, (jax.Array, jax.core.Tracer))


def _static_scalar_key(x):
    if isinstance(x, (list, tuple)):
        return ("py", type(x), tuple(_static_scalar_key(v) for v in x))
    if hasattr(x, "_wp_scalar_type_"):  # a Warp vector/matrix value
        return ("py", type(x), tuple(np.asarray(x).ravel().tolist()))
    try:
        hash(x)
    except TypeError:
        raise TypeError(f"scalar argument of type {type(x).__name__} is not hashable") from None
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
    if isinstance(value, jax.Array):
        if value.ndim:
            return tuple(int(v) for v in np.asarray(value))
        return int(value)
    return value


# ---------------------------------------------------------------------------------------
# One static configuration of one op
# ---------------------------------------------------------------------------------------
def _py_spec(desc, p, x) -> ScalarSpec:
    import numbers

    if isinstance(x, bool):
        return ScalarSpec("py", bool)
    if isinstance(x, numbers.Integral):
        return ScalarSpec("py", np.dtype(x.dtype) if isinstance(x, np.generic) else int)
    if isinstance(x, numbers.Real):
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
        self.jop = jop
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
            if _is_jax(x) or _is_scalar_operand(p, x):
                if p.is_array:
                    specs.append(ArraySpec(tuple(x.shape), np.dtype(x.dtype)))
                else:
                    specs.append(ScalarSpec("ref", np.dtype(x.dtype), tuple(x.shape)))
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
                raise TypeError(str(e) + _X64_HINT) from None
            raise
        if not _x64():
            for p, spec in zip(desc.returned_params, plan.out_specs):
                if spec.dtype.itemsize == 8:
                    raise TypeError(
                        f"op {desc.label!r}, output {p.name!r}: the kernel writes {spec.dtype.name}, which JAX "
                        f"would silently make a 32-bit array" + _X64_HINT
                    )
        self.plan = plan
        self.fwd = _forward_launch(self, plan)
        self._bwd: dict[tuple, Any] = {}
        self._folded: dict[int, Any] = {}
        self.fn = self._make_vjp()
        self.jitted = jax.jit(self.fn)

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
        n_in_out = sum(1 for p in desc.returned_params if p.role == IN_OUT)

        @jax.custom_vjp
        def fn(*xs):
            return tuple(fwd_launch(*xs))

        def fn_fwd(*pxs):
            xs = [p.value for p in pxs]
            want = tuple(i for i, p in enumerate(pxs) if p.perturbed)
            self._check_differentiable(want)
            outs = tuple(fwd_launch(*xs))
            # which operands need a gradient is static: carry it in the residuals' tree structure
            return outs, (tuple(xs), outs[n_in_out:], {str(i): None for i in want})

        def fn_bwd(res, cts):
            xs, outs, want = res
            want = tuple(sorted(int(k) for k in want))
            return self._backward(xs, outs, want, cts)

        fn.defvjp(fn_fwd, fn_bwd, symbolic_zeros=True)
        return fn

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
        launch = self._bwd.get(want)
        if launch is None:
            launch = _adjoint_launch(self, plan, want)
            self._bwd[want] = launch
        operands = list(xs) + list(outs) + [c for c in ct_vals if c is not None]
        results = launch(*operands) if launch.results else ()
        for i, r in zip(launch.grad_for, results):
            grads[i] = r
        for i, k in launch.ct_passthrough:
            grads[i] = ct_vals[k]
        return tuple(grads)

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
        return tuple(grads)


_backward_ops: dict[Any, Any] = {}


def _op_for(bdesc):
    from interop._op import Op, _ops

    o = _ops.get(bdesc) or _backward_ops.get(bdesc)
    if o is None:
        o = _backward_ops[bdesc] = Op(bdesc)
    return o


# ---------------------------------------------------------------------------------------
# Launches: one FFI target family each (forward, or adjoint for a set of wanted gradients)
# ---------------------------------------------------------------------------------------
_name_lock = threading.Lock()
_name_counter = itertools.count()


def _unique_target(desc, what: str) -> str:
    with _name_lock:
        n = next(_name_counter)
    return f"interop.{desc.name.replace('::', '.')}.{what}.{n}"


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
    return launch


class _Launch:
    """A forward or adjoint launch of one plan as an FFI call; batched by a ``custom_vmap`` rule."""

    def __init__(self, entry: _Entry, plan, direction: str, operands, results, aliases, side_effect: bool):
        self.entry = entry
        self.plan = plan
        self.direction = direction
        self.operands = operands
        self.results = results
        self.aliases = aliases
        self.side_effect = side_effect
        self.grad_for: list[int] = []
        self.result_for: list[int] = [k for k, b in enumerate(results) if b.zero and b.slot == "adj"]
        self.name = _unique_target(entry.desc, direction)
        self._fns: dict[tuple, Any] = {}
        self._lock = threading.Lock()
        self._folded: dict[int, _Launch] = {}

    def __call__(self, *xs):
        outs = self._fn(())(*xs)
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

    def _build(self, levels: tuple):
        batch = tuple(size for size, _ in reversed(levels))
        target = f"{self.name}.{len(self._fns)}"
        _jax_ffi.register(target, _Handler(self, levels).run)
        out_types = [jax.ShapeDtypeStruct(batch + tuple(b.spec.shape), b.spec.dtype) for b in self.results]
        ffi = jax.ffi.ffi_call(
            target,
            out_types,
            has_side_effect=self.side_effect,
            input_output_aliases=self.aliases or None,
            vmap_method="sequential",  # never used: custom_vmap below batches the call
        )

        @custom_vmap
        def launch(*xs):
            return tuple(ffi(*xs))

        @launch.def_vmap
        def rule(axis_size, in_batched, *xs):
            return self._batch(levels, axis_size, in_batched, xs)

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

    def _fold(self, axis_size, in_batched, xs):
        folded = self._folded.get(axis_size)
        if folded is None:
            plan = self.entry.folded_plan(axis_size)
            folded = self._refold(plan, axis_size)
            self._folded[axis_size] = folded
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

        return _Launch(
            self.entry,
            plan,
            self.direction,
            [fold(b) for b in self.operands],
            [fold(b) for b in self.results],
            self.aliases,
            self.side_effect,
        )


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


# Warp's module loading is not thread-safe, and XLA runs handlers from several threads at
# once (shard_map, pmap): the first launch of each handler on each device is serialized.
_first_run_lock = threading.Lock()


class _Handler:
    """The Python side of one FFI target: XLA buffers -> launch values -> Warp launch."""

    def __init__(self, launch: _Launch, levels: tuple):
        import warp as wp  # noqa: F401  (Warp is initialised by the core on first use)

        self.launch = launch
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
        self.batch = int(math.prod(size for size, _ in levels)) if levels else 1
        if levels:
            self.op_offsets = _offsets(levels, launch.operands, lambda lvl, k: lvl[1][k])
            self.res_offsets = _offsets(levels, launch.results, lambda lvl, k: True)
        else:
            self.op_offsets = [(0,) * len(self.ops)]
            self.res_offsets = [(0,) * len(self.res)]
        self._warm: set = set()
        self._go: dict[str, Any] = {}

    def run(self, frame, platform: str) -> None:
        key = (platform, _jax_ffi.device_ordinal(frame) if platform != "cpu" else 0)
        if key in self._warm:
            self._run(frame, platform)
            return
        with _first_run_lock:
            self._run(frame, platform)
            self._warm.add(key)

    def _run(self, frame, platform: str) -> None:
        ins = _jax_ffi.buffers(frame.args)
        outs = _jax_ffi.buffers(frame.rets)
        if platform == "cpu":
            device = get_device("cpu")
            stream = None
            for k, nbytes in self.zero:
                if nbytes:
                    ctypes.memset(outs[k][0], 0, nbytes * self.batch)
        else:
            device = get_device(f"cuda:{_jax_ffi.device_ordinal(frame)}")
            ptr = _jax_ffi.cuda_stream(frame)
            stream = external_stream(device, ptr)
            for k, nbytes in self.zero:
                if nbytes:
                    _jax_compat.cuda_memset_async(device, outs[k][0], nbytes * self.batch, ptr)
        go = self._go.get(device.alias)
        if go is None:
            # a cached launch record per device, replayed with this call's pointers
            go = self.runner.fast_adjoint(device) if self.adjoint else _as_fwd(self.runner.fast_forward(device))
            self._go[device.alias] = go
        for op_off, res_off in zip(self.op_offsets, self.res_offsets):
            values = list(self.template_values)
            adj = [None] * len(values) if self.adjoint else None
            for (i, slot), (ptr, _), off in zip(self.ops, ins, op_off):
                if slot == "values":
                    values[i] = (ptr + off, None)
                elif slot == "adj":
                    adj[i] = (ptr + off, None)
            for (i, slot), (ptr, _), off in zip(self.res, outs, res_off):
                if slot == "values":
                    values[i] = (ptr + off, None)
                else:
                    adj[i] = (ptr + off, None)
            go(values, adj, stream)
