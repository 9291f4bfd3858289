"""torch.autocast: an op behaves as torch's own float32-policy operators (issue 49, item 4).

Under autocast a float16/bfloat16 tensor given for a float32 (float64) parameter is cast to it, the
output is the kernel's dtype and the gradient goes back in the caller's dtype; outside autocast,
integer tensors, in-out arrays and float32 given for float64 nothing is cast (the refusal stays).
Eager (the fast path and the registered operator) and torch.compile, on every test device.
"""

from __future__ import annotations

import catalogue
import pytest

torch = pytest.importorskip("torch")

from torch.overrides import TorchFunctionMode  # noqa: E402

import interop  # noqa: E402

VSCALE = interop.op(catalogue.vscale_kernel, name="tt_autocast::vscale")
SCALAR = interop.op(catalogue.scalar_kernel, name="tt_autocast::scalar")
GENERIC = interop.op(catalogue.generic_kernel, name="tt_autocast::generic")
GATHER = interop.op(catalogue.gather_kernel, name="tt_autocast::gather")
INOUT = interop.op(catalogue.inout_kernel, in_out=["acc"], outputs=2, name="tt_autocast::inout")
CUBE64 = interop.op(catalogue.cube64, name="tt_autocast::cube64")
HALF = [torch.bfloat16, torch.float16]
PATHS = ("eager", "operator", "compile")


