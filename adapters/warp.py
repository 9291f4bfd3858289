"""Warp adapter: ``wp.array`` in, ``wp.array`` out, on the arrays' device and Warp's stream.

Outputs keep Warp's element types (an output of ``vec3`` is a ``wp.array`` of ``vec3``).
Gradients work as for any Warp launch: a call made inside ``with wp.Tape() as tape:`` is
recorded on the tape, and ``tape.backward(...)`` accumulates into the ``.grad`` arrays of the
inputs that have one (outputs get ``requires_grad`` when some input has it).
"""

from __future__ import annotations

from typing import Any

import warp as wp

from interop import _dtypes, _warp_compat
from interop._errors import ArgumentError, UnsupportedError
from interop._plan import ArraySpec

from ._common import EagerFramework, unexpected_keywords


class _Warp(EagerFramework):
    name = "warp"

    def is_array(self, x: Any) -> bool:
        return isinstance(x, wp.array)

    def spec(self, x: wp.array) -> ArraySpec:
        scalar, inner = _dtypes.split(x.dtype)
        return ArraySpec(tuple(x.shape) + inner, _dtypes.np_dtype(scalar))

    def layout(self, x: wp.array):
        scalar, inner = _dtypes.split(x.dtype)
        itemsize = wp.types.type_size_in_bytes(scalar)
        inner_strides = []
        acc = itemsize
        for s in reversed(inner):
            inner_strides.append(acc)
            acc *= s
        return int(x.ptr or 0), tuple(x.strides) + tuple(reversed(inner_strides)), itemsize

    def device(self, x: wp.array) -> str:
        return str(x.device)

    def default_device(self) -> str:
        return str(wp.get_device())

    def alloc(self, spec: ArraySpec, device: str, zero: bool, elem: Any = None) -> wp.array:
        inner = _dtypes.split(elem)[1]
        outer = tuple(spec.shape[: len(spec.shape) - len(inner)])
        return wp.zeros(outer, dtype=elem, device=device) if zero else wp.empty(outer, dtype=elem, device=device)

    def stream(self, device: str, arrays) -> Any:
        return None  # Warp's current stream on the device

    def call(self, op, args, launch_dims, output_dims, kwargs):
        tape = _warp_compat.active_tape()
        if tape is None or not any(isinstance(a, wp.array) and a.requires_grad for a in args):
            return super().call(op, args, launch_dims, output_dims, kwargs)
        if kwargs:
            raise ArgumentError(unexpected_keywords(op.description, kwargs))
        plan, values, returned, device, stream = self.forward(op, args, launch_dims, output_dims)
        _record_on_tape(tape, op, plan, args, values, returned, device)
        return returned[0] if len(returned) == 1 else tuple(returned)


def _record_on_tape(tape, op, plan, args, values, returned, device) -> None:
    """Record the call on ``tape``: its backward runs the op's adjoint with the arrays' ``.grad``."""
    desc = op.description
    arrays = {}
    for p, a in zip(desc.call_params, args):
        if isinstance(a, wp.array):
            arrays[p.index] = a
    for p, a in zip(desc.returned_params, returned):
        if p.role == "output":
            a.requires_grad = True  # allocates its .grad: the tape seeds it in backward()
        arrays[p.index] = a
    if desc.backward is not None:
        raise UnsupportedError(
            f"op {desc.label!r}: a hand-written backward= is not run by wp.Tape; call the op with "
            "PyTorch, JAX or Paddle arrays for its gradient, or record the backward yourself"
        )
    for p in desc.call_params:
        if not p.is_array and p.name in plan.scalar_refs:
            raise UnsupportedError(
                f"op {desc.label!r}, parameter {p.name!r}: wp.Tape does not record scalar gradients; "
                "pass the scalar as a Python number"
            )
    vals = list(values)

    def backward():
        adj = [None] * len(desc.params)
        for i, a in arrays.items():
            g = a.grad
            if g is not None and (plan.differentiable[i] or desc.params[i].role != "input"):
                adj[i] = (int(g.ptr), tuple(g.strides))
        plan.runner.adjoint(device, vals, adj)

    tape.record_func(backward, [a for a in arrays.values() if a.grad is not None])


FRAMEWORK = _Warp()


def call(op, args, launch_dims, output_dims, kwargs):
    """Run ``op`` on Warp arrays (see :meth:`interop.Op.__call__`)."""
    return FRAMEWORK.call(op, args, launch_dims, output_dims, kwargs)


def bind(op):
    """A callable that runs ``op`` with Warp arrays (outputs are Warp arrays even with no array input)."""

    def run(*args, launch_dims=None, output_dims=None):
        return FRAMEWORK.call(op, args, launch_dims, output_dims, {})

    return run
