"""CuPy adapter: CuPy arrays in and out, on CuPy's current stream, CAI v3 stream ordering for
other producers. Needs a CUDA GPU and CuPy: skipped here otherwise, with the reason shown.

The shape/dtype resolution behind these calls is the one every adapter shares; it is tested
on the CPU through the NumPy, Warp and Paddle adapters. What runs without a GPU here is the
part that honestly can: the adapter loads without CuPy, and a CUDA-array producer reaches it
and gets a clear error when CuPy is missing.
"""

import importlib.util
import sys

import numpy as np
import pytest
import warp as wp
from guide_kernels import saxpy

import interop
from interop._frameworks import data_ptr, framework_of


@wp.kernel
def accumulate(x: wp.array(dtype=wp.vec3), acc: wp.array(dtype=float), n: wp.array(dtype=wp.vec3)):
    i = wp.tid()
    wp.atomic_add(acc, 0, wp.length(x[i]))
    n[i] = wp.normalize(x[i])


SAXPY = interop.op(saxpy, name="cupy_test::saxpy")
ACC = interop.op(accumulate, outputs=2, in_out=["acc"], name="cupy_test::accumulate")
HAS_CUPY = importlib.util.find_spec("cupy") is not None


class CudaBuffer:
    """A minimal CUDA Array Interface v3 producer (what Numba and others export)."""

    def __init__(self, ptr, shape, typestr, stream=None):
        self.__cuda_array_interface__ = {
            "shape": shape,
            "typestr": typestr,
            "data": (ptr, False),
            "strides": None,
            "version": 3,
            "stream": stream,
        }


def test_adapter_loads_without_importing_cupy():
    import adapters.cupy  # noqa: F401

    if not HAS_CUPY:
        assert "cupy" not in sys.modules


@pytest.mark.skipif(HAS_CUPY, reason="checks the message given when CuPy is missing")
def test_cuda_array_producer_without_cupy_is_told_to_install_it():
    buf = CudaBuffer(0, (4,), "<f4")
    assert framework_of(buf) == "cupy"
    with pytest.raises(
        ImportError,
        match=r"op 'cupy_test::saxpy': CUDA arrays \(__cuda_array_interface__\) are handled by the CuPy adapter, which needs CuPy",
    ):
        SAXPY(buf, buf, 2.0)


# ---- on a GPU with CuPy --------------------------------------------------------------------
@pytest.fixture
def cp():
    return pytest.importorskip("cupy", reason="CuPy is not installed")


@pytest.mark.cuda
def test_values_and_types(cp):
    x = cp.arange(8, dtype=cp.float32)
    y = cp.ones(8, dtype=cp.float32)
    out = SAXPY(x, y, 2.0)
    assert isinstance(out, cp.ndarray) and out.device.id == x.device.id
    np.testing.assert_allclose(cp.asnumpy(out), 2.0 * np.arange(8) + 1.0)


@pytest.mark.cuda
def test_vec3_in_out_in_place(cp):
    x = cp.asarray(np.random.default_rng(0).uniform(-1, 1, (5, 3)).astype(np.float32))
    acc = cp.zeros(1, dtype=cp.float32)
    ptr = data_ptr(acc)
    ret, n = ACC(x, acc)
    assert ret is acc and data_ptr(ret) == ptr
    xn = cp.asnumpy(x)
    np.testing.assert_allclose(cp.asnumpy(acc)[0], np.linalg.norm(xn, axis=1).sum(), rtol=1e-5)
    np.testing.assert_allclose(cp.asnumpy(n), xn / np.linalg.norm(xn, axis=1, keepdims=True), rtol=1e-5)


@pytest.mark.cuda
def test_launches_on_cupys_current_stream(cp):
    from adapters.cupy import FRAMEWORK

    s = cp.cuda.Stream(non_blocking=True)
    with s:
        x = cp.arange(1 << 20, dtype=cp.float32)
        y = cp.ones(1 << 20, dtype=cp.float32)
        assert FRAMEWORK.stream(f"cuda:{x.device.id}", [x, y]).cuda_stream == s.ptr
        out = SAXPY(x, y, 2.0)
        total = float(out.sum())  # ordered on s after the launch
    assert total == pytest.approx(float(2.0 * np.arange(1 << 20, dtype=np.float64).sum() + (1 << 20)), rel=1e-5)


def _slow_fill(cp, n: int, value: float):
    """A CuPy array of ``value`` written by a slow kernel on CuPy's current stream (a dependent
    loop of ``spins`` steps per element: milliseconds), so a reader that does not wait reads 0."""
    kernel = cp.ElementwiseKernel(
        "int32 spins, float32 v",
        "float32 y",
        "float acc = 0; for (int k = 0; k < spins; k++) { acc = acc * 0.5f + 1.0f; } y = v + (acc < 0 ? 1.0f : 0.0f);",
        "interop_test_slow_fill",
    )
    y = cp.zeros(n, dtype=cp.float32)
    kernel(cp.int32(1 << 21), cp.float32(value), y)
    return y


