"""Kernel variants whose scalar parameters are one-element arrays (the scalars' adjoints).

``wp.launch(adjoint=True)`` never writes a scalar parameter's adjoint back, so a scalar that needs
a gradient is passed as a 1-element array to a copy of the kernel that reads it once: the adjoint
accumulates the scalar's gradient there, summed over threads. Also here: the lock held while Warp
builds or loads a module, and the retry for CPython 3.11's ``ast`` thread race.
"""

from __future__ import annotations

import ast
import threading
import types as _pytypes
import weakref
from typing import Any, Callable, Sequence

import warp as wp

# Held while Warp builds or loads a module (recording a launch, a Python-function op's own
# launches). Warp 1.19's ``Module.load`` is not thread-safe: two threads loading one module
# hash load the same object twice under one name, and dropping either copy unloads the code
# the other's launch records still call (a segfault). Replaying a recorded launch never loads,
# so the hot path does not take this lock.
build_lock = threading.RLock()


class _ScalarsAsArrays(ast.NodeTransformer):
    """Rename uses of scalar ``s`` to a local read once from the 1-element array ``s``."""

    def __init__(self, names: Sequence[str]):
        self.names = set(names)

    def visit_FunctionDef(self, node: ast.FunctionDef):
        node.body = [self.visit(stmt) for stmt in node.body]
        loads = [
            ast.Assign(
                targets=[ast.Name(id=f"{n}__interop_value", ctx=ast.Store())],
                value=ast.Subscript(value=ast.Name(id=n, ctx=ast.Load()), slice=ast.Constant(0), ctx=ast.Load()),
            )
            for n in sorted(self.names)
        ]
        node.body = loads + node.body
        node.decorator_list = []
        return ast.fix_missing_locations(ast.copy_location(node, node))

    def visit_Name(self, node: ast.Name):
        if node.id in self.names:
            return ast.copy_location(ast.Name(id=f"{node.id}__interop_value", ctx=node.ctx), node)
        return node


_AST_RACE = "AST constructor recursion depth mismatch"


def retry_ast_race(make: Callable[[], Any], attempts: int = 5) -> Any:
    """``make()``, again when CPython's ``ast`` module reports its thread race.

    CPython 3.11 keeps the AST constructor's recursion depth in interpreter-wide state
    (python/cpython gh-106905): an ``ast.parse`` in one thread that runs while another
    thread's is suspended makes the suspended one raise ``SystemError(AST constructor
    recursion depth mismatch)``. Nothing is left half-made (the depth is reset on each
    parse), so parsing again is correct. Reproduced on CPython 3.11.7 (the test in
    tests/test_threads.py), not on 3.12.1 or 3.13.0.
    """
    for attempt in range(attempts):
        try:
            return make()
        except SystemError as e:
            if _AST_RACE not in str(e) or attempt == attempts - 1:
                raise
    raise AssertionError("unreachable")


# kernel -> {scalar names: variant}; weak, so a dropped op's kernel (and its variants) can go
_variants: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_variant_lock = threading.Lock()


def scalar_ref_kernel(kernel, names: tuple[str, ...]):
    """A copy of ``kernel`` where each scalar parameter in ``names`` is a 1-element array.

    The body reads the value once (``s = s_arr[0]``), so the adjoint accumulates the
    scalar's gradient into the gradient array, summed over all threads.
    """
    # build_lock first: Warp parses the source in wp.Kernel, as it may while building a module,
    # so no two threads of this package parse at once (see retry_ast_race)
    with build_lock, _variant_lock:
        per_kernel = _variants.get(kernel)
        if per_kernel is None:
            per_kernel = _variants[kernel] = {}
        k = per_kernel.get(names)
        if k is not None:
            return k
        f = kernel.func
        ann = dict(kernel.adj.arg_types)
        for n in names:
            ann[n] = wp.array(dtype=ann[n], ndim=1)
        fn = _pytypes.FunctionType(f.__code__, f.__globals__, f.__name__, f.__defaults__, f.__closure__)
        fn.__annotations__ = ann
        fn.__qualname__ = f.__qualname__
        fn.__module__ = f.__module__
        suffix = "_".join(names)
        # overloads of one generic kernel share its key: their signature tells them apart
        parent = getattr(kernel, "generic_parent", None)
        sig = next((s for s, k in (parent.overloads.items() if parent else ()) if k is kernel), "")
        if sig:
            suffix += "__" + sig
        module = wp.get_module(f"interop_scalar_ref.{kernel.key}.{suffix}")
        # the kernel's module options hold for its variant too (fast_math, mode, deterministic,
        # block_dim, max_unroll, ... set with wp.set_module_options or module_options=)
        module.options.update(kernel.module.options)
        k = retry_ast_race(
            lambda: wp.Kernel(
                fn,
                key=f"{kernel.key}__scalar_ref_{suffix}",
                module=module,
                options=dict(kernel.options or {}),
                code_transformers=[_ScalarsAsArrays(names)],
                source=kernel.adj.source,
            )
        )
        per_kernel[names] = k
        return k
