"""Struct parameters as trees of leaves.

A kernel parameter annotated with a ``@wp.struct`` type is described as the leaves of its
fields: ``state_in.x`` becomes the array parameter ``state_in__x`` of a *flat* kernel, built
once from the kernel's own source with each ``state_in.x`` read as ``state_in__x`` (nested
structs nest: ``model.sub.k`` is ``model__sub__k``). A struct that the body uses as a value (passed
to a ``wp.func``) is built again at the top of the flat kernel from its leaves, as Warp's own
code would build it. The plan, the checks and every adapter then see ordinary array and scalar
parameters; :func:`flatten_call` takes a caller's structure (a Warp struct instance, a mapping,
a dataclass, a NamedTuple, any object with the fields as attributes) apart at the call and
:func:`rebuild_results` puts the returned leaves back together.
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import textwrap
import threading
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import warp as wp

from . import _indexed, _warp_compat
from ._codegen import kernel_with_signature
from ._errors import ArgumentError, UnsupportedError

SEP = "__"
FLAT_SUFFIX = "__interop_flat"


@dataclass(frozen=True)
class Leaf:
    """A field holding an array or a scalar/vector/matrix value: one flat kernel parameter."""

    field: str  # field name in its struct
    path: str  # dotted path for messages: "state_in.x"
    param: str  # flat kernel parameter name: "state_in__x"
    is_array: bool


@dataclass(frozen=True)
class Node:
    """A struct value: a kernel parameter (``field`` is its name) or a nested struct field."""

    field: str
    path: str
    struct_key: str
    children: tuple  # of Leaf | Node
    struct: Any = dataclasses.field(compare=False, hash=False, repr=False)

    def leaves(self) -> list[Leaf]:
        out: list[Leaf] = []
        for c in self.children:
            out.extend(c.leaves() if isinstance(c, Node) else [c])
        return out

    @property
    def name(self) -> str:
        return _warp_compat.struct_name(self.struct)


@dataclass(frozen=True)
class IndexedNode(Node):
    """A ``wp.indexedarray`` parameter (see ``_indexed``): its leaves are the data (the flat
    parameter of the same name) and one int32 index array per dimension."""

    ndim: int = 1

    @property
    def name(self) -> str:
        return f"wp.indexedarray(ndim={self.ndim})"


def _indexed_node(pname: str, ann: Any, field: str | None = None, path: str | None = None) -> IndexedNode:
    """The tree of indexed array ``pname`` (flat name), a parameter or a struct's ``field`` at ``path``."""
    ndim = int(ann.ndim)
    path = path or pname
    names = _indexed.leaf_names(pname, ndim)
    children = [Leaf(field="data", path=path, param=pname, is_array=True)]
    children += [
        Leaf(field=f"indices[{k}]", path=f"{path}.indices[{k}]", param=names[k + 1], is_array=True) for k in range(ndim)
    ]
    return IndexedNode(
        field=field or pname, path=path, struct_key="indexedarray", children=tuple(children), struct=ann, ndim=ndim
    )


def _indexed_fields(node: Node) -> dict[str, int]:
    """The indexed arrays among the fields of struct ``node`` (nested too): flat name -> ndim."""
    out: dict[str, int] = {}
    for c in node.children:
        if isinstance(c, IndexedNode):
            out[c.children[0].param] = c.ndim
        elif isinstance(c, Node):
            out.update(_indexed_fields(c))
    return out


def _is_index_leaf(leaf: Leaf) -> bool:
    """An index array of an indexed array: an input, never returned or differentiated."""
    return leaf.field.startswith("indices[")


def _is_struct(t: Any) -> bool:
    return _warp_compat.is_struct(t)


def has_struct_params(fn: Any) -> bool:
    """Whether ``fn`` (a ``wp.Kernel``) has a parameter annotated with a ``@wp.struct`` type or a
    ``wp.indexedarray`` (both described as trees of leaves by a flat kernel)."""
    if not isinstance(fn, wp.Kernel):
        return False
    return any(_is_struct(a.type) or _indexed.is_indexed(a.type) for a in fn.adj.args)


