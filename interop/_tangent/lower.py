"""Forward mode, the lowering: one function's body (a kernel's or a ``wp.func``'s) as its tangent body.

:class:`_Gen` walks the body's AST once per pass of the fixed point that :mod:`interop._tangent` runs
over the names carrying a tangent, and emits the tangent body as source lines: expressions lowered
to temporaries (each evaluated once) by :class:`~interop._tangent.exprs._Exprs`, each with its
tangent expression (``None``: structurally zero) from the rules of :mod:`interop._tangent.rules`;
calls (:class:`_Calls`: builtins, ``wp.func`` calls through the function's tangent variant, which
:mod:`interop._tangent` makes: ``owner.function``; tile builtins from
:mod:`interop._tangent.tiles`); statements mirrored (assignments, augmented assignments, stores,
atomics, ``if``/``for``/``while``/``return``). What cannot be transformed raises
:class:`_Refusal` with the node, which the caller turns into an ``UnsupportedError`` naming the op
and the source line.
"""

from __future__ import annotations

import ast
import builtins
import copy
from typing import Any

import warp as wp

from .._source import Refusal as _Refusal
from .._source import Source as _Source
from .._source import is_builtin as _is_builtin
from .._source import is_user_function as _is_user_function
from .._source import namespace_of as _ns_of
from .._source import resolve as _resolve
from .._warp_compat import is_struct, struct_name
from . import rules as R
from .exprs import (
    _PY_ALIASES,
    SUFFIX,
    _Exprs,
    _is_dtype_expression,
    _is_int_type,
    _is_simple,
    _is_value_type,
    _op_text,
    _return_arity,
    _root,
    _root_name,
    _static_value,
    _struct_array_fields,
    _unparse,
    fresh_suffix,
)
from .tiles import _Tiles, is_tile_builtin

__all__ = [
    "SUFFIX",
    "_Gen",
    "_Refusal",
    "_Source",
    "_is_builtin",
    "_ns_of",
    "_resolve",
    "_static_value",
    "fresh_suffix",
]


