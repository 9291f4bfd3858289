"""The Paddle internals the Paddle adapter needs (STYLE.md rule 11), in one place.

Checked against Paddle 3.3.1 (CPU build). ``paddle.zeros``/``paddle.empty`` go through
several Python layers (argument decorators, ``fill_constant``) that cost about as much as
a whole Warp launch on small arrays; the adapter allocates outputs and gradients with the
C operator they end in, ``paddle._C_ops.full`` (falling back to ``paddle.zeros``).
"""

from __future__ import annotations

import paddle

_full = getattr(getattr(paddle, "_C_ops", None), "full", None)


def zeros(shape: list, dtype, place):
    """A new zero-filled tensor of ``shape`` and ``dtype`` on ``place`` (stop_gradient=True)."""
    if _full is not None:
        return _full(shape, 0.0, dtype, place)
    return paddle.zeros(shape, dtype=dtype, device=place)
