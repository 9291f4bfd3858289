"""Vector values through an op's registered torch operator (``torch.ops``, what a compiled graph
calls): a ``float[]`` list of Python floats is written into the launch's argument struct as it is
(``interop._launch.direct_lines``, ``vectors``); any other value is converted and checked as
before. A sequence of calls changes the value between calls (-0.0, NaN, inf, the largest float32,
ints) and each result and gradient is compared with Warp's own ``wp.launch``/``wp.Tape`` on the
same device; values a vec3 cannot hold are refused naming the op and the parameter, on both
operators (forward and backward).
"""

from __future__ import annotations

import numpy as np
import pytest
import warp as wp

import interop

torch = pytest.importorskip("torch")
atorch = pytest.importorskip("adapters.torch")


@wp.kernel
def _shift(x: wp.array(dtype=wp.vec3), g: wp.vec3, s: float, y: wp.array(dtype=wp.vec3)):
    i = wp.tid()
    y[i] = x[i] * s + g + wp.vec3(g[0] * x[i][1], 0.0, wp.sign(g[2]))


SHIFT = interop.op(_shift)

F32_MAX = float(np.finfo(np.float32).max)

#: gravity values of consecutive calls
VALUES = [
    [0.0, -9.8, 0.0],
    [0.0, -9.8, 0.0],
    [1.5, -0.0, -0.0],  # the sign of zero reaches the kernel (wp.sign(-0.0))
    [0.0, 0.0, 0.0],
    [float("nan"), 1.0, 2.0],
    [float("inf"), -float("inf"), 0.5],
    [F32_MAX, -F32_MAX, 3.0],
    [1.0, 2.0, 3.0],
    [0.0, -9.8, 0.0],
]


def _reference(x: np.ndarray, g, s: float, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    wx = wp.array(x, dtype=wp.vec3, device="cpu", requires_grad=True)
    wy = wp.zeros(len(x), dtype=wp.vec3, device="cpu", requires_grad=True)
    tape = wp.Tape()
    with tape:
        wp.launch(_shift, dim=len(x), inputs=[wx, wp.vec3(*g), s], outputs=[wy], device="cpu")
    wy.grad = wp.array(w, dtype=wp.vec3, device="cpu")
    tape.backward()
    return wy.numpy(), wx.grad.numpy()


def _same(got, ref) -> None:
    np.testing.assert_array_equal(np.asarray(got), ref)  # the same float32 operations: bit for bit


def test_a_sequence_of_vector_values_through_the_operator():
    fwd = atorch.operators(SHIFT)["functional"]._opoverload
    rng = np.random.default_rng(0)
    for t, g in enumerate(VALUES):
        n = 4 if t % 2 else 6
        x_np = rng.uniform(-1, 1, (n, 3)).astype(np.float32)
        w = rng.uniform(-1, 1, (n, 3)).astype(np.float32)
        y_ref, gx_ref = _reference(x_np, g, 0.5, w)
        x = torch.tensor(x_np, device="cpu", requires_grad=True)
        y = fwd(x, list(g), 0.5)
        _same(y.detach(), y_ref)
        (y * torch.tensor(w, device="cpu")).sum().backward()  # the backward operator, the same list
        _same(x.grad, gx_ref)
        with torch.no_grad():
            _same(fwd(x.detach(), list(g), 0.5), y_ref)
        # the op object with a tuple, under saved-tensor hooks (as torch.utils.checkpoint runs it)
        x.grad = None
        with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
            y = SHIFT(x, tuple(g), 0.5)
        _same(y.detach(), y_ref)
        (y * torch.tensor(w, device="cpu")).sum().backward()
        _same(x.grad, gx_ref)


def test_ints_and_tuples_take_the_conversion():
    fwd = atorch.operators(SHIFT)["functional"]._opoverload
    x_np = np.arange(12, dtype=np.float32).reshape(4, 3) / 7
    y_ref, _ = _reference(x_np, (1.0, -2.0, 0.0), 2.0, np.ones((4, 3), np.float32))
    x = torch.tensor(x_np, device="cpu")
    _same(fwd(x, [1, -2, 0], 2.0), y_ref)  # (torch hands ints of a float[] over as floats)
    _same(SHIFT(x, (1, -2, 0), 2.0), y_ref)
    _same(SHIFT(x, wp.vec3(1.0, -2.0, 0.0), 2.0), y_ref)


@pytest.mark.parametrize(
    "g, match",
    [
        ([1e39, 0.0, 0.0], "'g'"),  # beyond float32: refused, not inf
        ([0.0, -1e39, 0.0], "'g'"),
        ([1.0, 2.0], "'g'"),  # two components for a vec3
        ([1.0, 2.0, 3.0, 4.0], "'g'"),
    ],
)
def test_values_a_vec3_cannot_hold_are_refused(g, match):
    fwd = atorch.operators(SHIFT)["functional"]._opoverload
    x = torch.ones(3, 3, device="cpu", requires_grad=True)
    fwd(x, [0.0, 1.0, 2.0], 1.0)  # (the launch record exists: the refusal is not a first call's)
    with pytest.raises(interop.ArgumentError, match=match):
        fwd(x, g, 1.0)
    with torch.no_grad(), pytest.raises(interop.ArgumentError, match=match):
        fwd(x.detach(), g, 1.0)
    # the record is not left with the refused value: the next call is right
    y_ref, _ = _reference(np.ones((3, 3), np.float32), (0.0, 1.0, 2.0), 1.0, np.ones((3, 3), np.float32))
    _same(fwd(x, [0.0, 1.0, 2.0], 1.0).detach(), y_ref)


def test_compiled_step_with_changing_gravity():
    """torch.compile bakes the list into the graph: each value its own graph, each right."""
    x_np = np.random.default_rng(3).uniform(-1, 1, (5, 3)).astype(np.float32)
    w = np.ones((5, 3), np.float32)
    for g in ([0.0, -9.8, 0.0], [1.5, -0.0, -0.0], [0.0, -9.8, 0.0]):

        @torch.compile(fullgraph=True, backend="aot_eager")
        def f(x, g=tuple(g)):
            return SHIFT(x, g, 0.5)

        y_ref, gx_ref = _reference(x_np, g, 0.5, w)
        x = torch.tensor(x_np, device="cpu", requires_grad=True)
        y = f(x)
        _same(y.detach(), y_ref)
        y.sum().backward()
        _same(x.grad, gx_ref)
