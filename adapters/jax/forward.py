"""JAX adapter: forward mode and second order of a kernel op, as three JAX primitives.

A kernel op's function (:class:`adapters.jax.entry._Entry`) is a ``jax.custom_jvp`` whose rule
computes the outputs and binds ``tan`` for their tangents. ``custom_vjp`` cannot be used in
forward mode, and a ``custom_jvp`` whose tangent is not made of transposable primitives cannot be
used in reverse mode, so the derivatives are primitives with their own rules (``x``: the call's
dynamic operands, ``v``: tangents of some of them, ``ct``: cotangents of the differentiable
results, ``J``: the op's Jacobian):

========  ==============================  ==============================  ================================
name      value                           JVP rule                        transpose rule
========  ==============================  ==============================  ================================
``tan``   ``J(x) v`` (the tangent op)     in v: ``tan``; in x: JAX's jvp   in v: ``adj`` (Warp's adjoint)
                                          of the tangent op (its own
                                          forward mode)
``adj``   ``J(x)^T ct`` (Warp's adjoint)  in ct: ``adj``; in x: ``sec``    in ct: ``tan``
``sec``   ``sum_k ct_k H_k v``            in v, ct: ``sec``, ``tan``'s     in v: ``sec`` (symmetric);
                                          jvp; in x: refused (third        in ct: JAX's jvp of ``tan``
                                          order)
========  ==============================  ==============================  ================================

So ``jax.grad`` is the forward launch and Warp's adjoint, as before (``tan`` is only staged and
transposed); ``jax.jvp``/``jacfwd`` launch the tangent op (:meth:`interop.Op.tangent`, generated from
the kernel on first use); ``jax.hessian`` (``jacfwd(jacrev)``) and ``grad(grad)`` add ``sec``, the
tangent op's own reverse mode (Warp's adjoint of the tangent kernel, with respect to ``x``).

Each primitive's implementation calls the op's launches or the tangent op's JAX binding, so it
is jitted, batched (``jax.vmap`` of the implementation: the launches' own ``custom_vmap`` rules) and
lowered (``mlir.lower_fun``) like any other call of the op. The entry is reached through a hashable
weak reference (:class:`_Ref`) held in the primitives' parameters.
"""

from __future__ import annotations

import weakref
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.interpreters import ad, batching, mlir

from interop._errors import UnsupportedError

from . import compat as _jax_compat
from .launch import _dropped

Primitive = _jax_compat.primitive_class()


class _Ref:
    """A hashable weak reference to an entry (a primitive's parameter)."""

    __slots__ = ("_ref", "label", "__weakref__")

    def __init__(self, entry):
        self._ref = weakref.ref(entry)
        self.label = entry.desc.label

    def __call__(self):
        e = self._ref()
        if e is None:
            raise _dropped(self.label)
        return e

    def __hash__(self) -> int:
        return id(self)

    def __eq__(self, other) -> bool:
        return self is other

    def __repr__(self) -> str:
        return f"<{self.label}>"


def _aval_like(avals, shape, dtype):
    """An abstract value of ``shape``/``dtype`` varying over the mesh axes of the operand that
    varies over the most (inside ``shard_map``); no other sharding is carried over."""
    base = None
    for a in avals:
        if hasattr(a, "shape") and (base is None or len(_vary(a)) > len(_vary(base))):
            base = a
    return _jax_compat.shaped_array(tuple(shape), np.dtype(dtype), base)


def _vary(aval) -> frozenset:
    mat = getattr(aval, "manual_axis_type", None)
    if mat is not None:
        return frozenset(mat.varying)
    return frozenset(getattr(aval, "vma", ()) or ())


_NOT_MAPPED = getattr(batching, "not_mapped", None)  # None on jax >= 0.10


def _zero_of(x) -> Any:
    """A symbolic zero tangent of ``x`` (a value or an abstract value)."""
    aval = x if isinstance(x, jax.core.ShapedArray) else jax.typeof(x)
    return ad.Zero(aval.to_tangent_aval())


