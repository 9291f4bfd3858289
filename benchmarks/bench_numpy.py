"""NumPy rows: an interop op called with NumPy arrays against raw ``wp.launch``."""

from __future__ import annotations

import numpy as np
import warp as wp

import interop

from .harness import SIZES, per_call, report


@wp.kernel
def saxpy(x: wp.array(dtype=float), y: wp.array(dtype=float), a: float, out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = a * x[i] + y[i]


def run(quick: bool = False) -> dict:
    results = {}
    op = interop.op(saxpy)
    for n in SIZES:
        x = np.random.default_rng(0).random(n, dtype=np.float32)
        y = np.ones(n, np.float32)
        wx, wy, wout = (wp.array(a, device="cpu") for a in (x, y, np.zeros(n, np.float32)))
        out_np = np.zeros(n, np.float32)
        rec = wp.launch(saxpy, dim=n, inputs=[wx, wy, 2.0, wout], device="cpu", record_cmd=True)
        kw = {"min_time": 0.05, "repeat": 3} if quick else {}
        rows = [
            (
                "raw wp.launch, prebuilt Warp arrays",
                per_call(lambda: wp.launch(saxpy, dim=n, inputs=[wx, wy, 2.0, wout], device="cpu"), **kw),
            ),
            ("wp.launch replay (record_cmd=True)", per_call(rec.launch, **kw)),
            (
                "wp.launch, NumPy arrays passed directly",
                per_call(lambda: wp.launch(saxpy, dim=n, inputs=[x, y, 2.0, out_np], device="cpu"), **kw),
            ),
            ("interop op(x, y, 2.0), NumPy in/out (allocates output)", per_call(lambda: op(x, y, 2.0), **kw)),
        ]
        np.testing.assert_allclose(op(x, y, 2.0), 2.0 * x + y, rtol=1e-6)
        results[n] = report(f"NumPy, saxpy, n={n}", rows, "raw wp.launch, prebuilt Warp arrays")
    return results