class _Calls(_Tiles, _Exprs):
    """Calls: builtins through their rules, constructors, ``wp.func`` calls through their tangent
    functions (or a ``jvp=``/expansion), atomics."""

    def call(self, node: ast.Call) -> tuple[str, str | None]:
        obj = _resolve(node.func, self.ns)
        if obj is None and isinstance(node.func, ast.Call):
            obj = self.owner.static_value(node.func, self.ns)  # wp.static(make_func())(...)
        fname = _unparse(node.func)
        if obj is type:
            return _unparse(node), None
        if isinstance(node.func, ast.Call) and _resolve(node.func.func, self.ns) is type:
            return self.constructor(fname, node)  # type(x)(...): x's type, a constructor
        if obj is None and _is_dtype_expression(node.func, self.ns):
            return self.constructor(fname, node)  # x.dtype(...), x.dtype.dtype(...), type(x).dtype(...)
        if _is_builtin(obj):
            key = obj.key
            if is_tile_builtin(key):
                return self.tile_call(key, fname, node)
            if key in R.PASSTHROUGH or key in R.QUERIES:
                return _unparse(node), None
            if key in R.ATOMIC_LINEAR or key in R.ATOMIC_REFUSED:
                if self.atomic_carries_tangent(node):
                    self.refuse(
                        f"the value returned by {fname!r} into a differentiated array (an atomic's old value "
                        "depends on thread order)",
                        node,
                    )
                return _unparse(node), None  # a counter, an index: no tangent
            return self.builtin_call(key, fname, node)
        if _is_user_function(obj):
            results = self.user_call(obj, fname, node, nret=1)
            if results is None:
                self.refuse(f"{fname!r} returns no value", node)
            ((p, t),) = results  # type: ignore[misc]
            return p, t
        if _is_int_type(obj):
            return _unparse(node), None
        if _is_value_type(obj):
            return self.constructor(fname, node)
        if isinstance(node.func, ast.Name) and node.func.id in _PY_ALIASES and obj is getattr(builtins, node.func.id):
            return self.builtin_call(_PY_ALIASES[node.func.id], fname, node)
        if obj is len or obj is range:
            return _unparse(node), None
        if is_struct(obj):
            arrays = _struct_array_fields(obj)
            if arrays:
                self.refuse(
                    f"a value of struct {struct_name(obj)} built in the code, whose field(s) {', '.join(arrays)} "
                    "hold arrays (an array field has no tangent; a struct of values is transformed, and a kernel "
                    "reading a struct parameter's fields directly)",
                    node,
                )
            # a struct of values: its tangent is a struct of the same type (the float fields' tangents;
            # the other fields stay zero, never read as tangents)
            return self.constructor(fname, node)
        self.refuse(f"the call {fname!r} (not a Warp builtin, type or wp.func)", node)
        raise AssertionError

    def atomic_carries_tangent(self, node: ast.Call) -> bool:
        """An atomic into an array with a tangent (into one without, its old value has none and what it
        adds is dropped, as a store into that array drops it)."""
        root = _root_name(node.args[0]) if node.args else ""
        return self.arrays.get(root) is not None or root in self.active

    def builtin_call(self, key: str, fname: str, node: ast.Call) -> tuple[str, str | None]:
        args = [self.simple(a) for a in node.args]
        # keyword arguments of builtins are static (shape=, dtype=, length=): passed as written
        kws = [(k.arg, (_unparse(k.value), None)) for k in node.keywords]
        text = ", ".join([p for p, _ in args] + [f"{k}={p}" for k, (p, _) in kws])
        if all(t is None for _, t in args):
            return f"{fname}({text})", None
        y = self.tmp()
        self.emit(f"{y} = {fname}({text})")
        t: str | None
        if key in ("vector", "matrix", "quaternion", "transformation", "spatial_vector") and kws:
            t = f"{fname}({', '.join([t if t is not None else R.zero(p) for p, t in args] + [f'{k}={p}' for k, (p, _) in kws])})"
        else:
            t = self.apply_rule(key, args, y, node)
        return self.finish(y, t)

    def constructor(self, fname: str, node: ast.Call) -> tuple[str, str | None]:
        """A float/vector/matrix/quaternion constructor or cast: linear in its arguments (``T(*v)``
        spreads a vector's components: its tangent is ``T(*dv)``)."""
        stars = [isinstance(a, ast.Starred) for a in node.args]
        args = [self.simple(a.value if isinstance(a, ast.Starred) else a) for a in node.args]
        kws = [(k.arg, (_unparse(k.value), None)) for k in node.keywords]  # static (dtype=, shape=...)
        text = ", ".join(
            [("*" if star else "") + p for (p, _), star in zip(args, stars)] + [f"{k}={p}" for k, (p, _) in kws]
        )
        if all(t is None for _, t in args):
            return f"{fname}({text})", None
        y = self.tmp()
        self.emit(f"{y} = {fname}({text})")
        targs = [("*" if star else "") + (t if t is not None else R.zero(p)) for (p, t), star in zip(args, stars)]
        tkws = [f"{k}={t if t is not None else p}" for k, (p, t) in kws]
        return self.finish(y, f"{fname}({', '.join(targs + tkws)})")

    def user_call(self, obj: Any, fname: str, node: ast.Call, nret: int) -> list[tuple[str, str | None]] | None:
        """Call of a ``wp.func``: its tangent function with each argument's tangent (where it has one).

        Returns the results as (primal, tangent) names, or None for a function without results."""
        args = [self.simple(a) for a in self.positional(obj, fname, node)]
        mask = tuple(t is not None for _, t in args)
        if not any(mask):
            # nothing carries a tangent into it: the function itself (it stores into no tangent array)
            text = f"{fname}({', '.join(p for p, _ in args)})"
            if nret == 0:
                self.emit(text)
                return None
            if nret < 0:  # every value, each in a temporary
                outs = [self.tmp() for _ in range(_return_arity(obj))]
                self.emit(f"{', '.join(outs)} = {text}")
                return [(o, None) for o in outs]
            return [(text, None)]
        fj, text = self.jvp_call(obj, args, mask, node)
        if fj.arity == 0 or nret == 0:
            self.emit(text)
            return None
        if nret == 1 and fj.arity != 1:
            self.refuse(f"{fname!r} returns {fj.arity} values, used as one", node)
        outs = [self.tmp() for _ in range(fj.arity)]
        touts = [o + self.sfx for o in outs]
        self.emit(f"{', '.join(outs + touts)} = {text}")
        return [(o, to if active else None) for o, to, active in zip(outs, touts, fj.active_results)]

    def jvp_call(self, obj: Any, args: list, mask: tuple[bool, ...], node: ast.AST) -> tuple[Any, str]:
        """The tangent function of ``wp.func`` ``obj`` for ``mask`` and the text of its call on the
        lowered ``args`` (each argument followed by its tangent where it has one)."""
        fj = self.owner.function(obj, mask, node, self)
        call_args = []
        for (p, t), m in zip(args, mask):
            call_args.append(p)
            if m:
                call_args.append(t)
        self.ns[fj.name] = fj.function
        return fj, f"{fj.name}({', '.join(call_args)})"

    def expansion_tangent(self, fobj: Any, args: list, node: ast.AST) -> str | None:
        """The tangent of a builtin through ``fobj``, a ``wp.func`` computing what the builtin computes
        (Warp's native code written again): its generated tangent function, the primal left to the builtin."""
        mask = tuple(t is not None for _, t in args)
        if not any(mask):
            return None
        fj, text = self.jvp_call(fobj, args, mask, node)
        if fj.arity != 1:
            self.refuse(
                f"the builtin {fobj.key.replace('_interop_', '')!r} returns {fj.arity} values, used as one", node
            )
        out = self.tmp()
        self.emit(f"{out}, {out}{self.sfx} = {text}")
        return f"{out}{self.sfx}" if fj.active_results[0] else None

    def tuple_results(self, value: ast.AST) -> list[tuple[str, str | None]] | None:
        """Each result of a call returning several values (a ``wp.func``, or a builtin with an
        expansion such as ``quat_to_axis_angle``) as (primal, tangent) temporaries; None for any
        other expression. A builtin's primal values stay the builtin's."""
        if not isinstance(value, ast.Call):
            return None
        obj = _resolve(value.func, self.ns)
        if obj is None and isinstance(value.func, ast.Call):
            obj = self.owner.static_value(value.func, self.ns)
        fname = _unparse(value.func)
        if _is_user_function(obj) and _return_arity(obj) > 1:
            return self.user_call(obj, fname, value, nret=-1)
        if not _is_builtin(obj):
            return None
        key = obj.key
        if key in R.TUPLE_TANGENTS:  # a closed form: f(primal arguments, their tangents) -> the results' tangents
            arity = _return_arity(R.TUPLE_TANGENTS[key])
        elif key in R.EXPANSIONS and _return_arity(R.EXPANSIONS[key]) > 1:
            arity = _return_arity(R.EXPANSIONS[key])
        else:
            return None
        if value.keywords:
            self.refuse(f"{fname!r} with keyword arguments", value)
        args = [self.simple(a) for a in value.args]
        outs = [self.tmp() for _ in range(arity)]
        self.emit(f"{', '.join(outs)} = {fname}({', '.join(p for p, _ in args)})")
        mask = tuple(t is not None for _, t in args)
        if not any(mask):
            return [(o, None) for o in outs]
        if key in R.TUPLE_TANGENTS:
            touts = [o + self.sfx for o in outs]
            helper = R.TUPLE_TANGENTS[key]
            self.ns[helper.key] = helper
            targs = [p for p, _ in args] + [t if t is not None else R.zero(p) for p, t in args]
            self.emit(f"{', '.join(touts)} = {helper.key}({', '.join(targs)})")
            return list(zip(outs, touts))
        fj, text = self.jvp_call(R.EXPANSIONS[obj.key], args, mask, value)
        touts = [o + self.sfx for o in outs]
        self.emit(f"{', '.join([self.tmp() for _ in outs] + touts)} = {text}")
        return [(o, to if active else None) for o, to, active in zip(outs, touts, fj.active_results)]

    def positional(self, obj: Any, fname: str, node: ast.Call) -> list[ast.expr]:
        """A ``wp.func`` call's arguments in parameter order (keywords placed by name): the tangent
        function interleaves each argument with its tangent, so it is called positionally."""
        params = list(obj.input_types or {})
        if not node.keywords and len(node.args) >= len(params):
            return list(node.args)
        by_name = {}
        for k in node.keywords:
            if k.arg is None or k.arg not in params[len(node.args) :] or k.arg in by_name:
                self.refuse(f"the keyword argument {k.arg or '**'!r} to {fname!r}", node)
            by_name[k.arg] = k.value
        ordered = list(node.args)
        for p in params[len(node.args) :]:
            if p not in by_name:
                by_name[p] = self.default_argument(obj, fname, p, node)
            ordered.append(by_name[p])
        return ordered

    def default_argument(self, obj: Any, fname: str, p: str, node: ast.Call) -> ast.expr:
        """The default of ``obj``'s parameter ``p`` written as an argument: a number typed as the
        parameter (``wp.float64(1e-06)``), a bool; other defaults are refused."""
        import inspect

        try:
            default = inspect.signature(obj.func).parameters[p].default
        except (TypeError, ValueError, KeyError):
            default = inspect.Parameter.empty
        t = (obj.input_types or {}).get(p)
        if type(default) in (wp.float16, wp.float32, wp.float64) and t is type(default):
            default = float(default.value)  # F64(1e-3): a Warp scalar of the parameter's type
        if isinstance(default, bool) or (isinstance(default, int) and t in (int, wp.int32)):
            return ast.Constant(default)
        if isinstance(default, (int, float)) and t in (float, wp.float16, wp.float32, wp.float64):
            name = "float32" if t is float else t.__name__
            return ast.parse(f"{R.W}.{name}({float(default)!r})", mode="eval").body
        self.refuse(f"a call of {fname!r} without its argument {p!r} (its default is not a number)", node)
        raise AssertionError


