"""Extent checks at plan time: what the kernel's code says about its arrays, and Warp's limits.

Rule (documented in docs/bounds.md): where a kernel indexes an array
parameter *directly* with a thread index, unconditionally, that array dimension must be
at least the launch extent of that thread index. "Directly" means:

- the thread index comes from ``i = wp.tid()`` (a 1-d launch) or ``i, j, ... = wp.tid()``
  (one name per launch dimension), and the name is never assigned again;
- the access is ``a[i]``, ``a[i, j]``, ``a[i, j] = ...``, ``a[i] += ...`` or the index
  arguments of ``wp.atomic_*(a, i, ...)``, with the index name itself in that position
  (not ``i + 1``, not ``idx[i]``);
- the statement sits at the top level of the kernel body, before any statement that can
  ``return`` (so accesses under ``if``, loops, conditional expressions, or after an early
  ``return`` guard are not counted).

Anything else says nothing: the analysis only reports what the code proves. The check
runs once per plan (per call signature), never on the hot path.
"""

from __future__ import annotations

import ast
from typing import Any, Sequence

from ._errors import ArgumentError

# Warp's own limits: wp.tid() coordinates and array dimensions are signed 32-bit, the thread
# count and byte sizes are 64-bit
MAX_EXTENT = 2**31 - 1
MAX_TOTAL = 2**63 - 1

#: Warp's atomic builtins, each writing the array it takes first (one list for every source analysis:
#: launch domain, scatters, fold/partition promises, checked mode, indexed arrays)
ATOMICS = frozenset(
    {
        "atomic_add",
        "atomic_sub",
        "atomic_min",
        "atomic_max",
        "atomic_cas",
        "atomic_exch",
        "atomic_and",
        "atomic_or",
        "atomic_xor",
    }
)
_ATOMICS = ATOMICS


def _is_tid_call(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call) or node.args or node.keywords:
        return False
    f = node.func
    return (isinstance(f, ast.Attribute) and f.attr == "tid") or (isinstance(f, ast.Name) and f.id == "tid")


def uses_tiles(kernel: Any) -> bool:
    """Does the kernel call Warp tile functions (``wp.tile_load``, ``wp.tile_sum``...)?"""
    tree = getattr(getattr(kernel, "adj", None), "tree", None)
    if tree is None:
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
            if name.startswith("tile"):
                return True
    return False


# calls that write their first argument (an array)
_WRITING_CALLS = _ATOMICS | {"tile_store", "tile_atomic_add"}


def _root_name(node: ast.AST) -> str | None:
    """``a`` for ``a``, ``a[i]``, ``a[i][j]``, ``a[i].x``; None for anything else."""
    while isinstance(node, (ast.Subscript, ast.Attribute)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def arrays_written(fn: Any, kind: str, names: Sequence[str]) -> dict[str, int]:
    """Among the array parameters ``names``, those the kernel's own code certainly writes, each with
    the line of its first write (in the kernel's source file where Warp knows it).

    A write: ``a[...] = v`` (also augmented, ``a[...] += v``, and component stores ``a[i].x = v``),
    or ``a`` as the first argument of ``wp.atomic_*``, ``wp.tile_store``, ``wp.tile_atomic_add``.
    A write through a local bound once to the parameter (``b = a; b[i] = v``) is a write to it. A
    name the kernel binds again (``a = ...``) is skipped, and so are writes inside the ``wp.func``
    functions it calls (not analysed): the result never claims a write that is not there. Empty for
    Python-function ops.
    """
    tree = getattr(getattr(fn, "adj", None), "tree", None)
    if kind != "kernel" or tree is None or not names:
        return {}
    stores = _stored_names(tree)
    wanted = set(names) - set(stores)
    # a local bound once to a parameter (``b = a``) writes the parameter's memory
    alias = {n: n for n in wanted}
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Name)
            and node.value.id in alias
            and stores.get(node.targets[0].id) == 1
        ):
            alias[node.targets[0].id] = alias[node.value.id]
    fields, locals_ = _struct_fields(tree, wanted, stores)
    first = getattr(fn.adj, "fun_lineno", None)
    found: dict[str, int] = {}
    for node in ast.walk(tree):
        targets: list[ast.AST] = []
        if isinstance(node, ast.Assign):
            targets = [
                t for target in node.targets for t in (target.elts if isinstance(target, ast.Tuple) else [target])
            ]
            targets = [t for t in targets if isinstance(t, (ast.Subscript, ast.Attribute))]
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)) and isinstance(
            node.target, (ast.Subscript, ast.Attribute)
        ):
            targets = [node.target]
        elif isinstance(node, ast.Call) and node.args:
            f = node.func
            fname = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
            if fname in _WRITING_CALLS:
                targets = [node.args[0]]
        for t in targets:
            root = alias.get(_root_name(t) or "")
            if root is None and (isinstance(node, ast.Call) or _stores_an_element(t)):
                # (``s.a = s__a`` sets a field: only an element store or a writing call writes memory)
                base, field = _base_field(t)
                root = fields.get((_resolve_local(base, locals_), field))
            if root is not None and root not in found:
                found[root] = getattr(node, "lineno", 1) + (first - 1 if isinstance(first, int) else 0)
    return found


