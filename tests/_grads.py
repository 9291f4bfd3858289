"""The gradient of ``sum(f(x))`` with respect to one CPU array in a framework's own autograd, for
tests that compare one op's gradient across frameworks (``torch``: ``.backward()``, ``paddle``:
``.backward()``, ``jax``: ``jax.grad``)."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np


def grad_of_sum(fw: str, f: Callable[[Any], Any], xn: np.ndarray) -> np.ndarray:
    """``d sum(f(x)) / dx`` at ``x = xn`` (a NumPy array), ``x`` made on the CPU in framework ``fw``."""
    if fw == "torch":
        import torch

        x = torch.tensor(xn, requires_grad=True, device="cpu")
        f(x).sum().backward()
        return x.grad.numpy()
    if fw == "paddle":
        import paddle

        x = paddle.to_tensor(xn, stop_gradient=False, place=paddle.CPUPlace())
        f(x).sum().backward()
        return x.grad.numpy()
    import jax
    import jax.numpy as jnp
    from _devices import jax_device

    return np.asarray(jax.grad(lambda v: f(v).sum())(jnp.asarray(xn, device=jax_device("cpu"))))
