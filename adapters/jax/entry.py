"""JAX adapter: one static configuration of one op (:class:`_Entry`).

Each key of a call's static configuration (:mod:`adapters.jax.operands`) gets, once, an entry:
the resolved plan, its forward launch and an adjoint launch per set of wanted gradients
(:mod:`adapters.jax.launch`), the function of the dynamic operands: a ``jax.custom_jvp`` over the
primitives of :mod:`adapters.jax.forward` (forward mode, reverse mode, second order; a
Python-function op's tangent op runs its function on a tangent tape, ``interop/_tangent/tape.py``;
symbolic zeros, so the backward launch computes only the gradients asked for; a hand-written
backward is called through the adapter), and its ``jax.jit`` for eager calls. The entry's configuration as canonical JSON (:func:`_entry_config`) travels with
each FFI call; :func:`_entry_from_config` rebuilds the entry from it in a process that only
described the op (``jax.export``).

The entry holds its binding (:class:`adapters.jax.JaxOp`, above) weakly and uses it by its
attributes.
"""

from __future__ import annotations

import json
import weakref
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from interop import _dtypes
from interop._description import IN_OUT, OUTPUT, VMAP_METHODS
from interop._errors import ArgumentError, UnsupportedError
from interop._function_calls import KEPT
from interop._plan import ArraySpec, ScalarSpec
from interop._values import check_scalar_value, vector_components

from . import compat as _jax_compat
from . import ffi as _jax_ffi
from . import forward as _forward
from .launch import _adjoint_launch, _dropped, _forward_launch, _Launch
from .operands import _is_jax, _is_scalar_operand, _operand_dtype, _static_dims, _x64

DEFAULT_VMAP_METHOD = "loop"


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


_X64_HINT = (
    "; JAX's 64-bit types are disabled (it makes float32/int32 arrays): enable them with "
    "jax.config.update('jax_enable_x64', True) or `with jax.enable_x64(True):`"
)


def _refuse_symbolic(desc, p, x) -> None:
    """Refuse a symbolic dimension (``jax.export`` with shape polymorphism): the launch, the outputs
    and the kernel's checks are planned from each call's concrete shapes (JAX's error came from inside
    its dimension arithmetic or from a JSON encoder, naming no op)."""
    for d in getattr(x, "shape", ()):
        if not isinstance(d, (int, np.integer)):
            raise UnsupportedError(
                f"op {desc.label!r}, parameter {p.name!r}: a symbolic dimension ({d}) in shape {tuple(x.shape)} is not "
                "supported (jax.export shape polymorphism): the op plans its launch and outputs from concrete "
                "shapes; export with concrete shapes"
            )