def _node(struct: Any, fieldname: str, path: tuple[str, ...], opname: str) -> Node:
    children: list[Leaf | Node] = []
    for fname, ftype in _warp_compat.struct_fields(struct):
        sub = (*path, fname)
        if _is_struct(ftype):
            children.append(_node(ftype, fname, sub, opname))
        elif _indexed.is_indexed(ftype):
            children.append(_indexed_node(SEP.join(sub), ftype, field=fname, path=".".join(sub)))
        else:
            children.append(
                Leaf(
                    field=fname,
                    path=".".join(sub),
                    param=SEP.join(sub),
                    is_array=_warp_compat.is_array_annotation(ftype),
                )
            )
    if not children:
        raise ArgumentError(
            f"op {opname!r}: parameter {'.'.join(path)!r} is a struct with no fields "
            f"({_warp_compat.struct_name(struct)})"
        )
    return Node(
        field=fieldname,
        path=".".join(path),
        struct_key=str(getattr(struct, "key", "")),
        children=tuple(children),
        struct=struct,
    )


def _leaf_types(struct: Any, path: tuple[str, ...], out: dict[str, Any]) -> None:
    for fname, ftype in _warp_compat.struct_fields(struct):
        if _is_struct(ftype):
            _leaf_types(ftype, (*path, fname), out)
        elif _indexed.is_indexed(ftype):
            out.update(_indexed.leaf_annotations(SEP.join((*path, fname)), ftype))
        else:
            out[SEP.join((*path, fname))] = ftype


def _local(path: tuple[str, ...]) -> str:
    """The local variable a nested struct value is built in (a root keeps its parameter's name)."""
    return path[0] if len(path) == 1 else SEP.join(path) + SEP + "interop"


class _Flatten(ast.NodeTransformer):
    """Reads each ``root.a.b`` that reaches a leaf as the leaf's parameter (keeping what follows:
    ``state.x.shape``), and one that reaches a nested struct as a local built from its leaves;
    records the struct values the body uses whole (``needed``: paths)."""

    def __init__(self, leaves: dict[tuple[str, ...], str], nodes: set[tuple[str, ...]]):
        self.leaves = leaves
        self.nodes = nodes
        self.roots = {p[0] for p in leaves}
        self.needed: set[tuple[str, ...]] = set()

    def visit_FunctionDef(self, node: ast.FunctionDef):
        node.body = [self.visit(stmt) for stmt in node.body]
        return node

    def visit_Attribute(self, node: ast.Attribute):
        chain = []
        n: Any = node
        while isinstance(n, ast.Attribute):
            chain.append(n.attr)
            n = n.value
        if isinstance(n, ast.Name) and n.id in self.roots:
            path = (n.id, *reversed(chain))
            for k in range(len(path), 1, -1):
                name = self.leaves.get(path[:k])
                if name is None and path[:k] in self.nodes:
                    name = _local(path[:k])
                    self.needed.add(path[:k])
                if name is not None:
                    rest = path[k:]
                    new: ast.expr = ast.Name(id=name, ctx=node.ctx if not rest else ast.Load())
                    for j, attr in enumerate(rest):
                        new = ast.Attribute(value=new, attr=attr, ctx=node.ctx if j == len(rest) - 1 else ast.Load())
                    return ast.copy_location(new, node)
        return self.generic_visit(node)

    def visit_Name(self, node: ast.Name):
        if node.id in self.roots:
            self.needed.add((node.id,))
        return node


def _build_stmts(node: Node, path: tuple[str, ...], ctor: dict[str, str], built: set) -> list[ast.stmt]:
    """Statements that make the local of ``node`` (at ``path``) the struct value of its leaves."""
    if path in built:
        return []
    built.add(path)
    stmts: list[ast.stmt] = []
    assigns: list[tuple[str, str]] = []
    for c in node.children:
        if isinstance(c, Node):
            sub = (*path, c.field)
            stmts += _build_stmts(c, sub, ctor, built)
            assigns.append((c.field, _local(sub)))
        else:
            assigns.append((c.field, c.param))
    var = _local(path)
    stmts.append(ast.parse(f"{var} = {ctor[node.struct_key]}()").body[0])
    for fname, src in assigns:
        stmts.append(ast.parse(f"{var}.{fname} = {src}").body[0])
    return stmts


