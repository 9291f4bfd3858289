"""Ops inside Warp's CPU graph capture (``wp.ScopedCapture(device="cpu")``, Warp's API capture).

The capture records each launch from its ``wp.array`` arguments (their memory regions) and refuses
the raw descriptors a launch record holds (Warp 1.19: ``NotImplementedError``), so while it records,
a kernel op launches with plain ``wp.launch`` and a Python-function op's launches are Warp's own
(``interop._launch._captured``, ``interop._fast_launch``). Replaying the graph after the
inputs changed gives what a new call gives: in Warp, NumPy and torch (eager fast path) arrays.
"""

from __future__ import annotations

import numpy as np
import pytest
import warp as wp

import interop


@wp.kernel
def _affine(x: wp.array(dtype=float), a: float, y: wp.array(dtype=float)):
    i = wp.tid()
    y[i] = a * x[i] + 1.0


@wp.kernel
def _square(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    y[i] = x[i] * x[i]


def two_launches(x: wp.array(dtype=float), a: float, y: wp.array(dtype=float)):
    t = wp.zeros(x.shape[0], dtype=float, device=x.device)
    wp.launch(_affine, dim=x.shape[0], inputs=[x, a], outputs=[t], device=x.device)
    wp.launch(_square, dim=x.shape[0], inputs=[t], outputs=[y], device=x.device)


AFFINE = interop.op(_affine)
TWO = interop.op(two_launches)
EXPECTED = {"kernel": lambda x: 3.0 * x + 1.0, "function": lambda x: (3.0 * x + 1.0) ** 2}


def _cpu_capture_available() -> bool:
    x = wp.zeros(2, dtype=float, device="cpu")
    try:
        with wp.ScopedCapture(device="cpu"):
            wp.launch(_square, dim=2, inputs=[x], outputs=[x], device="cpu")
    except Exception:  # noqa: BLE001 - a Warp without CPU capture
        return False
    return True


pytestmark = pytest.mark.skipif(not _cpu_capture_available(), reason="this Warp has no CPU graph capture")


def _arrays(fw: str, values: np.ndarray):
    if fw == "warp":
        return wp.array(values, dtype=float, device="cpu")
    if fw == "torch":
        torch = pytest.importorskip("torch")
        return torch.tensor(values, device="cpu")
    return values.copy()


def _assign(fw: str, x, values: np.ndarray) -> None:
    if fw == "warp":
        x.assign(values)
    else:
        np.copyto(np.asarray(x) if fw == "numpy" else x.numpy(), values)


@pytest.mark.parametrize("fw", ["warp", "numpy", "torch"])
@pytest.mark.parametrize("kind", ["kernel", "function"])
def test_captured_call_replays_with_new_inputs(fw, kind):
    op = AFFINE if kind == "kernel" else TWO
    x0 = np.array([1.0, 2.0, -0.5, 0.25], np.float32)
    x = _arrays(fw, x0)
    op(x, 3.0)  # a first call outside the capture: records, kernels loaded, the eager path bound
    with wp.ScopedCapture(device="cpu") as capture:
        y = op(x, 3.0)  # (recorded: the graph runs it)
    wp.capture_launch(capture.graph)
    np.testing.assert_allclose(np.asarray(y.numpy() if fw != "numpy" else y), EXPECTED[kind](x0), rtol=1e-6)
    x1 = np.array([0.0, -1.0, 4.0, 0.5], np.float32)
    _assign(fw, x, x1)
    wp.capture_launch(capture.graph)
    np.testing.assert_allclose(np.asarray(y.numpy() if fw != "numpy" else y), EXPECTED[kind](x1), rtol=1e-6)
    # and outside the capture again, the records run
    y2 = op(x, 3.0)
    np.testing.assert_allclose(np.asarray(y2.numpy() if fw != "numpy" else y2), EXPECTED[kind](x1), rtol=1e-6)
