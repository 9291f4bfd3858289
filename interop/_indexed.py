"""Indexed-array parameters: ``wp.indexedarray`` kernels called with any framework's arrays.

Warp's own adjoint does not differentiate through an indexed array (``adj_address`` of an
``indexedarray_t`` is empty in warp/native/array.h, and ``wp.Tape`` fails on one), so the
package does not launch the kernel with a ``wp.indexedarray`` at all. A parameter
``a: wp.indexedarray(dtype=T, ndim=n)`` is described, like a struct (``_structs``), as a tree of
leaves: the data ``a`` (a plain ``wp.array(dtype=T, ndim=n)``) and one int32 index array
``a__idx0`` ... ``a__idx{n-1}`` per dimension, and the kernel is read again from its source with
every access through the view made explicit: ``a[i, j]`` becomes ``a[a__idx0[i], a__idx1[j]]``,
``wp.atomic_add(a, i, v)`` becomes ``wp.atomic_add(a, a__idx0[i], v)``, ``a.shape[k]`` the
length of index ``k``. The plan, the launch domain, Warp's adjoint (gradients scattered into the
data's gradient through the same indices, repeated indices accumulating), the tangent kernels and
every adapter then see plain arrays. A dimension given no index (``None``) takes ``0..n-1``, made
in the data's framework at the call (a small int32 array; the data is never copied).
"""

from __future__ import annotations

import ast
import collections
import copy
import importlib
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np
import warp as wp

from . import _extent, _warp_compat
from ._errors import ArgumentError, UnsupportedError
from ._frameworks import adapter, framework_of

IDX = "__idx"
_ATOMIC_CAS = "atomic_cas"
_ATOMICS = _extent.ATOMICS - {_ATOMIC_CAS}  # (a compare-and-swap takes two values)


class Indexed:
    """A view of ``data`` through one int32 index array (or ``None``) per dimension, as
    ``wp.indexedarray`` takes them; made by :func:`interop.indexed`."""

    __slots__ = ("data", "indices")

    def __init__(self, data: Any, indices: tuple) -> None:
        self.data = data
        self.indices = indices

    def __repr__(self) -> str:
        shapes = [None if i is None else tuple(getattr(i, "shape", ())) for i in self.indices]
        return (
            f"interop.indexed({type(self.data).__name__} of shape {tuple(getattr(self.data, 'shape', ()))}, {shapes})"
        )


def indexed(data: Any, indices: Any) -> Indexed:
    """A view of ``data`` selecting entries through index arrays, for a ``wp.indexedarray`` parameter.

    Args:
        data: an array of any supported framework (NumPy, Warp, PyTorch, JAX, Paddle, CuPy).
        indices: one index array per leading dimension of ``data`` (int32, 1-D, from the same
            framework and on the same device), or ``None`` for a whole dimension; a single
            array stands for ``[array]``. Dimensions past the list are taken whole.

    Returns:
        An object that an op accepts wherever the kernel's parameter is a ``wp.indexedarray``:
        the kernel reads and writes ``data`` itself through the indices (no copy). Gradients
        reach ``data`` (scattered through the indices); index arrays are not differentiable.

    Raises:
        ArgumentError: ``indices`` is not an array, ``None`` or a sequence of them.

    Example:
        >>> import numpy as np, warp as wp, interop
        >>> @wp.kernel
        ... def double(a: wp.indexedarray(dtype=float), out: wp.array(dtype=float)):
        ...     i = wp.tid()
        ...     out[i] = 2.0 * a[i]
        >>> op = interop.op(double)
        >>> op(interop.indexed(np.arange(5, dtype=np.float32), np.array([4, 0], dtype=np.int32)))
        array([8., 0.], dtype=float32)
    """
    if data is None:
        raise ArgumentError("interop.indexed: data must be an array, got None")
    if indices is None or not isinstance(indices, (list, tuple)):
        indices = [indices]
    fw = framework_of(data)
    if fw == "jax" or fw == "torch":
        adapter(fw)  # registers Indexed as a pytree: a view may be a transform's argument
    return Indexed(data, tuple(indices))


# ---- describing ------------------------------------------------------------------------------
def is_indexed(ann: Any) -> bool:
    """Whether annotation ``ann`` is a ``wp.indexedarray`` (either spelling)."""
    return _warp_compat.is_indexed_array_annotation(ann)


