"""Bad input raises an error that names the op and the parameter, with what was expected and what came.

Never a silent cast, never a silent copy. Each case is checked twice where it matters: on the
first call of a signature (full validation) and after a good call has cached the fast path.
"""

import array

import numpy as np
import pytest
import warp as wp
from guide_kernels import diagonal_kernel as diagonal
from guide_kernels import rowsum_kernel as rowsum
from guide_kernels import saxpy

import interop
from interop._errors import ArgumentError


@wp.kernel
def vecmat(b: wp.array(dtype=wp.vec3), m: wp.array(dtype=wp.mat22), out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = b[i][0] + m[i][1, 0]


@wp.kernel
def with_int(a: wp.array(dtype=float), n: int, out: wp.array(dtype=float)):
    tid = wp.tid()
    out[tid] = a[tid] * float(n)


@wp.kernel
def generic_float(a: wp.array(dtype=wp.Float), out: wp.array(dtype=wp.Float)):
    tid = wp.tid()
    out[tid] = a[tid] + a[tid]


@wp.kernel
def generic_out_only(n: int, out: wp.array(dtype=wp.Float)):
    tid = wp.tid()
    out[tid] = out.dtype(n)


SAXPY = interop.op(saxpy)
VECMAT = interop.op(vecmat)
ROWSUM = interop.op(rowsum, in_out=["sums"])
DIAG = interop.op(diagonal, name="test_errors::diagonal")  # its own op: other files call the guide kernel

X = np.ones(4, np.float32)


def f32(*shape):
    return np.ones(shape, np.float32)


@pytest.fixture(params=["first_call", "after_cached_call"])
def warm(request):
    """Run each error case both before and after a valid call with the good signature."""
    if request.param == "after_cached_call":
        SAXPY(X, X, 1.0)
        VECMAT(f32(4, 3), f32(4, 2, 2))
        ROWSUM(f32(3, 2), np.zeros(3, np.float32))
    return request.param


# ---- dtype ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float64, np.float16, np.int32, np.int64])
def test_wrong_dtype_never_cast(warm, dtype):
    with pytest.raises(
        TypeError,
        match=rf"op 'saxpy', parameter 'x': expected a 1-d array of float32 \(dtype float32\), got an array of "
        rf"shape \(4,\) and dtype {np.dtype(dtype).name}; arrays are never cast",
    ):
        SAXPY(X.astype(dtype), X, 1.0)


def test_wrong_dtype_second_parameter():
    with pytest.raises(TypeError, match=r"op 'saxpy', parameter 'y': .*float32.*got .*dtype float64"):
        SAXPY(X, X.astype(np.float64), 1.0)


def test_dtype_unknown_to_warp():
    with pytest.raises(
        TypeError,
        match=r"parameter 'x': expected a 1-d array of float32, got .*complex64 \(dtype not supported by Warp\)",
    ):
        SAXPY(X.astype(np.complex64), X, 1.0)


def test_wrong_dtype_warp_array():
    with pytest.raises(TypeError, match=r"op 'saxpy', parameter 'x': .*got an array of shape \(4,\) and dtype float64"):
        SAXPY(wp.array(X.astype(np.float64), dtype=wp.float64, device="cpu"), wp.array(X, device="cpu"), 1.0)


def test_generic_float_refuses_int():
    with pytest.raises(
        TypeError, match=r"op 'generic_float', parameter 'a': expected a float array \(generic Float\), got .*int32"
    ):
        interop.op(generic_float)(np.ones(3, np.int32))


def test_generic_scalar_type_refuses_vec_dims():
    with pytest.raises(
        TypeError,
        match=r"op 'generic_float', parameter 'a': expected a 1-d array of Float, got an array of shape \(3, 3\)",
    ):
        interop.op(generic_float)(np.ones((3, 3), np.float32))


def test_generic_output_without_generic_input():
    with pytest.raises(TypeError, match=r"output 'out': its dtype is generic and no generic array input fixes it"):
        interop.op(generic_out_only)(3, launch_dims=2)


# ---- ndim and trailing vec/mat dims ----------------------------------------------------------------
def test_wrong_ndim(warm):
    with pytest.raises(
        ValueError, match=r"op 'saxpy', parameter 'x': expected a 1-d array of float32, got an array of shape \(4, 2\)"
    ):
        SAXPY(f32(4, 2), X, 1.0)
    with pytest.raises(
        ValueError,
        match=r"op 'rowsum_kernel', parameter 'matrix': expected a 2-d array of float32, got an array of shape \(3,\)",
    ):
        ROWSUM(f32(3), np.zeros(3, np.float32))


def test_wrong_vec_trailing_dims(warm):
    with pytest.raises(
        ValueError,
        match=r"op 'vecmat', parameter 'b': expected a 1-d array of vec3f \(trailing dims \(3,\) of float32\), i.e. a "
        r"2-d framework array, got an array of shape \(4, 4\) and dtype float32: trailing dims \(4,\), expected \(3,\)",
    ):
        VECMAT(f32(4, 4), f32(4, 2, 2))


def test_missing_vec_dim():
    with pytest.raises(
        ValueError, match=r"parameter 'b': expected .*vec3f.*2-d framework array, got an array of shape \(4,\)"
    ):
        VECMAT(f32(4), f32(4, 2, 2))


def test_wrong_mat_trailing_dims(warm):
    with pytest.raises(
        ValueError,
        match=r"parameter 'm': expected .*mat22f.*got .*\(4, 3, 3\).*trailing dims \(3, 3\), expected \(2, 2\)",
    ):
        VECMAT(f32(4, 3), f32(4, 3, 3))
    with pytest.raises(ValueError, match=r"parameter 'm': expected .*mat22f.*3-d framework array, got .*\(4, 4\)"):
        VECMAT(f32(4, 3), f32(4, 4))


# ---- argument count and kinds -------------------------------------------------------------------------
def test_wrong_argument_count(warm):
    msg = r"op 'saxpy' takes 3 argument\(s\) \['x', 'y', 'a'\] \(outputs are returned, not passed\), got {}"
    with pytest.raises(TypeError, match=msg.format(2)):
        SAXPY(X, X)
    with pytest.raises(TypeError, match=msg.format(4)):
        SAXPY(X, X, 1.0, np.zeros(4, np.float32))  # the output passed in
    with pytest.raises(TypeError, match=msg.format(0)):
        SAXPY()


def test_unexpected_keyword():
    msg = (
        r"op 'saxpy': unexpected keyword argument\(s\) \['foo'\]; its parameters are \['x', 'y', 'a'\] "
        r"\(and the options launch_dims=, output_dims=, framework=\)"
    )
    with pytest.raises(TypeError, match=msg):
        SAXPY(X, X, 1.0, foo=1)
    with pytest.raises(TypeError, match=msg.replace("foo", "x_")):
        SAXPY(X, X, 1.0, x_=X)  # a misspelt parameter name


def test_framework_keyword_mismatch():
    with pytest.raises(TypeError, match=r"op 'saxpy': framework='warp' but the arrays passed are numpy arrays"):
        SAXPY(X, X, 1.0, framework="warp")


def test_non_array_for_array_parameter():
    with pytest.raises(TypeError, match=r"op 'saxpy', parameter 'x': expected a 1-d array of float32, got list"):
        SAXPY([1.0, 2.0], X, 1.0)
    # (None stands for an absent array, Warp's optional one; not for one the kernel indexes with wp.tid())
    with pytest.raises(
        TypeError, match=r"op 'saxpy', parameter 'y': expected a 1-d array of float32, got None \(an absent"
    ):
        SAXPY(X, None, 1.0)
    with pytest.raises(TypeError, match=r"op 'saxpy', parameter 'x': expected a 1-d array of float32, got float"):
        SAXPY(1.0, X, 1.0)


def test_wrong_scalar(warm):
    with pytest.raises(TypeError, match=r"op 'saxpy', parameter 'a': expected float32 \(a number\), got str"):
        SAXPY(X, X, "2")
    with pytest.raises(TypeError, match=r"op 'saxpy', parameter 'a': expected float32 \(a number\), got NoneType"):
        SAXPY(X, X, None)
    with pytest.raises(TypeError, match=r"op 'with_int', parameter 'n': expected a int32 value, got float"):
        interop.op(with_int)(X, 2.5)
    with pytest.raises(TypeError, match=r"parameter 'n': expected a int32 value, got float64"):
        interop.op(with_int)(X, np.float64(2.0))


def test_scalar_by_reference_wrong_dtype_or_shape():
    with pytest.raises(
        TypeError,
        match=r"parameter 'a': expected a float32 value \(a 0-d array of float32 or a Python number\), got an array of shape \(\) and dtype float64",
    ):
        SAXPY(X, X, np.array(2.0))
    with pytest.raises(TypeError, match=r"parameter 'a': expected a float32 value .*got an array of shape \(2,\)"):
        SAXPY(X, X, f32(2))


# ---- frameworks ---------------------------------------------------------------------------------------
def test_numpy_and_warp_in_one_call():
    with pytest.raises(
        TypeError,
        match=r"op 'saxpy': arrays from two frameworks in one call: parameter 'x' is a numpy array, parameter 'y' "
        r"is a warp array; convert one with interop.convert",
    ):
        SAXPY(X, wp.array(X, device="cpu"), 1.0)


def test_numpy_and_torch_in_one_call():
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match=r"parameter 'x' is a numpy array, parameter 'y' is a torch array"):
        SAXPY(X, torch.ones(4, device="cpu"), 1.0)
    # a 0-d tensor for the scalar counts as a torch array too
    with pytest.raises(TypeError, match=r"parameter 'x' is a numpy array, parameter 'a' is a torch array"):
        SAXPY(X, X, torch.tensor(1.0, device="cpu"))


