"""paddle.amp.auto_cast: an op behaves as Paddle's own float32 (black-list) operators (issue 49, item 4).

In effect (GPU places, levels O1 and O2) a float16/bfloat16 tensor given for a float32 parameter is
cast to it, the output is the kernel's dtype and the gradient goes back in the caller's dtype; on the
CPU Paddle's auto_cast changes nothing, and neither does the op; integers and in-out arrays are never cast.
"""

from __future__ import annotations

import contextlib
import sys

import catalogue
import numpy as np
import pytest

paddle = pytest.importorskip("paddle", reason="paddlepaddle is not installed")

import interop  # noqa: E402

SCALE = interop.op(catalogue.scale_kernel, name="tt_paddle_amp::scale")
VSCALE = interop.op(catalogue.vscale_kernel, name="tt_paddle_amp::vscale")
GENERIC = interop.op(catalogue.generic_kernel, name="tt_paddle_amp::generic")
GATHER = interop.op(catalogue.gather_kernel, name="tt_paddle_amp::gather")
INOUT = interop.op(catalogue.inout_kernel, in_out=["acc"], outputs=2, name="tt_paddle_amp::inout")
LEVELS = ("O1", "O2")


@contextlib.contextmanager
def _in_effect_on_the_cpu(level: str):
    """Paddle's auto_cast state as ``paddle.amp.auto_cast(level=...)`` leaves it on a GPU place (its
    module state and the tracer's AMP level), on the CPU, where this machine has no GPU: only the op
    is called inside (Paddle's own CPU kernels have no AMP path: use them outside)."""
    from paddle.base import core, framework

    amp_module = sys.modules["paddle.amp.auto_cast"]  # the module (paddle.amp.auto_cast is its function)
    tracer = framework._dygraph_tracer()
    saved = (tracer._amp_level, tracer._amp_dtype, amp_module._g_amp_state_)
    tracer._amp_level = getattr(core.AmpLevel, level)
    tracer._amp_dtype = "bfloat16"
    amp_module._g_amp_state_ = {"level": level}
    try:
        yield
    finally:
        tracer._amp_level, tracer._amp_dtype, amp_module._g_amp_state_ = saved


def _cpu(a, dtype="float32"):
    return paddle.to_tensor(np.asarray(a, dtype=np.float32), place=paddle.CPUPlace()).astype(dtype)


@pytest.fixture
def on_the_cpu():
    """Paddle's expected place set to the CPU (auto_cast reads it; a GPU machine's default is the GPU)."""
    before = paddle.get_device()
    paddle.set_device("cpu")
    yield
    paddle.set_device(before)


def test_auto_cast_on_the_cpu_casts_nothing_as_paddle_does(on_the_cpu):
    lin = paddle.nn.Linear(4, 3)
    x = _cpu(np.ones((2, 4)))
    with pytest.warns(UserWarning, match="makes no effect"), paddle.amp.auto_cast(dtype="bfloat16"):
        assert lin(x).dtype == paddle.float32  # Paddle's own operators are not cast on the CPU
        with pytest.raises(interop.ArgumentError, match=r"parameter 'a'.*bfloat16; arrays are never cast"):
            SCALE(_cpu([1.0, 2.0], "bfloat16"), 2.0)


def test_outside_auto_cast_nothing_is_cast():
    with pytest.raises(interop.ArgumentError, match=r"op 'tt_paddle_amp::scale', parameter 'a'.*bfloat16"):
        SCALE(_cpu([1.0, 2.0], "bfloat16"), 2.0)


