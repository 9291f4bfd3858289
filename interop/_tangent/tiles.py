"""Forward mode through tiles: the tangent rules of Warp's tile builtins, for the lowering
(:mod:`interop._tangent.lower`, whose ``_Calls`` takes this mixin).

A tile's tangent is a tile of the same shape and type (``t__dot``); a tile local that takes a
tangent anywhere starts from ``tile_zeros`` of its own shape and type. The rules:

- linear builtins carry the tangent tile through the same call: ``tile_load``/``tile_load_indexed``
  (from the tangent array), ``tile_view``, ``tile_transpose``, ``tile_broadcast``, ``tile_reshape``,
  ``tile_squeeze``, ``tile_astype`` (to a float type), ``tile_sum``, ``tile_reduce(wp.add, ...)``,
  the scans ``tile_scan_inclusive``/``tile_scan_exclusive``, ``tile``/``untile``, ``tile_extract``,
  ``tile_full``, ``tile_diag_add``, and the writes ``tile_store``/``tile_store_indexed`` (into the
  tangent array; a zero tile where the value has no tangent), ``tile_atomic_add`` (its tangent into
  the tangent array), ``tile_assign``, ``tile_add_inplace``/``tile_sub_inplace``, ``tile_fft``/``tile_ifft``;
- tile arithmetic (``+ - * /``, unary ``-``) by the product and quotient rules, elementwise;
- ``tile_map(f, ...)`` by the tangent of ``f`` (a builtin or a ``wp.func``) element by element: a
  generated ``wp.func`` returning the scalar tangent, mapped over the tiles and their tangents;
- ``tile_matmul`` is bilinear (``dC = dA B + A dB``; the accumulating form ``tile_matmul(a, b, out)``
  accumulates both terms into ``out``'s tangent), ``tile_axpy`` too;
- ``tile_max``/``tile_min`` (and ``tile_reduce(wp.max/wp.min, ...)``) take the tangent of the element
  ``tile_argmax``/``tile_argmin`` select (one-dimensional tiles);
- constructors without a value (``tile_zeros``, ``tile_ones``, ``tile_arange``, ``tile_empty``,
  ``tile_randf``...) and index results (``tile_argmax``...) carry none.

Any other tile builtin is refused, naming it (among them ``tile_cholesky`` and the triangular and
Cholesky solves: their tangents need the triangle of a tangent tile, which no tile builtin masks), when a value it takes carries a tangent (or, for a
write, when the array it writes carries one); one whose arguments carry none runs as written.
"""

from __future__ import annotations

import ast
from typing import Any

from .._warp_compat import builtin_function
from . import rules as R

# builtins linear in the named parameters: the tangent is the same call on their tangents
LINEAR = {
    "tile_load": ("a",),
    "tile_load_indexed": ("a",),
    "tile_view": ("t",),
    "tile_transpose": ("a",),
    "tile_broadcast": ("a",),
    "tile_reshape": ("t",),
    "tile_squeeze": ("t",),
    "tile_astype": ("t",),
    "tile_sum": ("a",),
    "tile_scan_inclusive": ("a",),
    "tile_scan_exclusive": ("a",),
    "tile": ("x",),
    "untile": ("a",),
    "tile_extract": ("a",),
    "tile_full": ("value",),
    "tile_diag_add": ("a", "d"),
}
# results that carry no tangent whatever the arguments (constructors, indices, counts)
NO_TANGENT = frozenset(
    {
        "tile_zeros",
        "tile_ones",
        "tile_arange",
        "tile_empty",
        "tile_randf",
        "tile_randi",
        "tile_argmax",
        "tile_argmin",
        "tile_query_valid",
        "tile_stack_count",
    }
)
# writes into an array (the first parameter) of the value parameter ``t``
STORES = {"tile_store": "t", "tile_store_indexed": "t"}
ATOMICS = {"tile_atomic_add": "t", "tile_atomic_add_indexed": "t"}
# in place on a tile (the first parameter), linear in the named parameters
IN_PLACE = {
    "tile_fft": ("inout", ()),
    "tile_ifft": ("inout", ()),
    "tile_assign": ("dst", ("src",)),
    "tile_add_inplace": ("a", ("value",)),
    "tile_sub_inplace": ("a", ("value",)),
}
# results that are not tiles (a tile local's zero tangent is a tile; these are values)
NOT_TILES = frozenset({"tile_extract", "untile", "tile_query_valid", "tile_stack_count", "tile_stack_pop"})
_FLOAT_NAMES = frozenset({"float", "float16", "float32", "float64", "half", "double"})


