"""Promises about a kernel checked against its source: ``vmap_method="fold"`` and ``partition="rows"``.

Both split or merge arrays along their first dimension, which is right only for arrays the thread
index of the launch's first dimension walks (``a[i]``, ``a[i, j]``, ``wp.atomic_add(a, i, ...)``
with ``i`` from ``wp.tid()``). What the kernel does with each array parameter is read once from its
source (:func:`accesses`):

- ``fold`` (a ``vmap`` batch folded into the first dimension of every array and of the launch) needs
  every array indexed that way: an array read at another row (``a[j]``, ``a[i + 1]``) or an array's
  shape (``a.shape[0]``: a batch element would see the folded length) is refused, naming the line
  (:func:`fold_refusal`); what a function the array is handed to does with it (a ``wp.func``,
  ``wp.tile_load``) is not read, and stays the caller's promise.
- ``partition="rows"`` shards the arrays the first thread index walks and replicates those it never
  indexes with it along their first dimension (a per-feature ``gamma[f]``), whatever their lengths
  (:func:`row_arrays`); an array read both ways, or handed to a function, or whose shape is read, leaves
  the call unpartitioned (run whole: slower, never wrong).
"""

from __future__ import annotations

import ast
import textwrap
from dataclasses import dataclass, field
from typing import Any

from ._extent import ATOMICS as _ATOMICS


@dataclass
class Access:
    """What a kernel does with one array parameter."""

    by_thread: list[ast.AST] = field(default_factory=list)  # first index is the first thread index
    other: list[ast.AST] = field(default_factory=list)  # first index is something else
    shape: list[ast.AST] = field(default_factory=list)  # reads ``a.shape``
    escapes: list[ast.AST] = field(default_factory=list)  # handed to a call, bound to another name


@dataclass
class KernelAccesses:
    arrays: dict[str, Access]
    lines: list[str]
    file: str
    first: int

    def where(self, node: ast.AST) -> str:
        k = int(getattr(node, "lineno", 1))
        text = self.lines[k - 1].strip() if 0 < k <= len(self.lines) else ""
        return f"{self.file}:{self.first + k - 1}: `{text}`"


def accesses(fn: Any, arrays: list[str]) -> KernelAccesses | None:
    """Each array parameter's accesses in kernel ``fn``'s body; None where there is no source."""
    adj: Any = getattr(fn, "adj", None)
    try:
        text = textwrap.dedent(adj.source)
        fdef = ast.parse(text).body[0]
    except Exception:  # noqa: BLE001 (no source to read: nothing is proved)
        return None
    if not isinstance(fdef, ast.FunctionDef):
        return None
    code = getattr(getattr(adj, "func", None), "__code__", None)
    found = KernelAccesses(
        {a: Access() for a in arrays},
        text.splitlines(),
        code.co_filename if code is not None else "<unknown>",
        int(getattr(adj, "fun_lineno", 1) or 1),
    )
    first = _first_thread_index(fdef)
    parents = {id(c): p for p in ast.walk(fdef) for c in ast.iter_child_nodes(p)}
    for node in ast.walk(fdef):
        if not (isinstance(node, ast.Name) and node.id in found.arrays and isinstance(node.ctx, ast.Load)):
            continue
        acc = found.arrays[node.id]
        parent = parents.get(id(node))
        if isinstance(parent, ast.Subscript) and parent.value is node:
            idx = parent.slice.elts if isinstance(parent.slice, ast.Tuple) else [parent.slice]
            (acc.by_thread if _is_name(idx[0], first) else acc.other).append(parent)
        elif isinstance(parent, ast.Attribute) and parent.value is node:
            if parent.attr == "shape":
                acc.shape.append(parent)
        elif isinstance(parent, ast.Call) and parent.args and parent.args[0] is node and _callee(parent) in _ATOMICS:
            index = parent.args[1] if len(parent.args) > 1 else None
            (acc.by_thread if _is_name(index, first) else acc.other).append(parent)
        else:
            acc.escapes.append(parent if parent is not None else node)
    return found


def fold_refusal(desc: Any) -> str | None:
    """Why ``vmap_method="fold"`` would give wrong values for this kernel op (naming the line), or None."""
    arrays = [p.name for p in desc.params if p.is_array]
    found = accesses(desc.fn, arrays)
    if found is None:
        return f"op {desc.label!r}: vmap_method='fold' needs the kernel's source, to check that it reads every array at its thread's row"
    for name in arrays:
        acc = found.arrays[name]
        for what, nodes in (
            ("reads the shape of", acc.shape),
            ("indexes, along its first dimension, other than by the first thread index", acc.other),
        ):
            if nodes:
                return (
                    f"op {desc.label!r}: vmap_method='fold' folds the batch into the first dimension of every array, "
                    f"but the kernel {what} array {name!r} at {found.where(nodes[0])}: a batch element would see other "
                    "elements' rows; use vmap_method='loop' (the default, right for every kernel)"
                )
    return None


def row_arrays(desc: Any) -> dict[str, bool] | None:
    """For ``partition="rows"``: per array parameter, True (its rows follow the first thread index:
    sharded) or False (never indexed by it along its first dimension: replicated); None where the
    source does not say (the call then runs unpartitioned)."""
    arrays = [p.name for p in desc.params if p.is_array]
    found = accesses(desc.fn, arrays)
    if found is None:
        return None
    out = {}
    for name in arrays:
        acc = found.arrays[name]
        if acc.escapes or (acc.shape and acc.by_thread):
            return None
        if acc.by_thread and acc.other:
            return None
        out[name] = bool(acc.by_thread)
    return out


def _first_thread_index(fdef: ast.FunctionDef) -> str | None:
    """The name bound to the first launch dimension's thread index (``i = wp.tid()``, ``i, j = wp.tid()``)."""
    for node in ast.walk(fdef):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and _callee(node.value) == "tid":
            t = node.targets[0]
            if isinstance(t, ast.Name):
                return t.id
            if isinstance(t, ast.Tuple) and t.elts and isinstance(t.elts[0], ast.Name):
                return t.elts[0].id
    return None


def _callee(node: ast.AST) -> str | None:
    if not isinstance(node, ast.Call):
        return None
    f = node.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None


def _is_name(node: ast.AST | None, name: str | None) -> bool:
    return name is not None and isinstance(node, ast.Name) and node.id == name