class _ArrayInterfaceOnly:
    """Exports __array_interface__ but belongs to no supported framework."""

    def __init__(self, a):
        self._a = a
        self.__array_interface__ = a.__array_interface__


@pytest.mark.parametrize(
    "make, tname",
    [
        (lambda: memoryview(X), "builtins.memoryview"),
        (lambda: array.array("f", [1.0, 2.0, 3.0, 4.0]), "array.array"),
        (lambda: _ArrayInterfaceOnly(X), r"test_errors._ArrayInterfaceOnly"),
        (lambda: bytearray(16), "builtins.bytearray"),
    ],
    ids=["memoryview", "array.array", "array_interface", "bytearray"],
)
def test_unsupported_array_type(make, tname):
    with pytest.raises(
        TypeError,
        match=rf"op 'saxpy', parameter 'x': unsupported array type {tname}; expected a NumPy, Warp, PyTorch, JAX, "
        r"Paddle or CuPy array",
    ):
        SAXPY(make(), X, 1.0)
    with pytest.raises(TypeError, match=rf"parameter 'y': unsupported array type {tname}"):
        SAXPY(X, make(), 1.0)


# ---- layouts a kernel cannot read ---------------------------------------------------------------------
def test_vec_components_not_packed(warm):
    b = np.ones((4, 6), np.float32)[:, ::2]  # shape (4, 3), strides (24, 8): components 8 bytes apart
    with pytest.raises(
        ValueError,
        match=r"op 'vecmat', parameter 'b': the vec/mat components of each element must be contiguous, got strides "
        r"\(24, 8\) \(bytes\) for shape \(4, 3\)",
    ):
        VECMAT(b, f32(4, 2, 2))
    m = np.ones((4, 2, 2), np.float32).transpose(0, 2, 1)  # mat components transposed
    with pytest.raises(ValueError, match=r"parameter 'm': the vec/mat components of each element must be contiguous"):
        VECMAT(f32(4, 3), m)