def _sub_nodes(node: Node, path: tuple[str, ...], out: dict) -> None:
    out[path] = node
    for c in node.children:
        if isinstance(c, Node):
            _sub_nodes(c, (*path, c.field), out)


@dataclass(frozen=True)
class FlatKernel:
    """A struct kernel's flat form: ``kernel`` takes the leaves; ``entries`` are the original
    parameters in order, each a plain parameter's name or the :class:`Node` of a struct."""

    kernel: Any
    entries: tuple


_flat: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_flat_lock = threading.Lock()


def flatten_kernel(kernel: Any, opname: str) -> FlatKernel:
    """The flat form of ``kernel`` (made once per kernel object)."""
    with _flat_lock:
        got = _flat.get(kernel)
        if got is None:
            got = _flat[kernel] = _make_flat(kernel, opname)
        return got


def _add_indexed(pname: str, ann: Any, names: set, annotations: dict, opname: str) -> IndexedNode:
    """The tree of indexed parameter ``pname``, its leaves' annotations added to ``annotations``."""
    for leaf, leaf_ann in _indexed.leaf_annotations(pname, ann).items():
        if leaf != pname and (leaf in names or leaf in annotations):
            raise ArgumentError(
                f"op {opname!r}: the index arrays of wp.indexedarray {pname!r} would be read as parameter "
                f"{leaf!r}, which the kernel already has; rename it"
            )
        annotations[leaf] = leaf_ann
    return _indexed_node(pname, ann)


def _add_struct(pname: str, ann: Any, names: set, annotations: dict, leafmap: dict, opname: str) -> Node:
    """The tree of struct parameter ``pname``, its leaves' annotations and source paths recorded."""
    node = _node(ann, pname, (pname,), opname)
    types: dict[str, Any] = {}
    _leaf_types(ann, (pname,), types)
    for leaf in node.leaves():
        if leaf.param in names or leaf.param in annotations:
            raise ArgumentError(
                f"op {opname!r}: struct field {leaf.path!r} would be read as parameter {leaf.param!r}, "
                "which the kernel already has; rename one of them"
            )
        annotations[leaf.param] = types[leaf.param]
        leafmap[tuple(leaf.path.split("."))] = leaf.param
    return node


def _make_flat(kernel: Any, opname: str) -> FlatKernel:
    args = [(a.label, a.type) for a in kernel.adj.args]
    names = {n for n, _ in args}
    entries: list[Any] = []
    annotations: dict[str, Any] = {}
    leafmap: dict[tuple[str, ...], str] = {}
    nodes: dict[str, Node] = {}
    indexed: dict[str, int] = {}
    for pname, ann in args:
        if _indexed.is_indexed(ann):
            inode = _add_indexed(pname, ann, names, annotations, opname)
            entries.append(inode)
            indexed[pname] = inode.ndim
            continue
        if not _is_struct(ann):
            entries.append(pname)
            annotations[pname] = ann
            continue
        node = nodes[pname] = _add_struct(pname, ann, names, annotations, leafmap, opname)
        entries.append(node)
        indexed.update(_indexed_fields(node))

    tree = ast.parse(textwrap.dedent(kernel.adj.source))
    fdef = next(n for n in tree.body if isinstance(n, ast.FunctionDef))
    all_nodes: dict[tuple[str, ...], Node] = {}
    for root, node in nodes.items():
        _sub_nodes(node, (root,), all_nodes)
    flat = _Flatten(leafmap, set(all_nodes))
    flat.visit(fdef)
    if indexed:
        _indexed.rewrite(fdef, indexed, opname)
    # struct types the rebuilt values are made of, reached through the flat function's closure
    ctor: dict[str, str] = {}
    structs: dict[str, Any] = {}

    def collect(node: Node) -> None:
        if isinstance(node, IndexedNode):
            raise UnsupportedError(
                f"op {opname!r}: a struct holding the wp.indexedarray {node.path!r} is used as a whole value (passed "
                "to a function or assigned); an op reads such a field only as `struct.field[i, ...]`"
            )
        if node.struct_key not in ctor:
            ctor[node.struct_key] = f"__interop_struct{len(ctor)}"
            structs[ctor[node.struct_key]] = node.struct
        for c in node.children:
            if isinstance(c, Node):
                collect(c)

    prologue: list[ast.stmt] = []
    built: set = set()
    for path in sorted(flat.needed, key=lambda p: (len(p), p)):
        collect(all_nodes[path])
        prologue += _build_stmts(all_nodes[path], path, ctor, built)
    fdef.body = prologue + fdef.body
    # the flat signature, closing over the struct types the rebuilt values are made of
    flat_kernel = kernel_with_signature(
        kernel,
        tree,
        fdef,
        list(annotations),
        annotations,
        extra=structs,
        module=f"interop_struct.{kernel.key}",
        key=f"{kernel.key}{FLAT_SUFFIX}",
        label="flat kernel",
    )
    if prologue:
        _grad_pointers[flat_kernel] = frozenset(
            leaf.param for path in built for leaf in all_nodes[path].leaves() if leaf.is_array
        )
    return FlatKernel(kernel=flat_kernel, entries=tuple(entries))