def _struct_fields(tree: ast.AST, wanted: set[str], stores: dict[str, int]) -> tuple[dict, dict]:
    """``(fields, locals)``: ``(local, field) -> parameter`` for a local struct whose field is set to
    an array parameter (``s.a = s__a``: how a struct parameter's flat kernel builds it again), and
    ``local -> local`` for a local bound once to another (``t = s``), so that a write to ``t.a[i]``
    is a write to ``s__a``."""
    fields: dict[tuple[str, str], str] = {}
    locals_: dict[str, str] = {}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.value, ast.Name)):
            continue
        t = node.targets[0]
        if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and node.value.id in wanted:
            fields[(t.value.id, t.attr)] = node.value.id
        elif isinstance(t, ast.Name) and stores.get(t.id) == 1:
            locals_[t.id] = node.value.id
    return fields, locals_


def _resolve_local(name: str | None, locals_: dict[str, str]) -> str | None:
    seen: set[str] = set()
    while name in locals_ and name not in seen:
        seen.add(name)
        name = locals_[name]
    return name


def _stores_an_element(node: ast.AST) -> bool:
    """Whether a store target indexes an array on its way (``t.a[i]``, ``t.a[i].x``), not only sets
    a field (``s.a``)."""
    while isinstance(node, (ast.Subscript, ast.Attribute)):
        if isinstance(node, ast.Subscript):
            return True
        node = node.value
    return False


def _base_field(node: ast.AST) -> tuple[str | None, str | None]:
    """``("t", "a")`` for ``t.a``, ``t.a[i]``, ``t.a[i].x``: the base name and the attribute next to it."""
    attr = None
    while isinstance(node, (ast.Subscript, ast.Attribute)):
        if isinstance(node, ast.Attribute):
            attr = node.attr
        node = node.value
    return (node.id if isinstance(node, ast.Name) else None), attr


def _stored_names(tree: ast.AST) -> dict[str, int]:
    """How many times each name is bound anywhere in ``tree`` (assignments, loop targets...)."""
    counts: dict[str, int] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            counts[node.id] = counts.get(node.id, 0) + 1
    return counts


def _thread_indices(stmt: ast.AST, stores: dict[str, int], tid: dict[str, int]) -> bool:
    """Whether ``stmt`` is ``i = wp.tid()`` or ``i, j, ... = wp.tid()``; if so, record in ``tid``
    each name never assigned again with its launch dim (-1 for the 1-d form, checked later)."""
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and _is_tid_call(stmt.value)):
        return False
    t = stmt.targets[0]
    if isinstance(t, ast.Name) and stores.get(t.id) == 1:
        tid[t.id] = -1
    elif isinstance(t, ast.Tuple):
        names = [e.id for e in t.elts if isinstance(e, ast.Name)]
        if len(names) == len(t.elts):
            for d, name in enumerate(names):
                if stores.get(name) == 1:
                    tid[name] = d
    return True


def _has_return(stmt: ast.AST) -> bool:
    return any(isinstance(n, (ast.Return, ast.Raise)) for n in ast.walk(stmt))


def _unconditional_nodes(stmt: ast.AST):
    """Nodes of a simple statement that always evaluate (skips IfExp/BoolOp branches, lambdas)."""
    stack = [stmt]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, ast.IfExp):
            stack.append(node.test)
            continue
        if isinstance(node, ast.BoolOp):
            stack.append(node.values[0])
            continue
        if isinstance(node, (ast.Lambda, ast.comprehension, ast.ListComp, ast.GeneratorExp)):
            continue
        stack.extend(ast.iter_child_nodes(node))


