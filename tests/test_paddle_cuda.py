"""Paddle on CUDA: launches on Paddle's current stream, values and gradients on the GPU.
Skipped without a CUDA GPU or without a CUDA build of Paddle."""

import numpy as np
import pytest
import warp as wp

paddle = pytest.importorskip("paddle", reason="paddlepaddle is not installed")

from guide_kernels import saxpy  # noqa: E402

import interop  # noqa: E402
from interop._frameworks import data_ptr  # noqa: E402

pytestmark = pytest.mark.cuda


SAXPY = interop.op(saxpy, name="paddle_cuda::saxpy")


@pytest.fixture(autouse=True)
def _paddle_cuda():
    if not paddle.device.is_compiled_with_cuda():
        pytest.skip("this Paddle build has no CUDA")


def test_values_and_gradients_on_gpu():
    x = paddle.arange(1 << 16, dtype="float32").cuda()
    y = paddle.ones([1 << 16], dtype="float32").cuda()
    x.stop_gradient = False
    out = SAXPY(x, y, 2.0)
    assert out.place.is_gpu_place()
    np.testing.assert_allclose(out.numpy(), 2.0 * np.arange(1 << 16) + 1.0)
    out.sum().backward()
    assert x.grad.place.is_gpu_place()
    np.testing.assert_allclose(x.grad.numpy(), 2.0)


def test_launches_on_paddles_current_stream():
    from adapters.paddle import FRAMEWORK

    s = paddle.device.Stream()
    with paddle.device.stream_guard(s):
        x = paddle.arange(1 << 20, dtype="float32").cuda()
        y = paddle.ones([1 << 20], dtype="float32").cuda()
        ws = FRAMEWORK.stream("cuda:0", [x, y])
        assert ws.cuda_stream == s.stream_base.cuda_stream
        assert ws.cuda_stream == wp.stream_from_paddle(s).cuda_stream
        ptr = data_ptr(x)
        out = SAXPY(x, y, 2.0)
        total = float(out.sum())  # ordered after the launch on s
    assert data_ptr(x) == ptr
    assert total == pytest.approx(float(2.0 * np.arange(1 << 20, dtype=np.float64).sum() + (1 << 20)), rel=1e-5)