# flat kernels that build struct values from their array parameters: Warp's adjoint of a read
# through such a value accumulates into the gradient pointer the array descriptor carries (as
# for tiles), so launches must set it (see _launch.Runner)
_grad_pointers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def grad_pointer_params(kernel: Any) -> frozenset:
    """The array parameters of flat kernel ``kernel`` that its struct values are built from, whose
    own gradient pointers its adjoint reads (empty for every other kernel)."""
    try:
        return _grad_pointers.get(kernel, frozenset())
    except TypeError:
        return frozenset()


# ---- describing: names given for structs, as leaves -------------------------------------------
def refuse_tree_outputs(label: str, outputs: list, inout_set: set, nodes: dict) -> None:
    """Refuse an output (not in-out) that the call cannot make: a view (``wp.indexedarray``) or a
    struct with scalar fields."""
    for n in outputs:
        node = nodes.get(n) if isinstance(n, str) else None
        if isinstance(node, IndexedNode) and n not in inout_set:
            raise ArgumentError(
                f"op {label!r}: parameter {n!r} is a wp.indexedarray, which the call cannot make: it is a view of "
                f"the caller's array. Describe it as in-out (in_out=[{n!r}]: the call passes "
                "interop.indexed(data, indices), data is updated through the view and returned) or pass "
                "outputs= naming the arrays the kernel writes"
            )
        if node is not None and n not in inout_set:
            scalars = [leaf.path for leaf in node.leaves() if not leaf.is_array]
            if scalars:
                raise ArgumentError(
                    f"op {label!r}: output {n!r} is struct {node.name}, whose field(s) {scalars} are not arrays: "
                    f"only arrays can be outputs. Describe it as in-out (in_out=[{n!r}]: the call passes the "
                    "struct, its array fields are updated in place and returned) or make it an output of array "
                    "fields only"
                )


def expand_names(values: Any, entries: tuple, what: str, opname: str, arrays_only: bool) -> tuple[str, ...]:
    """Names in ``values`` (a struct parameter, a dotted leaf ``"state.x"`` or a plain parameter)
    as flat parameter names; a struct stands for its array leaves (``arrays_only``) or all."""
    out: list[str] = []
    by_name = {e.field if isinstance(e, Node) else e: e for e in entries}
    for v in values:
        if not isinstance(v, str):
            out.append(v)  # the plain checks report it
            continue
        head, *rest = v.split(".")
        e = by_name.get(head)
        if isinstance(e, IndexedNode):
            out.append(e.field)  # the view stands for its data (index arrays are inputs only)
            continue
        if isinstance(e, Node):
            target: Any = e
            for part in rest:
                nxt = next((c for c in target.children if c.field == part), None) if isinstance(target, Node) else None
                if nxt is None:
                    raise ArgumentError(
                        f"op {opname!r}: {what} names {v!r}: struct {e.name} of parameter {head!r} has no field "
                        f"{part!r}"
                    )
                target = nxt
            if isinstance(target, Leaf):
                out.append(target.param)
            else:
                out.extend(
                    leaf.param
                    for leaf in target.leaves()
                    if (leaf.is_array and not _is_index_leaf(leaf)) or not arrays_only
                )
        else:
            out.append(v)
    return tuple(out)