def direct_indexing(fn: Any, kind: str, arrays: Sequence[tuple[str, int]]) -> tuple[tuple[str, int, int], ...]:
    """``(parameter, array dim, launch dim)`` triples the kernel's code indexes directly.

    Args:
        fn: the ``wp.Kernel`` (anything else gives no triples).
        kind: ``"kernel"`` or ``"function"``.
        arrays: ``(name, ndim)`` of the array parameters.

    Returns:
        Sorted, de-duplicated triples; empty when the code says nothing provable.
    """
    if kind != "kernel":
        return ()
    tree = getattr(getattr(fn, "adj", None), "tree", None)
    if tree is None or not tree.body or not isinstance(tree.body[0], ast.FunctionDef):
        return ()
    body = tree.body[0].body
    ndims = dict(arrays)
    stores = _stored_names(tree.body[0])
    tid: dict[str, int] = {}  # thread-index name -> launch dim; 1-d form gets launch dim -1 (checked later)
    found: set[tuple[str, int, int]] = set()
    for stmt in body:
        if _has_return(stmt):
            break  # later accesses may be guarded by an early return
        if _thread_indices(stmt, stores, tid):
            continue
        if isinstance(stmt, (ast.If, ast.For, ast.While, ast.With, ast.Try, ast.FunctionDef)):
            continue
        for node in _unconditional_nodes(stmt):
            if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
                name = node.value.id
                idx = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Name):
                f = node.func
                fname = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
                if fname not in _ATOMICS:
                    continue
                name = node.args[0].id
                idx = node.args[1 : 1 + ndims.get(name, 0)]
            else:
                continue
            if name not in ndims or stores.get(name):
                continue
            for k, e in enumerate(idx[: ndims[name]]):
                if isinstance(e, ast.Name) and e.id in tid:
                    found.add((name, k, tid[e.id]))
    return tuple(sorted(found))


def _thread_index_count(kernel: ast.FunctionDef, stores: Any, tid: dict[str, int]) -> int:
    """How many thread indices ``kernel`` reads from ``wp.tid()``; fills ``tid`` (name -> which)."""
    n = 0
    for node in ast.walk(kernel):
        if isinstance(node, ast.Assign) and _thread_indices(node, stores, tid):
            t = node.targets[0]
            n = max(n, len(t.elts) if isinstance(t, ast.Tuple) else 1)
        elif _is_tid_call(node):
            n = max(n, 1)
    return n


def thread_domain(
    fn: Any, kind: str, arrays: Sequence[tuple[str, int]]
) -> tuple[tuple[tuple[tuple[str, int, bool], ...], ...], bool]:
    """The launch domain a kernel is written for: per launch dimension, the ``(parameter, array dim,
    exact)`` triples it indexes with that dimension's thread index, anywhere in its body.

    Unlike :func:`direct_indexing`, accesses under ``if``, in loops and after an early ``return``
    count: the question is not what every thread reads but which arrays the thread index walks
    (newton's ``eval_springs`` reads ``spring_stiffness[tid]`` after a ``return`` guard: it is
    written for one thread per spring). The thread index comes from ``i = wp.tid()`` (launch
    dimension 0 of a 1-d launch) or ``i, j = wp.tid()``, bound once, or is ``wp.tid()`` itself
    (``a[wp.tid()]``); the array is a parameter (or a local bound once to one, ``y = x``). The
    index is the thread index itself (``exact``) or the thread index plus or minus a constant
    (``a[i + 1]``: the array is walked by the thread index, shifted).

    Returns:
        ``(domain, escapes)``: ``domain`` has one entry per thread index (none when the kernel has no
        ``wp.tid()``), each the triples indexed by it (maybe none); ``escapes`` says the kernel passes
        a bare thread index to a function of its own (a ``wp.func``, which may index arrays with it
        where this analysis does not look).
    """
    if kind != "kernel":
        return (), False
    tree = getattr(getattr(fn, "adj", None), "tree", None)
    if tree is None or not tree.body or not isinstance(tree.body[0], ast.FunctionDef):
        return (), False
    kernel = tree.body[0]
    ndims = dict(arrays)
    stores = _stored_names(kernel)
    tid: dict[str, int] = {}
    nd = _thread_index_count(kernel, stores, tid)
    escapes = any(
        isinstance(node, ast.Call)
        and not _is_builtin_call(node)
        and any(_tid_dim(a, tid) is not None for a in [*node.args, *(k.value for k in node.keywords)])
        for node in ast.walk(kernel)
    )
    # a local bound once to an array parameter (``y = x``) indexes that parameter
    alias = {
        node.targets[0].id: node.value.id
        for node in ast.walk(kernel)
        if isinstance(node, ast.Assign)
        and len(node.targets) == 1
        and isinstance(node.targets[0], ast.Name)
        and stores.get(node.targets[0].id) == 1
        and isinstance(node.value, ast.Name)
        and node.value.id in ndims
        and not stores.get(node.value.id)
    }
    found: set[tuple[str, int, int, bool]] = set()
    for node in ast.walk(kernel):
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
            name = alias.get(node.value.id, node.value.id)
            idx = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Name):
            f = node.func
            fname = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
            if fname not in _ATOMICS:
                continue
            name = alias.get(node.args[0].id, node.args[0].id)
            idx = node.args[1 : 1 + ndims.get(name, 0)]
        else:
            continue
        if name not in ndims or stores.get(name):
            continue
        for k, e in enumerate(idx[: ndims[name]]):
            d = _tid_dim(e, tid)
            if d is not None:
                found.add((name, k, d, True))
            elif (
                isinstance(e, ast.BinOp)
                and isinstance(e.op, (ast.Add, ast.Sub))
                and any(isinstance(x, ast.Constant) and type(x.value) is int for x in (e.left, e.right))
            ):
                d = _tid_dim(e.left, tid) if isinstance(e.right, ast.Constant) else None
                if d is None and isinstance(e.op, ast.Add) and isinstance(e.left, ast.Constant):
                    d = _tid_dim(e.right, tid)
                if d is not None:
                    found.add((name, k, d, False))
    order = {name: n for n, (name, _) in enumerate(arrays)}
    domain = tuple(
        tuple(
            (name, k, exact)
            for name, k, _, exact in sorted(
                (t for t in found if t[2] == d), key=lambda t: (not t[3], order[t[0]], t[1])
            )
        )
        for d in range(nd)
    )
    return domain, escapes