def _total(outs, terms) -> list:
    """The sum of a JVP rule's tangent terms (each a list per output), or symbolic zeros."""
    if not terms:
        return [_zero_of(o) for o in outs]
    total = terms[0]
    for t in terms[1:]:
        total = [a + b for a, b in zip(total, t)]
    return total


def _instantiate(t, primal):
    if type(t) is ad.Zero:
        return jnp.zeros(jnp.shape(primal), jnp.result_type(primal))
    return t


# ---------------------------------------------------------------------------------------
# Batched primitives: a ``levels`` parameter (one in_axes tuple per vmap, outermost first)
# ---------------------------------------------------------------------------------------
# A primitive batched by ``jax.vmap`` stays the same primitive, with the vmap's in_axes added to
# its ``levels``: its implementation is ``jax.vmap`` of the unbatched one (the launches' own
# batching rules, "loop"/"sequential"/"fold"), and its JVP and transpose rules are ``jax.vmap`` of
# the unbatched rules. So a derivative taken outside a vmap (``jax.hessian`` = jacfwd of jacrev's
# vmap, ``jax.jvp`` of a vmapped function) still meets these rules, never a launch's batching rule.
def _unbatch_aval(a, d):
    if d is None:
        return a
    return _jax_compat.shaped_array(tuple(a.shape[:d]) + tuple(a.shape[d + 1 :]), a.dtype, a)


def _batched_jvp(base_jvp):
    """The JVP rule of a primitive with batch levels: the base rule, vmapped level by level."""

    def jvp(primals, tangents, **params):
        levels = params["levels"]
        if not levels:
            return base_jvp(list(primals), list(tangents), **params)
        d0 = levels[0]
        inner = dict(params, levels=levels[1:])
        live = tuple(i for i, t in enumerate(tangents) if type(t) is not ad.Zero)

        def f(prims, lts):
            ts = dict(zip(live, lts))
            full = [ts[i] if i in ts else _zero_of(p) for i, p in enumerate(prims)]
            outs, touts = jvp(list(prims), full, **inner)
            return tuple(outs), tuple(_instantiate(t, o) for t, o in zip(touts, outs))

        outs, touts = jax.vmap(f, in_axes=(tuple(d0), tuple(d0[i] for i in live)))(
            tuple(primals), tuple(tangents[i] for i in live)
        )
        return list(outs), list(touts)

    return jvp


def _batched_transpose(base_transpose):
    """The transpose rule of a primitive with batch levels: the base rule, vmapped level by level
    over the defined operands and the live cotangents (an unbatched linear input's cotangent summed
    over the batch)."""

    def transpose(cts, *args, **params):
        levels = params["levels"]
        if not levels:
            return base_transpose(list(cts), *args, **params)
        d0 = levels[0]
        inner = dict(params, levels=levels[1:])
        lin = [ad.is_undefined_primal(a) for a in args]
        lin_avals = [_unbatch_aval(a.aval, d) if u else None for a, d, u in zip(args, d0, lin)]
        defined = [i for i, u in enumerate(lin) if not u]
        live = [k for k, c in enumerate(cts) if type(c) is not ad.Zero]
        zero_avals = {k: _unbatch_aval(c.aval, 0) for k, c in enumerate(cts) if type(c) is ad.Zero}

        def f(dvals, lcts):
            full = [None] * len(args)
            for i, v in zip(defined, dvals):
                full[i] = v
            for i, a in enumerate(lin_avals):
                if a is not None:
                    full[i] = ad.UndefinedPrimal(a)
            cmap = dict(zip(live, lcts))
            fcts = [cmap[k] if k in cmap else ad.Zero(zero_avals[k]) for k in range(len(cts))]
            res = transpose(fcts, *full, **inner)
            out = []
            for i, a in enumerate(lin_avals):
                if a is not None:
                    r = res[i]
                    out.append(jnp.zeros(a.shape, a.dtype) if r is None or type(r) is ad.Zero else r)
            return tuple(out)

        outs = jax.vmap(f, in_axes=(tuple(d0[i] for i in defined), tuple(0 for _ in live)))(
            tuple(args[i] for i in defined), tuple(cts[k] for k in live)
        )
        res: list[Any] = [None] * len(args)
        it = iter(outs)
        for i, u in enumerate(lin):
            if u:
                r = next(it)
                res[i] = jnp.sum(r, axis=0) if d0[i] is None else jnp.moveaxis(r, 0, d0[i])
        return res

    return transpose


