"""Registering an op's torch operators with ``torch.library``: one ``custom_op`` per kind
(functional, mutable, backward) and scalar signature, each with its fake, autograd, vmap and
DTensor sharding rules, and the binding of an op found again by name.
"""

from __future__ import annotations

import collections
import weakref
from typing import Any

import torch

from interop._errors import ArgumentError

from . import sharding as _torch_sharding
from .autocast import register_direct as register_autocast
from .autograd import _make_backward, _make_setup_context
from .binding import _BINDINGS, _OVERLOADS, _bind_lock, _Binding, _make_fake, _make_impl
from .compat import (
    PLAIN_TENSOR_TYPES,
    assume_constant_result_of,
    direct_autograd_kernel,
    refusing_autograd_kernel,
    unregister,
)
from .eager_path import _eager_hook
from .forward_mode import make_backward_setup, make_double_backward
from .vmap import _make_vmap


def _binding(op) -> _Binding:
    b = _BINDINGS.get(op.description.name)
    if b is None or b._op() is not op:
        _release_dropped()
        with _bind_lock:
            b = _BINDINGS.get(op.description.name)
            if b is None or b._op() is not op:
                old = _BINDINGS.get(op.description.name)
                old_op = None if old is None else old._op()
                if old_op is not None:
                    # an equal-named op described again replaced the old one's operators
                    for t in PLAIN_TENSOR_TYPES:
                        old_op.eager_paths.pop(t, None)
                b = _Binding(op)
                _BINDINGS[op.description.name] = b
                hook = _eager_hook(b)
                for t in PLAIN_TENSOR_TYPES:
                    op.eager_paths[t] = hook
                weakref.finalize(op, _dropped.append, b)
    return b


# bindings whose op was dropped: their operators are unregistered at the next registration
# (never inside the garbage collector's callback, which may run anywhere, a trace included)
_dropped: collections.deque[_Binding] = collections.deque()


def _release_dropped() -> None:
    """Unregister the operators of the ops that were dropped (describe/drop loops stay bounded)."""
    if not _dropped or torch.compiler.is_compiling():
        return
    while True:
        try:
            b = _dropped.popleft()
        except IndexError:
            return
        with _bind_lock:
            if _BINDINGS.get(b.desc.name) is b:
                del _BINDINGS[b.desc.name]
            with b.lock:
                variants = list(b.variants.values())
                b.variants.clear()
            for ops in variants:
                for cdef in ops.values():
                    qual = getattr(cdef, "_qualname", None)
                    if qual is not None and _OVERLOADS.get(qual) is getattr(cdef, "_opoverload", None):
                        del _OVERLOADS[qual]
                    unregister(cdef)
        # what the binding caches goes now (an autograd node still alive keeps what it uses: its
        # Function class and that class's launch records). torch keeps the kernels it generated
        # for the unregistered operators, and through their closures this binding: it must hold
        # nothing big after this
        b.entries.clear()
        b.entry_last.clear()
        b.entry_matchers.clear()
        b.eager_runs.clear()
        b.eager_last = None
        b.quals.clear()
        b.functions.clear()
        b.__dict__.pop("_helpers", None)


def variant(b: _Binding, mask: tuple) -> dict[str, Any]:
    v = b.variants.get(mask)
    if v is None:
        with b.lock:
            v = b.variants.get(mask)
            if v is None:
                v = _register(b, mask)
                b.variants[mask] = v
    return v


def _refuse_mutable_grad(b: _Binding) -> None:
    raise ArgumentError(
        f"op {b.label!r}: its in-place operator torch.ops.{b.ns}.{b.base} has no gradient (PyTorch cannot "
        "attach a backward to a mutating operator) and a tensor given to it requires grad, whose gradient "
        "would be dropped: call the op itself, which then runs its functional operator under autograd and "
        "copies the new values in, or call the operator under torch.no_grad()"
    )


def _register(b: _Binding, mask: tuple) -> dict[str, Any]:
    if b.backward_op is not None:
        # the hand-written backward's operator exists whenever the forward's does: a compiled
        # backward loaded from torch.compile's caches calls it without tracing (and so without
        # the lazy registration a trace would do)
        _resolve(b.backward_op, None, "functional")
    kinds = ["functional"]
    if b.inout_pos:
        kinds.append("mutable")
    if b.backward_op is None:
        kinds.append("backward")
    ops: dict[str, Any] = {}
    for kind in kinds:
        qual = b.qualname(mask, "primary" if kind == b.primary_kind() else kind)
        mutates = tuple(b.call_params[i].name for i in b.inout_pos) if kind == "mutable" else ()
        impl = _make_impl(b, mask, kind)
        cdef = torch.library.custom_op(qual, impl, mutates_args=mutates, schema=b.schema(mask, kind))
        cdef.register_fake(_make_fake(b, mask, kind))
        if kind == "functional":
            cdef.register_autograd(_make_backward(b, mask), setup_context=_make_setup_context(b, mask))
            register_autocast(b, cdef)  # torch.ops.<ns>.<name> called directly under autocast
        elif kind == "backward":
            # second order through the op's tangent op (or its error, raised then)
            cdef.register_autograd(make_double_backward(b), setup_context=make_backward_setup(b))
        if kind != "mutable":
            # a call that needs no autograd node (every call inside a compiled graph) runs the
            # implementation without torch's second dispatch below Autograd
            direct_autograd_kernel(cdef, impl)
        else:
            # torch.ops.<ns>.<name> called directly with a tensor that wants a gradient: refused
            # (torch would drop it; the op itself runs the functional operator then)
            refusing_autograd_kernel(cdef, lambda b=b: _refuse_mutable_grad(b))
        cdef.register_vmap(_make_vmap(b, mask, kind))
        ops[kind] = cdef
        _OVERLOADS[qual] = cdef._opoverload
    _torch_sharding.register(b, mask, ops)
    return ops


@assume_constant_result_of  # torch.compiler.assume_constant_result, with the op passed by identity
def _resolve(op, mask: tuple | None, kind: str) -> str:
    """Qualified name of ``op``'s operator for one scalar signature, registering it on first use.

    ``mask`` says which scalar parameters are tensors (None: none). Marked constant for
    Dynamo: reached inside ``torch.compile`` it runs at trace time, so a first registration
    there does not break the graph.
    """
    b = _binding(op)
    if mask is None:
        mask = b.base_mask
    q = b.quals.get((mask, kind))
    if q is None:
        variant(b, mask)
        q = b.qualname(mask, "primary" if kind == b.primary_kind() else kind)
        b.quals[(mask, kind)] = q
    return q
