"""Checked mode, the rewrite: a kernel's (or ``wp.func``'s) body with every array access checked.

The rules over the parsed body (the reader and emitter are :mod:`interop._source`, shared with the
tangent kernels of forward mode):

- a read ``a[i, j]`` (every axis indexed) becomes ``_interop_ck_load2(a, i, j, err, site)``: the
  element, or zero without reading where an index is out of range;
- a statement that writes an element (``a[i] = v``, ``a[i] += v``, ``a[i].x = v``, ``a[i][k] = v``)
  and a statement ``wp.atomic_*(a, i, ..., v)`` run under ``if _interop_ck_ok1(a, i, err, site):``;
  an atomic whose old value is used becomes ``_interop_ck_atomic_add1(a, i, v, err, site)``;
- a tile's ``offset=`` (``tile_load``, ``tile_store``, ``tile_atomic_add``) passes through
  ``_interop_ck_off<N>``: an offset outside the array becomes the array's extent, where Warp's tile
  access reads zeros and writes nothing (a tile that only overhangs the end is Warp's own padding);
- a ``wp.func`` with array parameters is called through its checked variant, which takes the
  error array last (built by the same rules, once per function).

``site`` numbers the access (:mod:`interop._checked.record` keeps what it names: the array, the
source file, line and text); ``err`` is the kernel's added last parameter.
"""

from __future__ import annotations

import ast
import copy
from typing import Any, Callable

import warp as wp

from .._source import Source, is_builtin, is_user_function, resolve
from . import record
from .checks import AT, ATOMICS, CALLER, ERR

TILE_ACCESSES = {"tile_load": 0, "tile_store": 0, "tile_atomic_add": 0}


def array_ndim(ann: Any) -> int | None:
    """The rank of an array parameter's annotation (a plain ``wp.array``), or None."""
    if isinstance(ann, wp.array) or (isinstance(ann, type) and issubclass(ann, wp.array)):
        return int(getattr(ann, "ndim", 1) or 1)
    cls = type(ann)
    if cls.__name__ == "array" and cls.__module__.startswith("warp"):
        return int(getattr(ann, "ndim", 1) or 1)
    return None


def _indices(node: ast.Subscript) -> list[ast.expr] | None:
    s = node.slice
    elts = list(s.elts) if isinstance(s, ast.Tuple) else [s]
    return None if any(isinstance(e, ast.Slice) for e in elts) else elts


def _name(text: str) -> ast.Name:
    return ast.Name(id=text, ctx=ast.Load())


def _call(fname: str, args: list[ast.expr]) -> ast.Call:
    return ast.Call(func=_name(fname), args=args, keywords=[])


def _i64(indices: list[ast.expr]) -> list[ast.expr]:
    """Indices as the checks take them, ``wp.int64(i)``: concrete parameters (Warp 1.19 resolves a
    generic ``Any`` argument against the module's globals, and a global named like the kernel's
    index, an array ``i``, made the checked kernel fail to build)."""
    return [_call("_interop_ck_wp.int64", [i]) for i in indices]