class _Entry:
    """Plan, launches and the differentiable function for one static call configuration."""

    def __init__(self, jop, args, launch_dims, output_dims, vmap_method):
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
                _refuse_symbolic(desc, p, x)
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
        self._fwd_keep: Any = None  # the forward keeping its tape (forward_keep), made on first use
        self._bwd: dict[tuple, Any] = {}
        self._bwd_fns: dict[Any, Any] = {}  # adjoint launch -> its custom_vjp (no second order)
        self._folded: dict[int, Any] = {}
        # the op's function is a custom_jvp over the primitives of adapters/jax/forward.py (forward
        # mode, reverse mode, second order); a Python-function op's too (its tangent op runs the
        # function on a tangent tape, interop/_tangent/tape.py)
        self._ref = _forward._Ref(self)
        self.fn = self._make_jvp()
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
    def jop(self):
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
            self._refuse_unfoldable_shapes()
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

    def _refuse_unfoldable_shapes(self) -> None:
        """Raise where folding the batch into the first dimension would misplace rows: an array
        (or output) whose first dimension is not the launch's, so that thread ``i`` of the folded
        launch would read row ``i`` of the folded array, another batch element's row."""
        n = self.plan.launch_dims[0]
        for p in self.desc.params:
            shape = self.plan.warp_shapes[p.index] if p.is_array else None
            if shape and shape[0] != n:
                first = shape[0]
                raise UnsupportedError(
                    f"op {self.desc.label!r}: vmap_method='fold' folds the batch into the first dimension of "
                    f"every array and of the launch, which needs them equal; parameter {p.name!r} has first "
                    f"dimension {first}, the launch {n} (use vmap_method='loop')"
                )

    # -- autodiff -------------------------------------------------------------------
    def _make_jvp(self):
        """The op's function as a ``custom_jvp``: its tangent is the ``tan`` primitive (the tangent
        op, launched only when a tangent is computed), whose transpose is Warp's adjoint."""
        desc = self.desc
        fwd_launch = self.fwd
        n = len(self.dyn)
        unread = self._unread_outputs()
        kept = tuple(k for k, p in enumerate(desc.returned_params) if p.role == OUTPUT and k not in unread)
        diff_in = tuple(self.plan.differentiable[p.index] for p in self.dyn)
        diff_out = tuple(self.plan.differentiable[p.index] for p in desc.returned_params)
        label, ref = desc.label, weakref.ref(self)

        def me() -> _Entry:
            entry = ref()
            if entry is None:
                raise _dropped(label)
            return entry

        @jax.custom_jvp
        def fn(*xs):
            return tuple(fwd_launch(*xs))

        keeps = self._keeps_tape()
        if keeps:
            fn_keep = _keeping(me, lambda p, t: rule(p, t))

        def rule(primals, tangents):
            entry = me()
            vpos = tuple(
                k
                for k, t in enumerate(tangents)
                if diff_in[k] and not isinstance(t, jax.custom_derivatives.SymbolicZero)
            )
            # through fn itself: a derivative of this rule meets fn's rule again (second order); the
            # tape kept only where a tangent (so a backward) reads it
            token = None
            if keeps and vpos:
                *outs, token = fn_keep(*primals)
                outs = tuple(outs)
                _release_with(token)
            else:
                outs = tuple(entry.fn(*primals))
            touts = iter(())
            if vpos:
                touts = iter(
                    _forward.tan_p.bind(
                        *primals,
                        *[outs[k] for k in kept],
                        *([token] if token is not None else []),
                        *[tangents[k] for k in vpos],
                        ref=entry._ref,
                        n=n,
                        kept=kept,
                        vpos=vpos,
                        levels=(),
                        tok=token is not None,
                    )
                )
            result = []
            for o, d in zip(outs, diff_out):
                if not d:
                    result.append(_forward.float0_zeros(jnp.shape(o)))
                elif vpos:
                    result.append(next(touts))
                else:
                    result.append(jnp.zeros_like(o))
            return outs, tuple(result), token

        def fn_jvp(primals, tangents):
            outs, touts, _ = rule(primals, tangents)
            return outs, touts

        fn.defjvp(fn_jvp, symbolic_zeros=True)
        return fn

    def _keeps_tape(self) -> bool:
        """Whether a derivative's forward keeps its ``wp.Tape`` for the backward (no replay of the
        function there): a Python-function op (not checked, without a hand-written backward, not
        partitioned: a token per shard would be a replicated value that differs)."""
        desc = self.desc
        return desc.kind == "function" and desc.backward is None and not desc.checked and desc.partition is None

    def forward_keep(self) -> _Launch:
        """The forward launch keeping its tape (:meth:`_keeps_tape`), with the token as last result."""
        launch = self._fwd_keep
        if launch is None:
            launch = self._fwd_keep = _forward_launch(self, self.plan, keep=True)
        return launch

    def release_kept(self, token) -> None:
        """Free the tape behind ``token`` (a forward-mode derivative: the tangent op runs, no
        backward will read the tape): now when concrete, else by a callback where the compiled
        function runs the tangent."""
        if not _jax_compat.is_tracer(token):
            _release(token)
        else:  # (on CUDA no tape is kept: the token is 0 there, the callback does nothing)
            jax.debug.callback(_release, token)

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
                raise UnsupportedError(
                    f"op {desc.label!r}: the gradient with respect to the traced scalar {p.name!r} is not available: "
                    "the op's hand-written backward returns gradients of array inputs only; pass the scalar as "
                    "a Python number (static), or wrap the computation in jax.lax.stop_gradient"
                )
            if desc.kind == "function":
                raise UnsupportedError(
                    f"op {desc.label!r}: the gradient with respect to the traced scalar {p.name!r} of a "
                    "Python-function op is not supported (wp.Tape does not record scalar adjoints); pass the "
                    "scalar as a 1-element array parameter, or as a Python number (static)"
                )

    def _backward(self, xs, outs, want, cts, token=None):
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
        if any(self.dyn[i].role != IN_OUT and plan.differentiable[self.dyn[i].index] for i in want):
            # at trace time, not as an XLA runtime error
            desc.check_adjoint([self.dyn[i].name for i in want if not self.dyn[i].is_array])
        keep = token is not None
        launch = self.adjoint(want, keep)
        # an output that is not a residual (see _make_vjp): its cotangent stands in
        stand_in = [ct for ct, p in zip(ct_vals, ret) if p.role == OUTPUT]
        outs = [o if o is not None else c for o, c in zip(outs, stand_in)]
        operands = list(xs) + outs + [c for c in ct_vals if c is not None] + ([token] if keep else [])
        if not launch.results:
            results: Any = ()
        elif desc.backward is None:
            # a primitive: differentiable again (second order through the tangent op)
            def bind():
                return _forward.adj_p.bind(
                    *operands, ref=self._ref, want=want, n=len(xs), nouts=len(outs), levels=(), tok=keep
                )

            results = _eager_errors(bind) if desc.kind == "function" else bind()
        else:
            results = self._no_second_order(launch)(*operands)
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

    def adjoint(self, want: tuple, keep: bool = False) -> _Launch:
        """The adjoint launch computing the gradients of operands ``want`` (with ``keep``: from the
        tape a forward kept, its token the last operand)."""
        key = (want, keep)
        launch = self._bwd.get(key)
        if launch is None:
            launch = self._bwd.setdefault(key, _adjoint_launch(self, self.plan, want, keep))
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


