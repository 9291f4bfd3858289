"""Forward mode: a Warp kernel's tangent kernel, generated from its Python source.

:func:`tangent_kernel` turns a kernel into an ordinary Warp kernel ``T`` that computes the kernel's
results and, alongside, their tangents (Jacobian-vector products; the body's lowering is
:mod:`interop._tangent.lower`): ``T`` takes the kernel's own
parameters in order, then one tangent per differentiable parameter (arrays and float scalars;
inputs, in-outs and outputs, in kernel order, each named ``<name>__dot`` with the primal's type).
Each local that depends on a tangent gets a twin ``<local>__dot``; expressions are lowered to
temporaries so no expression is evaluated twice; each builtin call takes its rule from
:mod:`interop._tangent.rules`; loads, stores and ``atomic_add``/``atomic_sub`` are mirrored onto the
tangent arrays; ``if``/``for``/``while``/``return`` keep their shape; a ``wp.func`` the kernel calls
is transformed the same way (recursively, cached per function and per set of arguments carrying a
tangent) into a function returning its results followed by their tangents.

Since ``T`` is Warp code, Warp's generated adjoint of ``T`` is the second-order launch: with
cotangents on the tangent outputs, its gradient with respect to the tangent inputs is ``J^T ct``
and with respect to the primal inputs ``sum_k ct_k H_k v`` (``v`` the tangent inputs).

Which values carry a tangent comes from the code itself: a kernel parameter that is a
differentiable float array or scalar does, and so does every local assigned, anywhere, a value
computed from one (a fixed point over the body); integer arithmetic, indices, ``wp.tid()`` and
constants never do. What the generator cannot transform (a builtin without a rule, ``atomic_min``,
tiles, a function with a custom gradient or native code...) raises :class:`UnsupportedError`
naming the op, the builtin and the source line, when forward mode is first used.

:func:`tangent_op` describes ``T`` as an op of its own (its outputs, in-outs and their tangents
returned), which the adapters call through their usual bindings (and differentiate in reverse
mode for the second order).

Reading the source, compiling the generated text and building the kernel and its functions are
:mod:`interop._source`'s, shared with checked mode (:mod:`interop._checked`); each generated line is
marked with the line of the kernel it comes from, so a checked tangent kernel names the user's line.
"""

from __future__ import annotations

import ast
import itertools
import threading
import weakref
from typing import Any

import warp as wp

from .._errors import ArgumentError, UnsupportedError
from .._scalar_ref import build_lock, retry_ast_race
from .._source import build_kernel, compile_function, function_bodies, overload_signature, register_function, set_origin
from .._source import parse_def as _parse_def
from .._warp_compat import is_struct, make_function
from . import rules as R
from .lower import (  # noqa: F401 (_resolve, _is_builtin: tests reach them here)
    SUFFIX,
    _Gen,
    _is_builtin,
    _ns_of,
    _Refusal,
    _resolve,
    _Source,
    _static_value,
    fresh_suffix,
)


class _FunctionJvp:
    """The tangent variant of one ``wp.func`` for one set of arguments carrying a tangent."""

    def __init__(self, name: str, function: Any, arity: int, active_results: tuple[bool, ...]):
        self.name = name
        self.function = function
        self.arity = arity
        self.active_results = active_results


class _Generator:
    """Generates tangent code for one kernel and the functions it calls."""

    def __init__(self, label: str):
        self.label = label
        self.statics: dict[int, Any] = {}  # wp.static(...) call node -> its value, evaluated once

    def static_value(self, node: ast.Call, ns: dict) -> Any:
        """``wp.static(expr)``'s value, evaluated once for every pass over the body (a factory makes
        one function, as when Warp builds the kernel)."""
        if id(node) not in self.statics:
            self.statics[id(node)] = (node, _static_value(node, ns))  # the node kept: its id stays its own
        return self.statics[id(node)][1]

    def function(self, fobj: Any, mask: tuple[bool, ...], node: ast.AST, caller: _Gen) -> _FunctionJvp:
        return _function_jvp(fobj, mask, self.label, caller.src.where(node))

    def map_tangent(self, obj: Any, op_text: str, ns: dict, mask: tuple[bool, ...], node: ast.AST, caller: _Gen):
        """``tile_map(op, ...)``'s tangent: (name, wp.func) of a function returning the scalar tangent of
        ``op`` from its arguments, each followed by its tangent where ``mask`` says (None: no tangent)."""
        return _map_tangent(obj, op_text, ns, mask, self.label, caller.src.where(node))

    def transform(self, fdef: ast.FunctionDef, src: _Source, ns: dict, kind: str, arrays: dict, active: set) -> _Gen:
        """Run the body to a fixed point of the names carrying tangents."""
        for _ in range(50):
            g = _Gen(self, src, ns, kind, arrays, set(active))
            g.body(fdef.body)
            grown = {w for w in g.wants if not w.startswith("__return")} - active
            if not grown:
                return g
            active |= grown
        raise _Refusal("the tangent analysis did not settle", fdef)


