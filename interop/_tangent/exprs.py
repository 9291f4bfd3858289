"""Forward mode, the lowering's expressions (split from :mod:`interop._tangent.lower`, which lowers
calls and statements on them): the state of one tangent body being written (:class:`_Emitter`:
its lines, temporaries, names carrying a tangent, refusals) and :class:`_Exprs`, which lowers an
expression to ``(primal source, tangent source or None)`` (``None``: structurally zero) from the
rules of :mod:`interop._tangent.rules`; and the small AST helpers both use.
"""

from __future__ import annotations

import ast
import textwrap
from typing import Any, NoReturn

import warp as wp

from .._source import ORIGIN
from .._source import Refusal as _Refusal
from .._source import Source as _Source
from .._source import is_builtin as _is_builtin
from .._source import is_user_function as _is_user_function
from .._source import namespace_of as _ns_of
from .._source import resolve as _resolve
from .._warp_compat import is_struct, struct_fields
from . import rules as R

SUFFIX = "__dot"


def _fresh_level(text: str) -> int:
    k = 2
    while f"{SUFFIX}{k}" in text or f"_interop_{k}t" in text:
        k += 1
    return k


def fresh_suffix(text: str) -> str:
    """The tangent suffix for a source: ``__dot``, or ``__dot<k>`` where the source has ``__dot``
    already (a generated tangent kernel)."""
    return SUFFIX if SUFFIX not in text else f"{SUFFIX}{_fresh_level(text)}"


_PY_ALIASES = {"abs": "abs", "min": "min", "max": "max", "round": "round", "pow": "pow"}


def _static_value(node: ast.Call, ns: dict) -> Any:
    """The value of ``wp.static(expr)``: ``expr`` evaluated in the function's globals and closure,
    as Warp evaluates it when it builds the kernel; None where it cannot be (a loop variable...)."""
    f = _resolve(node.func, ns)
    if not (_is_builtin(f) and f.key == "static") or len(node.args) != 1 or node.keywords:
        return None
    try:
        return eval(compile(ast.Expression(node.args[0]), "<wp.static>", "eval"), dict(ns))  # noqa: S307
    except Exception:  # noqa: BLE001 (not evaluable here: refused as an unknown call)
        return None


def _return_arity(fobj: Any, depth: int = 0) -> int:
    """How many values a ``wp.func`` returns (a ``return`` of a tuple, or of a call of a function
    returning several values; 1 for one value, 0 for none)."""
    try:
        fdef = ast.parse(textwrap.dedent(fobj.adj.source)).body[0]
    except Exception:  # noqa: BLE001 (no source: a native function, refused where it is transformed)
        return 1
    arity = 0
    for node in ast.walk(fdef):
        if isinstance(node, ast.Return) and node.value is not None:
            if isinstance(node.value, ast.Tuple):
                return len(node.value.elts)
            if isinstance(node.value, ast.Call) and depth < 8:  # return g(...): g's values
                callee = _resolve(node.value.func, _ns_of(fobj.func))
                if _is_user_function(callee) and callee is not fobj:
                    n = _return_arity(callee, depth + 1)
                    if n > 1:
                        return n
            arity = 1
    return arity


def _struct_array_fields(st: Any, prefix: str = "") -> list[str]:
    """The fields of a ``@wp.struct`` (nested structs' fields dotted) that hold arrays."""
    out = []
    for name, t in struct_fields(st):
        if is_struct(t):
            out += _struct_array_fields(t, f"{prefix}{name}.")
        elif wp.types.is_array(t):
            out.append(prefix + name)
    return out


def _is_dtype_expression(node: ast.AST, ns: dict) -> bool:
    """``x.dtype``, ``x.dtype.dtype``, ``type(x).dtype``: the type of an array's (or a vector's)
    elements, which Warp resolves when it builds the kernel; called, a constructor or cast."""
    if not (isinstance(node, ast.Attribute) and node.attr == "dtype"):
        return False
    base = node.value
    while isinstance(base, ast.Attribute) and base.attr == "dtype":
        base = base.value
    if isinstance(base, ast.Call):
        return _resolve(base.func, ns) is type
    return isinstance(base, ast.Name)


