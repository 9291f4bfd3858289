"""``torch.autocast``: an op is one of torch's float32-policy operators.

Under ``torch.autocast(device_type, dtype=torch.bfloat16 or torch.float16)`` torch runs the
operators on its autocast "fp32" list (``exp``, ``sum``, ``layer_norm``, ...) in float32: their
half-precision inputs are cast up, and autograd's record of the cast hands the gradients back in
the caller's dtype. A Warp kernel is declared at one precision, and its atomics and reductions are
written for it, so an op does the same:

- a float16 or bfloat16 tensor on the autocast device, passed for a parameter declared float32 or
  float64 (arrays, vectors and matrices of them, and 0-d tensors for float scalars), is cast to
  the parameter's dtype with ``Tensor.to`` (recorded by autograd: its gradient comes back as
  float16/bfloat16);
- a generic parameter (``typing.Any``) takes float32, as torch's fp32 policy does (outside autocast
  a bfloat16 tensor runs the kernel's bfloat16 overload, as before);
- nothing else is cast: integer tensors, float32 passed for float64 (torch does not cast that
  either), parameters declared float16, and in-out arrays (updated in place: their dtype is the
  caller's storage), which keep today's refusal naming the dtypes.

``torch.ops.<ns>.<name>`` called directly: the functional operator of an op whose floating
parameters are all float32 or generic carries torch's own rule (``register_direct``).

Outside autocast nothing is ever cast. The test costs a plain call one C call
(``torch._C._is_any_autocast_enabled``, through ``compat.autocast_enabled``); Dynamo traces it and
the casts, so a compiled function casts as eager does.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch

from interop import _dtypes
from interop._description import Param

from .._common import autocast_dtype
from .compat import autocast_available, autocast_on

HALF = (torch.float16, torch.bfloat16)
_UP = {np.dtype(np.float32): torch.float32, np.dtype(np.float64): torch.float64}


def targets(params: Sequence[Param]) -> tuple:
    """Per call parameter, its autocast dtype (None: never cast); the binding keeps them (``autocast_to``)."""
    dtypes = (autocast_dtype(p) for p in params)
    return tuple(None if dt is None else _UP.get(dt) for dt in dtypes)


def cast(b: Any, args: Sequence[Any]) -> Sequence[Any]:
    """``args`` with each half-precision tensor on an autocast-enabled device cast to its parameter's
    dtype (called only while some autocast is enabled; ``b``: the op's binding)."""
    out = None
    for i, (x, to) in enumerate(zip(args, b.autocast_to)):
        if to is not None and isinstance(x, torch.Tensor) and x.dtype in HALF and autocast_on(x.device.type):
            if out is None:
                out = list(args)
            out[i] = x.to(to)
    return args if out is None else tuple(out)


def would_cast(b: Any, args: Sequence[Any]) -> bool:
    """Whether a call with ``args`` would be cast under autocast (its half-precision tensors): such a
    signature is not remembered for the eager hook, which does not look at autocast."""
    return any(to is not None and isinstance(x, torch.Tensor) and x.dtype in HALF for x, to in zip(args, b.autocast_to))


def register_direct(b: Any, cdef: Any) -> None:
    """Give the functional operator ``cdef`` torch's own autocast rule (``CustomOpDef.register_autocast``:
    every floating tensor but float64 cast to one dtype) where that rule gives the op's casts: every
    floating parameter float32 or generic, no in-out. Then ``torch.ops.<ns>.<name>`` called directly
    under autocast casts as a call of the op does; otherwise such a direct call is not cast (the op's
    own call path casts per parameter, before the operator)."""
    if not b.autocast or b.inout_pos:
        return
    for p, to in zip(b.call_params, b.autocast_to):
        if (p.generic or _dtypes.is_float(p.scalar)) and to is not torch.float32:
            return  # float64 or float16 parameters: one cast dtype would be wrong for them
    for device_type in ("cpu", "cuda"):
        if autocast_available(device_type):
            cdef.register_autocast(device_type, torch.float32)