def _start_late_parameters(g: _Gen, names: list[str], seed: set[str], types: dict) -> None:
    """A value parameter without a tangent of its own that takes one in the body (``v.x = a[i]`` with
    ``v`` a vector parameter) starts from a zero tangent; a struct parameter cannot (its arrays have no
    tangent arrays): refused."""
    late = [n for n in names if n in g.active and n not in seed and n not in g.arrays]
    for n in late:
        if is_struct(types.get(n)):
            raise _Refusal(
                f"a store of a differentiated value into the struct parameter {n!r} (struct parameters carry no tangent)",
                None,
            )
    g.lines[:0] = [f"    {n}{g.sfx} = {R.zero(n)}" for n in late]


def _annotation_is_array(ann: Any) -> bool:
    return wp.types.is_array(ann)


def _annotation_dtype(ann: Any) -> Any:
    return getattr(ann, "dtype", ann)


def float_like(t: Any) -> bool:
    """A Warp type that may carry a tangent: floats, float vectors/matrices, generic types."""
    if t is Any or t is float or getattr(t, "__name__", "") in ("Any", "Float", "Scalar"):
        return True
    if isinstance(t, type) and wp.types.type_is_float(t):
        return True
    scalar = getattr(t, "_wp_scalar_type_", None)
    if scalar is not None:
        return scalar is Any or wp.types.type_is_float(scalar)
    return False


# ---- wp.func tangents (cached per function and mask) ----------------------------------------------
_fn_cache: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_fn_lock = threading.RLock()


def _function_jvp(fobj: Any, mask: tuple[bool, ...], label: str, where: str) -> _FunctionJvp:
    with _fn_lock:
        per = _fn_cache.get(fobj)
        if per is None:
            per = _fn_cache[fobj] = {}
        hit = per.get(mask)
        if isinstance(hit, _FunctionJvp):
            return hit
        if hit == "building":
            raise _Refusal(f"the recursive function {fobj.key!r}", None)
        per[mask] = "building"
        try:
            fj = _build_function_jvp(fobj, mask, label, where)
        except BaseException:
            per.pop(mask, None)
            raise
        per[mask] = fj
        return fj


def _build_function_jvp(fobj: Any, mask: tuple[bool, ...], label: str, where: str) -> _FunctionJvp:
    if getattr(fobj, "custom_grad_func", None) is not None or getattr(fobj, "custom_replay_func", None) is not None:
        raise _Refusal(
            f"the function {fobj.key!r} (called {where}) has a custom gradient (wp.func_grad/func_replay); "
            "forward mode would differentiate its body, which the custom gradient replaces",
            None,
        )
    if getattr(fobj, "native_snippet", None) is not None or fobj.func is None:
        raise _Refusal(f"the native function {fobj.key!r} (called {where}) has no Python source to transform", None)
    # an overloaded function (one body per argument type) gets a tangent function with the same
    # overloads, each transformed from its own body; Warp picks among them as among the originals
    # named by Warp's own unique name of the function (``native_func``: the key and a number), so two
    # functions of one key (closures made by one factory: make_f(3.0), make_f(2.0)) get two tangents
    unique = (getattr(fobj, "native_func", None) or fobj.key).replace(".", "_")
    digest = "".join("1" if m else "0" for m in mask)
    name = f"_interop_jvp_{unique}_{digest}"
    module = wp.get_module(f"interop_tangent_fn.{unique}")
    function: Any = None
    arity: int | None = None
    active: list[bool] = []
    for variant in function_bodies(fobj):
        text, annotations, ns, v_arity, v_active = _function_variant(variant, mask, name, label)
        if arity is not None and v_arity != arity:
            raise _Refusal(
                f"the function {fobj.key!r} (called {where}) has overloads returning different numbers of values", None
            )
        arity = v_arity
        active = [a or b for a, b in zip(active, v_active)] if active else list(v_active)
        function = register_function(_compile(text, name, ns, annotations), name, module, text, function)
        set_origin(function, _Source(variant, variant.adj))
    return _FunctionJvp(name, function, arity or 0, tuple(active))


def _compile(text: str, name: str, ns: dict, annotations: dict) -> Any:
    return compile_function(text, name, ns, annotations, "tangent")


