"""Both optimisation examples of the Paddle section of Warp's interoperability guide, with the
loss kernel called as an interop op and Paddle's Adam stepping through the op's gradients."""

import numpy as np
import pytest
import warp as wp

paddle = pytest.importorskip("paddle", reason="paddlepaddle is not installed")

import interop  # noqa: E402


@wp.kernel
def loss(xs: wp.array(dtype=float, ndim=2), l: wp.array(dtype=float)):  # noqa: E741 (the guide's names)
    tid = wp.tid()
    wp.atomic_add(l, 0, xs[tid, 0] ** 2.0 + xs[tid, 1] ** 2.0)


# one thread per point (not per element), a 1-element output
LOSS = interop.op(loss, output_dims=1, name="paddle_guide::loss")
STEPS = 300


def test_optimise_paddle_tensor_with_adam():
    """Guide example 1 (wp.from_paddle): the points are a Paddle tensor."""
    paddle.seed(0)
    xs = paddle.randn([100, 2])
    xs.stop_gradient = False
    opt = paddle.optimizer.Adam(learning_rate=0.1, parameters=[xs])
    first = None
    for _ in range(STEPS):
        opt.clear_grad()
        value = LOSS(xs, launch_dims=xs.shape[0])
        if first is None:
            first = value.item()
            np.testing.assert_allclose(first, float((xs**2).sum()), rtol=1e-5)
        value.backward()
        opt.step()
    final = LOSS(xs.detach(), launch_dims=100).item()
    assert first > 50.0
    assert final < 1e-2 * first, (first, final)


def test_optimise_warp_array_with_adam_through_to_paddle():
    """Guide example 2 (wp.to_paddle): the points are a Warp array; Adam gets one Paddle view of it."""
    xs = wp.array(
        np.random.default_rng(0).standard_normal((100, 2)), dtype=wp.float32, requires_grad=True, device="cpu"
    )
    start = xs.numpy().copy()
    t = wp.to_paddle(xs)  # shares memory with xs
    if t.data_ptr() != xs.ptr:
        pytest.skip(
            f"warp-lang {wp.__version__}'s wp.to_paddle copies a CPU array (1.16 to 1.18 do): the guide's "
            "pattern needs a Warp that shares the memory (1.19)"
        )
    assert not t.stop_gradient
    opt = paddle.optimizer.Adam(learning_rate=0.1, parameters=[t])
    for _ in range(STEPS):
        opt.clear_grad()
        LOSS(t, launch_dims=100).backward()
        opt.step()
    final = xs.numpy()  # Adam updated the Warp array in place
    assert np.sum(final**2) < 1e-2 * np.sum(start**2)
