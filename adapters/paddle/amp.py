"""``paddle.amp.auto_cast``: an op is one of Paddle's float32 (black-list) operators.

Under ``paddle.amp.auto_cast(level="O1" or "O2", dtype="float16" or "bfloat16")`` Paddle runs the
operators on its black list (``exp``, ``softmax_with_cross_entropy``, ``layer_norm``, ...) in float32
at both levels: their half-precision inputs are cast up, and Paddle's autograd of the cast hands the
gradients back in the caller's dtype. A Warp kernel is declared at one precision, so an op does the
same (the rule is ``adapters._common.autocast_dtype``, shared with ``torch.autocast``):

- a float16 or bfloat16 tensor passed for a float32 or float64 parameter (arrays, vectors and
  matrices of them, 0-d tensors for float scalars) is cast to the parameter's dtype with
  ``Tensor.astype``; a generic parameter (``typing.Any``) takes float32;
- integer tensors, parameters declared float16 and in-out arrays are never cast (the refusal that
  names the dtypes stays), nor is float32 passed for float64.

Paddle enables auto_cast on GPU (and XPU, custom) places only; on the CPU it warns and changes
nothing, and so does the op. Outside auto_cast nothing is ever cast; a plain call pays one
attribute read (``compat.autocast_enabled``). ``custom_white_list``/``custom_black_list`` name
Paddle operators; an op is not one, and is always on the float32 side.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import paddle

from .._common import autocast_dtype

_HALF = (paddle.float16, paddle.bfloat16)
_UP: dict[np.dtype, Any] = {np.dtype(np.float32): paddle.float32, np.dtype(np.float64): paddle.float64}


def cast(op, args: Sequence[Any]) -> Sequence[Any]:
    """``args`` with each half-precision tensor cast to its parameter's dtype (called only inside an
    auto_cast region in effect)."""
    out = None
    for i, (p, x) in enumerate(zip(op.description.call_params, args)):
        if isinstance(x, paddle.Tensor) and x.dtype in _HALF:
            dt = autocast_dtype(p)
            to = None if dt is None else _UP.get(dt)
            if to is not None:
                if out is None:
                    out = list(args)
                out[i] = x.astype(to)
    return args if out is None else tuple(out)


def would_cast(op, args: Sequence[Any]) -> bool:
    """Whether a call with ``args`` has a half-precision tensor auto_cast would cast: its signature is
    not remembered for the eager hook, which does not look at auto_cast."""
    return any(
        isinstance(x, paddle.Tensor) and x.dtype in _HALF and autocast_dtype(p) is not None
        for p, x in zip(op.description.call_params, args)
    )
