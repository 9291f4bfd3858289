"""Zero-length arrays: the call returns empty outputs of the right shape and dtype in every
framework (Warp records no launch for zero threads), and gradients are empty too."""

import importlib.util

import numpy as np
import pytest
import warp as wp

import interop


@wp.kernel
def saxpy_empty(x: wp.array(dtype=float), y: wp.array(dtype=float), a: float, out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = a * x[i] + y[i]


FRAMEWORKS = [
    f for f in ("numpy", "warp", "torch", "jax", "paddle") if f in ("numpy", "warp") or importlib.util.find_spec(f)
]


def _empty(fw):
    a = np.zeros(0, np.float32)
    if fw == "numpy":
        return a
    if fw == "warp":
        return wp.zeros(0, dtype=float, device="cpu")
    return interop.convert(a, to=fw, copy=True)


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_empty_call_returns_empty_output(fw):
    op = interop.op(saxpy_empty)
    out = op(_empty(fw), _empty(fw), 2.0)
    assert tuple(out.shape) == (0,)
    assert interop.convert(out, to="numpy", copy=True).dtype == np.float32


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch not installed")
def test_empty_torch_gradient():
    import torch

    op = interop.op(saxpy_empty)
    x = torch.zeros(0, requires_grad=True, device="cpu")
    op(x, torch.zeros(0, device="cpu"), 2.0).sum().backward()
    assert x.grad is not None and tuple(x.grad.shape) == (0,)
