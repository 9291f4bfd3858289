"""The one PyTorch internal the torch adapter needs (STYLE.md rule 11).

Checked against torch 2.13.0 (CPU build). ``torch._C._are_functorch_transforms_active``
says whether a ``torch.func`` transform (grad, vjp, vmap, jacrev...) is being traced. The
adapter needs it because the autograd.Function that ``torch.library.custom_op`` generates for
``register_autograd`` has no ``setup_context`` staticmethod, which ``torch.func`` requires;
under those transforms the adapter applies an equivalent autograd.Function of its own
around the same registered operators.
"""

from __future__ import annotations

import torch

_active = getattr(torch._C, "_are_functorch_transforms_active", None)


def functorch_transforms_active() -> bool:
    """True inside ``torch.func.grad``/``vjp``/``vmap``/``jacrev``... (False if torch cannot say)."""
    return bool(_active()) if _active is not None else False