def leaf_names(pname: str, ndim: int) -> list[str]:
    """The flat parameters of indexed parameter ``pname``: the data, then the index arrays."""
    return [pname] + [f"{pname}{IDX}{k}" for k in range(ndim)]


def leaf_annotations(pname: str, ann: Any) -> dict[str, Any]:
    """The flat parameters' annotations: the data a plain array of the view's dtype and ndim."""
    ndim = int(ann.ndim)
    out: dict[str, Any] = {pname: wp.array(dtype=ann.dtype, ndim=ndim)}
    for k in range(ndim):
        out[f"{pname}{IDX}{k}"] = wp.array(dtype=wp.int32, ndim=1)
    return out


def rewrite(fdef: ast.FunctionDef, dims: dict[str, int], opname: str) -> None:
    """Make every access through the indexed parameters ``dims`` (name -> ndim) explicit."""
    stores = collections.Counter(
        n.id for n in ast.walk(fdef) if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del))
    )
    fdef.body = _Rewrite(dims, opname, stores).visit_body(fdef.body)


def _idx_name(name: str, k: int) -> ast.Name:
    return ast.Name(id=f"{name}{IDX}{k}", ctx=ast.Load())


def _indices_of(sl: ast.expr) -> list[ast.expr]:
    return list(sl.elts) if isinstance(sl, ast.Tuple) else [sl]


def _tuple_or_one(elts: list[ast.expr]) -> ast.expr:
    return elts[0] if len(elts) == 1 else ast.Tuple(elts=elts, ctx=ast.Load())


