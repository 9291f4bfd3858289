"""NumPy rows: an interop op called with NumPy arrays against raw ``wp.launch``."""

from __future__ import annotations

import numpy as np
import warp as wp

import interop

from .harness import clock, gate, interleaved, ratios, report, sizes


@wp.kernel
def saxpy(x: wp.array(dtype=float), y: wp.array(dtype=float), a: float, out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = a * x[i] + y[i]


CHECKED_ROW = "interop op, checked=True (every access bounds-checked)"


def run(quick: bool = False) -> dict:
    results = {}
    op = interop.op(saxpy)
    checked = interop.op(saxpy, checked=True)  # checked mode (docs/checked.md): every access bounds-checked
    for n in sizes():
        x = np.random.default_rng(0).random(n, dtype=np.float32)
        y = np.ones(n, np.float32)
        wx, wy, wout = (wp.array(a, device="cpu") for a in (x, y, np.zeros(n, np.float32)))
        out_np = np.zeros(n, np.float32)
        rec = wp.launch(saxpy, dim=n, inputs=[wx, wy, 2.0, wout], device="cpu", record_cmd=True)
        kw = {"rounds": 5, "batch_time": 0.01} if quick else {}
        base = "raw wp.launch, prebuilt Warp arrays"
        op_row = "interop op(x, y, 2.0), NumPy in/out (allocates output)"
        rows = [
            (base, lambda: wp.launch(saxpy, dim=n, inputs=[wx, wy, 2.0, wout], device="cpu")),
            ("wp.launch replay (record_cmd=True)", rec.launch),
            (
                "wp.launch, NumPy arrays passed directly",
                lambda: wp.launch(saxpy, dim=n, inputs=[x, y, 2.0, out_np], device="cpu"),
            ),
            (op_row, lambda: op(x, y, 2.0)),
            (CHECKED_ROW, lambda: checked(x, y, 2.0)),
        ]
        np.testing.assert_allclose(op(x, y, 2.0), 2.0 * x + y, rtol=1e-6)
        np.testing.assert_array_equal(checked(x, y, 2.0), op(x, y, 2.0))
        table = report(f"NumPy, saxpy, n={n}, {clock()[0]}", interleaved(rows, **kw), base)
        ratios("checked mode (printed, not gated): its cost beside the unchecked call", table, [(CHECKED_ROW, op_row)])
        if n == 1024:
            us = {label: u for label, u, _ in table}
            gate("numpy", f"{op_row} / {base}", us[op_row] / us[base])
        results[n] = table
    return results