_INT_TYPES = (int, bool)


def _is_int_type(obj: Any) -> bool:
    if obj in _INT_TYPES or obj is wp.bool:
        return True
    return isinstance(obj, type) and wp.types.type_is_int(obj)


def _is_value_type(obj: Any) -> bool:
    """A Warp scalar, vector, matrix, quaternion or transform type, or Python's float."""
    if obj is float:
        return True
    if not isinstance(obj, type):
        return False
    return wp.types.type_is_float(obj) or hasattr(obj, "_wp_scalar_type_")


def _unparse(node: ast.AST) -> str:
    return ast.unparse(node)


class _Emitter:
    """The state of one function's tangent body being written: its source, namespace, which names
    carry a tangent, the lines so far; emission, temporaries, refusals and tangent names.
    :class:`_Exprs` lowers expressions on it, :class:`_Calls` calls, :class:`_Gen` statements."""

    def __init__(self, owner: Any, src: _Source, ns: dict, kind: str, arrays: dict, active: set):
        self.owner = owner  # the _Generator (interop._tangent): owner.function() makes a wp.func's tangent
        # the tangent twin's suffix and the temporaries' prefix: fresh in this source (a tangent
        # kernel's own tangent kernel, for forward over forward, gets "__dot2", "_interop_2t")
        self.sfx = fresh_suffix(src.text)
        self.tp = "_interop_t" if "_interop_t" not in src.text else f"_interop_{_fresh_level(src.text)}t"
        self.src = src
        self.ns = ns
        self.kind = kind  # "kernel" or "func"
        self.arrays = arrays  # array parameter -> its tangent's name or None
        self.active = active  # names (scalars, locals) that carry a tangent
        self.wants: set[str] = set()  # names assigned a tangent in this pass (the fixed point's next set)
        self.lines: list[str] = []
        self.depth = 1
        self.n = 0
        self.return_active: list[bool] = []  # per return statement of a func: its values' tangents
        self.return_arity: int | None = None
        # a name bound to several values (r = f(x)) -> how many: r[k] is the local r__k (see
        # _Gen.assign), since Warp's adjoint through a tuple local drops its gradients
        self.tuples: dict[str, int] = {}
        self.tile_names: set[str] = set()  # locals holding tiles (their zero tangent is a tile)
        self.current = 0  # the line (in src) of the statement being lowered

    # -- emission -------------------------------------------------------------------------------
    def emit(self, line: str) -> None:
        # each line marked with the line of the source it comes from (checked mode names it)
        mark = ORIGIN.format(self.current) if self.current else ""
        self.lines.append("    " * self.depth + line + mark)

    def tmp(self) -> str:
        self.n += 1
        return f"{self.tp}{self.n}"

    def refuse(self, what: str, node: ast.AST | None) -> NoReturn:
        raise _Refusal(what, node)

    def resolve(self, node: ast.AST) -> Any:
        return _resolve(node, self.ns)

    def builtin_key(self, node: ast.AST) -> str | None:
        obj = _resolve(node, self.ns)
        return obj.key if _is_builtin(obj) else None

    # -- names --------------------------------------------------------------------------------------
    def tangent_of_name(self, name: str) -> str | None:
        if name in self.arrays:
            return self.arrays[name]
        if name in self.active:
            return name + self.sfx
        return None