class _Rewrite(ast.NodeTransformer):
    """The rewrite. A view of the view bound once to a local (``row = a[i]``, the names in its
    indices never reassigned) is an alias: ``row[j]`` reads ``a[a__idx0[i], a__idx1[j]]``."""

    def __init__(self, dims: dict[str, int], opname: str, stores: collections.Counter):
        self.dims = dims
        self.opname = opname
        self.stores = stores
        self.aliases: dict[str, tuple[str, list[ast.expr]]] = {}  # local -> (parameter, its first indices)

    def visit_body(self, body: list[ast.stmt]) -> list[ast.stmt]:
        out = []
        for stmt in body:
            new = self.visit(stmt)
            if new is not None:
                out.append(new)
        return out

    def _refuse(self, name: str, node: ast.AST, what: str) -> UnsupportedError:
        base = self.aliases[name][0] if name in self.aliases else name
        return UnsupportedError(
            f"op {self.opname!r}: parameter {base!r} is a wp.indexedarray, and the kernel {what} "
            f"(`{ast.unparse(node)}`); an op supports reading and writing its elements (`{base}[i, ...]` with "
            f"all {self.dims[base]} indices, also through a view bound once, `row = {base}[i]`), wp.atomic_* on "
            f"them, `{base}.shape[k]` and `len({base})`. Index the view fully, or annotate the parameter as a "
            "plain array and pass the rows it needs"
        )

    def _root(self, name: str) -> tuple[str, list[ast.expr]] | None:
        """(parameter, the index expressions an alias fixes) of a name that is a view."""
        if name in self.dims:
            return name, []
        if name in self.aliases:
            base, fixed = self.aliases[name]
            return base, [copy.deepcopy(e) for e in fixed]
        return None

    def _chain(self, node: ast.Subscript) -> tuple[str, list[ast.expr], list[ast.expr]] | None:
        parts: list[ast.expr] = []
        n: ast.expr = node
        while isinstance(n, ast.Subscript):
            parts = _indices_of(n.slice) + parts
            n = n.value
        root = self._root(n.id) if isinstance(n, ast.Name) else None
        return None if root is None else (root[0], root[1], parts)

    def _indices(self, base: str, fixed: list[ast.expr], parts: list[ast.expr]) -> list[ast.expr]:
        """The data's indices: those an alias fixed, then each given index through its index array."""
        return fixed + [
            ast.Subscript(value=_idx_name(base, len(fixed) + k), slice=self.visit(e), ctx=ast.Load())
            for k, e in enumerate(parts)
        ]

    def visit_Assign(self, node: ast.Assign):
        t, v = node.targets, node.value
        if len(t) == 1 and isinstance(t[0], ast.Name) and isinstance(v, ast.Subscript):
            chain = self._chain(v)
            if chain is not None and len(chain[1]) + len(chain[2]) < self.dims[chain[0]]:
                base, fixed, parts = chain
                used = {n.id for e in parts for n in ast.walk(e) if isinstance(n, ast.Name)}
                if self.stores[t[0].id] != 1 or any(self.stores[u] > 1 for u in used):
                    raise self._refuse(base, node, "binds a view of it to a name assigned more than once")
                self.aliases[t[0].id] = (base, self._indices(base, fixed, parts))
                return None  # each use of the alias reads through the data
        return self.generic_visit(node)

    def visit_Subscript(self, node: ast.Subscript):
        v = node.value
        if isinstance(v, ast.Attribute) and v.attr == "shape" and isinstance(v.value, ast.Name):
            root = self._root(v.value.id)
            if root is not None:
                base, fixed = root
                k = node.slice
                if not (
                    isinstance(k, ast.Constant)
                    and isinstance(k.value, int)
                    and 0 <= k.value < self.dims[base] - len(fixed)
                ):
                    raise self._refuse(v.value.id, node, "reads its shape by an index that is not a constant dimension")
                new = ast.parse(f"{base}{IDX}{len(fixed) + k.value}.shape[0]", mode="eval").body
                return ast.copy_location(new, node)
        chain = self._chain(node)
        if chain is None:
            return self.generic_visit(node)
        base, fixed, parts = chain
        n = self.dims[base] - len(fixed)
        if len(parts) < n:
            raise self._refuse(
                base, node, f"takes a view of it with {len(fixed) + len(parts)} of its {self.dims[base]} indices"
            )
        new = ast.Subscript(
            value=ast.Name(id=base, ctx=ast.Load()),
            slice=_tuple_or_one(self._indices(base, fixed, parts[:n])),
            ctx=node.ctx if len(parts) == n else ast.Load(),
        )
        rest = [self.visit(e) for e in parts[n:]]
        if rest:  # components of a vector/matrix element: a[i][0]
            new = ast.Subscript(value=new, slice=_tuple_or_one(rest), ctx=node.ctx)
        return ast.copy_location(new, node)

    def visit_Call(self, node: ast.Call):
        f = node.func
        fname = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
        a0 = node.args[0] if node.args else None
        root = self._root(a0.id) if isinstance(a0, ast.Name) else None
        if root is not None:
            base, fixed = root
            n = self.dims[base] - len(fixed)
            if fname == "len" and len(node.args) == 1:
                return ast.copy_location(ast.parse(f"{base}{IDX}{len(fixed)}.shape[0]", mode="eval").body, node)
            extra = 2 if fname == _ATOMIC_CAS else 1 if fname in _ATOMICS else None
            if extra is None or node.keywords or len(node.args) != 1 + n + extra:
                raise self._refuse(a0.id, node, "passes it whole to a function")  # type: ignore[union-attr]
            idx = self._indices(base, fixed, node.args[1 : 1 + n])
            node.args = [ast.Name(id=base, ctx=ast.Load()), *idx, *(self.visit(e) for e in node.args[1 + n :])]
            node.func = self.visit(f)
            return node
        return self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute):
        name = node.value.id if isinstance(node.value, ast.Name) else None
        root = self._root(name) if name is not None else None
        if root is None:
            return self.generic_visit(node)
        if node.attr == "dtype":  # the data's, for the view and its views alike
            return ast.copy_location(ast.parse(f"{root[0]}.dtype", mode="eval").body, node)
        if node.attr == "ndim" and not root[1]:
            return node
        raise self._refuse(name, node, f"reads its {node.attr!r} whole")  # type: ignore[arg-type]

    def visit_Name(self, node: ast.Name):
        if self._root(node.id) is not None:
            raise self._refuse(node.id, node, "uses it as a value")
        return node


