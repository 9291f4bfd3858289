"""Paddle rows: an interop op called with Paddle tensors against ``wp.from_paddle`` + ``wp.launch``.

Per size (n=1024 and n=1e6), ratios to a raw ``wp.launch`` on Warp arrays built once:

- ``wp.from_paddle`` on the two inputs and a ``paddle.zeros`` output, then ``wp.launch``: the
  forward a user writes by hand (target: the op's forward is no slower);
- the op's forward (inputs with ``stop_gradient=True``: no autograd node);
- the op's forward + ``out.sum().backward()`` through its PyLayer (Warp's adjoint);
- the same math in plain Paddle, forward + backward, for scale;
- the floors: an empty PyLayer's forward+backward, and the raw forward + adjoint launches; the
  op's forward+backward is also compared with their sum (its node does both).

All rows are measured round-robin in one process (see ``harness.interleaved``).
"""

from __future__ import annotations

import numpy as np
import paddle
import warp as wp
from paddle.autograd import PyLayer

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


class EmptyLayer(PyLayer):
    """A PyLayer with nothing inside: the floor of any Python-level Paddle autograd node."""

    @staticmethod
    def forward(ctx, x, y, a):
        return paddle.empty_like(x)

    @staticmethod
    def backward(ctx, g):
        return g, g


def run(quick: bool = False) -> dict:
    results = {}
    op = interop.op(saxpy, name="bench_paddle::saxpy")
    kw = {"rounds": 5, "batch_time": 0.01} if quick else {}
    for n in sizes():
        xn = np.random.default_rng(0).random(n, dtype=np.float32)
        x = paddle.to_tensor(xn)
        y = paddle.ones([n], dtype="float32")
        wx, wy, wout = wp.from_paddle(x), wp.from_paddle(y), wp.zeros(n, dtype=float, device="cpu")
        gx, gy, gout = (wp.zeros(n, dtype=float, device="cpu") for _ in range(3))
        gout.fill_(1.0)

        def by_hand():
            out = paddle.zeros([n], dtype="float32")
            wp.launch(
                saxpy,
                dim=n,
                inputs=[wp.from_paddle(x), wp.from_paddle(y), 2.0],
                outputs=[wp.from_paddle(out)],
                device="cpu",
            )
            return out

        raw_fwd_adj = raw_saxpy_forward_adjoint(saxpy, n, wx, wy, wout, gx, gy, gout)

        def paddle_allocations():  # what the op's call allocates: a new output, two zeroed gradients
            return (
                paddle.empty([n], dtype="float32"),
                paddle.zeros([n], dtype="float32"),
                paddle.zeros([n], dtype="float32"),
            )

        raw_alloc = raw_saxpy_forward_adjoint(saxpy, n, wx, wy, wout, gx, gy, gout, allocate=paddle_allocations)

        by_hand_fb = by_hand_saxpy_forward_backward(
            saxpy,
            n,
            x.data_ptr(),
            y.data_ptr(),
            lambda: paddle.empty([n], dtype="float32"),
            lambda: paddle.zeros([n], dtype="float32"),
            lambda: paddle.ones([n], dtype="float32"),
            lambda t: t.data_ptr(),
        )

        xg = x.clone()
        xg.stop_gradient = False
        yg = y.clone()
        yg.stop_gradient = False

        def fwd_bwd(f):
            def step():
                f(xg, yg, 2.0).sum().backward()
                xg.clear_gradient(False)
                yg.clear_gradient(False)

            return step

        rows = [
            (
                "raw wp.launch, prebuilt Warp arrays",
                lambda: wp.launch(saxpy, dim=n, inputs=[wx, wy, 2.0], outputs=[wout], device="cpu"),
            ),
            ("raw wp.launch forward + zero grads + adjoint launch", raw_fwd_adj),
            ("  the same + new Paddle output and zeroed gradients", raw_alloc),
            ("  by hand: raw launches into Paddle buffers held as autograd holds them", by_hand_fb),
            ("floor: empty PyLayer, forward+backward", fwd_bwd(EmptyLayer.apply)),
            ("floor: paddle.zeros(n), the output allocation alone", lambda: paddle.zeros([n], dtype="float32")),
            ("wp.from_paddle x3 + wp.launch (output by paddle.zeros)", by_hand),
            ("interop op(x, y, 2.0), forward (no grad)", lambda: op(x, y, 2.0)),
            ("interop op, forward+backward (PyLayer)", fwd_bwd(op)),
            ("plain Paddle 2*x+y, forward+backward", fwd_bwd(lambda a, b, s: s * a + b)),
        ]
        np.testing.assert_allclose(op(x, y, 2.0).numpy(), 2.0 * xn + 1.0, rtol=1e-6)
        np.testing.assert_allclose(by_hand().numpy(), 2.0 * xn + 1.0, rtol=1e-6)
        op(xg, yg, 2.0).sum().backward()
        np.testing.assert_allclose(xg.grad.numpy(), 2.0, rtol=1e-6)
        np.testing.assert_allclose(yg.grad.numpy(), 1.0, rtol=1e-6)
        xg.clear_gradient(False)
        yg.clear_gradient(False)
        base = "raw wp.launch, prebuilt Warp arrays"
        table = report(f"Paddle (CPU), saxpy, n={n}, {clock()[0]}", interleaved(rows, **kw), base)
        found = ratios(
            "targets",
            table,
            [
                ("interop op(x, y, 2.0), forward (no grad)", base),
                ("interop op, forward+backward (PyLayer)", "floor: empty PyLayer, forward+backward"),
                ("interop op, forward+backward (PyLayer)", "raw wp.launch forward + zero grads + adjoint launch"),
                ("interop op, forward+backward (PyLayer)", "  the same + new Paddle output and zeroed gradients"),
                (
                    "interop op, forward+backward (PyLayer)",
                    "  by hand: raw launches into Paddle buffers held as autograd holds them",
                ),
            ],
        )
        if n == 1024:
            for name, r in found.items():
                gate("paddle", name, r)
        faults_per_call(
            rows,
            [
                "  by hand: raw launches into Paddle buffers held as autograd holds them",
                "interop op, forward+backward (PyLayer)",
                "plain Paddle 2*x+y, forward+backward",
            ],
        )
        # the op's node does what an empty PyLayer does plus the two launches: their sum is its floor
        us = {label: u for label, u, _ in table}
        both = us["floor: empty PyLayer, forward+backward"] + us["raw wp.launch forward + zero grads + adjoint launch"]
        print(
            "    interop op, forward+backward (PyLayer)  /  (empty PyLayer + raw forward, zero grads, adjoint): "
            f"{us['interop op, forward+backward (PyLayer)'] / both:.2f}x"
        )
        results[n] = table
    return results
