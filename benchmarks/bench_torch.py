"""PyTorch rows: an interop op called with tensors against raw ``wp.launch``, the custom-operator
pattern of Warp's guide, and NVIDIA's ``warp_custom_op`` (package ``nvalchemi-toolkit-ops``).

Every row computes ``out = a * x + y`` for float32 tensors on the CPU; the forward+backward
rows also compute the gradients of ``x`` and ``y`` for a given upstream gradient.
"""

from __future__ import annotations

import torch
import warp as wp

import interop

from .harness import SIZES, per_call, report


@wp.kernel
def saxpy(x: wp.array(dtype=float), y: wp.array(dtype=float), a: float, out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = a * x[i] + y[i]


# ---- the guide's custom-operator pattern (reference/warp_interoperability.rst) ---------
@torch.library.custom_op("bench_guide::saxpy", mutates_args=())
def guide_saxpy(x: torch.Tensor, y: torch.Tensor, a: float) -> torch.Tensor:
    wx, wy = wp.from_torch(x.detach()), wp.from_torch(y.detach())
    wout = wp.zeros(x.shape[0], dtype=wp.float32, device=wx.device)
    wp.launch(saxpy, dim=x.shape[0], inputs=[wx, wy, a], outputs=[wout], device=wx.device)
    return wp.to_torch(wout)


@guide_saxpy.register_fake
def _(x, y, a):
    return torch.empty_like(x)


@torch.library.custom_op("bench_guide::saxpy_backward", mutates_args=())
def guide_saxpy_backward(
    x: torch.Tensor, y: torch.Tensor, a: float, out: torch.Tensor, adj_out: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    wx = wp.from_torch(x.detach(), requires_grad=True)
    wy = wp.from_torch(y.detach(), requires_grad=True)
    wout = wp.from_torch(out, requires_grad=False)
    wadj = wp.from_torch(adj_out.contiguous(), requires_grad=False)
    wp.launch(
        saxpy,
        dim=x.shape[0],
        inputs=[wx, wy, a],
        outputs=[wout],
        adj_inputs=[wx.grad, wy.grad, 0.0],
        adj_outputs=[wadj],
        adjoint=True,
        device=wx.device,
    )
    return wp.to_torch(wx.grad), wp.to_torch(wy.grad)


@guide_saxpy_backward.register_fake
def _(x, y, a, out, adj_out):
    return torch.empty_like(x), torch.empty_like(y)


def _guide_setup(ctx, inputs, output):
    ctx.x, ctx.y, ctx.a = inputs
    ctx.out = output


def _guide_backward(ctx, adj_out):
    gx, gy = guide_saxpy_backward(ctx.x, ctx.y, ctx.a, ctx.out, adj_out)
    return gx, gy, None


guide_saxpy.register_autograd(_guide_backward, setup_context=_guide_setup)


# ---- NVIDIA's warp_custom_op -----------------------------------------------------------
def _nvidia_saxpy():
    """The same op written with nvalchemiops' ``warp_custom_op``, or the reason it is unavailable."""
    try:
        from nvalchemiops.torch.autograd import (
            OutputSpec,
            WarpAutogradContextManager,
            attach_for_backward,
            needs_grad,
            warp_custom_op,
            warp_from_torch,
        )
    except Exception as e:  # not installed, or it cannot be imported here
        return None, f"{type(e).__name__}: {e}"

    @warp_custom_op(
        name="bench_nvidia::saxpy",
        outputs=[OutputSpec("out", wp.float32, lambda x, *_: (x.shape[0],))],
        grad_arrays=["out", "x", "y"],
    )
    def nv_saxpy(x: torch.Tensor, y: torch.Tensor, a: float) -> torch.Tensor:
        grad = needs_grad(x, y)
        wx = warp_from_torch(x, wp.float32, requires_grad=grad)
        wy = warp_from_torch(y, wp.float32, requires_grad=grad)
        out = torch.zeros_like(x)
        wout = warp_from_torch(out, wp.float32, requires_grad=grad)
        with WarpAutogradContextManager(grad) as tape:
            wp.launch(saxpy, dim=x.shape[0], inputs=[wx, wy, a], outputs=[wout], device=wp.device_from_torch(x.device))
        if grad:
            attach_for_backward(out, tape=tape, out=wout, x=wx, y=wy)
        return out

    return nv_saxpy, None


def run(quick: bool = False) -> dict:
    results = {}
    op = interop.op(saxpy, name="bench_interop::saxpy")
    nv, nv_reason = _nvidia_saxpy()
    kw = {"min_time": 0.05, "repeat": 3} if quick else {}
    for n in SIZES:
        x = torch.rand(n)
        y = torch.rand(n)
        xr = x.clone().requires_grad_(True)
        yr = y.clone().requires_grad_(True)
        g = torch.rand(n)
        wx, wy, wout = (wp.array(t.numpy(), device="cpu") for t in (x, y, torch.zeros(n)))
        out_t = torch.zeros(n)

        def fwd_bwd(f):
            def step():
                xr.grad = None
                yr.grad = None
                f(xr, yr, 2.0).backward(g)

            return step

        # every path computes the same values and gradients
        ref = 2.0 * x + y
        paths = [("interop", op)] + [("guide", guide_saxpy)] + ([("nvidia", nv)] if nv is not None else [])
        for _, f in paths:
            torch.testing.assert_close(f(x, y, 2.0), ref)
            fwd_bwd(f)()
            torch.testing.assert_close(xr.grad, 2.0 * g)
            torch.testing.assert_close(yr.grad, g)

        rows = [
            (
                "raw wp.launch, prebuilt Warp arrays",
                per_call(lambda: wp.launch(saxpy, dim=n, inputs=[wx, wy, 2.0, wout], device="cpu"), **kw),
            ),
            (
                "wp.launch, tensors passed directly",
                per_call(lambda: wp.launch(saxpy, dim=n, inputs=[x, y, 2.0, out_t], device="cpu"), **kw),
            ),
            ("guide custom op, forward", per_call(lambda: guide_saxpy(x, y, 2.0), **kw)),
            ("guide custom op, forward+backward", per_call(fwd_bwd(guide_saxpy), **kw)),
        ]
        if nv is not None:
            rows += [
                ("nvidia warp_custom_op, forward", per_call(lambda: nv(x, y, 2.0), **kw)),
                ("nvidia warp_custom_op, forward+backward", per_call(fwd_bwd(nv), **kw)),
            ]
        rows += [
            ("interop op, forward (no grad)", per_call(lambda: op(x, y, 2.0), **kw)),
            ("interop op, forward+backward", per_call(fwd_bwd(op), **kw)),
        ]
        results[n] = report(f"PyTorch (CPU), saxpy, n={n}", rows, "raw wp.launch, prebuilt Warp arrays")
        if nv is None:
            print(f"  nvidia warp_custom_op rows skipped: {nv_reason}")
    return results
