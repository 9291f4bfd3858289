"""Paddle rows: an interop op called with Paddle tensors against ``wp.from_paddle`` + ``wp.launch``.

Per size (n=1024 and n=1e6), ratios to a raw ``wp.launch`` on Warp arrays built once:

- ``wp.from_paddle`` on the two inputs and a ``paddle.zeros`` output, then ``wp.launch``: the
  forward a user writes by hand (target: the op's forward is no slower);
- the op's forward (inputs with ``stop_gradient=True``: no autograd node);
- the op's forward + ``out.sum().backward()`` through its PyLayer (Warp's adjoint);
- the same math in plain Paddle, forward + backward, for scale.
"""

from __future__ import annotations

import numpy as np
import paddle
import warp as wp

import interop

from .harness import SIZES, per_call, report


@wp.kernel
def saxpy(x: wp.array(dtype=float), y: wp.array(dtype=float), a: float, out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = a * x[i] + y[i]


def run(quick: bool = False) -> dict:
    results = {}
    op = interop.op(saxpy, name="bench_paddle::saxpy")
    kw = {"min_time": 0.05, "repeat": 3} if quick else {}
    for n in SIZES:
        xn = np.random.default_rng(0).random(n, dtype=np.float32)
        x = paddle.to_tensor(xn)
        y = paddle.ones([n], dtype="float32")
        wx, wy, wout = wp.from_paddle(x), wp.from_paddle(y), wp.zeros(n, dtype=float, device="cpu")

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

        xg = x.clone()
        xg.stop_gradient = False
        yg = y.clone()
        yg.stop_gradient = False

        def fwd_bwd():
            op(xg, yg, 2.0).sum().backward()

        def paddle_fwd_bwd():
            (2.0 * xg + yg).sum().backward()

        rows = [
            (
                "raw wp.launch, prebuilt Warp arrays",
                per_call(lambda: wp.launch(saxpy, dim=n, inputs=[wx, wy, 2.0], outputs=[wout], device="cpu"), **kw),
            ),
            ("wp.from_paddle x3 + wp.launch (output by paddle.zeros)", per_call(by_hand, **kw)),
            ("interop op(x, y, 2.0), forward", per_call(lambda: op(x, y, 2.0), **kw)),
            ("interop op, forward + backward (PyLayer)", per_call(fwd_bwd, **kw)),
            ("plain Paddle 2*x+y, forward + backward (reference)", per_call(paddle_fwd_bwd, **kw)),
        ]
        np.testing.assert_allclose(op(x, y, 2.0).numpy(), 2.0 * xn + 1.0, rtol=1e-6)
        np.testing.assert_allclose(by_hand().numpy(), 2.0 * xn + 1.0, rtol=1e-6)
        xg.clear_gradient()
        fwd_bwd()
        np.testing.assert_allclose(xg.grad.numpy(), 2.0, rtol=1e-6)
        xg.clear_gradient()
        yg.clear_gradient()
        results[n] = report(f"Paddle, saxpy, n={n}", rows, "raw wp.launch, prebuilt Warp arrays")
    return results