def _define(prim, base_impl, base_abstract, base_jvp, base_transpose):
    def impl(*args, **params):
        levels = params["levels"]
        if not levels:
            return base_impl(*args, **params)
        inner = dict(params, levels=levels[1:])
        return list(jax.vmap(lambda *a: tuple(impl(*a, **inner)), in_axes=levels[0])(*args))

    def abstract(*avals, **params):
        sizes = []
        cur = list(avals)
        for dims in params["levels"]:
            sizes.append(next(a.shape[d] for a, d in zip(cur, dims) if d is not None))
            cur = [_unbatch_aval(a, d) for a, d in zip(cur, dims)]
        base = base_abstract(*cur, **params)
        return [_jax_compat.shaped_array(tuple(sizes) + tuple(a.shape), a.dtype, a) for a in base]

    jvp = _batched_jvp(base_jvp)
    transpose = _batched_transpose(base_transpose)

    def batch(args, dims, **params):
        dims = tuple(None if d is _NOT_MAPPED else d for d in dims)
        out = prim.bind(*args, **dict(params, levels=(dims,) + params["levels"]))
        return out, [0] * len(out)

    prim.def_impl(impl)
    prim.def_abstract_eval(abstract)
    ad.primitive_jvps[prim] = jvp
    ad.primitive_transposes[prim] = transpose
    batching.primitive_batchers[prim] = batch
    _jax_compat.register_lowering_with_devices(prim, mlir.lower_fun(impl, multiple_results=True))


# ---------------------------------------------------------------------------------------
# The entry's side: the tangent op's calls
# ---------------------------------------------------------------------------------------
def tangent_outs(entry, xs, vpos: tuple, vs) -> list:
    """The tangents of the op's differentiable results: the tangent op with tangents ``vs`` on
    operands ``vpos`` (zero elsewhere)."""
    from interop._op import _zeros_like, tangent_names

    desc = entry.desc
    plan = entry.plan
    top = entry.jop.op.tangent()
    by_pos = dict(zip(vpos, vs))
    dyn = {p.index: k for k, p in enumerate(entry.dyn)}
    args = []
    tans = []
    for p in desc.call_params:
        k = dyn.get(p.index)
        x = xs[k] if k is not None else entry.static[p.index]
        args.append(x)
        if not p.differentiable:
            continue
        if k is not None:
            tans.append(by_pos[k] if k in by_pos else jnp.zeros(jnp.shape(x), jnp.result_type(x)))
        elif isinstance(x, (tuple, list)):
            tans.append(type(x)(0.0 for _ in x))
        else:
            tans.append(_zeros_like(x))
    tangent_of = tangent_names(entry.jop.op)
    od = {}
    for p in desc.output_params:
        od[p.name] = plan.framework_shape(p)
        if p.name in tangent_of:
            od[tangent_of[p.name]] = plan.framework_shape(p)
    res = top.bound("jax")(
        *args, *tans, launch_dims=plan.launch_dims, output_dims=od or None, vmap_method=entry.vmap_method
    )
    res = res if isinstance(res, tuple) else (res,)
    return list(res[len(desc.returned_params) :])


def second_order(entry, xs, vpos: tuple, vs, cts, opos: tuple) -> list:
    """``sum_k ct_k H_k v`` at operands ``opos``: the tangent op's reverse mode with respect to ``x``."""

    def f(*xo):
        ys = list(xs)
        for k, x in zip(opos, xo):
            ys[k] = x
        return tuple(tangent_outs(entry, ys, vpos, vs))

    _, pull = jax.vjp(f, *[xs[k] for k in opos])
    return list(pull(tuple(cts)))