class Checker(ast.NodeTransformer):
    """Rewrites one body. ``arrays``: array parameter -> rank; ``function``: makes the checked
    variant of a called ``wp.func`` (``(name, wp.func)`` or None where it needs none)."""

    def __init__(self, src: Source, ns: dict, arrays: dict[str, int], owner: str, function: Callable):
        self.src, self.ns, self.arrays, self.owner, self.function = src, ns, arrays, owner, function
        self.used: dict[str, Any] = {}  # checked function variants the body calls: name -> wp.func

    # -- what an access names ----------------------------------------------------------------------
    def _site(self, array: str, node: ast.AST) -> ast.expr:
        """The site number of an access; in a ``wp.func``, plus the kernel's call site (``AT``)."""
        file, line, text = self.src.line(node)
        k = ast.Constant(record.site(array, self.owner, file, line, text))
        if not self.owner:
            return k
        return ast.BinOp(left=_call("_interop_ck_wp.int64", [k]), op=ast.Add(), right=_name(AT))

    def _caller(self, fobj: Any, node: ast.Call) -> ast.expr:
        """What a call of a checked ``wp.func`` passes as ``AT``: in the kernel, this call's site
        (naming which argument each of the function's parameters is); in a function, its own."""
        if self.owner:
            return _name(AT)
        file, line, text = self.src.line(node)
        names = list((getattr(fobj, "input_types", None) or {}).keys())
        args = tuple((n, ast.unparse(a)) for n, a in zip(names, node.args))
        k = record.site("", "", file, line, text, args)
        return _call("_interop_ck_wp.int64", [ast.Constant((k + 1) * CALLER)])

    def _element(self, node: ast.AST) -> tuple[str, list[ast.expr]] | None:
        """``(array, indices)`` where ``node`` is ``a[i, ...]`` of an array parameter, every axis indexed."""
        if not (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name)):
            return None
        nd = self.arrays.get(node.value.id)
        idx = _indices(node)
        if nd is None or idx is None or len(idx) != nd:
            return None
        return node.value.id, idx

    def _guard(self, stmt: ast.stmt, array: str, idx: list[ast.expr], node: ast.AST) -> ast.If:
        test = _call(f"_interop_ck_ok{len(idx)}", [_name(array), *_i64(idx), _name(ERR), self._site(array, node)])
        return ast.copy_location(ast.If(test=test, body=[stmt], orelse=[]), stmt)

    def _components_of(self, node: ast.AST) -> tuple[str, int, int] | None:
        """``(array, its rank, level)`` where ``node`` indexes the components of an array's element
        (``a[i][k]``: level 1; ``a[i][r][c]``: 2), else None."""
        level, base = 0, node
        while isinstance(base, ast.Subscript) and self._element(base) is None:
            level, base = level + 1, base.value
        el = self._element(base) if level and isinstance(base, ast.Subscript) else None
        return None if el is None else (el[0], self.arrays[el[0]], level)

    def _component_indices(self, array: str, nd: int, level: int, elem: ast.expr, slc: ast.expr, fn: str, node):
        """Each component index of ``elem[slc]`` through ``_interop_ck_<fn><nd>``, against ``len(elem)``
        (a vector's length, a matrix's rows) and, for a matrix's ``[r, c]``, ``len(elem[0])``."""
        idx = list(slc.elts) if isinstance(slc, ast.Tuple) else [slc]
        out = []
        for k, i in enumerate(idx):
            of = copy.deepcopy(elem) if k == 0 else ast.Subscript(value=copy.deepcopy(elem), slice=ast.Constant(0))
            n = _call("len", [of])
            axis = ast.Constant(nd + level - 1 + k)
            out.append(
                _call(f"_interop_ck_{fn}{nd}", [_name(array), n, *_i64([i]), axis, _name(ERR), self._site(array, node)])
            )
        return out

    # -- reads ---------------------------------------------------------------------------------------
    def visit_Subscript(self, node: ast.Subscript) -> Any:
        comp = self._components_of(node) if isinstance(node.ctx, ast.Load) else None
        self.generic_visit(node)
        if comp is not None:  # a component of an element: an index past its length reads component 0
            ix = self._component_indices(*comp, node.value, node.slice, "cix", node)
            node.slice = ix[0] if len(ix) == 1 else ast.Tuple(elts=ix, ctx=ast.Load())
            return node
        el = self._element(node)
        if el is None or not isinstance(node.ctx, ast.Load):
            return node
        array, idx = el
        call = _call(f"_interop_ck_load{len(idx)}", [_name(array), *_i64(idx), _name(ERR), self._site(array, node)])
        return ast.copy_location(call, node)

    # -- writes ----------------------------------------------------------------------------------------
    def _store(self, stmt: ast.stmt, target: ast.expr) -> Any:
        """A statement writing ``target``: guarded where the written element is an array's."""
        base = target
        while isinstance(base, ast.Attribute | ast.Subscript) and self._element(base) is None:
            base = base.value
        el = self._element(base)
        if el is None:
            return self.generic_visit(stmt)
        array, _ = el
        # the value and the indices are rewritten (their reads checked); the element written stays
        # a store of Warp's own, under the guard
        stmt.value = self.visit(stmt.value)  # type: ignore[attr-defined]
        self._visit_target(target, base)  # type: ignore[arg-type]
        _, idx = self._element(base)  # type: ignore[misc]
        guard = self._guard(stmt, array, [copy.deepcopy(i) for i in idx], base)
        comps: list[ast.Subscript] = []  # the component subscripts written through, the element's first (a[i][r][c])
        node = target
        while node is not base:
            if isinstance(node, ast.Subscript):
                comps.insert(0, node)
            node = node.value  # type: ignore[attr-defined]
        if comps:  # each component index checked too (the element read through the checked load)
            elem: ast.expr = _call(
                f"_interop_ck_load{len(idx)}",
                [_name(array), *_i64(copy.deepcopy(idx)), _name(ERR), self._site(array, base)],
            )
            tests = [guard.test]
            for level, c in enumerate(comps, 1):
                ix = self._component_indices(array, len(idx), level, elem, copy.deepcopy(c.slice), "cok", c)
                tests += ix
                cix = self._component_indices(array, len(idx), level, elem, copy.deepcopy(c.slice), "cix", c)
                elem = ast.Subscript(value=elem, slice=cix[0] if len(cix) == 1 else ast.Tuple(elts=cix, ctx=ast.Load()))
            guard.test = ast.BoolOp(op=ast.And(), values=tests)
        return guard

    def _visit_target(self, target: ast.expr, base: ast.Subscript) -> None:
        node = target
        while node is not base:  # component indices of a[i][k] = v / a[i].x = v
            if isinstance(node, ast.Subscript):
                node.slice = self.visit(node.slice)
            node = node.value  # type: ignore[attr-defined]
        base.slice = self.visit(base.slice)

    def visit_Assign(self, node: ast.Assign) -> Any:
        if len(node.targets) == 1:
            return self._store(node, node.targets[0])
        return self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> Any:
        return self._store(node, node.target)

    # -- atomics, tiles, function calls ------------------------------------------------------------
    def _atomic(self, node: ast.AST) -> tuple[str, str, list[ast.expr]] | None:
        """``(builtin, array, indices)`` of ``wp.atomic_*(a, i.., v)`` on an array parameter."""
        if not isinstance(node, ast.Call) or node.keywords or len(node.args) < 3:
            return None
        f = resolve(node.func, self.ns)
        if not (is_builtin(f) and f.key in ATOMICS) or not isinstance(node.args[0], ast.Name):
            return None
        array = node.args[0].id
        nd = self.arrays.get(array)
        idx = node.args[1:-1]
        if nd is None or len(idx) != nd:
            return None
        return f.key, array, idx

    def visit_Expr(self, node: ast.Expr) -> Any:
        at = self._atomic(node.value)
        if at is None:
            return self.generic_visit(node)
        _, array, _ = at
        call = node.value
        call.args = [call.args[0], *[self.visit(a) for a in call.args[1:]]]  # type: ignore[attr-defined]
        idx = [copy.deepcopy(i) for i in call.args[1:-1]]  # type: ignore[attr-defined]
        return self._guard(node, array, idx, call)

    def visit_Call(self, node: ast.Call) -> Any:
        at = self._atomic(node)
        if at is not None:  # an atomic whose old value is used: the value, or zero
            name, array, idx = at
            node.args = [node.args[0], *[self.visit(a) for a in node.args[1:]]]
            site = self._site(array, node)
            args = [node.args[0], *_i64(node.args[1:-1]), node.args[-1], _name(ERR), site]
            return ast.copy_location(_call(f"_interop_ck_{name}{len(idx)}", args), node)
        self.generic_visit(node)
        f = resolve(node.func, self.ns)
        if is_builtin(f) and f.key in TILE_ACCESSES:
            return self._tile(node, f.key)
        if is_user_function(f):
            made = self.function(f, node, self.src)
            if made is not None:
                name, fn = made
                self.used[name] = fn
                node.func = _name(name)
                node.args += [_name(ERR), self._caller(f, node)]
        return node

    def _tile(self, node: ast.Call, key: str) -> ast.Call:
        """A tile access's ``offset=`` checked against the array (its first argument)."""
        arr = node.args[0] if node.args else None
        nd = self.arrays.get(arr.id) if isinstance(arr, ast.Name) else None
        kw = next((k for k in node.keywords if k.arg == "offset"), None)
        if arr is None or nd is None or kw is None:
            return node
        offs = kw.value.elts if isinstance(kw.value, ast.Tuple) else [kw.value]
        if len(offs) != nd:
            return node
        site = self._site(arr.id, node)  # type: ignore[attr-defined]
        checked = [
            _call(f"_interop_ck_off{nd}", [_name(arr.id), ast.Constant(k), *_i64([o]), _name(ERR), site])  # type: ignore[attr-defined]
            for k, o in enumerate(offs)
        ]
        kw.value = ast.Tuple(elts=checked, ctx=ast.Load()) if nd > 1 else checked[0]  # type: ignore[arg-type]
        return node


def rewrite(fdef: ast.FunctionDef, checker: Checker, name: str) -> str:
    """The checked function's source: ``fdef`` renamed ``name``, its body rewritten, taking the
    error array last."""
    fdef.body = [checker.visit(s) for s in fdef.body]
    fdef.name = name
    fdef.decorator_list = []
    fdef.returns = None
    for a in fdef.args.args:
        a.annotation = None
    fdef.args.args.append(ast.arg(arg=ERR))
    if checker.owner:
        fdef.args.args.append(ast.arg(arg=AT))
    ast.fix_missing_locations(fdef)
    return ast.unparse(fdef) + "\n"