def _tid_dim(e: ast.AST, tid: dict[str, int]) -> int | None:
    """The launch dimension of thread index ``e`` (a thread-index name or ``wp.tid()``), else None."""
    if isinstance(e, ast.Name) and e.id in tid:
        return max(tid[e.id], 0)
    return 0 if _is_tid_call(e) else None


def _is_builtin_call(node: ast.Call) -> bool:
    """A call of a Warp builtin (``wp.sin``, ``wp.vec3``...) or a Python type (``float(i)``)."""
    f = node.func
    if isinstance(f, ast.Attribute):
        return isinstance(f.value, ast.Name) and f.value.id in ("wp", "warp")
    return isinstance(f, ast.Name) and f.id in ("int", "float", "bool", "range", "min", "max", "abs", "len")


def written_outputs(fn: Any, kind: str, outputs: Sequence[tuple[str, int]]) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """Outputs the kernel's code writes element by element, all of them: ``(name, launch dims)``.

    An output is listed when the kernel body has, at its top level and before any statement
    that can ``return``, a plain store ``out[i, j, ...] = value`` whose indices are distinct
    thread-index names (as in :func:`direct_indexing`), one per output dimension, and the
    output's name appears nowhere else in the kernel (no read, no second or conditional write,
    no atomic). Every thread then writes its element; when the output's extents equal the launch
    extents of those indices (checked per plan: :func:`fully_written`), every element is written,
    so zero-filling the output first would be wasted work. ``launch dims`` gives, per output
    dimension, the launch dimension indexing it (-1 for ``i = wp.tid()`` of a 1-d launch).
    """
    if kind != "kernel" or uses_tiles(fn):  # a tile kernel's threads cooperate: no per-thread rule
        return ()
    tree = getattr(getattr(fn, "adj", None), "tree", None)
    if tree is None or not tree.body or not isinstance(tree.body[0], ast.FunctionDef):
        return ()
    kernel = tree.body[0]
    ndims = dict(outputs)
    mentions: dict[str, int] = {}
    for node in ast.walk(kernel):
        if isinstance(node, ast.Name) and node.id in ndims:
            mentions[node.id] = mentions.get(node.id, 0) + 1
    stores = _stored_names(kernel)
    tid: dict[str, int] = {}
    found = []
    for stmt in kernel.body:
        if _has_return(stmt):
            break
        if _thread_indices(stmt, stores, tid):
            continue
        if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1):
            continue
        target = stmt.targets[0]
        if not (isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name)):
            continue
        name = target.value.id
        if name not in ndims or mentions.get(name) != 1:
            continue
        idx = target.slice.elts if isinstance(target.slice, ast.Tuple) else [target.slice]
        names = [e.id for e in idx if isinstance(e, ast.Name) and e.id in tid]
        if len(names) != len(idx) or len(idx) != ndims[name] or len(set(names)) != len(names):
            continue
        found.append((name, tuple(tid[n] for n in names)))
    return tuple(sorted(found))


def _index_chain(target: ast.AST) -> tuple[str | None, list[ast.AST]]:
    """``("a", [i, j, k])`` for ``a[i, j][k]`` or ``a[i][j].x``: the root name and the indices from
    the outermost array index inward (component indices of a vec/mat element follow the array's)."""
    chain: list[list[ast.AST]] = []
    node = target
    while isinstance(node, (ast.Subscript, ast.Attribute)):
        if isinstance(node, ast.Subscript):
            chain.append(list(node.slice.elts) if isinstance(node.slice, ast.Tuple) else [node.slice])
        node = node.value
    name = node.id if isinstance(node, ast.Name) else None
    return name, [e for part in reversed(chain) for e in part]