def test_negative_strides(warm):
    with pytest.raises(
        ValueError,
        match=r"op 'saxpy', parameter 'x': a Warp kernel cannot read strides \(-4,\) \(bytes\) for shape \(4,\): "
        r"strides must be non-negative multiples of the item size 4",
    ):
        SAXPY(X[::-1], X, 1.0)


def test_unaligned_strides():
    raw = np.zeros(4 * 5 + 1, np.uint8)[1:].view(np.float32)  # misaligned start is fine; misaligned stride is not
    rec = np.zeros(4, dtype=[("a", np.float32), ("b", np.uint8)])["a"]  # stride 5 bytes
    with pytest.raises(
        ValueError, match=r"parameter 'x': a Warp kernel cannot read strides \(5,\).*multiples of the item size 4"
    ):
        SAXPY(rec, X, 1.0)
    assert raw.shape == (5,)


def test_read_only_in_out(warm):
    sums = np.zeros(3, np.float32)
    sums.flags.writeable = False
    with pytest.raises(
        ValueError, match=r"op 'rowsum_kernel', parameter 'sums': the in-out array is read-only; pass a writable array"
    ):
        ROWSUM(f32(3, 2), sums)
    np.testing.assert_array_equal(sums, 0)


def test_read_only_input_is_fine():
    x = X.copy()
    x.flags.writeable = False
    np.testing.assert_array_equal(SAXPY(x, x, 1.0), 2 * X)


