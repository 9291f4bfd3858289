"""PyTorch rows: an interop op called with tensors against raw ``wp.launch``, PyTorch's own floors
(an empty custom op, an empty ``autograd.Function``), the op through its registered operator and
``torch.compile``, the custom-operator pattern of Warp's guide, and NVIDIA's ``warp_custom_op``
(package ``nvalchemi-toolkit-ops``). All rows are measured round-robin in one process.

Every row computes ``out = a * x + y`` for float32 tensors on the CPU; the forward+backward
rows also compute the gradients of ``x`` and ``y`` for a given upstream gradient.
"""

from __future__ import annotations

import torch
import warp as wp

import interop

from .harness import (
    by_hand_saxpy_forward_backward,
    clock,
    faults_per_call,
    gate,
    interleaved,
    ratios,
    raw_saxpy_forward_adjoint,
    report,
    sizes,
)


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


# ---- floors: what PyTorch itself costs per call, with no work inside -------------------
@torch.library.custom_op("bench_floor::empty", mutates_args=())
def empty_custom_op(x: torch.Tensor, y: torch.Tensor, a: float) -> torch.Tensor:
    return torch.empty_like(x)


@empty_custom_op.register_fake
def _(x, y, a):
    return torch.empty_like(x)


empty_custom_op.register_autograd(lambda ctx, g: (g, g, None), setup_context=lambda ctx, inputs, output: None)


class EmptyFunction(torch.autograd.Function):
    """An autograd.Function with nothing inside: the floor of any Python-level autograd node."""

    @staticmethod
    def forward(ctx, x, y, a):
        return torch.empty_like(x)

    @staticmethod
    def backward(ctx, g):
        return g, g, None


JVP = "interop op, torch.func.jvp (tangent kernel)"
PLAIN_JVP = "plain torch (2*x+y), torch.func.jvp"


def run(quick: bool = False) -> dict:
    threads = torch.get_num_threads()
    # Warp's CPU kernels run on one thread: so does torch here, so that every row is one thread's
    # work (with BENCH_CLOCK=cpu, idle OpenMP workers spinning would count as the rows' time)
    torch.set_num_threads(1)
    try:
        return _run(quick)
    finally:
        torch.set_num_threads(threads)


CHECKED_FWD = "interop op, checked=True, eager forward"
CHECKED_FWD_BWD = "interop op, checked=True, eager forward+backward"