# ---- calling ---------------------------------------------------------------------------------
def flatten(value: Any, pname: str, ndim: int, opname: str) -> tuple[list[Any], bool]:
    """The leaves of a caller's indexed argument (data, then one index per dimension) and whether
    they came from a ``wp.indexedarray``."""
    from_warp = False
    if isinstance(value, Indexed):
        data, indices = value.data, list(value.indices)
    elif _warp_compat.is_indexedarray_value(value):
        data, indices = _warp_compat.indexedarray_parts(value)
        from_warp = True
    elif _warp_compat.is_fabric_value(value):
        raise ArgumentError(
            f"op {opname!r}, parameter {pname!r}: got a {type(value).__name__}; fabric arrays address Omniverse "
            "Fabric memory, which no framework array holds: pass interop.indexed(data, indices)"
        )
    elif framework_of(value) not in (None, "unsupported"):
        data, indices = value, []  # a whole array: every index taken whole
    else:
        raise ArgumentError(
            f"op {opname!r}, parameter {pname!r}: expected interop.indexed(data, indices) (a wp.indexedarray in "
            f"NumPy and Warp calls) or an array for this wp.indexedarray(ndim={ndim}) parameter, got "
            f"{type(value).__name__}"
        )
    if len(indices) > ndim and any(i is not None for i in indices[ndim:]):
        raise ArgumentError(
            f"op {opname!r}, parameter {pname!r}: {len(indices)} index arrays given for a wp.indexedarray of "
            f"{ndim} dimension(s)"
        )
    indices = (indices + [None] * ndim)[:ndim]
    out = [data]
    for k, idx in enumerate(indices):
        out.append(_whole(data, k, pname, opname) if idx is None else idx)
    return out, from_warp


def _whole(data: Any, k: int, pname: str, opname: str) -> Any:
    """The index ``0..n-1`` of dimension ``k`` of ``data``, in data's framework and on its device."""
    shape = getattr(data, "shape", None)
    if shape is None or len(shape) <= k:
        raise ArgumentError(
            f"op {opname!r}, parameter {pname!r}: data has {0 if shape is None else len(shape)} dimension(s), "
            f"the view indexes dimension {k}"
        )
    n = int(shape[k])
    fw = framework_of(data)
    if fw == "numpy":
        return np.arange(n, dtype=np.int32)
    if fw == "warp":
        return wp.array(np.arange(n, dtype=np.int32), dtype=wp.int32, device=data.device)
    if fw == "torch":
        torch = sys.modules["torch"]
        return torch.arange(n, dtype=torch.int32, device=data.device)
    if fw == "jax":
        jnp = importlib.import_module("jax.numpy")
        try:
            (dev,) = data.devices()
        except Exception:  # a tracer: a constant of the computation, which places it
            return jnp.arange(n, dtype=jnp.int32)
        return jnp.arange(n, dtype=jnp.int32, device=dev)
    if fw == "paddle":
        paddle = sys.modules["paddle"]
        return paddle.to_tensor(np.arange(n, dtype=np.int32), place=data.place)
    if fw == "cupy":
        cupy = sys.modules["cupy"]
        with data.device:
            return cupy.arange(n, dtype=cupy.int32)
    return np.arange(n, dtype=np.int32)  # the plain checks report data's type


def data_of(view: Any) -> Any:
    """The data of a caller's view (``interop.indexed`` or ``wp.indexedarray``), or the array itself."""
    if isinstance(view, Indexed):
        return view.data
    if _warp_compat.is_indexedarray_value(view):
        return _warp_compat.indexedarray_parts(view)[0]
    return view


def indices_of(view: Any) -> tuple:
    """The indices of a caller's view (none for a whole array)."""
    if isinstance(view, Indexed):
        return view.indices
    if _warp_compat.is_indexedarray_value(view):
        return tuple(_warp_compat.indexedarray_parts(view)[1])
    return ()


def harmonize(flat: list[Any], from_warp: Sequence[int]) -> list[Any]:
    """A ``wp.indexedarray`` passed to a NumPy call: its CPU leaves as NumPy views (no copy)."""
    if not from_warp:
        return flat
    others = [framework_of(x) for i, x in enumerate(flat) if i not in from_warp]
    fws = [f for f in others if f is not None]
    if not fws or fws[0] != "numpy":
        return flat
    out = list(flat)
    for i in from_warp:
        x = out[i]
        if framework_of(x) == "warp" and str(x.device) == "cpu":
            out[i] = x.numpy()
    return out