def _function_variant(fobj: Any, mask: tuple[bool, ...], name: str, label: str) -> tuple[str, dict, dict, int, tuple]:
    """The tangent source of one body of a ``wp.func``: (text, annotations, namespace, arity, active results)."""
    adj = fobj.adj
    src = _Source(fobj, adj)
    fdef = _parse_def(adj)
    names = [a.arg for a in fdef.args.args]
    if len(names) != len(mask):
        raise _Refusal(f"a call of {fobj.key!r} with {len(mask)} arguments ({len(names)} parameters)", None)
    ann = dict(fobj.input_types or {})
    sfx = fresh_suffix(src.text)
    arrays: dict[str, str | None] = {}
    active: set[str] = set()
    params = []
    annotations: dict[str, Any] = {}
    for n, m in zip(names, mask):
        a = ann.get(n, Any)
        params.append(n)
        annotations[n] = a
        if _annotation_is_array(a):
            arrays[n] = n + sfx if m else None
        elif m:
            active.add(n)
        if m:
            params.append(n + sfx)
            annotations[n + sfx] = a
    ns = _ns_of(fobj.func)
    ns.update(R.HELPERS)
    ns[R.W] = wp
    gen = _Generator(label)
    seed = set(active)
    g = gen.transform(fdef, src, ns, "func", arrays, active)
    _start_late_parameters(g, names, seed, ann)
    arity = g.return_arity or 0
    active_results = tuple(f"__return{k}" in g.wants for k in range(arity))
    text = f"def {name}({', '.join(params)}):\n" + "\n".join(g.lines or ["    pass"]) + "\n"
    return text, annotations, ns, arity, active_results


# ---- tile_map's elementwise tangents (cached per operator and mask) --------------------------------
_map_cache: dict = {}
_map_count = itertools.count()


def _map_tangent(obj: Any, op_text: str, ns: dict, mask: tuple[bool, ...], label: str, where: str) -> tuple:
    """The operator as a ``wp.func`` of its own (``def f(a0, a1): return op(a0, a1)``), transformed as
    any ``wp.func``, and a wrapper returning only the result's tangent (what ``tile_map`` maps)."""
    with _fn_lock:
        hit = _map_cache.get((obj, mask))
        if hit is not None:
            return hit
        base = f"_interop_map{next(_map_count)}"
        params = [f"a{k}" for k in range(len(mask))]
        text = f"def {base}({', '.join(params)}):\n    return {op_text}({', '.join(params)})\n"
        module = wp.get_module(f"interop_tangent_map.{base}")
        fn = _compile(text, base, dict(ns), dict.fromkeys(params, Any))
        scalar = retry_ast_race(lambda: make_function(fn, base, module, text))
        fj = _function_jvp(scalar, mask, label, where)
        if fj.arity != 1 or not fj.active_results[0]:
            _map_cache[(obj, mask)] = (None, None)
            return None, None
        args = []
        for p, m in zip(params, mask):
            args += [p, p + SUFFIX] if m else [p]
        name = base + "_dot"
        text = (
            f"def {name}({', '.join(args)}):\n    r, r{SUFFIX} = {fj.name}({', '.join(args)})\n    return r{SUFFIX}\n"
        )
        wrapper = _compile(text, name, {fj.name: fj.function}, dict.fromkeys(args, Any))
        hit = (name, retry_ast_race(lambda: make_function(wrapper, name, module, text)))
        _map_cache[(obj, mask)] = hit
        return hit


# ---- kernels ---------------------------------------------------------------------------------------
class TangentKernel:
    """A generated tangent kernel and its parameter layout."""

    def __init__(self, kernel: Any, tangent_of: dict[str, str], source: str):
        self.kernel = kernel
        self.tangent_of = tangent_of  # primal parameter -> its tangent parameter, in kernel order
        self.source = source


_kernels: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_kernel_lock = threading.Lock()


def tangent_kernel(kernel: Any, differentiable: dict[str, bool], label: str) -> TangentKernel:
    """The tangent kernel of ``kernel`` (cached): ``differentiable`` says which parameters carry a
    tangent (name -> bool, kernel order). Raises UnsupportedError naming what cannot be transformed."""
    key = tuple(sorted(differentiable.items()))
    with build_lock, _kernel_lock:
        per = _kernels.get(kernel)
        if per is None:
            per = _kernels[kernel] = {}
        hit = per.get(key)
        if isinstance(hit, _Refusal):  # refused before: raised again, in the name of the op asking
            raise _refusal_error(hit, kernel, label) from None
        if hit is not None:
            return hit
        try:
            tk = _build_tangent_kernel(kernel, differentiable, label)
        except _Refusal as r:
            per[key] = r
            raise _refusal_error(r, kernel, label) from None
        per[key] = tk
        return tk