def _output_writes(kernel: ast.FunctionDef, names: set[str], ndims: dict[str, int]):
    """``(output, indices, node)`` for every write of an output in the kernel body: a store or an
    augmented store through subscripts, or an atomic whose first argument is the output."""
    for node in ast.walk(kernel):
        if isinstance(node, ast.Assign):
            targets = [
                t for target in node.targets for t in (target.elts if isinstance(target, ast.Tuple) else [target])
            ]
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Call) and node.args and _call_name(node) in _ATOMICS:
            a = node.args[0]
            if isinstance(a, ast.Name) and a.id in names:
                yield a.id, list(node.args[1 : 1 + ndims[a.id]]), node
            continue
        elif isinstance(node, ast.Call) and node.args and _call_name(node) == "tile_store":
            a = node.args[0]
            if isinstance(a, ast.Name) and a.id in names:
                yield a.id, _tile_offset(node, ndims[a.id]), node
            continue
        else:
            continue
        for t in targets:
            if isinstance(t, ast.Subscript):
                name, idx = _index_chain(t)
                if name in names:
                    yield name, idx, node


def _tile_offset(node: ast.Call, ndim: int) -> list[ast.AST]:
    """The indices a ``wp.tile_store(out, t, offset)`` writes its tile at, one per dimension of
    ``out`` (no offset: zeros). At the bare tile coordinates (``offset=i``, ``offset=(i, j)``) the
    output is sized by the tile grid; at any other offset (``offset=(i * TILE_M, j * TILE_N)``,
    Warp's GEMM example) its shape is the tiles' extent, not the grid's."""
    off: ast.AST | None = node.args[2] if len(node.args) > 2 else None
    for k in node.keywords:
        if k.arg == "offset":
            off = k.value
    if off is None:
        return [ast.Constant(0)] * ndim
    return list(off.elts) if isinstance(off, ast.Tuple) else [off]


def scattered_outputs(
    fn: Any, kind: str, outputs: Sequence[tuple[str, int]], want_permuted: bool = False
) -> tuple[tuple[Any, ...], ...]:
    """Outputs the kernel writes at an index that is not the thread's: ``(name, line, source)`` of
    the first such write of each, in the kernel's source file (the line where Warp knows it).

    The output's shape then says nothing about the launch (a scatter ``f[idx[i]] += v``, an atomic
    at a computed index ``wp.atomic_add(f, i // 2, v)``, a reduction into ``out[0]``), so it must not
    be sized from the launch (:func:`interop._plan.make_plan` asks for ``output_dims``). A write at
    the thread index is ``out[i]`` with ``i = wp.tid()``, or ``out[i, j, ...]`` with
    ``i, j, ... = wp.tid()`` in launch order (each name bound once), or ``out[wp.tid()]``; component
    indices after the array's own (``out[i][0]``, ``out[i].x``) do not count, and a name bound once to
    a thread index (``k = i``) or to ``wp.hash_grid_point_id(grid, i)`` is that index. A tile store
    writes at its offset (:func:`_tile_offset`): at the bare tile coordinates it is at the thread's
    index (sized by the tile grid), at any other offset a scatter. Writes inside the ``wp.func``
    functions the kernel calls are not looked at: the result never claims a scatter that is not there.
    """
    if kind != "kernel" or not outputs:
        return ()
    tree = getattr(getattr(fn, "adj", None), "tree", None)
    if tree is None or not tree.body or not isinstance(tree.body[0], ast.FunctionDef):
        return ()
    kernel = tree.body[0]
    ndims = dict(outputs)
    stores = _stored_names(kernel)
    names = {n for n in ndims if not stores.get(n)}
    tid: dict[str, int] = {}
    _thread_index_count(kernel, stores, tid)
    for node in ast.walk(kernel):
        # a local bound once to a thread index is that index (``i = tid``), and so is the point a hash
        # grid sorts there (``i = wp.hash_grid_point_id(grid, tid)``: a permutation of the launch, as in
        # Warp's SPH example)
        if not (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and stores.get(node.targets[0].id) == 1
        ):
            continue
        v = node.value
        if isinstance(v, ast.Call) and _call_name(v) == "hash_grid_point_id" and len(v.args) == 2:
            v = v.args[1]
        if isinstance(v, ast.Name) and v.id in tid:
            tid[node.targets[0].id] = tid[v.id]
    first = getattr(fn.adj, "fun_lineno", None)
    offset = first - 1 if isinstance(first, int) else 0
    found: dict[str, tuple[int, str]] = {}
    perms: dict[str, dict[tuple[int, ...], tuple[int, str]]] = {}  # other orders of the thread indices
    at_thread: set[str] = set()
    for name, idx, node in _output_writes(kernel, names, ndims):
        if name in found:
            continue
        where = (getattr(node, "lineno", 1) + offset, ast.unparse(node).splitlines()[0])
        perm = _thread_permutation(idx[: ndims[name]], tid)
        if perm is not None and perm == tuple(range(len(perm))):
            at_thread.add(name)  # the thread's own index (or a prefix of it: a row written whole)
        elif perm is not None and len(perm) == ndims[name]:
            perms.setdefault(name, {}).setdefault(perm, where)
        else:
            found[name] = where
    # written at one other order of the thread indices only (``out[j, i]``): sized from the launch
    # permuted; at two orders (``out[i, j]`` and ``out[j, i]``), at none that the launch gives
    permuted = {n: next(iter(p)) for n, p in perms.items() if n not in found and n not in at_thread and len(p) == 1}
    for n, p in perms.items():
        if n not in found and n not in permuted:
            found[n] = next(iter(p.values()))
    order = [n for n, _ in outputs]
    if want_permuted:
        return tuple((n, permuted[n]) for n in order if n in permuted)
    return tuple((n, *found[n]) for n in order if n in found)


