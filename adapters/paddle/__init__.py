"""PaddlePaddle adapter: Paddle tensors in, Paddle tensors out, with Paddle's autograd.

A call reads each tensor's data pointer and strides (``Tensor.data_ptr()``, ``strides``):
no copy and no ``__array__()`` (Warp reading a Paddle tensor through ``__array__`` gets a
temporary that can be freed under it). Outputs and gradients are allocated by Paddle
(a zero-filled tensor on the inputs' place). On CUDA every launch runs on Paddle's current
stream of that device.

Gradients flow through one ``paddle.autograd.PyLayer`` per call:

- only tensors with ``stop_gradient=False`` receive a gradient; outputs are differentiable
  when some input is; nothing is written to ``x.grad`` by the forward;
- the backward runs Warp's adjoint (a ``wp.Tape`` for Python-function ops) or the op's
  hand-written backward, itself called through this adapter so that it can be
  differentiated again; Warp's adjoint is differentiated through the op's tangent kernel
  (``paddle/second_order.py``: second derivatives, ``paddle.incubate.autograd.jvp``);
- in-out arrays are updated in place and returned as the same tensor; their gradient
  passes through unchanged (the in-out rule of the core), and the update is recorded with
  a Paddle in-place ``add_`` of a zero tensor that carries the op's autograd node, so
  Paddle's own in-place checks (leaf tensors, saved tensors) apply;
- scalars passed as 0-d tensors with ``stop_gradient=False`` get real gradients.

``paddle.amp.auto_cast`` (``paddle/amp.py``): an op is a float32 (black-list) operator: half-precision
inputs of float32/float64 parameters are cast up at O1 and O2; outside it nothing is ever cast.

``paddle.jit.to_static``: with ``full_graph=False`` (SOT, the default) Paddle runs the op
eagerly between compiled segments (a graph break), gradients included. Under
``full_graph=True`` Paddle hands over symbolic values with no memory; the call raises a
``TypeError`` naming the op (see docs/guide/paddle.md).
"""

from __future__ import annotations

import paddle

from .._common import unexpected_keywords
from . import amp as _amp
from .autograd import _call_grad
from .compat import autocast_enabled
from .compat import place_key as _place_key  # noqa: F401 (tests read it here)
from .framework import FRAMEWORK as FRAMEWORK
from .framework import _check_args
from .hook import _PLAIN_NUMBERS as _PLAIN_NUMBERS  # noqa: F401 (tests)
from .hook import _TENSOR_TYPES as _TENSOR_TYPES  # noqa: F401 (tests)
from .hook import _apply as _apply  # noqa: F401 (tests)
from .hook import _register, _remember
from .static import _run_eagerly_under_sot  # (importing it registers the ops described before Paddle)


# ---- entry points ------------------------------------------------------------------------
def call(op, args, launch_dims, output_dims, kwargs):
    """Run ``op`` on Paddle tensors (see :meth:`interop.Op.__call__`)."""
    if kwargs:
        raise TypeError(unexpected_keywords(op.description, kwargs))
    if autocast_enabled():
        args = _amp.cast(op, args)  # paddle.amp.auto_cast: an op is a float32 (black-list) operator
    if _check_args(op, args) and paddle.is_grad_enabled():
        res = _call_grad(op, args, launch_dims, output_dims)
    else:
        # no autograd node: the shared eager path (validated once per argument signature)
        res = FRAMEWORK.call(op, args, launch_dims, output_dims, {})
    if launch_dims is None and output_dims is None and paddle.in_dynamic_mode():
        _remember(op, args)
    return res


def bind(op):
    """A callable that runs ``op`` with Paddle tensors (outputs are Paddle tensors even with no tensor input)."""
    _run_eagerly_under_sot(op)
    _register(op)

    def run(*args, launch_dims=None, output_dims=None):
        return call(op, args, launch_dims, output_dims, {})

    _run_eagerly_under_sot(run)
    return paddle.jit.not_to_static(run)


def on_describe(op) -> None:
    """Called for each op described while Paddle is imported: make it a graph break for SOT, give it
    its eager hook."""
    _run_eagerly_under_sot(op)
    _register(op)