# ---------------------------------------------------------------------------------------
# tan(x..., outs..., [token], v...; ref, n, kept, vpos, tok) -> tangents of the differentiable
# results (outs: the outputs the adjoint reads, at positions ``kept`` among the returned arrays;
# only the transpose uses them, so an output Warp's adjoint never reads is not kept alive for it;
# token, when ``tok``: a Python-function op's kept forward tape, ``entry.fwd_keep``'s last result,
# which the transpose hands to the adjoint; every other rule drops it)
# ---------------------------------------------------------------------------------------
tan_p = Primitive("interop_tangent")
tan_p.multiple_results = True


def _split_tan(args, n, kept, tok=False):
    """``(xs, outs, vs)``, and the token when ``tok``."""
    nouts = len(kept)
    rest = n + nouts + (1 if tok else 0)
    parts = list(args[:n]), list(args[n : n + nouts]), list(args[rest:])
    return (*parts, args[n + nouts]) if tok else parts


def _tan_impl(*args, ref, n, kept, vpos, levels, tok=False):
    if tok:
        xs, _, vs, token = _split_tan(args, n, kept, tok)
        # forward mode: the kept tape is not needed (no backward reads it)
        ref().release_kept(token)
    else:
        xs, _, vs = _split_tan(args, n, kept)
    return tangent_outs(ref(), xs, vpos, vs)


def _tan_abstract(*avals, ref, n, kept, vpos, levels, tok=False):
    e = ref()
    return [
        _aval_like(avals, spec.shape, spec.dtype)
        for p, spec in zip(e.desc.returned_params, e.plan.out_specs)
        if e.plan.differentiable[p.index]
    ]


def _tan_jvp(primals, tangents, *, ref, n, kept, vpos, levels, tok=False):
    # the primal value with the token (its impl frees the kept tape); the other terms without it
    outs = tan_p.bind(*primals, ref=ref, n=n, kept=kept, vpos=vpos, levels=(), tok=tok)
    if tok:
        primals = list(primals[: n + len(kept)]) + list(primals[n + len(kept) + 1 :])
        tangents = list(tangents[: n + len(kept)]) + list(tangents[n + len(kept) + 1 :])
    xs, _, vs = _split_tan(primals, n, kept)
    dxs, _, dvs = _split_tan(tangents, n, kept)
    terms = []
    live = [k for k, t in zip(vpos, dvs) if type(t) is not ad.Zero]
    if live:
        lin = [t for t in dvs if type(t) is not ad.Zero]
        terms.append(
            tan_p.bind(*xs, *primals[n : n + len(kept)], *lin, ref=ref, n=n, kept=kept, vpos=tuple(live), levels=())
        )
    if any(type(t) is not ad.Zero for t in dxs):
        # forward over forward: the tangent op's own forward mode, x moving
        def f(*ys):
            return tuple(tangent_outs(ref(), list(ys), vpos, vs))

        _, t = jax.jvp(f, tuple(xs), tuple(_instantiate(t, x) for t, x in zip(dxs, xs)))
        terms.append(list(t))
    return outs, _total(outs, terms)


def _tan_transpose(cts, *args, ref, n, kept, vpos, levels, tok=False):
    entry = ref()
    token = None
    if tok:
        xs, outs, _, token = _split_tan(args, n, kept, tok)
    else:
        xs, outs, _ = _split_tan(args, n, kept)
    want = tuple(sorted(vpos))
    entry._check_differentiable(want)
    desc = entry.desc
    ret = desc.returned_params
    it = iter(cts)
    full = []
    for p, spec in zip(ret, entry.plan.out_specs):
        if entry.plan.differentiable[p.index]:
            ct = next(it)
            full.append(jnp.zeros(spec.shape, spec.dtype) if type(ct) is ad.Zero else ct)
        else:
            full.append(None)
    by_pos = dict(zip(kept, outs))
    pure = [by_pos.get(k) for k, p in enumerate(ret) if p.role == "output"]
    grads = entry._backward(tuple(xs), tuple(pure), want, full, token)
    res: list[Any] = [None] * (n + len(kept) + (1 if tok else 0))
    for k in vpos:
        g = grads[k]
        res.append(g if g is not None else _zero_of(xs[k]))
    return res