def _thread_permutation(idx: Sequence[ast.AST], tid: dict[str, int]) -> tuple[int, ...] | None:
    """The launch dimension of each index of a write, when they are distinct thread indices, one per
    output dimension (``out[i, j]``: ``(0, 1)``; ``out[j, i]``: ``(1, 0)``), else None."""
    dims = [_tid_dim(e, tid) for e in idx]
    if any(d is None for d in dims) or len(set(dims)) != len(dims):
        return None
    return tuple(int(d) for d in dims if d is not None)


def permuted_outputs(fn: Any, kind: str, outputs: Sequence[tuple[str, int]]) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """Outputs the kernel writes only at one permutation of the thread indices other than theirs
    (a transpose ``out[j, i] = a[i, j]`` with ``i, j = wp.tid()``): ``(name, perm)``, the output's
    dimension ``k`` walked by launch dimension ``perm[k]``. Such an output is sized from the launch
    permuted (:func:`interop._plan.make_plan`), where the launch has as many dimensions."""
    return scattered_outputs(fn, kind, outputs, want_permuted=True)  # type: ignore[return-value]


def check_scattered(label: str, fn: Any, scattered: Sequence[tuple[str, int, str]], sized: set) -> None:
    """Refuse to size from the launch an output of :func:`scattered_outputs` that the call gives no
    ``output_dims`` for (``sized``: the outputs it gives them for): its shape is not the launch's."""
    for name, line, text in scattered:
        if name in sized:
            continue
        where = getattr(getattr(fn, "adj", None), "filename", None)
        raise ArgumentError(
            f"op {label!r}, output {name!r}: the kernel writes it at an index that is not the thread's "
            f"(line {line}{f' of {where}' if where else ''}: {text}), so its shape cannot be inferred from the "
            f"launch; pass output_dims={{{name!r}: shape}} (to interop.op or the call) with the shape it is "
            "written into"
        )


def fully_written(written: Sequence[tuple[str, tuple[int, ...]]], launch: Sequence[int], shapes: dict) -> frozenset:
    """Names of the outputs of :func:`written_outputs` that this launch writes entirely: each
    output dimension's extent equals the launch extent of the thread index writing it."""
    full = set()
    for name, dims in written:
        shape = shapes[name]
        if dims == (-1,):
            ok = len(launch) == 1 and tuple(shape) == (launch[0],)
        else:
            ok = all(d < len(launch) and shape[k] == launch[d] for k, d in enumerate(dims))
        if ok:
            full.add(name)
    return frozenset(full)


def check_launch(label: str, launch: Sequence[int], what: str = "launch_dims") -> None:
    """Warp's launch limits: each extent below 2**31 (``wp.tid()`` is 32-bit), total below 2**63."""
    total = 1
    for d, n in enumerate(launch):
        if n > MAX_EXTENT:
            raise ArgumentError(
                f"op {label!r}: {what} {tuple(launch)}: extent {n} in dimension {d} exceeds Warp's limit of "
                f"{MAX_EXTENT} (wp.tid() coordinates are signed 32-bit)"
            )
        total *= n
    if total > MAX_TOTAL:
        raise ArgumentError(
            f"op {label!r}: {what} {tuple(launch)} launch {total} threads, more than Warp's limit of {MAX_TOTAL}"
        )


