"""The torch eager backward's buffers (issue 32, item 3), on every device.

- The gradient of ``.sum()`` (an expanded scalar, strides 0) reaches Warp's adjoint without a
  copy: on CUDA read in place, on the CPU through the launch record's packed buffer.
- Gradients of one dtype needed together are views of one zero-filled buffer on CUDA (one fill);
  on the CPU the same generated code runs when a test asks for it (``SHARED_ZEROS_ON``).

Values are checked against the closed-form gradients; sharing by comparing storage pointers.
"""

from __future__ import annotations

import pytest
import warp as wp
from _cuda import require_cuda

import interop

torch = pytest.importorskip("torch")
eager = pytest.importorskip("adapters.torch.eager")


@wp.kernel
def saxpy_buf(x: wp.array(dtype=float), y: wp.array(dtype=float), a: float, out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = a * x[i] * x[i] + y[i]


@wp.kernel
def mixed_buf(x: wp.array(dtype=wp.float32), y: wp.array(dtype=wp.float64), out: wp.array(dtype=wp.float32)):
    i = wp.tid()
    out[i] = x[i] * wp.float32(y[i])


@pytest.fixture(params=["shared", "separate"])
def sharing(request, device, monkeypatch):
    """Whether gradients share one buffer on ``device`` in this test (CUDA always does)."""
    if request.param == "shared":
        monkeypatch.setattr(eager, "SHARED_ZEROS_ON", frozenset({"cuda", "cpu"}))
    elif device != "cpu":
        pytest.skip("on CUDA gradients of one dtype always share a buffer")
    else:
        monkeypatch.setattr(eager, "SHARED_ZEROS_ON", frozenset({"cuda"}))
    return request.param == "shared"


def _storage(t):
    return t.untyped_storage().data_ptr()


@pytest.mark.parametrize("n", [1, 7, 1024, 5000])
@pytest.mark.parametrize("upstream", ["sum", "dense", "strided"])
def test_gradients_and_their_buffers(device, sharing, n, upstream):
    require_cuda("torch", device)
    op = interop.op(saxpy_buf)  # a new op: its generated code reads SHARED_ZEROS_ON now
    g = torch.Generator(device="cpu").manual_seed(n)
    x = torch.rand(n, generator=g, device="cpu").to(device).requires_grad_(True)
    y = torch.rand(n, generator=g, device="cpu").to(device).requires_grad_(True)
    up = torch.rand(2 * n, generator=g, device="cpu").to(device)
    for step in range(3):  # the same signature again: the cached Function, the accumulated .grad
        out = op(x, y, 1.5)
        if upstream == "sum":
            out.sum().backward()
            gout = torch.ones(n, device=device)
        elif upstream == "dense":
            out.backward(up[:n])
            gout = up[:n]
        else:
            out.backward(up[::2])
            gout = up[::2]
        torch.testing.assert_close(x.grad, (step + 1) * 3.0 * x.detach() * gout)
        torch.testing.assert_close(y.grad, (step + 1) * gout)
        if step == 0:
            assert (_storage(x.grad) == _storage(y.grad)) == sharing
    assert x.grad.device == x.device and y.grad.device == y.device
    assert x.grad.is_contiguous() and y.grad.is_contiguous()


def test_one_gradient_needed_gets_its_own_buffer(device, sharing):
    require_cuda("torch", device)
    op = interop.op(saxpy_buf)
    x = torch.rand(64, device=device, requires_grad=True)
    y = torch.rand(64, device=device)
    op(x, y, 2.0).sum().backward()
    torch.testing.assert_close(x.grad, 4.0 * x.detach())
    assert y.grad is None
    assert x.grad.untyped_storage().nbytes() == 64 * 4
    # then both: the same op, another signature
    y.requires_grad_(True)
    x.grad = None
    op(x, y, 2.0).sum().backward()
    torch.testing.assert_close(x.grad, 4.0 * x.detach())
    torch.testing.assert_close(y.grad, torch.ones_like(y))
    assert (_storage(x.grad) == _storage(y.grad)) == sharing


def test_gradients_of_two_dtypes_never_share(device, sharing):
    require_cuda("torch", device)
    op = interop.op(mixed_buf)
    x = torch.rand(32, device=device, requires_grad=True)
    y = torch.rand(32, device=device, dtype=torch.float64, requires_grad=True)
    op(x, y).sum().backward()
    torch.testing.assert_close(x.grad, y.detach().float())
    torch.testing.assert_close(y.grad, x.detach().double())
    assert _storage(x.grad) != _storage(y.grad)
    assert x.grad.dtype == torch.float32 and y.grad.dtype == torch.float64


@wp.kernel
def vec_buf(a: wp.array(dtype=wp.vec3), b: wp.array2d(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = wp.dot(a[i], a[i]) + b[i, 0] * b[i, 1]


@pytest.mark.parametrize("n", [1, 5, 100])
def test_shared_buffer_views_of_several_dimensions(device, sharing, n):
    """Gradients of (n, 3) and (n, 2) arguments carved from one buffer (with alignment padding)."""
    require_cuda("torch", device)
    op = interop.op(vec_buf)
    g = torch.Generator(device="cpu").manual_seed(n)
    a = torch.rand(n, 3, generator=g, device="cpu").to(device).requires_grad_(True)
    b = torch.rand(n, 2, generator=g, device="cpu").to(device).requires_grad_(True)
    op(a, b).sum().backward()
    torch.testing.assert_close(a.grad, 2.0 * a.detach())
    torch.testing.assert_close(b.grad, b.detach().flip(1))
    assert a.grad.shape == (n, 3) and b.grad.shape == (n, 2)
    assert a.grad.is_contiguous() and b.grad.is_contiguous()
    assert (_storage(a.grad) == _storage(b.grad)) == sharing
    if sharing:  # each gradient starts 256 bytes apart from the buffer's start (CUDA's allocation alignment)
        assert (b.grad.data_ptr() - a.grad.data_ptr()) % 256 == 0


@pytest.mark.parametrize("transform", ["jacrev", "jacfwd", "hessian", "grad_of_grad"])
def test_transforms_through_the_backward_operator_get_separate_gradients(device, sharing, transform):
    """``torch.func``'s transforms and double backward call the registered backward operator, whose
    outputs must not alias one another (torch refuses it: the 2026-11-28 GPU run's 26 failures);
    only the autograd.Function's own backward hands out views of one shared buffer."""
    require_cuda("torch", device)
    g = torch.Generator(device="cpu").manual_seed(3)
    x = torch.rand(5, generator=g, device="cpu", dtype=torch.float64).to(device)
    y = torch.rand(5, generator=g, device="cpu", dtype=torch.float64).to(device)

    @wp.kernel
    def square_axpy64(x: wp.array(dtype=wp.float64), y: wp.array(dtype=wp.float64), out: wp.array(dtype=wp.float64)):
        i = wp.tid()
        out[i] = wp.float64(1.5) * x[i] * x[i] + y[i]

    op = interop.op(square_axpy64)
    eye = torch.eye(5, dtype=torch.float64, device=device)
    if transform in ("jacrev", "jacfwd"):
        jx, jy = getattr(torch.func, transform)(op, argnums=(0, 1))(x, y)
        torch.testing.assert_close(jx, torch.diag(3.0 * x))
        torch.testing.assert_close(jy, eye)
    elif transform == "hessian":
        h = torch.func.hessian(lambda x, y: op(x, y).sum(), argnums=0)(x, y)
        torch.testing.assert_close(h, 3.0 * eye)
    else:
        xr, yr = x.clone().requires_grad_(True), y.clone().requires_grad_(True)
        gx, gy = torch.autograd.grad(op(xr, yr).sum(), (xr, yr), create_graph=True)
        torch.testing.assert_close(gx, 3.0 * x)
        torch.testing.assert_close(gy, torch.ones_like(y))
        (ggx,) = torch.autograd.grad(gx.sum(), xr)
        torch.testing.assert_close(ggx, torch.full_like(x, 3.0))