_define(tan_p, _tan_impl, _tan_abstract, _tan_jvp, _tan_transpose)


# ---------------------------------------------------------------------------------------
# adj(x..., outs..., ct..., [token]; ref, want, n, nouts, levels, tok) -> the adjoint launch's
# gradients (its grad_for); token when ``tok``: the kept forward tape the adjoint runs
# ---------------------------------------------------------------------------------------
adj_p = Primitive("interop_adjoint")
adj_p.multiple_results = True


def _adj_impl(*args, ref, want, n, nouts, levels, tok=False):
    return list(ref().adjoint(want, tok)(*args))


def _adj_abstract(*avals, ref, want, n, nouts, levels, tok=False):
    e = ref()
    launch = e.adjoint(want, tok)
    return [_aval_like(avals, avals[i].shape, avals[i].dtype) for i in launch.grad_for]


def _adj_jvp(primals, tangents, *, ref, want, n, nouts, levels, tok=False):
    # the primal value from the kept tape (the last operand, with ``tok``); the derivatives' terms
    # without it
    outs = adj_p.bind(*primals, ref=ref, want=want, n=n, nouts=nouts, levels=(), tok=tok)
    if tok:
        primals, tangents = primals[:-1], tangents[:-1]
    entry = ref()
    launch = entry.adjoint(want)
    xs = list(primals[:n])
    cts = list(primals[n + nouts :])
    dxs = tangents[:n]
    dcts = tangents[n + nouts :]
    terms = []
    if any(type(t) is not ad.Zero for t in dcts):
        lin = [_instantiate(t, c) for t, c in zip(dcts, cts)]
        terms.append(adj_p.bind(*xs, *primals[n : n + nouts], *lin, ref=ref, want=want, n=n, nouts=nouts, levels=()))
    live = tuple(k for k, t in enumerate(dxs) if type(t) is not ad.Zero)
    if live and launch.grad_for:
        vs = [dxs[k] for k in live]
        terms.append(sec_p.bind(*xs, *vs, *cts, ref=ref, n=n, vpos=live, opos=tuple(launch.grad_for), levels=()))
    return outs, _total(outs, terms)


def _adj_transpose(gs, *args, ref, want, n, nouts, levels, tok=False):
    if tok:  # (the last operand: a kept forward tape's token, not linear)
        return list(_adj_transpose(gs, *args[:-1], ref=ref, want=want, n=n, nouts=nouts, levels=levels)) + [None]
    entry = ref()
    launch = entry.adjoint(want)
    xs = list(args[:n])
    cts = args[n + nouts :]
    if any(ad.is_undefined_primal(x) for x in args[: n + nouts]):
        raise UnsupportedError(
            f"op {entry.desc.label!r}: this composition of derivatives needs the adjoint as a linear function "
            "of the inputs, which it is not"
        )
    live = [(k, g) for k, g in zip(launch.grad_for, gs) if type(g) is not ad.Zero]
    res: list[Any] = [None] * (n + nouts)
    if not live:
        return res + [ad.Zero(c.aval) for c in cts]
    touts = tan_p.bind(
        *xs,
        *args[n : n + nouts],
        *[g for _, g in live],
        ref=ref,
        n=n,
        kept=tuple(k for k, p in enumerate(entry.desc.returned_params) if p.role == "output"),
        vpos=tuple(k for k, _ in live),
        levels=(),
    )
    return res + list(touts)


_define(adj_p, _adj_impl, _adj_abstract, _adj_jvp, _adj_transpose)


# ---------------------------------------------------------------------------------------
# sec(x..., v..., ct...; ref, n, vpos, opos, levels) -> sum_k ct_k H_k v at operands opos
# ---------------------------------------------------------------------------------------
sec_p = Primitive("interop_second_order")
sec_p.multiple_results = True


