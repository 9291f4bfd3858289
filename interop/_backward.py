"""Hand-written backward kernels in their author's parameter order.

An op's hand-written backward is called with the forward's call parameters (inputs and in-out, in
order), one upstream gradient per returned array, then one gradient output per differentiable
array input (see ``_description._describe_backward``). A kernel shipped with its own order
(physicsnemo's ``grad0, grad1, grad2, inv_dx0, inv_dx1, inv_dx2, grad_field``) is given through
:func:`backward` with a mapping from its parameters to those slots; the package then makes, once,
a kernel of the same body whose signature is in that order (slots the kernel does not read get a
parameter it never uses), and describes it as any backward.
"""

from __future__ import annotations

import ast
import hashlib
import textwrap
import threading
from dataclasses import dataclass
from typing import Any, Sequence

import warp as wp

from ._codegen import kernel_with_signature
from ._errors import ArgumentError

ADJ, GRAD = "adj_", "grad_"


@dataclass(frozen=True)
class Backward:
    """A backward kernel and where each of its parameters comes from (see :func:`backward`)."""

    kernel: Any
    sources: tuple[tuple[str, str], ...]  # (kernel parameter, slot), sorted

    def __repr__(self) -> str:
        return (
            f"interop.backward({getattr(self.kernel, 'key', self.kernel)!r}, "
            + ", ".join(f"{p}={s!r}" for p, s in self.sources)
            + ")"
        )


def backward(kernel: Any, **sources: str) -> Backward:
    """A hand-written backward kernel used as its author wrote it, for ``interop.op(..., backward=)``.

    Each keyword maps one of the kernel's parameters to what the op passes there: a forward input
    or in-out parameter by its name (``inv_dx0="inv_dx0"``), the upstream gradient of a returned
    array as ``"adj_<name>"`` (``grad0="adj_grad0"``), or the gradient the kernel writes for a
    differentiable array input as ``"grad_<name>"`` (``grad_field="grad_field"``). A parameter not
    named maps to the slot spelled like itself. Slots the kernel has no parameter for (a forward
    input it does not read) are left out of its call.

    Args:
        kernel: the backward ``wp.kernel``.
        **sources: kernel parameter -> slot.

    Returns:
        A hashable :class:`Backward` (part of the forward op's identity).

    Example:
        >>> import warp as wp, interop
        >>> @wp.kernel(module="unique")
        ... def scale_bwd(adj: wp.array(dtype=float), s: float, gx: wp.array(dtype=float)):
        ...     i = wp.tid()
        ...     gx[i] = adj[i] * s
        >>> interop.backward(scale_bwd, adj="adj_out", gx="grad_x")
        interop.backward('scale_bwd', adj='adj_out', gx='grad_x')
    """
    if not isinstance(kernel, wp.Kernel):
        raise ArgumentError(f"interop.backward: kernel must be a wp.kernel, got {type(kernel).__name__}")
    names = [a.label for a in kernel.adj.args]
    for p, slot in sources.items():
        if p not in names:
            raise ArgumentError(
                f"interop.backward({kernel.key}): {p!r} is not a parameter of the kernel; its parameters are {names}"
            )
        if not isinstance(slot, str):
            raise ArgumentError(
                f"interop.backward({kernel.key}): {p}= must be a slot name (a forward input, 'adj_<returned>' "
                f"or 'grad_<input>'), got {type(slot).__name__}"
            )
    full = {n: sources.get(n, n) for n in names}
    return Backward(kernel, tuple(sorted(full.items())))


_made: dict[tuple, Any] = {}
_lock = threading.Lock()


def conventional_kernel(spec: Backward, slots: Sequence[tuple[str, Any]], opname: str) -> Any:
    """The kernel of ``spec`` with its parameters in the conventional order of ``slots``
    (``(slot name, annotation)``, inputs then ``adj_*`` then ``grad_*``), made once per spec."""
    slot_names = [s for s, _ in slots]
    by_slot: dict[str, str] = {}
    for p, slot in spec.sources:
        if slot not in slot_names:
            raise ArgumentError(
                f"op {opname!r}: backward {spec.kernel.key!r}: parameter {p!r} is given {slot!r}, which is not a "
                f"slot of this op; slots are the forward's inputs {[s for s in slot_names if not s.startswith((ADJ, GRAD))]}, "
                f"the upstream gradients {[s for s in slot_names if s.startswith(ADJ)]} and the gradient outputs "
                f"{[s for s in slot_names if s.startswith(GRAD)]} (map it with interop.backward(kernel, {p}=<slot>))"
            )
        if slot in by_slot:
            raise ArgumentError(
                f"op {opname!r}: backward {spec.kernel.key!r}: parameters {by_slot[slot]!r} and {p!r} both take {slot!r}"
            )
        by_slot[slot] = p
    missing = [s for s in slot_names if s.startswith(GRAD) and s not in by_slot]
    if missing:
        raise ArgumentError(
            f"op {opname!r}: backward {spec.kernel.key!r}: no parameter writes the gradient for {missing}; map one "
            "to each (interop.backward(kernel, <parameter>='grad_<input>'))"
        )
    key = (spec, tuple(slot_names))
    with _lock:
        got = _made.get(key)
        if got is None:
            got = _made[key] = _reorder(spec.kernel, slots, by_slot)
        return got


def _reorder(kernel: Any, slots: Sequence[tuple[str, Any]], by_slot: dict[str, str]) -> Any:
    anns = {a.label: a.type for a in kernel.adj.args}
    taken = set(anns)
    order: list[str] = []
    annotations: dict[str, Any] = {}
    for slot, ann in slots:
        p = by_slot.get(slot)
        if p is None:  # a slot the kernel does not read: a parameter it never uses
            p = f"unused_{slot}"
            while p in taken:
                p = "_" + p
            taken.add(p)
            annotations[p] = ann
        else:
            annotations[p] = anns[p]
        order.append(p)
    tree = ast.parse(textwrap.dedent(kernel.adj.source))
    fdef = next(n for n in tree.body if isinstance(n, ast.FunctionDef))
    digest = hashlib.sha1(repr(order).encode()).hexdigest()[:6]
    return kernel_with_signature(
        kernel,
        tree,
        fdef,
        order,
        annotations,
        module=f"interop_backward.{kernel.key}",
        key=f"{kernel.key}__interop_bwd_{digest}",
        label="backward",
    )