def _run(quick: bool) -> dict:
    import adapters.torch as atorch

    results = {}
    op = interop.op(saxpy, name="bench_interop::saxpy")
    checked = interop.op(saxpy, checked=True)  # checked mode (docs/checked.md)
    registered = atorch.bind(op)  # torch.ops.bench_interop.saxpy: the path every tracer sees
    compiled = torch.compile(lambda x, y: op(x, y, 2.0), fullgraph=True)
    nv, nv_reason = _nvidia_saxpy()
    kw = {"rounds": 5, "batch_time": 0.01} if quick else {}
    for n in sizes():
        x = torch.rand(n)
        y = torch.rand(n)
        xr = x.clone().requires_grad_(True)
        yr = y.clone().requires_grad_(True)
        g = torch.rand(n)
        wx, wy, wout = (wp.array(t.numpy(), device="cpu") for t in (x, y, torch.zeros(n)))
        gx, gy, gout = (wp.zeros(n, dtype=float, device="cpu") for _ in range(3))
        gout.fill_(1.0)

        def fwd_bwd(f):
            def step():
                xr.grad = None
                yr.grad = None
                f(xr, yr, 2.0).sum().backward()

            return step

        raw_fwd_adj = raw_saxpy_forward_adjoint(saxpy, n, wx, wy, wout, gx, gy, gout)
        raw_alloc = raw_saxpy_forward_adjoint(
            saxpy, n, wx, wy, wout, gx, gy, gout, allocate=lambda: (torch.empty(n), torch.zeros(n), torch.zeros(n))
        )

        by_hand_fb = by_hand_saxpy_forward_backward(
            saxpy,
            n,
            x.data_ptr(),
            y.data_ptr(),
            lambda: torch.empty(n),
            lambda: torch.zeros(n),
            lambda: torch.ones(n),
            lambda t: t.data_ptr(),
        )

        # every path computes the same values and gradients
        ref = 2.0 * x + y
        paths = [("interop", op), ("operator", registered), ("compiled", lambda a, b, s: compiled(a, b))]
        paths += [("guide", guide_saxpy)] + ([("nvidia", nv)] if nv is not None else [])
        paths += [("checked", checked)]
        for _, f in paths:
            torch.testing.assert_close(f(x, y, 2.0), ref)
            xr.grad = yr.grad = None
            f(xr, yr, 2.0).backward(g)
            torch.testing.assert_close(xr.grad, 2.0 * g)
            torch.testing.assert_close(yr.grad, g)
        # forward mode (issue 34): the generated tangent kernel through the op's autograd.Function
        torch.testing.assert_close(torch.func.jvp(lambda a: op(a, y, 2.0), (x,), (y,))[1], 2.0 * y)
        before = atorch._binding(op).eager_calls
        op(x, y, 2.0)
        assert atorch._binding(op).eager_calls == before + 1, "the eager row must take the fast path"
        registered(x, y, 2.0)
        compiled(x, y)
        assert atorch._binding(op).eager_calls == before + 1, "operator/compiled rows must not take the fast path"

        rows = [
            (
                "raw wp.launch, prebuilt Warp arrays",
                lambda: wp.launch(saxpy, dim=n, inputs=[wx, wy, 2.0, wout], device="cpu"),
            ),
            ("raw wp.launch forward + zero grads + adjoint launch", raw_fwd_adj),
            ("  the same + new torch output and zeroed gradients", raw_alloc),
            ("  by hand: raw launches into torch buffers held as autograd holds them", by_hand_fb),
            ("floor: empty custom op, forward", lambda: empty_custom_op(x, y, 2.0)),
            ("floor: empty custom op, forward+backward", fwd_bwd(empty_custom_op)),
            ("floor: empty autograd.Function, forward", lambda: EmptyFunction.apply(x, y, 2.0)),
            ("floor: empty autograd.Function, forward+backward", fwd_bwd(EmptyFunction.apply)),
            ("floor: torch.zeros(n), the output allocation alone", lambda: torch.zeros(n)),
            ("plain torch (2*x+y), forward", lambda: 2.0 * x + y),
            ("plain torch (2*x+y), forward+backward", fwd_bwd(lambda a, b, s: s * a + b)),
            ("interop op, eager forward (no grad)", lambda: op(x, y, 2.0)),
            ("interop op, eager forward+backward", fwd_bwd(op)),
            (CHECKED_FWD, lambda: checked(x, y, 2.0)),
            (CHECKED_FWD_BWD, fwd_bwd(checked)),
            ("interop via torch.ops (registered operator), forward", lambda: registered(x, y, 2.0)),
            ("interop via torch.ops (registered operator), fwd+bwd", fwd_bwd(registered)),
            ("interop in torch.compile(fullgraph=True), forward", lambda: compiled(x, y)),
            ("interop in torch.compile(fullgraph=True), fwd+bwd", fwd_bwd(lambda a, b, s: compiled(a, b))),
            (JVP, lambda: torch.func.jvp(lambda a: op(a, y, 2.0), (x,), (y,))),
            (PLAIN_JVP, lambda: torch.func.jvp(lambda a: 2.0 * a + y, (x,), (y,))),
            ("guide custom op, forward", lambda: guide_saxpy(x, y, 2.0)),
            ("guide custom op, forward+backward", fwd_bwd(guide_saxpy)),
        ]
        if nv is not None:
            rows += [
                ("nvidia warp_custom_op, forward", lambda: nv(x, y, 2.0)),
                ("nvidia warp_custom_op, forward+backward", fwd_bwd(nv)),
            ]
        base = "raw wp.launch, prebuilt Warp arrays"
        table = report(f"PyTorch (CPU), saxpy, n={n}, {clock()[0]}", interleaved(rows, **kw), base)
        found = ratios(
            "targets",
            table,
            [
                ("interop op, eager forward (no grad)", base),
                ("interop op, eager forward+backward", "floor: empty autograd.Function, forward+backward"),
                ("interop op, eager forward+backward", "raw wp.launch forward + zero grads + adjoint launch"),
                ("interop op, eager forward+backward", "  the same + new torch output and zeroed gradients"),
                (
                    "interop op, eager forward+backward",
                    "  by hand: raw launches into torch buffers held as autograd holds them",
                ),
                (
                    "interop in torch.compile(fullgraph=True), fwd+bwd",
                    "interop via torch.ops (registered operator), fwd+bwd",
                ),
            ],
        )
        ratios(
            "checked mode (printed, not gated): its cost beside the unchecked call",
            table,
            [
                (CHECKED_FWD, "interop op, eager forward (no grad)"),
                (CHECKED_FWD_BWD, "interop op, eager forward+backward"),
            ],
        )
        ratios(
            "forward mode (printed, not gated): a JVP against the forward, the VJP and plain torch's JVP",
            table,
            [
                (JVP, "interop op, eager forward (no grad)"),
                (JVP, "interop op, eager forward+backward"),
                (JVP, PLAIN_JVP),
            ],
        )
        if n == 1024:
            for name, r in found.items():
                gate("torch", name, r)
        faults_per_call(
            rows,
            [
                "  by hand: raw launches into torch buffers held as autograd holds them",
                "interop op, eager forward+backward",
                "plain torch (2*x+y), forward+backward",
            ],
        )
        results[n] = table
        if nv is None:
            print(f"  nvidia warp_custom_op rows skipped: {nv_reason}")
    return results
