"""What one call issues on a GPU, counted (never timed): kernels, fills and copies seen by CUDA's
activity tracing (torch's profiler, which records every CUDA activity of the process: torch's,
Warp's, JAX's and CuPy's alike).

- torch forward: the op's kernel alone (its output is fully written: no fill).
- torch forward+backward: what an empty ``autograd.Function`` issues (but its copies: it hands
  AccumulateGrad the expanded ``.sum()`` gradient), plus the forward and the adjoint kernels and at
  most one fill (the zeroed gradient buffers); no copy.
- JAX under ``jit``, a kernel that writes every output element: its kernel alone, no fill.
- CuPy: its kernel alone.

CUDA only (marked ``cuda``); they need a CUDA build of torch for the tracing.
"""

from __future__ import annotations

import pytest
import warp as wp
from _cuda import require_cuda

import interop

pytestmark = pytest.mark.cuda

N = 1024


@wp.kernel
def saxpy_counted(x: wp.array(dtype=float), y: wp.array(dtype=float), a: float, out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = a * x[i] + y[i]


def _activities(fn, sync) -> dict[str, list[str]]:
    """The CUDA activities of one call of ``fn`` (after three warm-up calls), by kind."""
    require_cuda("torch")
    import torch
    from torch.profiler import ProfilerActivity, profile

    for _ in range(3):
        fn()
    sync()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        sync()
    names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    kinds: dict[str, list[str]] = {"kernel": [], "fill": [], "copy": []}
    for n in names:
        low = n.lower()
        if low.startswith("memcpy") or "copy" in low:
            kinds["copy"].append(n)
        elif low.startswith("memset") or "fill" in low:
            kinds["fill"].append(n)
        else:
            kinds["kernel"].append(n)
    return kinds


def _ours(kinds: dict[str, list[str]]) -> list[str]:
    return [n for n in kinds["kernel"] if "saxpy_counted" in n]


def test_torch_forward_is_one_kernel():
    require_cuda("torch")
    import torch

    op = interop.op(saxpy_counted)
    x = torch.rand(N, device="cuda")
    y = torch.rand(N, device="cuda")
    kinds = _activities(lambda: op(x, y, 2.0), torch.cuda.synchronize)
    assert len(kinds["kernel"]) == 1 and _ours(kinds), kinds
    assert not kinds["fill"] and not kinds["copy"], kinds


def test_torch_forward_backward_adds_two_kernels_and_at_most_one_fill():
    require_cuda("torch")
    import torch

    class Empty(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, y, a):
            return torch.empty_like(x)

        @staticmethod
        def backward(ctx, g):
            return g, g, None

    op = interop.op(saxpy_counted)
    x = torch.rand(N, device="cuda", requires_grad=True)
    y = torch.rand(N, device="cuda", requires_grad=True)

    def step(f):
        def run():
            x.grad = y.grad = None
            f(x, y, 2.0).sum().backward()

        return run

    base = _activities(step(Empty.apply), torch.cuda.synchronize)
    ours = _activities(step(op), torch.cuda.synchronize)
    assert len(_ours(ours)) == 2, ours  # the forward and the adjoint
    assert len(ours["kernel"]) - len(base["kernel"]) == 2, (base, ours)
    assert len(ours["fill"]) - len(base["fill"]) <= 1, (base, ours)
    # no copy at all (the empty Function's AccumulateGrad copies the expanded .sum() gradient it
    # returns into each .grad: two copies on the GPU run; ours hands over dense gradients)
    assert not ours["copy"], ours
    torch.testing.assert_close(x.grad, torch.full_like(x, 2.0))
    torch.testing.assert_close(y.grad, torch.ones_like(y))


def test_jax_jit_is_one_kernel_without_a_fill():
    require_cuda("jax")
    import jax
    import numpy as np

    dev = jax.devices("gpu")[0]
    op = interop.op(saxpy_counted)
    x = jax.device_put(np.random.default_rng(0).random(N, dtype=np.float32), dev)
    y = jax.device_put(np.ones(N, np.float32), dev)
    f = jax.jit(lambda x, y: op(x, y, 2.0))
    out = {}

    def run():
        out["r"] = f(x, y)

    kinds = _activities(run, lambda: jax.block_until_ready(out["r"]))
    assert len(_ours(kinds)) == 1 and len(kinds["kernel"]) == 1, kinds
    assert not kinds["fill"] and not kinds["copy"], kinds
    np.testing.assert_allclose(np.asarray(out["r"]), 2.0 * np.asarray(x) + 1.0, rtol=1e-6)


def test_cupy_call_is_one_kernel():
    require_cuda("cupy")
    import cupy as cp

    op = interop.op(saxpy_counted)
    with cp.cuda.Device(0):
        x = cp.random.random(N, dtype=cp.float32)
        y = cp.random.random(N, dtype=cp.float32)
        kinds = _activities(lambda: op(x, y, 2.0), cp.cuda.get_current_stream().synchronize)
    assert len(kinds["kernel"]) == 1 and _ours(kinds), kinds
    assert not kinds["fill"] and not kinds["copy"], kinds