def struct_output_dims(value: Any, entries: tuple, opname: str) -> Any:
    """``output_dims`` with each struct output's entry (a dict by field, or one shape for every
    array field) given per leaf."""
    if not isinstance(value, Mapping):
        return value
    nodes = {e.field: e for e in entries if isinstance(e, Node)}
    out: dict[str, Any] = {}
    for k, v in value.items():
        node = nodes.get(k)
        if node is None:
            out[k] = v
            continue
        _node_dims(node, v, out, opname)
    return out


def _node_dims(node: Node, v: Any, out: dict, opname: str) -> None:
    if isinstance(v, Mapping):
        fields = {c.field: c for c in node.children}
        for fk, fv in v.items():
            c = fields.get(fk)
            if c is None:
                raise ArgumentError(
                    f"op {opname!r}: output_dims[{node.path!r}] names {fk!r}, which is not a field of struct "
                    f"{node.name} (fields: {list(fields)})"
                )
            if isinstance(c, Node):
                _node_dims(c, fv, out, opname)
            else:
                out[c.param] = fv
        return
    for leaf in node.leaves():
        if leaf.is_array:
            out[leaf.param] = v


# ---- calling: the caller's structures taken apart and put back together -----------------------
def _field_of(value: Any, fname: str, node: Node, opname: str) -> Any:
    if isinstance(value, Mapping):
        try:
            return value[fname]
        except KeyError:
            raise ArgumentError(
                f"op {opname!r}, parameter {node.path!r}: expected struct {node.name} (a Warp struct instance, "
                f"a mapping or an object with its fields), got a mapping without field {fname!r} "
                f"(keys {list(value)})"
            ) from None
    try:
        return getattr(value, fname)
    except AttributeError:
        raise ArgumentError(
            f"op {opname!r}, parameter {node.path!r}: expected struct {node.name} (a Warp struct instance, a "
            f"mapping or an object with the fields {[c.field for c in node.children]}), got "
            f"{type(value).__name__} without field {fname!r}"
        ) from None


def _flatten_value(value: Any, node: Node, out: list, opname: str, skip: frozenset) -> None:
    wstruct = _warp_compat.struct_of_instance(value)
    if wstruct is not None and wstruct is not node.struct:
        raise ArgumentError(
            f"op {opname!r}, parameter {node.path!r}: expected struct {node.name}, got a Warp struct instance of "
            f"{_warp_compat.struct_name(wstruct)}"
        )
    if isinstance(value, Mapping):
        extra = [k for k in value if k not in {c.field for c in node.children}]
        if extra:
            raise ArgumentError(
                f"op {opname!r}, parameter {node.path!r}: struct {node.name} has no field(s) {extra} "
                f"(fields: {[c.field for c in node.children]})"
            )
    for c in node.children:
        if isinstance(c, Leaf) and c.param in skip:
            continue  # an output field (outputs=["state.x"]): the call makes it
        v = _field_of(value, c.field, node, opname)
        if isinstance(c, IndexedNode):
            out.extend(_indexed.flatten(v, c.path, c.ndim, opname)[0])
            continue
        if isinstance(c, Node):
            _flatten_value(v, c, out, opname, skip)
            continue
        if v is None:
            raise ArgumentError(
                f"op {opname!r}, parameter {c.path!r}: the field is not set (None); "
                f"give every field of struct {node.name} a value"
            )
        out.append(v)


def flatten_call(op_label: str, entries: tuple, called: tuple[bool, ...], skip: frozenset, args: tuple) -> tuple:
    """The flat arguments of a call whose arguments follow ``entries`` (those ``called``);
    ``skip``: the flat names of output leaves (not passed)."""
    out: list[Any] = []
    from_warp: list[int] = []
    for e, a in zip((e for e, c in zip(entries, called) if c), args):
        if isinstance(e, IndexedNode):
            leaves, warp_made = _indexed.flatten(a, e.field, e.ndim, op_label)
            if warp_made:
                from_warp.extend(range(len(out), len(out) + len(leaves)))
            out.extend(leaves)
        elif isinstance(e, Node):
            _flatten_value(a, e, out, op_label, skip)
        else:
            out.append(a)
    return tuple(_indexed.harmonize(out, from_warp))