# ---- launch_dims / output_dims ------------------------------------------------------------------------
def test_output_dims_naming_a_non_output():
    with pytest.raises(
        ValueError,
        match=r"op 'saxpy': output_dims names 'x', which is not an output; outputs are \['out'\]",
    ):
        SAXPY(X, X, 1.0, output_dims={"x": 3})
    with pytest.raises(
        ValueError,
        match=r"output_dims names 'sums', which is not an output; outputs are none \(in-out arrays take the shape of the array passed\)",
    ):
        ROWSUM(f32(3, 2), np.zeros(3, np.float32), output_dims={"sums": 3})


def test_output_dims_wrong_rank():
    with pytest.raises(
        ValueError,
        match=r"op 'test_errors::diagonal', output 'output': output_dims \(3, 3\) does not fit a 1-d array of mat33f \(expected 1 "
        r"dims, or 3 ending in \(3, 3\)\)",
    ):
        DIAG(launch_dims=3, output_dims=(3, 3))


def test_launch_dims_missing_without_array_input():
    with pytest.raises(
        ValueError,
        match=r"op 'test_errors::diagonal': cannot size output 'output': the op has no array input; pass launch_dims=",
    ):
        DIAG()


@pytest.mark.parametrize(
    "bad, exc, msg",
    [
        ("4", TypeError, r"launch_dims must be an int or a tuple of ints, got str '4'"),
        (4.0, TypeError, r"launch_dims must be an int or a tuple of ints, got float 4.0"),
        ((2, "a"), TypeError, r"launch_dims must be an int or a tuple of ints, got \(2, 'a'\)"),
        ((2, 1.5), TypeError, r"launch_dims must be an int or a tuple of ints, got \(2, 1.5\)"),
        (True, TypeError, r"launch_dims must be an int or a tuple of ints, got bool"),
        ({"output": 3}, TypeError, r"launch_dims must be an int or a tuple of ints, got dict"),
        (-2, ValueError, r"launch_dims must be non-negative, got \(-2,\)"),
        ((1, 1, 1, 1, 1), ValueError, r"launch_dims must have 1 to 4 dimensions, got \(1, 1, 1, 1, 1\)"),
        ((), ValueError, r"launch_dims must have 1 to 4 dimensions, got \(\)"),
    ],
)
def test_bad_launch_dims(bad, exc, msg):
    with pytest.raises(exc, match=r"op 'test_errors::diagonal': " + msg):
        DIAG(launch_dims=bad)


@pytest.mark.parametrize("good, bad", [(4, 4.0), (1, True), ((2,), (2.0,))])
def test_bad_launch_dims_after_a_cached_call(good, bad):
    op = interop.op(diagonal, name="test_errors::diagonal_cached")
    op(launch_dims=good)
    with pytest.raises(TypeError, match=r"launch_dims must be an int or a tuple of ints, got "):
        op(launch_dims=bad)


def test_numpy_int_launch_dims_accepted():
    assert DIAG(launch_dims=np.int64(2)).shape == (2, 3, 3)
    assert DIAG(launch_dims=(np.int32(2),)).shape == (2, 3, 3)


def test_bad_output_dims_types():
    with pytest.raises(TypeError, match=r"op 'saxpy': output_dims must be an int or a tuple of ints, got str"):
        SAXPY(X, X, 1.0, output_dims="3")
    with pytest.raises(TypeError, match=r"output_dims\['out'\] must be an int or a tuple of ints, got float"):
        SAXPY(X, X, 1.0, output_dims={"out": 3.0})


def test_all_errors_are_argument_errors():
    """One class catches every bad-input error; it is both a TypeError and a ValueError."""
    for bad in (lambda: SAXPY(X.astype(np.float64), X, 1.0), lambda: SAXPY(X[::-1], X, 1.0), lambda: DIAG()):
        with pytest.raises(ArgumentError):
            bad()
    assert issubclass(ArgumentError, TypeError) and issubclass(ArgumentError, ValueError)