class _Gen(_Calls):
    """Emits the tangent body of one function (kernel or ``wp.func``) as source lines: its
    statements (assignments, augmented assignments, loops, branches, returns, atomics)."""

    def body(self, stmts: list[ast.stmt]) -> None:
        for s in stmts:
            self.stmt(s)

    def block(self, header: str, stmts: list[ast.stmt]) -> None:
        self.emit(header)
        self.depth += 1
        start = len(self.lines)
        self.body(stmts)
        if len(self.lines) == start:
            self.emit("pass")
        self.depth -= 1

    def stmt(self, s: ast.stmt) -> None:
        self.current = int(getattr(s, "lineno", 0) or 0)
        if isinstance(s, ast.Assign):
            if len(s.targets) != 1:
                self.refuse("a chained assignment", s)
            self.assign(s.targets[0], s.value, s)
        elif isinstance(s, ast.AnnAssign):
            if s.value is None:
                self.emit(_unparse(s))
            else:
                self.assign(s.target, s.value, s, annotation=_unparse(s.annotation))
        elif isinstance(s, ast.AugAssign):
            self.augassign(s)
        elif isinstance(s, ast.Expr):
            self.expr_stmt(s)
        elif isinstance(s, ast.If):
            self.emit(f"if {_unparse(s.test)}:")
            self.depth += 1
            start = len(self.lines)
            self.body(s.body)
            if len(self.lines) == start:
                self.emit("pass")
            self.depth -= 1
            if s.orelse:
                self.block("else:", s.orelse)
        elif isinstance(s, ast.For):
            if s.orelse:
                self.refuse("a for loop with an else branch", s)
            it_p, it_t = self.expr(s.iter) if not isinstance(s.iter, ast.Call) else (_unparse(s.iter), None)
            if it_t is not None:
                self.refuse("a loop over a differentiated value", s)
            self.block(f"for {_unparse(s.target)} in {it_p}:", s.body)
        elif isinstance(s, ast.While):
            if s.orelse:
                self.refuse("a while loop with an else branch", s)
            self.block(f"while {_unparse(s.test)}:", s.body)
        elif isinstance(s, ast.Return):
            self.ret(s)
        elif isinstance(s, (ast.Break, ast.Continue, ast.Pass, ast.Assert)):
            self.emit(_unparse(s))  # an assert checks primal values (Warp compiles it in debug mode)
        else:
            self.refuse(f"the statement {type(s).__name__}", s)

    def assign(self, target: ast.AST, value: ast.AST, s: ast.stmt, annotation: str | None = None) -> None:
        if isinstance(target, ast.Tuple):
            self.assign_tuple(target, value, s)
            return
        ann = f": {annotation}" if annotation else ""
        if isinstance(target, ast.Name):
            n = target.id
            if n in self.arrays:
                self.refuse(f"assigning to the array parameter {n!r}", s)
            results = None if annotation else self.tuple_results(value)
            if results is None and isinstance(value, ast.Name) and value.id in self.tuples:
                results = [
                    (f"{value.id}__{k}", self.tangent_of_name(f"{value.id}__{k}")) for k in range(self.tuples[value.id])
                ]
            if results is not None:
                # r = f(x), f returning several values: r[k] becomes the local r__k with its own tangent
                # (the tuple r stays for primal uses: Warp's adjoint through a tuple local is zero)
                self.emit(f"{n} = ({', '.join(p for p, _ in results)},)")
                self.tuples[n] = len(results)
                for k, (p, t) in enumerate(results):
                    self.emit(f"{n}__{k} = {p}")
                    self.tangent_store_name(f"{n}__{k}", t)
                return
            p, t = self.expr(value)
            self.emit(f"{n}{ann} = {p}")
            if self.is_tile_expr(value):
                self.tile_names.add(n)
            if t is not None:
                self.wants.add(n)
            if n in self.active:
                zero = self.tile_zero(n) if n in self.tile_names else R.zero(n)
                self.emit(f"{n}{self.sfx}{ann} = {t if t is not None else zero}")
            return
        if isinstance(target, (ast.Subscript, ast.Attribute)):
            p, t = self.simple(value)
            text = _unparse(target)
            self.emit(f"{text} = {p}")
            tt = self.tangent_target(target, s)
            if tt is not None:
                self.emit(f"{tt} = {t if t is not None else R.zero(text)}")
            elif t is not None and isinstance(_root(target), ast.Name):
                root = _root_name(target)
                if root not in self.arrays:
                    self.wants.add(root)  # a local vector's component: the vector carries a tangent
            return
        self.refuse(f"assigning to {type(target).__name__}", s)

    def tangent_target(self, target: ast.AST, s: ast.stmt) -> str | None:
        """``out__dot[i]`` for ``out[i]``, ``v__dot.x`` for ``v.x``; None where the root has no tangent."""
        root = _root(target)
        if not isinstance(root, ast.Name):
            self.refuse("a store through an expression (not a named array or local)", s)
        assert isinstance(root, ast.Name)
        rt = self.tangent_of_name(root.id)
        if rt is None:
            return None

        twin = copy.deepcopy(target)
        _root(twin).id = rt  # type: ignore[attr-defined]
        return _unparse(twin)

    def assign_tuple(self, target: ast.Tuple, value: ast.AST, s: ast.stmt) -> None:
        names = target.elts
        if not all(isinstance(e, ast.Name) for e in names):
            self.refuse("unpacking into something other than names", s)
        if isinstance(value, ast.Tuple):
            if len(value.elts) != len(names):
                self.refuse("unpacking a tuple of another length", s)
            vals = [self.simple(v) for v in value.elts]
            # bind all values first: ``a, b = b, a``
            bound = [self.bind(p, t) if t is not None or not _is_simple(p) else (p, t) for p, t in vals]
            for n, (p, t) in zip(names, bound):
                self.emit(f"{n.id} = {p}")  # type: ignore[attr-defined]
                self.tangent_store_name(n.id, t)  # type: ignore[attr-defined]
            return
        if isinstance(value, ast.Call):
            obj = _resolve(value.func, self.ns)
            if obj is None and isinstance(value.func, ast.Call):
                obj = self.owner.static_value(value.func, self.ns)  # wp.static(make_func())(...)
            if _is_user_function(obj):
                results = self.user_call(obj, _unparse(value.func), value, nret=len(names))
                if results is not None and len(results) == 1 and results[0][1] is None and len(names) > 1:
                    # no argument carries a tangent: the function itself, unpacked as written
                    self.emit(f"{_unparse(target)} = {results[0][0]}")
                    for n in names:
                        self.tangent_store_name(n.id, None)  # type: ignore[attr-defined]
                    return
                if results is None or len(results) != len(names):
                    self.refuse("unpacking a function's results into another number of names", s)
                for n, (p, t) in zip(names, results):  # type: ignore[arg-type]
                    self.emit(f"{n.id} = {p}")  # type: ignore[attr-defined]
                    self.tangent_store_name(n.id, t)  # type: ignore[attr-defined]
                return
            results = (
                self.tuple_results(value)
                if _is_builtin(obj) and (obj.key in R.EXPANSIONS or obj.key in R.TUPLE_TANGENTS)
                else None
            )
            if results is not None:
                if len(results) != len(names):
                    self.refuse("unpacking a builtin's results into another number of names", s)
                for n, (p, t) in zip(names, results):
                    self.emit(f"{n.id} = {p}")  # type: ignore[attr-defined]
                    self.tangent_store_name(n.id, t)  # type: ignore[attr-defined]
                return
            p, t = self.expr(value) if not (_is_builtin(obj) and obj.key == "tid") else (_unparse(value), None)
            if t is not None:
                self.refuse(
                    f"unpacking the results of the builtin {_unparse(value.func)!r} (it has no tangent rule)", s
                )
            self.emit(f"{_unparse(target)} = {p}")
            return
        self.refuse("this unpacking assignment", s)

    def tangent_store_name(self, n: str, t: str | None) -> None:
        if t is not None:
            self.wants.add(n)
        if n in self.active:
            self.emit(f"{n}{self.sfx} = {t if t is not None else R.zero(n)}")

    def augassign(self, s: ast.AugAssign) -> None:
        target = s.target
        op = type(s.op)
        p, t = self.simple(s.value)
        text = _unparse(target)
        if isinstance(target, ast.Name):
            if target.id in self.arrays:
                self.refuse(f"assigning to the array parameter {target.id!r}", s)
            tt = target.id + self.sfx if target.id in self.active else None
            if t is not None:
                self.wants.add(target.id)
        elif isinstance(target, (ast.Subscript, ast.Attribute)):
            tt = self.tangent_target(target, s)
            if tt is None and t is not None and _root_name(target) not in self.arrays:
                self.wants.add(_root_name(target))
        else:
            self.refuse(f"augmented assignment to {type(target).__name__}", s)
        sym = _op_text(s.op)
        if op in (ast.Add, ast.Sub):
            self.emit(f"{text} {sym}= {p}")
            if tt is not None and t is not None:
                self.emit(f"{tt} {sym}= {t}")
            return
        if tt is None:
            if t is not None and op not in (ast.Mult, ast.Div):
                self.refuse(f"the operator {sym}= on a differentiated value", s)
            self.emit(f"{text} {sym}= {p}")
            return
        if op is ast.Mult:
            parts = [f"({tt}) * ({p})"] + ([f"({text}) * ({t})"] if t is not None else [])
            self.emit(f"{tt} = {' + '.join(parts)}")
        elif op is ast.Div:
            rhs = f"(({tt}) - (({text}) / ({p})) * ({t})) / ({p})" if t is not None else f"({tt}) / ({p})"
            self.emit(f"{tt} = {rhs}")
        else:
            self.refuse(f"the operator {sym}= on a differentiated value", s)
        self.emit(f"{text} {sym}= {p}")

    def expr_stmt(self, s: ast.Expr) -> None:
        v = s.value
        if isinstance(v, ast.Constant):
            return  # a docstring
        if not isinstance(v, ast.Call):
            self.refuse("an expression statement that is not a call", s)
        assert isinstance(v, ast.Call)
        obj = _resolve(v.func, self.ns)
        if obj is None and isinstance(v.func, ast.Call):
            obj = self.owner.static_value(v.func, self.ns)  # wp.static(make_func())(...)
        fname = _unparse(v.func)
        if _is_builtin(obj):
            key = obj.key
            if key in R.ATOMIC_LINEAR:
                self.atomic(key, fname, v, s)  # type: ignore[arg-type]
                return
            if key in R.ATOMIC_REFUSED:
                arr = v.args[0] if v.args else None  # type: ignore[union-attr]
                if isinstance(arr, ast.Name) and self.arrays.get(arr.id) is not None:
                    self.refuse(
                        f"{fname!r} into a differentiated array (the tangent belongs to the thread that wins, "
                        "known only once all threads are done)",
                        s,
                    )
                self.emit(_unparse(s))
                return
            if is_tile_builtin(key):
                self.tile_stmt(key, fname, v, s)  # type: ignore[arg-type]
                return
            if key in R.TUPLE_TANGENTS:
                self.out_args_call(key, fname, v, s)  # type: ignore[arg-type]
                return
            self.emit(_unparse(s))
            return
        if _is_user_function(obj):
            self.user_call(obj, fname, v, nret=0)  # type: ignore[arg-type]
            return
        if obj is print:
            self.emit(_unparse(s))
            return
        self.refuse(f"the call {fname!r}", s)

    def out_args_call(self, key: str, fname: str, v: ast.Call, s: ast.stmt) -> None:
        """``wp.svd3(A, U, sigma, V)``: a builtin of :data:`R.TUPLE_TANGENTS` storing its results in
        the local variables after its arguments; their tangents from the same closed form."""
        helper = R.TUPLE_TANGENTS[key]
        n_in = len(v.args) - _return_arity(helper)
        outs = v.args[n_in:]
        if v.keywords or n_in < 1 or not all(isinstance(o, ast.Name) and o.id not in self.arrays for o in outs):
            self.refuse(f"{fname!r} with keyword arguments or results stored elsewhere than in local variables", s)
        args = [self.simple(a) for a in v.args[:n_in]]
        names = [o.id for o in outs]  # type: ignore[attr-defined]
        self.emit(f"{fname}({', '.join([p for p, _ in args] + names)})")
        if all(t is None for _, t in args):
            for n in names:
                self.tangent_store_name(n, None)
            return
        touts = [self.tmp() for _ in names]
        self.ns[helper.key] = helper
        targs = [p for p, _ in args] + [t if t is not None else R.zero(p) for p, t in args]
        self.emit(f"{', '.join(touts)} = {helper.key}({', '.join(targs)})")
        for n, t in zip(names, touts):
            self.tangent_store_name(n, t)

    def atomic(self, key: str, fname: str, v: ast.Call, s: ast.stmt) -> None:
        if v.keywords or len(v.args) < 3:
            self.refuse(f"{fname!r} with keyword arguments", s)
        arr = v.args[0]
        idx = [_unparse(a) for a in v.args[1:-1]]
        p, t = self.simple(v.args[-1])
        self.emit(f"{fname}({', '.join([_unparse(arr)] + idx + [p])})")
        if isinstance(arr, ast.Name):
            ta = self.tangent_of_name(arr.id)
        else:
            root = _root(arr)
            if not isinstance(root, ast.Name):
                self.refuse(f"{fname!r} into an expression", s)
            assert isinstance(root, ast.Name)
            ta = self.tangent_target(arr, s) if self.tangent_of_name(root.id) else None
        if ta is not None and t is not None:
            self.emit(f"{R.W}.{key}({', '.join([ta] + idx + [t])})")

    def returned_call(self, v: ast.AST) -> list[tuple[str, str | None]] | None:
        """``return f(...)`` of a ``wp.func`` that returns several values: its values, one by one
        (None for anything else)."""
        if not isinstance(v, ast.Call):
            return None
        obj = _resolve(v.func, self.ns)
        if obj is None and isinstance(v.func, ast.Call):
            obj = self.owner.static_value(v.func, self.ns)
        if not _is_user_function(obj) or _return_arity(obj) < 2:
            return None
        return self.user_call(obj, _unparse(v.func), v, nret=-1)

    def ret(self, s: ast.Return) -> None:
        if self.kind == "kernel":
            if s.value is not None:
                self.refuse("a kernel returning a value", s)
            self.emit("return")
            return
        if s.value is None:
            self.return_arity = 0
            self.emit("return")
            return
        vals = self.returned_call(s.value)
        if vals is None:
            elts = s.value.elts if isinstance(s.value, ast.Tuple) else [s.value]
            vals = [self.simple(e) for e in elts]
        if self.return_arity not in (None, len(vals)):
            self.refuse("returns with different numbers of values", s)
        self.return_arity = len(vals)
        self.return_active.append(any(t is not None for _, t in vals))
        for k, (_, t) in enumerate(vals):
            if t is not None:
                self.wants.add(f"__return{k}")
        prims, ts = [], []
        for p, t in vals:
            if t is None and not _is_simple(p):
                p, _ = self.bind(p, None)  # evaluated once, its zero typed like it
            prims.append(p)
            ts.append(t if t is not None else R.zero(p))
        self.emit(f"return {', '.join(prims + ts)}")