def _refusal_error(r: _Refusal, kernel: Any, label: str) -> UnsupportedError:
    src = _Source(kernel, kernel.adj)
    where = src.where(r.node) if r.node is not None else ""
    return UnsupportedError(
        f"op {label!r}: forward-mode differentiation is not available: {r.what}"
        + (f" {where}" if where else "")
        + ". Forward mode (jvp, jacfwd, hessian, grad of grad) needs a tangent of every differentiated "
        "value; describe the op with a hand-written tangent (interop.op(..., jvp=<kernel>)), or use reverse "
        "mode (grad, vjp, jacrev)"
    )


def _build_tangent_kernel(kernel: Any, differentiable: dict[str, bool], label: str) -> TangentKernel:
    adj = kernel.adj
    src = _Source(kernel, adj)
    fdef = _parse_def(adj)
    arg_types = dict(adj.arg_types)
    names = [a.arg for a in fdef.args.args]
    sfx = fresh_suffix(src.text)
    arrays: dict[str, str | None] = {}
    active: set[str] = set()
    tangent_of: dict[str, str] = {}
    for n in names:
        t = arg_types[n]
        d = differentiable.get(n, False)
        if _annotation_is_array(t):
            arrays[n] = n + sfx if d else None
        elif d:
            active.add(n)
        if d:
            tangent_of[n] = n + sfx
    f = kernel.func
    ns = _ns_of(f)
    for n in list(ns):
        if n.endswith(sfx) and n[: -len(sfx)] in names:
            raise _Refusal(f"the global name {n!r} (the tangent of {n[: -len(sfx)]!r} takes that name)", None)
    ns.update(R.HELPERS)
    ns[R.W] = wp
    gen = _Generator(label)
    seed = set(active)
    g = gen.transform(fdef, src, ns, "kernel", arrays, active)
    _start_late_parameters(g, names, seed, arg_types)
    params = names + [tangent_of[n] for n in names if n in tangent_of]
    fname = f"{fdef.name}__tangent"
    text = f"def {fname}({', '.join(params)}):\n" + "\n".join(g.lines or ["    pass"]) + "\n"
    annotations = {n: arg_types[n] for n in names}
    for n, tn in tangent_of.items():
        annotations[tn] = arg_types[n]
    fn = _compile(text, fname, ns, annotations)
    sig = overload_signature(kernel)
    suffix = "".join("1" if differentiable.get(n) else "0" for n in names) + (f"__{sig}" if sig else "")
    k = build_kernel(kernel, fn, text, "tangent", suffix)
    set_origin(k, src)
    return TangentKernel(k, tangent_of, text)


def check_jvp_kernel(jvp: Any, kernel: Any, tangent_of: dict[str, str], label: str) -> None:
    """A hand-written tangent kernel must take the kernel's parameters, then one tangent per
    differentiable parameter, in order, of the same types."""
    if not isinstance(jvp, wp.Kernel):
        raise ArgumentError(f"op {label!r}: jvp must be a wp.kernel, got {type(jvp).__name__}")
    want = list(kernel.adj.arg_types.items())
    want += [(tangent_of[n], t) for n, t in kernel.adj.arg_types.items() if n in tangent_of]
    got = list(jvp.adj.arg_types.items())
    if len(got) != len(want):
        raise ArgumentError(
            f"op {label!r}: jvp kernel {jvp.key!r} must take {len(want)} parameters (the kernel's own, then one "
            f"tangent per differentiable parameter: {[n for n, _ in want]}), got {len(got)}: {[n for n, _ in got]}"
        )
    for (wn, wt), (gn, gt) in zip(want, got):
        if not wp.types.types_equal(wt, gt):
            raise ArgumentError(
                f"op {label!r}: jvp kernel {jvp.key!r}, parameter {gn!r} (in the place of {wn!r}): expected "
                f"{wp.types.type_repr(wt)}, got {wp.types.type_repr(gt)}"
            )


# ---- the tangent op ---------------------------------------------------------------------------------
def tangent_params(desc: Any) -> dict[str, str]:
    """Each differentiable parameter (float arrays and scalars, any role) -> its tangent's default
    name (that of a generated tangent kernel of a kernel without ``__dot`` in its source)."""
    return {p.name: p.name + SUFFIX for p in desc.params if p.differentiable}


# ---- Python-function ops: a tangent tape (interop._tangent.tape) ----------------------------------
def function_tangent(desc: Any, names: dict[str, str]) -> Any:
    """A Python-function op's tangent function: its function run with each ``wp.launch`` replaced by
    its kernel's tangent launch (:mod:`interop._tangent.tape`); ``names``: each differentiable
    parameter's tangent name."""
    from .tape import function_tangent as make

    return make(desc, names, tangent_kernel, float_like)