class _Exprs(_Emitter):
    """Expressions: each lowered to ``(primal source, tangent source or None)``."""

    # calls, lowered by the subclass :class:`_Calls` (an expression may hold one)
    call: Any
    expansion_tangent: Any
    is_tile_expr: Any  # (interop._tangent.tiles._Tiles, mixed into _Calls)
    tile_product: Any

    def expr(self, node: ast.AST) -> tuple[str, str | None]:
        if isinstance(node, ast.Constant):
            return _unparse(node), None
        if isinstance(node, ast.Name):
            if node.id in self.tuples and any(
                self.tangent_of_name(f"{node.id}__{k}") is not None for k in range(self.tuples[node.id])
            ):
                self.refuse(
                    f"the tuple {node.id!r} used whole (only its items r[k], k a constant, are transformed)", node
                )
            return node.id, self.tangent_of_name(node.id)
        if isinstance(node, ast.Attribute):
            return self.attribute(node)
        if isinstance(node, ast.Subscript):
            return self.subscript(node)
        if isinstance(node, ast.BinOp):
            return self.binop(node)
        if isinstance(node, ast.UnaryOp):
            return self.unaryop(node)
        if isinstance(node, (ast.Compare, ast.BoolOp)):
            return f"({_unparse(node)})", None
        if isinstance(node, ast.Call):
            return self.call(node)
        if isinstance(node, ast.IfExp):
            return self.ifexp(node)
        if isinstance(node, ast.Tuple):
            self.refuse("a tuple value", node)
        self.refuse(f"the expression {type(node).__name__}", node)
        raise AssertionError

    def simple(self, node: ast.AST) -> tuple[str, str | None]:
        """The expression's value as a name or constant (a temporary when it carries a tangent)."""
        p, t = self.expr(node)
        if t is None or _is_simple(p):
            return p, t
        v = self.tmp()
        self.emit(f"{v} = {p}")
        self.emit(f"{v}{self.sfx} = {t}")
        return v, f"{v}{self.sfx}"

    def bind(self, p: str, t: str | None) -> tuple[str, str | None]:
        """A temporary holding the primal ``p`` and one holding its tangent ``t``."""
        v = self.tmp()
        self.emit(f"{v} = {p}")
        if t is None:
            return v, None
        self.emit(f"{v}{self.sfx} = {t}")
        return v, v + self.sfx

    def attribute(self, node: ast.Attribute) -> tuple[str, str | None]:
        root = _root_name(node)
        if isinstance(node.value, ast.Name) and root in self.arrays:
            return _unparse(node), None  # x.shape, x.ndim...
        if root and root not in self.active and root not in self.arrays:
            return _unparse(node), None  # a constant (wp.pi, a global's field) or an undifferentiated local
        base, tb = self.simple(node.value)
        return f"{base}.{node.attr}", None if tb is None else f"{tb}.{node.attr}"

    def subscript(self, node: ast.Subscript) -> tuple[str, str | None]:
        # a tuple index unparsed element by element: ``ast.unparse`` writes ``(0:1, :)`` for
        # ``y[0:1, :]``'s, which is not Python (slices only parse directly inside brackets)
        sl = node.slice
        if isinstance(node.value, ast.Name) and node.value.id in self.tuples:
            k = sl.value if isinstance(sl, ast.Constant) and isinstance(sl.value, int) else None
            if k is None or not -self.tuples[node.value.id] <= k < self.tuples[node.value.id]:
                self.refuse(
                    f"the tuple {node.value.id!r} indexed by {_unparse(sl)} (a constant index is transformed)", node
                )
            item = f"{node.value.id}__{k % self.tuples[node.value.id]}"
            return item, self.tangent_of_name(item)
        index = ", ".join(map(_unparse, sl.elts)) if isinstance(sl, ast.Tuple) and sl.elts else _unparse(sl)
        if isinstance(node.value, ast.Name):
            base, tb = node.value.id, self.tangent_of_name(node.value.id)
        else:
            base, tb = self.simple(node.value)
        return f"{base}[{index}]", None if tb is None else f"{tb}[{index}]"

    _BINOPS = {
        ast.Add: ("add", "+"),
        ast.Sub: ("sub", "-"),
        ast.Mult: ("mul", "*"),
        ast.Div: ("div", "/"),
        ast.Mod: ("mod", "%"),
        ast.Pow: ("pow", "**"),
        ast.MatMult: ("mul", "@"),
        ast.FloorDiv: ("floordiv", "//"),
    }

    def binop(self, node: ast.BinOp) -> tuple[str, str | None]:
        a = self.simple(node.left)
        b = self.simple(node.right)
        entry = self._BINOPS.get(type(node.op))
        if a[1] is None and b[1] is None:
            return f"({a[0]} {_op_text(node.op)} {b[0]})", None
        if entry is None:
            self.refuse(f"the operator {_op_text(node.op)!r}", node)
        key, sym = entry  # type: ignore[misc]
        y = self.tmp()
        self.emit(f"{y} = {a[0]} {sym} {b[0]}")
        if key == "pow" and isinstance(node.right, ast.Constant) and b[1] is None:
            e: Any = node.right.value
            t: str | None = (
                f"type({a[0]})({float(e)!r}) * {R.W}.pow({a[0]}, type({a[0]})({float(e) - 1.0!r})) * ({a[1]})"
            )
        elif key in ("mul", "div") and (self.is_tile_expr(node.left) or self.is_tile_expr(node.right)):
            t = self.tile_product(key, a, b, y)
        else:
            t = self.apply_rule(key, [a, b], y, node)
        return self.finish(y, t)

    def finish(self, y: str, t: str | None) -> tuple[str, str | None]:
        if t is None:
            return y, None
        self.emit(f"{y}{self.sfx} = {t}")
        return y, y + self.sfx

    def unaryop(self, node: ast.UnaryOp) -> tuple[str, str | None]:
        p, t = self.simple(node.operand)
        if isinstance(node.op, (ast.Not, ast.Invert)):
            return f"({_op_text(node.op)} {p})", None
        sign = "-" if isinstance(node.op, ast.USub) else "+"
        if t is None:
            return f"({sign}{p})", None
        return f"({sign}{p})", f"({sign}{t})"

    def ifexp(self, node: ast.IfExp) -> tuple[str, str | None]:
        # as an if statement, so each branch is evaluated only when taken (a guarded load)
        y = self.tmp()
        test = _unparse(node.test)
        saved = self.lines
        body: list[str] = []
        self.lines = body
        self.depth += 1
        pa, ta = self.expr(node.body)
        self.depth -= 1
        orelse: list[str] = []
        self.lines = orelse
        self.depth += 1
        pb, tb = self.expr(node.orelse)
        self.depth -= 1
        self.lines = saved
        self.emit(f"if {test}:")
        self.lines.extend(body)
        self.emit(f"    {y} = {pa}")
        if ta is not None or tb is not None:
            self.emit(f"    {y}{self.sfx} = {ta if ta is not None else R.zero(y)}")
        self.emit("else:")
        self.lines.extend(orelse)
        self.emit(f"    {y} = {pb}")
        if ta is not None or tb is not None:
            self.emit(f"    {y}{self.sfx} = {tb if tb is not None else R.zero(y)}")
            return y, y + self.sfx
        return y, None

    def apply_rule(self, key: str, args: list, y: str, node: ast.AST) -> str | None:
        rule = R.RULES.get(key)
        if rule is None and key in R.EXPANSIONS:
            return self.expansion_tangent(R.EXPANSIONS[key], args, node)
        if rule is None:
            self.refuse(f"the builtin {key!r} has no tangent rule", node)
        try:
            return rule(args, y)  # type: ignore[misc]
        except R.NoRule as e:
            self.refuse(f"the builtin {key!r} has no tangent rule for {e}", node)
        except (ValueError, TypeError):
            self.refuse(f"the builtin {key!r} with {len(args)} argument(s) has no tangent rule", node)
        raise AssertionError


def _root(node: ast.AST) -> ast.AST:
    while isinstance(node, (ast.Subscript, ast.Attribute)):
        node = node.value
    return node


def _root_name(node: ast.AST) -> str:
    r = _root(node)
    return r.id if isinstance(r, ast.Name) else ""


def _is_simple(p: str) -> bool:
    return p.isidentifier() or _is_number(p)


def _is_number(p: str) -> bool:
    try:
        float(p)
        return True
    except ValueError:
        return False


_OPS = {
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.Div: "/",
    ast.Mod: "%",
    ast.Pow: "**",
    ast.MatMult: "@",
    ast.FloorDiv: "//",
    ast.BitAnd: "&",
    ast.BitOr: "|",
    ast.BitXor: "^",
    ast.LShift: "<<",
    ast.RShift: ">>",
    ast.Not: "not",
    ast.Invert: "~",
    ast.USub: "-",
    ast.UAdd: "+",
}


def _op_text(op: ast.AST) -> str:
    return _OPS.get(type(op), type(op).__name__)