def is_tile_builtin(key: str) -> bool:
    return key.startswith("tile") or key == "untile"


def _param_names(key: str, n: int) -> list[str]:
    """The parameter names of the builtin's first overload that takes ``n`` positional arguments."""
    f = builtin_function(key)
    for o in getattr(f, "overloads", None) or [f]:
        names = list((o.input_types or {}).keys())
        if len(names) >= n:
            return names
    return []


class _TileCall:
    """One tile builtin call's arguments by parameter name, lowered where they carry values."""

    def __init__(self, gen: Any, key: str, fname: str, node: ast.Call, values: tuple[str, ...]):
        self.key, self.fname, self.node = key, fname, node
        names = _param_names(key, len(node.args))
        self.pos = [names[k] if k < len(names) else f"#{k}" for k in range(len(node.args))]
        self.kws = [k.arg or "**" for k in node.keywords]
        self.nodes = dict(zip(self.pos, node.args))
        self.nodes.update((k.arg, k.value) for k in node.keywords if k.arg)
        self.low: dict[str, tuple[str, str | None]] = {}
        for name in self.pos + self.kws:
            if name in values and name in self.nodes:
                self.low[name] = gen.value_arg(self.nodes[name])

    def t(self, name: str) -> str | None:
        return self.low[name][1] if name in self.low else None

    def p(self, name: str) -> str:
        return self.low[name][0] if name in self.low else ast.unparse(self.nodes[name])

    def text(self, subs: dict[str, Any] | None = None, fname: str | None = None) -> str:
        """The call with each lowered argument's primal, or ``subs``' text for a parameter."""
        subs = subs or {}
        out = [subs.get(n, self.p(n)) if n in self.nodes else ast.unparse(a) for n, a in zip(self.pos, self.node.args)]
        out += [f"{n}={subs.get(n, self.p(n))}" for n in self.kws if n in self.nodes]
        return f"{fname or self.fname}({', '.join(out)})"

    def given(self, name: str) -> bool:
        return name in self.nodes