def check_strides(label: str, what: str, shape: Sequence[int], strides: Sequence[int]) -> None:
    """Byte strides Warp's array descriptor holds: each below 2**31 along a dimension of more than
    one element (Warp keeps them as 32-bit ints: a larger one wraps negative, and the kernel reads
    far outside the array)."""
    for d, (n, st) in enumerate(zip(shape, strides)):
        if n > 1 and abs(int(st)) > MAX_EXTENT:
            raise ArgumentError(
                f"op {label!r}, {what}: shape {tuple(shape)}: the byte stride {int(st)} of dimension {d} exceeds "
                f"Warp's array limit of {MAX_EXTENT} (its strides are 32-bit); pass a smaller array, or one laid "
                "out with smaller strides"
            )


def contiguous_byte_strides(shape: Sequence[int], itemsize: int) -> tuple[int, ...]:
    out = []
    step = itemsize
    for n in reversed(tuple(shape)):
        out.append(step)
        step *= max(int(n), 1)
    return tuple(reversed(out))


def check_array(label: str, what: str, shape: Sequence[int], itemsize: int) -> None:
    """An array argument Warp can describe packed: each dimension below 2**31 (Warp's shapes are
    32-bit: a larger extent wraps) and each byte stride of its packed layout below 2**31."""
    for d, n in enumerate(shape):
        if n > MAX_EXTENT:
            raise ArgumentError(
                f"op {label!r}, {what}: shape {tuple(shape)}: extent {n} in dimension {d} exceeds Warp's array "
                f"limit of {MAX_EXTENT}"
            )
    check_strides(label, what, shape, contiguous_byte_strides(shape, itemsize))


def check_output(label: str, name: str, shape: Sequence[int], itemsize: int) -> None:
    """An output Warp can describe: each dimension below 2**31, the size in bytes below 2**63."""
    check_strides(label, f"output {name!r}", shape, contiguous_byte_strides(shape, itemsize))
    total = itemsize
    for d, n in enumerate(shape):
        if n > MAX_EXTENT:
            raise ArgumentError(
                f"op {label!r}, output {name!r}: shape {tuple(shape)}: extent {n} in dimension {d} exceeds Warp's "
                f"array limit of {MAX_EXTENT}; pass smaller output_dims / launch_dims"
            )
        total *= n
    if total > MAX_TOTAL:
        raise ArgumentError(
            f"op {label!r}, output {name!r}: shape {tuple(shape)} would take {total} bytes, beyond what can be "
            "allocated; pass smaller output_dims / launch_dims"
        )


def check_extents(
    label: str,
    triples: Sequence[tuple[str, int, int]],
    launch: Sequence[int],
    shapes: dict[str, tuple[int, ...]],
    roles: dict[str, str],
    tiled: bool = False,
) -> None:
    """Raise if an array indexed directly by a thread index is shorter than that launch extent.
    ``tiled``: a ``wp.launch_tiled`` launch ``(*grid, block_dim)``, where a single ``i = wp.tid()``
    is the block's index along the grid's first dimension (``wp.tile_load(x[i], ...)``)."""
    if not triples or any(int(n) == 0 for n in launch):
        return  # a zero-thread launch reads nothing
    for name, k, d in triples:
        if d == -1:
            if len(launch) != 1 and not (tiled and len(launch) == 2):
                continue  # a single wp.tid() name in a multi-d launch: not a per-dimension index
            d = 0
        if d >= len(launch):
            continue
        shape = shapes.get(name)
        if shape is None or k >= len(shape):
            continue
        if shape[k] < launch[d]:
            role = roles.get(name, "input")
            what = {"output": "output", "in_out": "in-out array"}.get(role, "input")
            fix = (
                "pass output_dims= at least the launch, or a smaller launch_dims="
                if role == "output"
                else "pass an array at least that long, or a smaller launch_dims="
            )
            raise ArgumentError(
                f"op {label!r}, parameter {name!r}: the kernel indexes dimension {k} of this {what} with "
                f"wp.tid() dimension {d}, so it must be at least the launch extent {launch[d]} "
                f"(launch dims {tuple(launch)}), got extent {shape[k]} (Warp shape {tuple(shape)}); {fix}"
            )


# tile builtins whose arguments are per-thread values, not tile coordinates (``wp.tile(x)`` gathers
# one value per lane; ``wp.untile`` hands one back)
_PER_THREAD_TILE_CALLS = {"tile", "untile"}