class _PassThrough(TorchFunctionMode):
    """Changes nothing, but an active TorchFunctionMode sends the op through its registered operator."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def _autocast_device(device: str) -> str:
    return device.split(":")[0]


def _model(device: str) -> torch.nn.Linear:
    torch.manual_seed(0)
    return torch.nn.Linear(4, 3, device=device)


def _loss(lin, x, target, device, dtype, explicit: bool):
    with torch.autocast(_autocast_device(device), dtype=dtype):
        h = lin(x)  # half precision: autocast's Linear
        assert h.dtype == dtype
        out = VSCALE(h.float() if explicit else h, 1.5)
        assert out.dtype == torch.float32  # the kernel's dtype
        return ((out - target) ** 2).mean()


def _train(path: str, device: str, dtype, explicit: bool, steps: int = 3):
    """A Linear under autocast feeding the op, trained by SGD: the weight gradients of each step."""
    lin = _model(device)
    opt = torch.optim.SGD(lin.parameters(), lr=0.1)
    gen = torch.Generator(device="cpu").manual_seed(1)
    x = torch.rand(16, 4, generator=gen, device="cpu").to(device)
    target = torch.rand(16, 3, generator=gen, device="cpu").to(device)
    loss_fn = _loss
    if path == "compile":
        torch.compiler.reset()
        loss_fn = torch.compile(_loss, fullgraph=True, backend="aot_eager")
    grads = []
    for _ in range(steps):
        opt.zero_grad()
        if path == "operator":
            with _PassThrough():
                loss = loss_fn(lin, x, target, device, dtype, explicit)
        else:
            loss = loss_fn(lin, x, target, device, dtype, explicit)
        loss.backward()
        grads.append(lin.weight.grad.clone())
        opt.step()
    if path == "compile":
        torch.compiler.reset()
    return grads, lin.weight.detach()


@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("path", PATHS)
def test_autocast_linear_trains_through_the_op(device, path, dtype):
    grads, w = _train(path, device, dtype, explicit=False)
    ref_grads, ref_w = _train("eager", device, dtype, explicit=True)
    tol = {"rtol": 1.6e-2, "atol": 1e-3}  # bfloat16's precision
    for g, r in zip(grads, ref_grads):
        assert g.dtype == torch.float32
        torch.testing.assert_close(g, r, **tol)
    torch.testing.assert_close(w, ref_w, **tol)


@pytest.mark.parametrize("path", [*PATHS, "compile-outside"])
def test_autocast_casts_inputs_and_gradients_come_back_in_the_callers_dtype(device, path):
    x = torch.rand(6, device=device).to(torch.bfloat16).requires_grad_()
    y = torch.rand(6, device=device, dtype=torch.float32)
    s = torch.tensor(0.5, device=device, dtype=torch.bfloat16, requires_grad=True)  # a 0-d float scalar

    def f(x, y, s):
        with torch.autocast(_autocast_device(device), dtype=torch.bfloat16):
            return SCALAR(x, y, s)

    if path == "compile":
        torch.compiler.reset()
        f = torch.compile(f, fullgraph=True, backend="aot_eager")
    if path == "operator":
        with _PassThrough():
            out = f(x, y, s)
    elif path == "compile-outside":  # autocast entered outside the compiled function
        torch.compiler.reset()
        with torch.autocast(_autocast_device(device), dtype=torch.bfloat16):
            out = torch.compile(SCALAR, fullgraph=True, backend="aot_eager")(x, y, s)
    else:
        out = f(x, y, s)
    assert out.dtype == torch.float32
    gx, gs = torch.autograd.grad(out.sum(), (x, s))
    assert (gx.dtype, gs.dtype) == (torch.bfloat16, torch.bfloat16)
    xf, sf = x.detach().float(), s.detach().float()
    torch.testing.assert_close(out, torch.sin(xf) * sf + y * y)
    torch.testing.assert_close(gx, (torch.cos(xf) * sf).to(torch.bfloat16))
    torch.testing.assert_close(gs, torch.sin(xf).sum().to(torch.bfloat16))
    torch.compiler.reset()


def test_outside_autocast_nothing_is_cast(device):
    x = torch.rand(4, 3, device=device, dtype=torch.bfloat16)
    with pytest.raises(
        interop.ArgumentError, match=r"op 'tt_autocast::vscale', parameter 'v'.*bfloat16; arrays are never cast"
    ):
        VSCALE(x, 1.5)
    # autocast on another device type casts nothing on this one
    other = "cuda" if _autocast_device(device) == "cpu" else "cpu"
    if other == "cpu" or torch.cuda.is_available():
        with torch.autocast(other, dtype=torch.bfloat16), pytest.raises(interop.ArgumentError, match="never cast"):
            VSCALE(x, 1.5)


def test_autocast_never_casts_integers_in_out_arrays_or_float32_to_float64(device):
    dev = _autocast_device(device)
    with torch.autocast(dev, dtype=torch.bfloat16):
        a = torch.rand(5, device=device, dtype=torch.bfloat16)
        idx = torch.tensor([4, 0, 2], device=device, dtype=torch.int64)  # int64 for an int32 parameter
        with pytest.raises(interop.ArgumentError, match=r"parameter 'idx'.*int64"):
            GATHER(a, idx)
        idx32 = idx.to(torch.int32)
        torch.testing.assert_close(GATHER(a, idx32), a.float()[idx])
        acc = torch.zeros(2, device=device, dtype=torch.bfloat16)
        with pytest.raises(interop.ArgumentError, match=r"parameter 'acc'.*bfloat16"):
            INOUT(torch.rand(2, 3, device=device), acc)
        with pytest.raises(interop.ArgumentError, match=r"parameter 'x'.*float64.*float32"):
            CUBE64(torch.rand(3, device=device, dtype=torch.float32))
        c = CUBE64(torch.full((3,), 2.0, device=device, dtype=torch.float16))  # half to a float64 kernel: cast up
        assert c.dtype == torch.float64
        torch.testing.assert_close(c, torch.full((3,), 8.0, device=device, dtype=torch.float64))


def test_generic_kernel_runs_in_float32_under_autocast_and_at_its_dtype_outside(device):
    a = torch.tensor([1.5, -2.0, 3.0], device=device, dtype=torch.bfloat16)
    for _ in range(2):  # the second outside call takes the eager hook: it must not skip autocast below
        outside = GENERIC(a, 2.0)
        assert outside.dtype == torch.bfloat16
    with torch.autocast(_autocast_device(device), dtype=torch.bfloat16):
        inside = GENERIC(a, 2.0)
    assert inside.dtype == torch.float32
    torch.testing.assert_close(inside, a.float() * a.float() * 2.0)
    torch.testing.assert_close(outside, (a.float() * a.float() * 2.0).to(torch.bfloat16))


def test_autocast_leaves_a_device_without_autocast_alone():
    # meta tensors (shapes only) reach the registered operator's fake implementation: under a CPU
    # autocast they are not cast (torch has no autocast for "meta"), and the dtype check still speaks
    x = torch.empty(4, 3, device="meta", dtype=torch.float32)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = VSCALE(x, 1.5)
        assert (out.device.type, out.dtype, tuple(out.shape)) == ("meta", torch.float32, (4, 3))
        with pytest.raises(interop.ArgumentError, match="bfloat16"):
            VSCALE(torch.empty(4, 3, device="meta", dtype=torch.bfloat16), 1.5)


def test_registered_operator_called_directly_under_autocast(device):
    # torch.ops.<ns>.<name> itself: torch's autocast rule (one dtype, float32) where it gives the op's
    # casts (every floating parameter float32 or generic); an op with a float64 parameter keeps its refusal
    x = torch.rand(5, device=device).to(torch.bfloat16).requires_grad_()
    y = torch.rand(5, device=device, dtype=torch.float32)
    with torch.autocast(_autocast_device(device), dtype=torch.bfloat16):
        out = torch.ops.tt_autocast.scalar(x, y, 2.0)
        g = torch.ops.tt_autocast.generic(x.detach(), 2.0)
        with pytest.raises(interop.ArgumentError, match=r"parameter 'x'.*float64.*bfloat16"):
            torch.ops.tt_autocast.cube64(x.detach())
    assert (out.dtype, g.dtype) == (torch.float32, torch.float32)
    torch.testing.assert_close(out, SCALAR(x.detach().float(), y, 2.0))
    (gx,) = torch.autograd.grad(out.sum(), (x,))
    assert gx.dtype == torch.bfloat16
    torch.testing.assert_close(gx, (2.0 * torch.cos(x.detach().float())).to(torch.bfloat16))