class _Tiles:
    """The tile builtins, for :class:`interop._tangent.lower._Calls` (a mixin: it emits through the
    lowering's ``emit``/``tmp``/``simple``/``refuse``)."""

    # provided by the lowering
    emit: Any
    tmp: Any
    simple: Any
    expr: Any
    refuse: Any
    finish: Any
    sfx: str
    arrays: dict
    active: set
    wants: set
    ns: dict
    owner: Any
    tangent_of_name: Any
    tile_names: set[str]
    resolve: Any  # the object a call's function expression names
    builtin_key: Any  # the key of the builtin it names (None: not a builtin)

    # -- which values are tiles -------------------------------------------------------------------
    def is_tile_expr(self, node: ast.AST) -> bool:
        """Is the value of ``node`` a tile (its zero tangent is then a tile of zeros)?"""
        if isinstance(node, ast.Name):
            return node.id in self.tile_names
        if isinstance(node, ast.BinOp):
            return self.is_tile_expr(node.left) or self.is_tile_expr(node.right)
        if isinstance(node, ast.UnaryOp):
            return self.is_tile_expr(node.operand)
        if isinstance(node, ast.IfExp):
            return self.is_tile_expr(node.body) or self.is_tile_expr(node.orelse)
        if isinstance(node, ast.Call):
            key = self.builtin_key(node.func)
            return key is not None and is_tile_builtin(key) and key not in NOT_TILES
        return False

    def tile_zero(self, p: str) -> str:
        return f"{R.W}.tile_zeros(shape={p}.shape, dtype={p}.dtype)"

    def value_arg(self, node: ast.AST) -> tuple[str, str | None]:
        """An argument: an array (or a view of one) as written, with its tangent array; a value
        lowered to a name."""
        if _root(node) in self.arrays and isinstance(node, (ast.Name, ast.Subscript)):
            return self.expr(node)
        return self.simple(node)

    def carries(self, node: ast.Call) -> bool:
        """Does any name the call reads carry a tangent (a differentiated array, a tile, a value)?"""
        return any(isinstance(n, ast.Name) and self.tangent_of_name(n.id) is not None for n in ast.walk(node))

    def no_rule(self, fname: str, node: ast.AST, why: str = "") -> None:
        self.refuse(f"the tile builtin {fname!r} has no tangent rule{why}", node)

    def tile_product(self, key: str, a: tuple, b: tuple, y: str) -> str | None:
        """``a * b``, ``a / b`` where one is a tile: elementwise product and quotient rules."""
        (pa, ta), (pb, tb) = a, b
        if key == "mul":
            return R._sum(None if ta is None else f"{ta} * {pb}", None if tb is None else f"{pa} * {tb}")
        return R._sum(None if ta is None else f"{ta} / {pb}", None if tb is None else f"-(({y}) * ({tb})) / {pb}")

    # -- expressions --------------------------------------------------------------------------------
    def tile_call(self, key: str, fname: str, node: ast.Call) -> tuple[str, str | None]:
        if key in NO_TANGENT:
            return ast.unparse(node), None
        if key in LINEAR:
            return self.tile_linear(key, fname, node)
        if key == "tile_map":
            return self.tile_map(fname, node)
        if key == "tile_reduce":
            return self.tile_reduce(fname, node)
        if key in ("tile_max", "tile_min"):
            return self.tile_select(key, fname, _TileCall(self, key, fname, node, ("a",)))
        if key == "tile_matmul":
            return self.tile_matmul(fname, node)
        if key in ATOMICS:
            c = _TileCall(self, key, fname, node, ())
            if self.tangent_of_name(_root(c.nodes.get("a"))) is not None:
                self.refuse(
                    f"the value returned by {fname!r} into a differentiated array (an atomic's old values "
                    "depend on thread order)",
                    node,
                )
            return ast.unparse(node), None
        if self.carries(node):
            self.no_rule(fname, node)
        return ast.unparse(node), None

    def tile_linear(self, key: str, fname: str, node: ast.Call) -> tuple[str, str | None]:
        c = _TileCall(self, key, fname, node, LINEAR[key])
        live = [n for n in LINEAR[key] if c.t(n) is not None]
        if not live:
            return c.text(), None
        if (
            key == "tile_astype"
            and ast.unparse(c.nodes.get("dtype", ast.Constant(""))).split(".")[-1] not in _FLOAT_NAMES
        ):
            return c.text(), None  # to an integer type: no tangent
        # the call itself, not a temporary: a view (tile_view...) copied into a local has no adjoint in Warp
        if key == "tile_diag_add" and c.t("d") is None:
            return c.text(), c.t("a")
        subs = {n: c.t(n) or self.tile_zero(c.p(n)) for n in LINEAR[key] if c.given(n)}
        return c.text(), c.text(subs)

    def tile_map(self, fname: str, node: ast.Call) -> tuple[str, str | None]:
        if node.keywords or len(node.args) < 2:
            self.refuse(f"{fname!r} with keyword arguments", node)
        op = node.args[0]
        args = [self.simple(a) for a in node.args[1:]]
        text = f"{fname}({', '.join([ast.unparse(op)] + [p for p, _ in args])})"
        mask = tuple(t is not None for _, t in args)
        if not any(mask):
            return text, None
        obj = self.resolve(op)
        if obj is None and isinstance(op, ast.Call):
            obj = self.owner.static_value(op, self.ns)
        if obj is None:
            self.refuse(f"{fname!r} of {ast.unparse(op)!r} (not a Warp builtin or wp.func)", node)
        y = self.tmp()
        self.emit(f"{y} = {text}")
        name, fn = self.owner.map_tangent(obj, ast.unparse(op), self.ns, mask, node, self)
        if fn is None:
            return y, None
        self.ns[name] = fn
        call = []
        for p, t in args:
            call += [p] if t is None else [p, t]
        return self.finish(y, f"{fname}({', '.join([name] + call)})")

    def tile_reduce(self, fname: str, node: ast.Call) -> tuple[str, str | None]:
        c = _TileCall(self, "tile_reduce", fname, node, ("a",))
        if c.t("a") is None:
            return c.text(), None
        kind = self.builtin_key(c.nodes["op"])
        if kind == "add":
            y = self.tmp()
            self.emit(f"{y} = {c.text()}")
            return self.finish(y, c.text({"a": c.t("a")}))
        if kind in ("max", "min") and not c.given("axis"):
            return self.tile_select(f"tile_{kind}", fname, c)
        self.no_rule(fname, node, f" for the operator {ast.unparse(c.nodes['op'])!r} (wp.add, wp.max, wp.min have)")
        raise AssertionError

    def tile_select(self, key: str, fname: str, c: _TileCall) -> tuple[str, str | None]:
        """max/min of a tile: the tangent of the element arg-max/arg-min selects (Warp's adjoint
        routes the cotangent to that element)."""
        if c.t("a") is None:
            return c.text(), None
        y = self.tmp()
        self.emit(f"{y} = {c.text()}")
        k = self.tmp()
        arg = "tile_argmax" if key == "tile_max" else "tile_argmin"
        self.emit(f"{k} = {R.W}.{arg}({c.p('a')})[0]")
        ta = c.t("a")
        return self.finish(y, f"{R.W}.tile_full(shape=1, value={ta}[{k}], dtype={ta}.dtype)")

    def tile_matmul(self, fname: str, node: ast.Call) -> tuple[str, str | None]:
        c = _TileCall(self, "tile_matmul", fname, node, ("a", "b"))
        if c.given("out"):
            self.refuse(f"{fname!r} with an accumulator, used as a value", node)
        if c.given("alpha") and self.carries_node(c.nodes["alpha"]):
            self.no_rule(fname, node, " for a differentiated alpha")
        ta, tb = c.t("a"), c.t("b")
        if ta is None and tb is None:
            return c.text(), None
        y = self.tmp()
        self.emit(f"{y} = {c.text()}")
        terms = []
        if ta is not None:
            terms.append(c.text({"a": ta}))
        if tb is not None:
            terms.append(c.text({"b": tb}))
        return self.finish(y, " + ".join(terms))

    def carries_node(self, node: ast.AST) -> bool:
        return any(isinstance(n, ast.Name) and self.tangent_of_name(n.id) is not None for n in ast.walk(node))

    # -- statements ---------------------------------------------------------------------------------
    def tile_stmt(self, key: str, fname: str, node: ast.Call, s: ast.stmt) -> None:
        if key in STORES or key in ATOMICS:
            self.tile_write(key, fname, node, s)
        elif key in IN_PLACE:
            self.tile_in_place(key, fname, node)
        elif key == "tile_matmul":
            self.tile_matmul_out(fname, node)
        elif key == "tile_axpy":
            self.tile_axpy(fname, node)
        elif key in ("tile_scatter_add", "tile_scatter_masked", "tile_stack_push", "tile_sort"):
            if self.carries(node):
                self.no_rule(fname, node)
            self.emit(ast.unparse(s))
        else:
            p, _ = self.tile_call(key, fname, node)
            self.emit(p)

    def tile_write(self, key: str, fname: str, node: ast.Call, s: ast.stmt) -> None:
        value = STORES.get(key) or ATOMICS[key]
        c = _TileCall(self, key, fname, node, ("a", value))
        self.emit(c.text())
        ta, tv = c.t("a"), c.t(value)
        if ta is None:
            return
        if key in ATOMICS:
            if tv is not None:
                self.emit(c.text({"a": ta, value: tv}))
            return
        self.emit(c.text({"a": ta, value: tv if tv is not None else self.tile_zero(c.p(value))}))

    def tile_dest(self, c: _TileCall, name: str, live: bool) -> str | None:
        """The tangent of the tile an in-place builtin writes (None: it has none yet; the fixed point
        gives it one when what is written carries a tangent)."""
        dst = c.nodes.get(name)
        if not isinstance(dst, ast.Name):
            if live:
                self.refuse(f"{c.fname!r} into an expression (not a named tile)", c.node)
            return None
        if live:
            self.wants.add(dst.id)
        return self.tangent_of_name(dst.id)

    def tile_in_place(self, key: str, fname: str, node: ast.Call) -> None:
        dst, values = IN_PLACE[key]
        c = _TileCall(self, key, fname, node, values)
        self.emit(c.text())
        live = [n for n in values if c.t(n) is not None]
        td = self.tile_dest(c, dst, bool(live))
        if td is None:
            return
        if key in ("tile_fft", "tile_ifft"):
            self.emit(c.text({dst: td}))
            return
        if key == "tile_assign":
            (v,) = values
            self.emit(c.text({dst: td, v: c.t(v) or self.tile_zero(c.p(v))}))
            return
        if live:  # tile_add_inplace / tile_sub_inplace: linear in the value
            self.emit(c.text({dst: td, values[0]: c.t(values[0])}))

    def tile_matmul_out(self, fname: str, node: ast.Call) -> None:
        """out = alpha a b + beta out: d out = alpha (da b + a db) + beta d out."""
        c = _TileCall(self, "tile_matmul", fname, node, ("a", "b"))
        if not c.given("out"):
            self.emit(c.text())
            return
        for n in ("alpha", "beta"):
            if c.given(n) and self.carries_node(c.nodes[n]):
                self.no_rule(fname, node, f" for a differentiated {n}")
        self.emit(c.text())
        ta, tb = c.t("a"), c.t("b")
        tout = self.tile_dest(c, "out", ta is not None or tb is not None)
        if tout is None:
            return
        one = {"beta": "1.0"} if c.given("beta") else {}
        terms = [{"a": ta}] if ta is not None else []
        terms += [{"b": tb}] if tb is not None else []
        if not terms:
            if c.given("beta"):  # d out = beta d out
                self.emit(f"{tout} = {tout} * {c.p('beta')}")
            return
        for k, sub in enumerate(terms):
            self.emit(c.text({**sub, "out": tout, **(one if k else {})}))

    def tile_axpy(self, fname: str, node: ast.Call) -> None:
        """dest += alpha src: d dest += alpha d src + d alpha src."""
        c = _TileCall(self, "tile_axpy", fname, node, ("alpha", "src"))
        self.emit(c.text())
        tal, ts = c.t("alpha"), c.t("src")
        td = self.tile_dest(c, "dest", tal is not None or ts is not None)
        if td is None:
            return
        if ts is not None:
            self.emit(c.text({"src": ts, "dest": td}))
        if tal is not None:
            self.emit(c.text({"alpha": tal, "dest": td}))


def _root(node: ast.AST | None) -> str:
    while isinstance(node, (ast.Subscript, ast.Attribute)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else ""