def _call_name(node: ast.Call) -> str:
    f = node.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def tile_form(fn: Any, arrays: Sequence[tuple[str, int]]) -> tuple[str, int, bool]:
    """The launch a tile kernel is written for, read from how it uses ``wp.tid()``.

    - ``"threads"``: a thread index that indexes array elements, as any kernel's does, and is not
      a tile coordinate (Warp's n-body example: ``i = wp.tid()`` then ``pos[i]``, tiles loaded at
      offsets of the loop counter): launched as ``wp.launch(kernel, dim, block_dim)``.
    - ``"tiled"``: thread indices that read tile coordinates (``wp.tile_load(x[i], ...)``,
      ``offset=i * TILE``, directly or through locals computed from them): launched as
      ``wp.launch_tiled(kernel, dim=grid, block_dim)``, the grid then the block's lanes.
    - ``"none"``: no ``wp.tid()`` at all: one block per element of the grid it is given.

    Returns:
        ``(form, n, lane)``: ``n`` values ``wp.tid()`` returns; ``lane`` says the last of them is
        the block's lane (a ``"tiled"`` kernel whose last thread index is no tile coordinate:
        ``i, lane = wp.tid()``), so its tile grid has ``n - 1`` dimensions, else ``n``.
    """
    tree = getattr(getattr(fn, "adj", None), "tree", None)
    if tree is None or not tree.body or not isinstance(tree.body[0], ast.FunctionDef):
        return "none", 0, False
    kernel = tree.body[0]
    stores = _stored_names(kernel)
    tid: dict[str, int] = {}
    nt = _thread_index_count(kernel, stores, tid)
    if nt == 0:
        return "none", 0, False
    # locals computed from thread indices carry their launch dims (``offset = i * TILE``)
    derived: dict[str, set[int]] = {name: {max(d, 0)} for name, d in tid.items()}

    def dims_of(e: ast.AST) -> set[int]:
        out: set[int] = set()
        for n in ast.walk(e):
            if isinstance(n, ast.Name) and n.id in derived:
                out |= derived[n.id]
            elif _is_tid_call(n):
                out.add(0)
        return out

    changed = True
    while changed:
        changed = False
        for node in ast.walk(kernel):
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and node.value is not None:
                if isinstance(node, ast.Assign) and _is_tid_call(node.value):
                    continue
                ds = dims_of(node.value)
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    for n in ast.walk(t):
                        if isinstance(n, ast.Name) and ds and not ds <= derived.get(n.id, set()):
                            derived[n.id] = derived.get(n.id, set()) | ds
                            changed = True
    coords: set[int] = set()
    inside_tile_calls: set[int] = set()  # ids of nodes within a tile call's arguments
    for node in ast.walk(kernel):
        if isinstance(node, ast.Call) and _call_name(node).startswith("tile"):
            if _call_name(node) in _PER_THREAD_TILE_CALLS:
                continue
            for a in [*node.args, *(k.value for k in node.keywords)]:
                coords |= dims_of(a)
                inside_tile_calls.update(id(n) for n in ast.walk(a))
    ndims = dict(arrays)
    elements: set[int] = set()
    for node in ast.walk(kernel):
        if id(node) in inside_tile_calls:
            continue
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id in ndims:
            idx = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            if len(idx) == ndims[node.value.id]:
                elements |= set().union(*(dims_of(e) for e in idx))
        elif isinstance(node, ast.Call) and _call_name(node) in _ATOMICS and node.args:
            a = node.args[0]
            if isinstance(a, ast.Name) and a.id in ndims:
                elements |= set().union(set(), *(dims_of(e) for e in node.args[1 : 1 + ndims[a.id]]))
    if elements and not coords:
        return "threads", nt, False
    return "tiled", nt, (nt - 1) not in coords


_WRITE_ONLY_CALLS = {"atomic_add", "atomic_sub"}


def returned_params_read(fn: Any, kind: str, names: list[str]) -> tuple[str, ...]:
    """Names among ``names`` that the kernel may read (conservative: unsure means read).

    A returned array is write-only when every use is ``a[...] = value`` or the first
    argument of ``wp.atomic_add`` / ``wp.atomic_sub`` (or ``a.shape`` / ``a.ndim``). Then
    Warp's adjoint only reads its gradient; otherwise it may accumulate into it.
    """
    if kind != "kernel":
        return tuple(names)  # a Python function may pass an output on to another launch
    tree = getattr(fn.adj, "tree", None)
    if tree is None or not names:
        return tuple(names)
    wanted = set(names)
    allowed: set[int] = set()  # ids of Name nodes in a write-only position
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name):
                    allowed.add(id(t.value))
        elif isinstance(node, ast.Call) and node.args:
            f = node.func
            fname = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
            if fname in _WRITE_ONLY_CALLS and isinstance(node.args[0], ast.Name):
                allowed.add(id(node.args[0]))
        elif isinstance(node, ast.Attribute) and node.attr in ("shape", "ndim") and isinstance(node.value, ast.Name):
            allowed.add(id(node.value))
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.FunctionDef) else [tree]
    read = set()
    for stmt in body:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Name) and node.id in wanted and id(node) not in allowed:
                read.add(node.id)
    return tuple(n for n in names if n in read)