def _split_sec(args, n, nv):
    return list(args[:n]), list(args[n : n + nv]), list(args[n + nv :])


def _sec_impl(*args, ref, n, vpos, opos, levels):
    xs, vs, cts = _split_sec(args, n, len(vpos))
    return second_order(ref(), xs, vpos, vs, cts, opos)


def _sec_abstract(*avals, ref, n, vpos, opos, levels):
    return [_aval_like(avals, avals[k].shape, avals[k].dtype) for k in opos]


def _sec_jvp(primals, tangents, *, ref, n, vpos, opos, levels):
    outs = sec_p.bind(*primals, ref=ref, n=n, vpos=vpos, opos=opos, levels=())
    xs, vs, cts = _split_sec(primals, n, len(vpos))
    dxs, dvs, dcts = _split_sec(tangents, n, len(vpos))
    terms = []
    if any(type(t) is not ad.Zero for t in dxs):
        # third order: JAX's jvp of the second-order launch (the tangent op's reverse mode), i.e.
        # the tangent op's own tangent op (generated from the generated tangent kernel)
        entry = ref()

        def f(*ys):
            return tuple(second_order(entry, list(ys), vpos, vs, cts, opos))

        _, t = jax.jvp(f, tuple(xs), tuple(_instantiate(t, x) for t, x in zip(dxs, xs)))
        terms.append(list(t))
    if any(type(t) is not ad.Zero for t in dvs):
        lin = [_instantiate(t, v) for t, v in zip(dvs, vs)]
        terms.append(sec_p.bind(*xs, *lin, *cts, ref=ref, n=n, vpos=vpos, opos=opos, levels=()))
    if any(type(t) is not ad.Zero for t in dcts):
        lin = [_instantiate(t, c) for t, c in zip(dcts, cts)]
        terms.append(sec_p.bind(*xs, *vs, *lin, ref=ref, n=n, vpos=vpos, opos=opos, levels=()))
    return outs, _total(outs, terms)


def _sec_transpose(gs, *args, ref, n, vpos, opos, levels):
    nv = len(vpos)
    xs, vs, cts = _split_sec(args, n, nv)
    if any(ad.is_undefined_primal(x) for x in xs):
        raise UnsupportedError(f"op {ref().desc.label!r}: third derivatives are not available")
    live = [(k, g) for k, g in zip(opos, gs) if type(g) is not ad.Zero]
    res: list[Any] = [None] * n
    v_lin = any(ad.is_undefined_primal(v) for v in vs)
    ct_lin = any(ad.is_undefined_primal(c) for c in cts)
    if v_lin and ct_lin:
        raise UnsupportedError(f"op {ref().desc.label!r}: this composition of second derivatives is not available")
    if v_lin:
        # symmetric in v: the same launch with the roles of the in and out positions swapped
        if not live:
            return res + [ad.Zero(v.aval) for v in vs] + [None] * len(cts)
        out = sec_p.bind(
            *xs, *[g for _, g in live], *cts, ref=ref, n=n, vpos=tuple(k for k, _ in live), opos=vpos, levels=()
        )
        return res + list(out) + [None] * len(cts)
    # in ct: d/de J(x + e g) v, the tangent op's own forward mode in direction g
    entry = ref()
    if not live:
        return res + [None] * nv + [ad.Zero(c.aval) for c in cts]
    g_by = dict(live)

    def f(*ys):
        return tuple(tangent_outs(entry, list(ys), vpos, vs))

    dirs = tuple(g_by[k] if k in g_by else jnp.zeros(jnp.shape(x), jnp.result_type(x)) for k, x in enumerate(xs))
    _, t = jax.jvp(f, tuple(xs), dirs)
    return res + [None] * nv + list(t)


_define(sec_p, _sec_impl, _sec_abstract, _sec_jvp, _sec_transpose)


def float0_zeros(shape) -> Any:
    return np.zeros(shape, dtype=jax.dtypes.float0)