def _keeping(me, rule):
    """A Python-function op's forward inside a derivative: the same call, its ``wp.Tape`` kept for the
    backward (``interop._function_calls.KEPT``), whose token is an extra result that reaches the
    adjoint as a residual; a ``custom_jvp`` with the op's own rule (``rule`` returns the outputs,
    their tangents and the token), so derivatives of it meet that rule again."""

    @jax.custom_jvp
    def fn_keep(*xs):
        return tuple(me().forward_keep()(*xs))

    def fn_keep_jvp(primals, tangents):
        outs, touts, token = rule(primals, tangents)
        if token is None:  # (no tangent at this level: no tape kept, the backward replays)
            token = jnp.zeros((), jnp.uint32)
        return (*outs, token), (*touts, _forward.float0_zeros(()))

    fn_keep.defjvp(fn_keep_jvp, symbolic_zeros=True)
    return fn_keep


def _release_with(token) -> None:
    """An eager derivative's token (concrete: the residual its pullback holds): the tape is freed
    when the token is, if no backward took it (a ``jax.vjp`` whose pullback is dropped uncalled,
    results that carry no gradient back). Traced tokens live in XLA's buffers: nothing to hold."""
    if not _jax_compat.is_tracer(token):
        t = int(np.asarray(token))
        if t:
            weakref.finalize(token, KEPT.discard, t)


def _release(token) -> None:
    for t in np.asarray(token).reshape(-1):  # (one token per element under jax.vmap)
        if t:
            KEPT.discard(int(t))


def _eager_errors(run):
    """``run()`` (a Python-function op's backward: a wp.Tape replaying the function, which may raise in
    its handler), with an eager call's error translated as the forward call's is: Ctrl-C in the
    handler raises KeyboardInterrupt, an exception raised in it its original type. Called eagerly
    (concrete results), it waits here: on CUDA JAX reports a failure when the result is read."""
    seen = _jax_ffi.interrupts()
    try:
        results = run()
        leaves = jax.tree_util.tree_leaves(results)
        if not any(isinstance(g, jax.core.Tracer) for g in leaves):
            jax.block_until_ready(leaves)
        return results
    except KeyboardInterrupt:
        raise
    except Exception as e:
        if _jax_ffi.was_interrupted(e, seen):
            raise KeyboardInterrupt from None
        original = _jax_ffi.original_error(e)
        if original is not None and not isinstance(original, KeyboardInterrupt):
            raise original from original.__cause__
        raise


# a hand-written backward's op, when the user did not describe it (its op holds it: JaxOp.backward_op)
_backward_ops: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


def _op_for(bdesc):
    from interop._op import Op, _ops

    o = _ops.get(bdesc) or _backward_ops.get(bdesc)
    if o is None:
        o = _backward_ops.setdefault(bdesc, Op(bdesc))
    return o


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
# The entry's configuration as JSON: the ``config`` attribute of each of its FFI calls
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


def _entry_from_config(jop, config: str) -> _Entry:
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