def _replace(value: Any, node: Node, new: dict[str, Any]) -> Any:
    """``value`` (the caller's structure) with the fields in ``new`` replaced, as a new object of
    its type (JAX's arrays are immutable: an in-out struct comes back as a new structure)."""
    if isinstance(value, Mapping):
        d = dict(value)
        d.update(new)
        try:
            return type(value)(d)  # type: ignore[call-arg]
        except Exception:
            return d
    if hasattr(value, "_replace") and isinstance(value, tuple):
        return value._replace(**new)  # type: ignore[attr-defined]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        try:
            return dataclasses.replace(value, **new)
        except (TypeError, ValueError):
            pass
    out = copy.copy(value)
    for k, v in new.items():
        object.__setattr__(out, k, v)
    return out


def _rebuild(value: Any, node: Node, results: dict[str, Any]) -> Any:
    """The caller's in-out structure ``value`` as it is after the call: itself when every returned
    field is the object passed (updated in place), else a new one with the new fields."""
    if isinstance(node, IndexedNode):
        return results[node.field]  # the data: the object passed (updated in place) or JAX's new array
    new = {}
    for c in node.children:
        old = _field_of(value, c.field, node, "")
        if isinstance(c, IndexedNode):
            r = results.get(c.children[0].param)
            if r is not None and r is not _indexed.data_of(old):  # JAX: a view of the new data
                new[c.field] = _indexed.Indexed(r, _indexed.indices_of(old))
            continue
        if isinstance(c, Node):
            sub = _rebuild(old, c, results)
            if sub is not old:
                new[c.field] = sub
        elif c.param in results and results[c.param] is not old:
            new[c.field] = results[c.param]
    return _replace(value, node, new) if new else value


def _as_dict(node: Node, results: dict[str, Any]) -> dict:
    out = {}
    for c in node.children:
        if isinstance(c, Node):
            out[c.field] = _as_dict(c, results)
        elif c.param in results:
            out[c.field] = results[c.param]
    return out


def rebuild_results(
    entries: tuple, called: tuple[bool, ...], returned: tuple[bool, ...], args: tuple, flat_names: tuple, result: Any
) -> Any:
    """The call's result in terms of the original parameters: an in-out struct as the caller's
    structure (itself, updated in place, or a new one of its type), an output struct as a dict by
    field; plain parameters as they came."""
    values = (result,) if len(flat_names) == 1 else tuple(result)
    results = dict(zip(flat_names, values))
    given = {}
    it = iter(args)
    for e, c in zip(entries, called):
        if c:
            given[e.field if isinstance(e, Node) else e] = next(it)
    out = []
    for e, r in zip(entries, returned):
        if not r:
            continue
        if isinstance(e, Node):
            out.append(_rebuild(given[e.field], e, results) if e.field in given else _as_dict(e, results))
        else:
            out.append(results[e])
    return out[0] if len(out) == 1 else tuple(out)


def readable(e: BaseException, entries: tuple, *_: Any) -> BaseException:
    """``e`` with each leaf named by its path (``'state_in.x'``, not the flat kernel's
    ``'state_in__x'``), of the same type; ``e`` itself when it names no leaf."""
    msg = str(e)
    new_msg = msg
    for entry in entries:
        if isinstance(entry, Node):
            for leaf in entry.leaves():
                new_msg = new_msg.replace(f"'{leaf.param}'", f"'{leaf.path}'")
    new_msg = new_msg.replace(FLAT_SUFFIX, "")
    if new_msg == msg:
        return e
    try:
        new = type(e)(new_msg)
    except Exception:
        return e
    new.__cause__ = e.__cause__
    new.__traceback__ = e.__traceback__
    return new


def leaf_paths(entries: Any) -> dict[str, str]:
    """A struct op's flat parameters by their field paths (``state_in__x`` -> ``state_in.x``), for messages."""
    return {leaf.param: leaf.path for e in entries if isinstance(e, Node) for leaf in e.leaves()}