@pytest.mark.parametrize("half", ["bfloat16", "float16"])
@pytest.mark.parametrize("level", LEVELS)
def test_in_effect_half_inputs_are_cast_and_gradients_come_back_in_their_dtype(level, half):
    v = _cpu(np.arange(12).reshape(4, 3) / 7.0, half)
    v.stop_gradient = False
    a = _cpu([0.5, -1.0, 2.0], half)
    with _in_effect_on_the_cpu(level):
        out = VSCALE(v, 1.5)
        generic = GENERIC(a, 2.0)  # typing.Any: float32, as Paddle's float32 operators
    assert (out.dtype, generic.dtype) == (paddle.float32, paddle.float32)
    np.testing.assert_allclose(out.numpy(), v.astype("float32").numpy() * 1.5, rtol=1e-6)
    np.testing.assert_allclose(generic.numpy(), a.astype("float32").numpy() ** 2 * 2.0, rtol=1e-6)
    (out * out).sum().backward()
    assert v.grad.dtype == getattr(paddle, half)  # autograd of the cast: the caller's dtype
    expected = (2 * 1.5 * 1.5 * v.astype("float32")).astype(half).astype("float32").numpy()
    np.testing.assert_allclose(v.grad.astype("float32").numpy(), expected, rtol=1e-2)


def test_in_effect_integers_and_in_out_arrays_are_never_cast():
    a = _cpu([1.0, 2.0, 3.0], "bfloat16")
    idx = paddle.to_tensor(np.array([2, 0], dtype=np.int64), place=paddle.CPUPlace())
    with _in_effect_on_the_cpu("O1"):
        with pytest.raises(interop.ArgumentError, match=r"parameter 'idx'.*int64"):
            GATHER(a, idx)
        np.testing.assert_allclose(GATHER(a, idx.astype("int32")).numpy(), [3.0, 1.0])
        with pytest.raises(interop.ArgumentError, match=r"parameter 'acc'.*bfloat16"):
            INOUT(_cpu(np.ones((2, 3))), _cpu([0.0, 0.0], "bfloat16"))


def test_generic_half_call_outside_then_inside_auto_cast():
    a = _cpu([1.5, -2.0], "bfloat16")
    for _ in range(2):  # the second call takes the eager hook, which must not serve the call below
        assert GENERIC(a, 2.0).dtype == paddle.bfloat16
    with _in_effect_on_the_cpu("O2"):
        assert GENERIC(a, 2.0).dtype == paddle.float32


# ---- the real thing: Paddle's auto_cast on a GPU -----------------------------------------------
def _train(level: str, half: str, explicit: bool, steps: int = 3):
    paddle.seed(0)
    paddle.set_device("gpu:0")  # the Linear's parameters on the GPU, where auto_cast takes effect
    lin = paddle.nn.Linear(4, 3)
    opt = paddle.optimizer.SGD(learning_rate=0.1, parameters=lin.parameters())
    rng = np.random.default_rng(1)
    x = paddle.to_tensor(rng.random((16, 4), dtype=np.float32), place=paddle.CUDAPlace(0))
    target = paddle.to_tensor(rng.random((16, 3), dtype=np.float32), place=paddle.CUDAPlace(0))
    grads = []
    for _ in range(steps):
        with paddle.amp.auto_cast(level=level, dtype=half):
            h = lin(x)
            assert h.dtype == getattr(paddle, half)
            out = VSCALE(h.astype("float32") if explicit else h, 1.5)
            loss = ((out - target) ** 2).mean()
        loss.backward()
        grads.append(lin.weight.grad.astype("float32").numpy())
        opt.step()
        opt.clear_grad()
    return grads


@pytest.mark.cuda
@pytest.mark.parametrize("half", ["bfloat16", "float16"])
@pytest.mark.parametrize("level", LEVELS)
def test_auto_cast_linear_trains_through_the_op_on_gpu(level, half):
    if not paddle.device.is_compiled_with_cuda():
        pytest.skip("this Paddle build has no CUDA")
    before = paddle.get_device()
    try:
        got, ref = _train(level, half, False), _train(level, half, True)
    finally:
        paddle.set_device(before)
    for g, r in zip(got, ref):
        np.testing.assert_allclose(g, r, rtol=1.6e-2, atol=1e-3)
