"""The Warp functions a checked kernel calls at each array access (see :mod:`interop._checked`).

Every check goes through one function per array rank, ``_interop_ck_ok<N>(a, i0.., err, site)``:
it compares each index with the array's extent and, for the first out-of-range access of a launch,
records ``site`` (which access, see :mod:`interop._checked.record`), the axis, the index and the
array's shape into the error array ``err``. Reads (``_interop_ck_load<N>``: the element, or zero),
atomics used as values (``_interop_ck_<atomic><N>``: the old value, or zero) and tile offsets
(``_interop_ck_off<N>``: the offset, or the array's extent, where a tile reads and writes nothing)
are built on it; stores and statement atomics are guarded by it. An indexed array (or any other
array kind) gets its checks by adding overloads of these functions.
"""

from __future__ import annotations

import threading
from typing import Any

import warp as wp

from .. import _extent
from .._source import compile_function, register_function
from .._warp_compat import builtin_function

MAX_NDIM = 4
# err: [count, site, axis, index, ndim, shape0..shape3]; count says how many accesses were refused
RECORD_SIZE = 16
ERR = "_interop_err"
# a checked wp.func's last parameter: the site of the kernel's call it runs under, times CALLER
AT = "_interop_at"
CALLER = 1 << 20
# the atomics checked mode wraps (a compare-and-swap is not: see docs/checked.md)
ATOMICS = tuple(sorted(_extent.ATOMICS - {"atomic_cas"}))

_FAIL = """
def _interop_ck_fail(err: wp.array(dtype=wp.int64), site: Any, axis: int, index: wp.int64, ndim: int,
                     s0: int, s1: int, s2: int, s3: int):
    if wp.atomic_add(err, 0, wp.int64(1)) == wp.int64(0):
        err[1] = wp.int64(site)
        err[2] = wp.int64(axis)
        err[3] = index
        err[4] = wp.int64(ndim)
        err[5] = wp.int64(s0)
        err[6] = wp.int64(s1)
        err[7] = wp.int64(s2)
        err[8] = wp.int64(s3)
"""


def _shape_args(nd: int) -> str:
    return ", ".join([f"a.shape[{k}]" for k in range(nd)] + ["0"] * (MAX_NDIM - nd))


def _ok(nd: int) -> str:
    idx = ", ".join(f"i{k}: wp.int64" for k in range(nd))
    lines = [
        f"def _interop_ck_ok{nd}(a: wp.array(dtype=Any, ndim={nd}), {idx}, err: wp.array(dtype=wp.int64), site: Any):"
    ]
    for k in range(nd):
        lines += [
            f"    j{k} = i{k}",
            f"    if j{k} < wp.int64(0) or j{k} >= wp.int64(a.shape[{k}]):",
            f"        _interop_ck_fail(err, site, {k}, j{k}, {nd}, {_shape_args(nd)})",
            "        return False",
        ]
    return "\n".join([*lines, "    return True"]) + "\n"


def _load(nd: int) -> str:
    idx = ", ".join(f"i{k}" for k in range(nd))
    return (
        f"def _interop_ck_load{nd}(a: wp.array(dtype=Any, ndim={nd}), {', '.join(f'i{k}: wp.int64' for k in range(nd))}, "
        "err: wp.array(dtype=wp.int64), site: Any):\n"
        f"    if _interop_ck_ok{nd}(a, {idx}, err, site):\n"
        f"        return a[{idx}]\n"
        "    return a.dtype(0)\n"
    )


def _atomic(name: str, nd: int) -> str:
    idx = ", ".join(f"i{k}" for k in range(nd))
    return (
        f"def _interop_ck_{name}{nd}(a: wp.array(dtype=Any, ndim={nd}), {', '.join(f'i{k}: wp.int64' for k in range(nd))}, "
        "v: Any, err: wp.array(dtype=wp.int64), site: Any):\n"
        f"    if _interop_ck_ok{nd}(a, {idx}, err, site):\n"
        f"        return wp.{name}(a, {idx}, v)\n"
        "    return a.dtype(0)\n"
    )


def _offset(nd: int) -> str:
    return (
        f"def _interop_ck_off{nd}(a: wp.array(dtype=Any, ndim={nd}), axis: int, o: wp.int64, "
        "err: wp.array(dtype=wp.int64), site: Any):\n"
        "    j = o\n"
        "    n = a.shape[axis]\n"
        "    if j < wp.int64(0) or j >= wp.int64(n):\n"
        f"        _interop_ck_fail(err, site, axis, j, {nd}, {_shape_args(nd)})\n"
        "        return wp.int32(n)\n"
        "    return wp.int32(o)\n"
    )


def _component(nd: int) -> str:
    """``_interop_ck_cok<N>(a, n, k, axis, err, site)``: whether ``k`` is a component index of an
    element of ``a`` (``n`` components: a vector's length, a matrix's rows or columns), recording the
    access where it is not, as an index along ``axis`` past the array's own; ``_interop_ck_cix<N>``:
    the index, or 0 where it is out of range (a read then reads a component that is there)."""
    shape = ", ".join([f"a.shape[{k}]" for k in range(nd)] + ["n"] + ["0"] * (MAX_NDIM - nd - 1))
    shape = ", ".join(shape.split(", ")[:MAX_NDIM])
    head = (
        f"(a: wp.array(dtype=Any, ndim={nd}), n: int, k: wp.int64, axis: int, err: wp.array(dtype=wp.int64), site: Any)"
    )
    return (
        f"def _interop_ck_cok{nd}{head}:\n"
        "    if k < wp.int64(0) or k >= wp.int64(n):\n"
        f"        _interop_ck_fail(err, site, axis, k, {min(nd + 1, MAX_NDIM)}, {shape})\n"
        "        return False\n"
        "    return True\n"
        f"def _interop_ck_cix{nd}{head}:\n"
        f"    if _interop_ck_cok{nd}(a, n, k, axis, err, site):\n"
        "        return wp.int32(k)\n"
        "    return wp.int32(0)\n"
    )


_lock = threading.Lock()
_helpers: dict[str, Any] = {}


def helpers() -> dict[str, Any]:
    """Name -> ``wp.func`` of every helper (built once, in a Warp module of their own)."""
    with _lock:
        if _helpers:
            return _helpers
        module = wp.get_module("interop_checked_helpers")
        ns: dict[str, Any] = {"wp": wp, "Any": Any}
        texts = [("_interop_ck_fail", _FAIL.strip() + "\n")]
        for nd in range(1, MAX_NDIM + 1):
            texts += [(f"_interop_ck_ok{nd}", _ok(nd)), (f"_interop_ck_load{nd}", _load(nd))]
            texts += [(f"_interop_ck_off{nd}", _offset(nd))]
            ok, ix = _component(nd).split(f"def _interop_ck_cix{nd}")
            texts += [(f"_interop_ck_cok{nd}", ok), (f"_interop_ck_cix{nd}", f"def _interop_ck_cix{nd}" + ix)]
            texts += [(f"_interop_ck_{a}{nd}", _atomic(a, nd)) for a in ATOMICS if builtin_function(a) is not None]
        for name, text in texts:
            fn = compile_function(text, name, ns, None, "checked")
            ns[name] = register_function(fn, name, module, text)
        _helpers.update({k: v for k, v in ns.items() if k.startswith("_interop_ck_")})
        _helpers["_interop_ck_wp"] = wp  # the module as checked code names it (the user's may differ)
        return _helpers