@pytest.mark.cuda
def test_other_producer_with_cai_stream(cp):
    """A CAI v3 producer whose data is still being written on its stream: the launch (on CuPy's
    current stream, another non-blocking one) must wait for it."""
    n = 1 << 16
    producer = cp.cuda.Stream(non_blocking=True)
    with producer:
        x = _slow_fill(cp, n, 2.0)
    y = cp.ones(n, dtype=cp.float32)
    producer_default = cp.cuda.Stream(non_blocking=True)
    with producer_default:
        bx = CudaBuffer(data_ptr(x), (n,), "<f4", stream=producer.ptr)
        by = CudaBuffer(data_ptr(y), (n,), "<f4", stream=1)  # legacy default stream
        out = SAXPY(bx, by, 3.0)
        assert isinstance(out, cp.ndarray)
        got = cp.asnumpy(out)  # on CuPy's current stream, after the launch
    np.testing.assert_allclose(got, 7.0)


@pytest.mark.cuda
def test_cai_stream_event_on_the_arrays_device_not_the_current_one(cp):
    """Arrays of device 0 named by a CAI v3 stream of device 0, called while device 1 is CuPy's
    current device: the event is made and recorded on device 0."""
    if cp.cuda.runtime.getDeviceCount() < 2:
        pytest.skip("needs two GPUs")
    n = 1024
    with cp.cuda.Device(0):
        producer = cp.cuda.Stream(non_blocking=True)
        with producer:
            x = _slow_fill(cp, n, 2.0)
        y = cp.ones(n, dtype=cp.float32)
    with cp.cuda.Device(1):
        bx = CudaBuffer(data_ptr(x), (n,), "<f4", stream=producer.ptr)
        by = CudaBuffer(data_ptr(y), (n,), "<f4", stream=1)  # device 0's legacy stream, not device 1's
        out = SAXPY(bx, by, 3.0)
    assert out.device.id == 0
    with cp.cuda.Device(0):
        np.testing.assert_allclose(cp.asnumpy(out), 7.0)


@pytest.mark.cuda
def test_cupy_streams_are_not_kept_alive(cp):
    """The package's view of CuPy's current stream keeps nothing of CuPy's alive: a stream the
    user drops is destroyed."""
    import gc
    import weakref

    x = cp.arange(16, dtype=cp.float32)
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        SAXPY(x, x, 1.0)
    s.synchronize()
    ref = weakref.ref(s)
    del s
    gc.collect()
    assert ref() is None


@pytest.mark.cuda
def test_bad_input_messages(cp):
    with pytest.raises(
        TypeError,
        match=r"op 'cupy_test::saxpy', parameter 'x': expected a 1-d array of float32.*dtype float64; arrays are never cast",
    ):
        SAXPY(cp.ones(4, cp.float64), cp.ones(4, cp.float32), 2.0)
    with pytest.raises(
        TypeError,
        match=r"op 'cupy_test::saxpy', parameter 'y': expected a 1-d array of float32, got an array of shape \(2, 2\)",
    ):
        SAXPY(cp.ones(4, cp.float32), cp.ones((2, 2), cp.float32), 2.0)
    with pytest.raises(
        TypeError,
        match=r"arrays from two frameworks in one call: parameter 'x' is a cupy array, parameter 'y' is a numpy array",
    ):
        SAXPY(cp.ones(4, cp.float32), np.ones(4, np.float32), 2.0)
    if cp.cuda.runtime.getDeviceCount() > 1:
        with cp.cuda.Device(1):
            y1 = cp.ones(4, cp.float32)
        with pytest.raises(ValueError, match=r"parameter 'x' is on cuda:0 but parameter 'y' is on cuda:1"):
            SAXPY(cp.ones(4, cp.float32), y1, 2.0)


@wp.kernel
def scale_rows_cp(x: wp.array2d(dtype=float), s: float, out: wp.array2d(dtype=float)):
    i, j = wp.tid()
    out[i, j] = s * x[i, j]


@pytest.mark.cuda
def test_repeated_signatures_take_the_fast_path_and_stay_right(cp):
    """Calls whose shape, strides, dtype or values change between calls (the fast path remembers
    signatures: a stale hit would be a silent wrong answer); each against NumPy. The op is
    described after CuPy was imported (its eager hook) and before (the adapter's own cache)."""
    ops = [interop.op(scale_rows_cp)]  # CuPy is imported: the hook
    rng = np.random.default_rng(5)
    base = cp.asarray(rng.standard_normal((6, 8)).astype(np.float32))
    variants = [
        ("full", lambda: base),
        ("rows", lambda: base[:3]),
        ("strided cols", lambda: base[:, ::2]),
        ("transposed", lambda: base.T),
        ("offset view", lambda: base[2:5, 1:7]),
        ("new values", lambda: base * 3.0),
    ]
    for op in ops:
        for _ in range(3):
            for name, make in variants:
                x = make()
                s = float(rng.standard_normal())
                out = op(x, s)
                assert isinstance(out, cp.ndarray) and out.shape == x.shape, name
                np.testing.assert_allclose(cp.asnumpy(out), s * cp.asnumpy(x), rtol=1e-6, err_msg=name)
    # a float64 array after float32 ones: refused by the full path, not replayed
    with pytest.raises(ValueError, match=r"op 'scale_rows_cp', parameter 'x'"):
        ops[0](base.astype(cp.float64), 1.0)
    # an int where the signature had a float: the full path checks it
    np.testing.assert_allclose(cp.asnumpy(ops[0](base, 2)), 2.0 * cp.asnumpy(base), rtol=1e-6)
