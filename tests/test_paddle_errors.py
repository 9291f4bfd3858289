"""Bad input with Paddle tensors: every error names the op and the parameter, says what was
expected and what came; nothing is cast or copied silently."""

import numpy as np
import pytest

paddle = pytest.importorskip("paddle", reason="paddlepaddle is not installed")

import catalogue  # noqa: E402
import warp as wp  # noqa: E402
from catalogue import norm3_kernel as norm3  # noqa: E402
from guide_kernels import saxpy  # noqa: E402

import interop  # noqa: E402

SAXPY = interop.op(saxpy, name="paddle_errors::saxpy")
NORM3 = interop.op(norm3, name="paddle_errors::norm3")


def f32(*shape):
    return paddle.ones(list(shape), dtype="float32")


@pytest.mark.parametrize("dtype", ["float64", "float16", "int32"])
def test_wrong_dtype_is_never_cast(dtype):
    with pytest.raises(TypeError) as e:
        SAXPY(paddle.ones([4], dtype=dtype), f32(4), 2.0)
    msg = str(e.value)
    assert "op 'paddle_errors::saxpy', parameter 'x': expected a 1-d array of float32" in msg
    assert f"dtype {np.dtype(dtype).name}; arrays are never cast" in msg


@pytest.mark.parametrize("dtype", ["complex64"])  # bfloat16 is supported (tests/test_bfloat16.py)
def test_dtype_unknown_to_warp(dtype):
    x = paddle.ones([4], dtype="float32").astype(dtype)
    with pytest.raises(
        TypeError,
        match=rf"op 'paddle_errors::saxpy', parameter 'y': expected a 1-d array of float32, got a Paddle tensor of dtype paddle.{dtype} \(not supported by Warp\)",
    ):
        SAXPY(f32(4), x, 2.0)


def test_wrong_ndim():
    with pytest.raises(
        TypeError,
        match=r"op 'paddle_errors::saxpy', parameter 'y': expected a 1-d array of float32, got an array of shape \(2, 2\) and dtype float32",
    ):
        SAXPY(f32(4), f32(2, 2), 2.0)


def test_wrong_vec_trailing_dims():
    with pytest.raises(
        TypeError,
        match=r"op 'paddle_errors::norm3', parameter 'v': expected a 1-d array of vec3.*trailing dims \(4,\), expected \(3,\)",
    ):
        NORM3(f32(5, 4))


def test_vec_components_not_packed():
    v = f32(3, 5).T  # shape [5, 3], components 5 elements apart
    with pytest.raises(
        ValueError,
        match=r"op 'paddle_errors::norm3', parameter 'v': the vec/mat components of each element must be contiguous",
    ):
        NORM3(v)


def test_strided_input_is_read_in_place():
    base = paddle.arange(8, dtype="float32")
    out = SAXPY(base[::2], f32(4), 2.0)  # no copy: Warp reads the strided view
    np.testing.assert_allclose(out.numpy(), 2.0 * np.arange(0, 8, 2) + 1.0)


def test_scalar_tensor_wrong_dtype():
    with pytest.raises(
        TypeError,
        match=r"op 'paddle_errors::saxpy', parameter 'a': expected a float32 value \(a 0-d array of float32 or a Python number\), got an array of shape \(\) and dtype float64",
    ):
        SAXPY(f32(4), f32(4), paddle.to_tensor(2.0, dtype="float64", place=paddle.CPUPlace()))


def test_not_a_tensor_for_an_array_parameter():
    with pytest.raises(
        TypeError, match=r"op 'paddle_errors::saxpy', parameter 'y': expected a 1-d array of float32, got list"
    ):
        SAXPY(f32(4), [1.0, 2.0, 3.0, 4.0], 2.0)


def test_paddle_and_numpy_in_one_call():
    with pytest.raises(
        TypeError,
        match=r"op 'paddle_errors::saxpy': arrays from two frameworks in one call: parameter 'x' is a paddle array, parameter 'y' is a numpy array",
    ):
        SAXPY(f32(4), np.ones(4, np.float32), 2.0)


def test_paddle_and_torch_in_one_call():
    torch = pytest.importorskip("torch", reason="torch is not installed")
    with pytest.raises(TypeError, match=r"parameter 'x' is a torch array, parameter 'y' is a paddle array"):
        SAXPY(torch.ones(4, device="cpu"), f32(4), 2.0)


def test_wrong_argument_count_and_keyword():
    with pytest.raises(TypeError, match=r"op 'paddle_errors::saxpy' takes 3 argument\(s\) \['x', 'y', 'a'\]"):
        SAXPY(f32(4), f32(4))
    with pytest.raises(
        TypeError,
        match=r"op 'paddle_errors::saxpy': unexpected keyword argument\(s\) \['stream'\]; its parameters are \['x', 'y', 'a'\]",
    ):
        SAXPY(f32(4), f32(4), 2.0, stream=None)


@pytest.mark.cuda
def test_cpu_and_gpu_tensors_in_one_call():
    if not paddle.device.is_compiled_with_cuda():
        pytest.skip("this Paddle build has no CUDA")
    with pytest.raises(
        ValueError, match=r"op 'paddle_errors::saxpy': parameter 'x' is on cpu but parameter 'y' is on cuda:0"
    ):
        SAXPY(f32(4), f32(4).cuda(), 2.0)


# ---- errors raised inside a backward ----------------------------------------------------------
def _failing_backward(a: wp.array(dtype=float), adj_out: wp.array(dtype=float), grad_a: wp.array(dtype=float)):
    raise ZeroDivisionError("the user's backward failed")


FAILING = interop.op(catalogue.square_kernel, backward=interop.op(_failing_backward), name="paddle_errors::failing")
CUBE = interop.op(catalogue.cube64, name="paddle_errors::cube")


@wp.kernel
def _scatter_max(x: wp.array(dtype=wp.float64), out: wp.array(dtype=wp.float64)):
    i = wp.tid()
    wp.atomic_max(out, i, x[i])  # no tangent rule: no second order


MAX = interop.op(_scatter_max, name="paddle_errors::scatter_max")


@pytest.mark.parametrize("where", ["user_backward", "second_derivative", "modified_in_place"])
def test_error_in_a_backward_reaches_the_user_as_oserror_with_its_type_and_text(where):
    """Paddle turns every exception raised in a PyLayer's backward into its own OSError (any
    PyLayer, not only this package's): the message keeps the original type and text (README,
    Limitations)."""
    x = paddle.to_tensor(np.arange(1.0, 4.0), place=paddle.CPUPlace())
    x.stop_gradient = False
    if where == "user_backward":
        loss = FAILING(x.astype("float32")).sum()
        want = "ZeroDivisionError: op '_failing_backward': the user's backward failed"  # its op named
    elif where == "second_derivative":
        (g,) = paddle.grad([MAX(x).sum()], [x], create_graph=True)
        loss = g.sum()
        want = "NotImplementedError: op 'paddle_errors::scatter_max': second derivatives through Warp's adjoint"
    else:
        y = x * 1.0
        loss = CUBE(y).sum()
        y.add_(paddle.ones_like(y))
        want = "RuntimeError: op 'paddle_errors::cube', parameter 'x': the tensor was modified in place"
    with pytest.raises(OSError) as e:
        loss.backward()
    assert want in str(e.value)
