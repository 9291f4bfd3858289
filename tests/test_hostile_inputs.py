"""Regression tests for hostile inputs (issue 9): each was a crash, a silent wrong answer or an
unclear error. Every test fails without its fix; kernels come from the catalogue."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap

import catalogue as cat
import numpy as np
import pytest
from _devices import jax_device
from _grads import grad_of_sum

import interop

F = np.float32
ALL = [f for f in ("numpy", "torch", "jax", "jax.jit", "paddle") if importlib.util.find_spec(f.split(".")[0])]
TORCH = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch not installed")
JAX = pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="jax not installed")
PADDLE = pytest.mark.skipif(importlib.util.find_spec("paddle") is None, reason="paddle not installed")


def _to(fw: str, a):
    if not isinstance(a, np.ndarray) or fw == "numpy":
        return a
    return interop.convert(np.ascontiguousarray(a), to=fw.split(".")[0], copy=True)


def _np(x):
    return np.asarray(interop.convert(x, to="numpy", copy=True))


def _call(fw: str, op, *args, **kw):
    """``op`` called with ``args`` converted to ``fw`` (``jax.jit``: arrays traced, the rest static)."""
    conv = [_to(fw, a) for a in args]
    if fw == "jax.jit":
        import jax

        pos = [i for i, a in enumerate(args) if isinstance(a, np.ndarray)]

        def f(*arrays):
            full = list(conv)
            for i, x in zip(pos, arrays):
                full[i] = x
            return op(*full, **kw)

        return jax.jit(f)(*[conv[i] for i in pos])
    return op(*conv, **kw)


# ---- output_dims smaller than the launch: was a heap overflow (SIGSEGV) -------------------------
@pytest.mark.parametrize("fw", ALL)
def test_output_dims_smaller_than_launch_is_refused(fw):
    op = interop.op(cat.scale_kernel)
    with pytest.raises(
        interop.ArgumentError, match=r"op 'scale_kernel', parameter 'out'.*launch extent 4194304.*got extent 1"
    ):
        _call(fw, op, np.ones(1 << 22, F), 2.0, output_dims=1)


@pytest.mark.parametrize("fw", ALL)
def test_launch_dims_larger_than_inputs_is_refused(fw):
    op = interop.op(cat.scale_kernel)
    with pytest.raises(interop.ArgumentError, match=r"parameter 'a'.*launch extent 67108864.*got extent 4"):
        _call(fw, op, np.ones(4, F), 2.0, launch_dims=1 << 26)


# ---- ndarray subclasses: the fast path was keyed on the type, not the layout ------------------
def _masked(a):
    return np.ma.masked_array(a)


def _memmap(a, tmp_path, name):
    m = np.memmap(tmp_path / name, dtype=a.dtype, mode="w+", shape=a.shape)
    m[:] = a
    return m


@pytest.mark.parametrize("kind", ["masked_array", "memmap"])
def test_ndarray_subclass_input_of_another_length(kind, tmp_path):
    op = interop.op(cat.scale_kernel)
    files = iter(range(9))
    make = _masked if kind == "masked_array" else (lambda a: _memmap(a, tmp_path, f"m{next(files)}"))
    big, small = np.arange(16, dtype=F), np.arange(4, dtype=F)
    np.testing.assert_array_equal(np.asarray(op(make(big), 2.0)), big * 2)
    out = np.asarray(op(make(small), 2.0))
    assert out.shape == (4,)
    np.testing.assert_array_equal(out, small * 2)


def test_masked_array_with_masked_elements_is_refused():
    # the kernel would read the masked elements' data as if it were valid
    op = interop.op(cat.scale_kernel)
    x = np.ma.masked_array(np.arange(4, dtype=F))
    np.testing.assert_array_equal(np.asarray(op(x, 2.0)), [0, 2, 4, 6])  # no element masked: accepted
    x[1] = np.ma.masked  # the same array, now with a masked element: refused on the next call too
    with pytest.raises(interop.ArgumentError, match=r"op 'scale_kernel', parameter 'a': a masked array.*filled"):
        op(x, 2.0)


def test_ndarray_subclass_in_out_then_smaller():
    op = interop.op(cat.atomic_kernel, in_out=["acc"])
    n = 1 << 20
    acc = np.ma.masked_array(np.zeros(n, F))
    op(np.ma.masked_array(np.ones(n, F)), acc)
    np.testing.assert_array_equal(np.asarray(acc[:3]), [2, 2, 2])
    acc1 = np.ma.masked_array(np.zeros(1, F))
    op(np.ma.masked_array(np.full(1, 3.0, F)), acc1)  # replayed the 2**20-element launch: SIGSEGV
    np.testing.assert_array_equal(np.asarray(acc1), [6.0])


# ---- Ctrl-C while a JAX FFI handler runs ---------------------------------------------------------
@JAX
def test_ctrl_c_during_jax_handler_surfaces_as_keyboard_interrupt():
    # in a child process: before the fix the interrupt escaped the ctypes callback and the process died.
    # The child sets Python's own SIGINT handler first: a process started in the background by a
    # non-interactive shell (a CI runner, `nox ... &`) inherits SIGINT ignored, and then Ctrl-C does nothing.
    code = textwrap.dedent(
        """
        import signal, numpy as np, warp as wp, jax, jax.numpy as jnp, interop
        signal.signal(signal.SIGINT, signal.default_int_handler)  # whatever disposition the parent had
        from tests import catalogue as cat
        state = {"n": 0}
        def interrupted(a: wp.array(dtype=float), s: float, out: wp.array(dtype=float)):
            state["n"] += 1
            if state["n"] == 2:
                signal.raise_signal(signal.SIGINT)  # Ctrl-C while the FFI handler runs
            wp.launch(cat.scale_kernel, dim=a.shape, inputs=[a, s], outputs=[out], device=a.device)
        op = interop.op(interrupted)
        a = jnp.arange(4.0, dtype=jnp.float32, device=jax.devices("cpu")[0])
        assert np.asarray(op(a, 2.0)).tolist() == [0, 2, 4, 6]
        try:
            op(a, 2.0)
            print("NO INTERRUPT")
        except KeyboardInterrupt:
            print("INTERRUPT")
        assert np.asarray(op(a, 3.0)).tolist() == [0, 3, 6, 9]
        f = jax.jit(lambda a: op(a, 1.0) * 2)
        state["n"] = 1
        try:
            f(a).block_until_ready()
        except Exception as e:
            print("JIT", type(e).__name__, "KeyboardInterrupt" in str(e))
        assert np.asarray(f(a)).tolist() == [0, 2, 4, 6]
        print("ALIVE")
        """
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stdout.split("\n")
    assert "INTERRUPT" in lines and "ALIVE" in lines
    assert "JIT JaxRuntimeError True" in lines


# ---- conversions Paddle cannot take --------------------------------------------------------------
@PADDLE
@TORCH
def test_convert_negative_stride_paddle_view_to_torch_is_refused():
    import paddle

    x = paddle.to_tensor(np.arange(6.0), place=paddle.CPUPlace())[::-1]  # was SIGABRT inside Paddle
    with pytest.raises(interop.ArgumentError, match=r"convert: a paddle array .* negative strides .*copy=True"):
        interop.convert(x, to="torch")
    np.testing.assert_array_equal(interop.convert(x, to="torch", copy=True).numpy(), np.arange(6.0)[::-1])


@PADDLE
def test_convert_negative_stride_numpy_to_paddle_is_refused():
    a = np.arange(6.0)[::-1]  # was Paddle's MemoryError "Fail to alloc memory of 18446744073709551600"
    with pytest.raises(interop.ArgumentError, match=r"convert: a numpy array .* negative strides"):
        interop.convert(a, to="paddle")
    np.testing.assert_array_equal(interop.convert(a, to="paddle", copy=True).numpy(), a)


# ---- arrays the kernel writes must own their elements ---------------------------------------------
def _expanded(fw):
    if fw == "numpy":
        return np.lib.stride_tricks.as_strided(np.zeros(1, F), shape=(4,), strides=(0,))
    if fw == "torch":
        import torch

        return torch.zeros(1, device="cpu").expand(4)
    import paddle

    return paddle.as_strided(paddle.zeros([1]), [4], [0])


@pytest.mark.parametrize("fw", [f for f in ("numpy", "torch", "paddle") if f in ALL])
def test_expanded_in_out_is_refused(fw):
    op = interop.op(cat.atomic_kernel, in_out=["acc"])
    acc = _expanded(fw)
    with pytest.raises(
        interop.ArgumentError, match=r"parameter 'acc': the kernel writes this array.*one memory location"
    ):
        op(_to(fw, np.ones(4, F)), acc)
    # the same shape, owning its elements: fine (and the refusal above did not poison a fast path)
    acc = _to(fw, np.zeros(4, F))
    np.testing.assert_array_equal(_np(op(_to(fw, np.ones(4, F)), acc)), [2, 2, 2, 2])
    with pytest.raises(interop.ArgumentError, match="one memory location"):
        op(_to(fw, np.ones(4, F)), _expanded(fw))


def test_overlapping_in_out_is_refused():
    op = interop.op(cat.inout_kernel, outputs=2, in_out=["acc"])
    base = np.zeros(4, F)
    acc = np.lib.stride_tricks.as_strided(base, shape=(3,), strides=(0,))
    with pytest.raises(interop.ArgumentError, match="one memory location"):
        op(np.ones((3, 2), F), acc)
    # a 2-d view whose rows overlap, written by transpose_kernel... as an in-out of a kernel
    op2 = interop.op(cat.transpose_kernel, outputs=1, in_out=["out"])
    over = np.lib.stride_tricks.as_strided(np.zeros(6, F), shape=(2, 3), strides=(4, 4))
    with pytest.raises(interop.ArgumentError, match="one memory location"):
        op2(np.ones((3, 2), F), over)
    # strided but not overlapping is fine
    spaced = np.zeros(8, F)[::2]
    op(np.ones((4, 2), F), spaced)
    np.testing.assert_array_equal(spaced, [2, 2, 2, 2])


# ---- scalars -----------------------------------------------------------------------------------
@pytest.mark.parametrize("fw", ALL)
@pytest.mark.parametrize("value", [2**32 + 3, np.int64(-(2**40)), 2**31])
def test_integer_scalar_out_of_range_is_refused(fw, value):
    op = interop.op(cat.int_offset_kernel)
    if fw == "torch" and isinstance(value, np.integer):
        value = int(value)
    with pytest.raises(
        interop.ArgumentError, match=r"op 'int_offset_kernel', parameter 's'.*\[-2147483648, 2147483647\]"
    ):
        _call(fw, op, np.zeros(2, np.int32), value)


@pytest.mark.parametrize("fw", ALL)
def test_integer_scalar_bounds_are_exact(fw):
    op = interop.op(cat.int_offset_kernel)
    np.testing.assert_array_equal(_np(_call(fw, op, np.zeros(2, np.int32), 2**31 - 1)), [2**31 - 1] * 2)
    np.testing.assert_array_equal(_np(_call(fw, op, np.zeros(2, np.int32), -(2**31))), [-(2**31)] * 2)
    # after a valid call (fast paths warm), an out-of-range value is still refused
    with pytest.raises(interop.ArgumentError, match="parameter 's'"):
        _call(fw, op, np.zeros(2, np.int32), 2**31)


def test_generic_integer_scalar_out_of_range_is_refused():
    op = cat.case("generic").op
    with pytest.raises(interop.ArgumentError, match=r"parameter 's'.*int8 value in \[-128, 127\]"):
        op(np.ones(2, np.int8), 300)


@pytest.mark.parametrize("fw", ALL)
@pytest.mark.parametrize("value", [1e40, -1e40, 10**39, 10**400, 3.4028236e38])
def test_float_scalar_that_would_become_inf_is_refused(fw, value):
    # a finite number past float32's largest value was packed as inf (a silent change)
    op = interop.op(cat.scale_kernel)
    np.testing.assert_array_equal(_np(_call(fw, op, np.ones(2, F), 2.0)), [2, 2])  # fast paths warm
    with pytest.raises(
        interop.ArgumentError,
        match=r"op 'scale_kernel', parameter 's': expected a float32 value in \[-3.40282e\+38, 3.40282e\+38\].*"
        r"it would become inf",
    ):
        _call(fw, op, np.ones(2, F), value)


@pytest.mark.parametrize("fw", ALL)
def test_float_scalar_bounds_inf_and_nan_pass(fw):
    op = interop.op(cat.scale_kernel)
    top = float(np.finfo(F).max)
    for value, want in ((top, top), (-top, -top), (float("inf"), np.inf), (float("-inf"), -np.inf)):
        np.testing.assert_array_equal(_np(_call(fw, op, np.ones(2, F), value)), [want] * 2)
    assert np.isnan(_np(_call(fw, op, np.ones(2, F), float("nan")))).all()


@pytest.mark.parametrize("fw", ALL)
def test_narrow_float_scalars_and_vector_components_that_would_become_inf(fw):
    bf16 = cat.case("bfloat16")
    x, y, _ = bf16.make(np.random.default_rng(0), bf16.dtypes[0])
    with pytest.raises(interop.ArgumentError, match=r"parameter 's': expected a bfloat16 value .*become inf"):
        _call(fw, bf16.op, x, y, 1e39)
    vec = interop.op(cat.vec_offset_kernel)
    with pytest.raises(interop.ArgumentError, match=r"parameter 'v': expected a float32 value .*become inf"):
        _call(fw, vec, np.ones((2, 3), F), (1.0, 1e40, 3.0))


@pytest.mark.parametrize("fw", ALL)
def test_bool_for_a_float_scalar_is_refused(fw):
    op = interop.op(cat.scale_kernel)
    with pytest.raises(interop.ArgumentError, match=r"op 'scale_kernel', parameter 's'.*got bool"):
        _call(fw, op, np.ones(2, F), True)


@pytest.mark.parametrize("fw", ALL)
def test_vec3_scalar_given_two_numbers(fw):
    op = interop.op(cat.vec_offset_kernel)
    with pytest.raises(interop.ArgumentError, match=r"op 'vec_offset_kernel', parameter 'v'.*3 numbers, got 2"):
        _call(fw, op, np.ones((2, 3), F), (1.0, 2.0))
    out = _np(_call(fw, op, np.ones((2, 3), F), (1.0, 2.0, 3.0)))
    np.testing.assert_array_equal(out, np.ones((2, 3)) + [1, 2, 3])


@pytest.mark.parametrize("fw", ALL)
@pytest.mark.parametrize("component", [True, np.bool_(False)], ids=["bool", "np.bool_"])
def test_bool_vector_component_is_refused(fw, component):
    """A bool inside a vector value was read as 1.0/0.0, where a bool scalar is refused; after
    calls with numbers too (the eager fast paths remember a tuple of numbers)."""
    op = interop.op(cat.vec_offset_kernel)
    for _ in range(2):
        _call(fw, op, np.ones((2, 3), F), (1.0, 2.0, 3.0))
    with pytest.raises(interop.ArgumentError, match=r"op 'vec_offset_kernel', parameter 'v'.*component 1 .*a bool"):
        _call(fw, op, np.ones((2, 3), F), (1.0, component, 3.0))


def _scalar_tensor(fw: str, value, dtype: str, grad: bool = False):
    if fw == "torch":
        import torch

        return torch.tensor(value, dtype=getattr(torch, dtype), device="cpu", requires_grad=grad)
    import paddle

    t = paddle.to_tensor(value, dtype=dtype, place=paddle.CPUPlace())
    t.stop_gradient = not grad
    return t


@pytest.mark.parametrize("fw", [f for f in ("torch", "paddle") if f in ALL])
def test_tensor_vector_components_are_never_cast_nor_left_without_gradient(fw):
    """A 0-d torch/Paddle tensor inside a tuple vector value: of another dtype it was cast (a
    float64 1.1 read as float32, an int64 2**40 as 1.1e12); wanting a gradient it got none (Paddle:
    silently; torch: a RuntimeError naming no op). One of the component dtype without gradient is
    read, as a number is."""
    op = interop.op(cat.vec_offset_kernel)
    x = np.ones((2, 3), F)
    for value, dtype in ((1.1, "float64"), (2**40, "int64"), (1.0, "float16")):
        with pytest.raises(
            interop.ArgumentError,
            match=rf"parameter 'v'.*component 0, a {fw} tensor of dtype {dtype} \(arrays are never cast\)",
        ):
            _call(fw, op, x, (_scalar_tensor(fw, value, dtype), 0.0, 0.0))
    with pytest.raises(
        interop.ArgumentError, match=r"parameter 'v'.*component 2, a .* tensor that requires a gradient"
    ):
        _call(fw, op, x, (0.0, 0.0, _scalar_tensor(fw, 1.0, "float32", grad=True)))
    out = _np(_call(fw, op, x, (_scalar_tensor(fw, 1.5, "float32"), 0.0, 0.0)))
    np.testing.assert_array_equal(out, x + [1.5, 0, 0])


@pytest.mark.parametrize("fw", [f for f in ("torch", "paddle") if f in ALL])
def test_strided_tensor_for_a_vector_value_is_refused(fw):
    """A tensor given for a vec3/mat22 value parameter was read as if packed (torch): a strided one
    gave other components ([0, 1, 2] for [0, 2, 4]), an expanded one read past its storage, a
    transposed matrix was read in the wrong order. Refused as a strided array's components are."""
    vec = interop.op(cat.vec_offset_kernel)
    x = np.zeros((2, 3), F)
    strided = np.arange(6, dtype=F)[::2]
    if fw == "torch":
        import torch

        g = torch.arange(6.0, device="cpu")[::2]
        expanded = torch.tensor(1.0, device="cpu").expand(3)
        for bad in (g, expanded):
            with pytest.raises(
                interop.ArgumentError, match=r"parameter 'v': the vec/mat components .* must be contiguous"
            ):
                vec(torch.from_numpy(x), bad)
        np.testing.assert_array_equal(vec(torch.from_numpy(x), g.contiguous()).numpy(), x + strided)
    else:
        import paddle

        m = paddle.to_tensor(np.arange(9, dtype=F).reshape(3, 3), place=paddle.CPUPlace()).t()[0]
        with pytest.raises(interop.ArgumentError, match=r"parameter 'v': the vec/mat components .* must be contiguous"):
            vec(paddle.to_tensor(x, place=paddle.CPUPlace()), m)


@TORCH
def test_torch_in_out_lazily_negated_view_is_updated():
    """An in-out tensor that is a lazily negated view (``z.conj().imag``): the no-grad path raised
    torch's bare "Expected Tensor but got None" (no op, no parameter). It is updated, through the
    view, as with autograd."""
    import torch

    op = interop.op(cat.atomic_kernel, in_out=["acc"])
    for grad in (False, True):
        z = torch.zeros(4, dtype=torch.complex64, device="cpu")
        acc = z.conj().imag
        assert acc.is_neg()
        x = torch.arange(4.0, device="cpu", requires_grad=grad)
        assert op(x, acc) is acc
        np.testing.assert_array_equal(acc.detach().resolve_neg().numpy(), 2 * np.arange(4.0))
        np.testing.assert_array_equal(z.imag.detach().numpy(), -2 * np.arange(4.0))


@pytest.mark.parametrize("fw", ["numpy", "torch", "paddle"])
@pytest.mark.parametrize("kw", ["launch_dims", "output_dims"])
def test_array_for_dims_names_the_op(fw, kw):
    """``launch_dims=np.array([3])``: NumPy's path hashed it for its call cache first and raised
    ``TypeError: unhashable type``; every framework now gives the op's error."""
    if fw not in ALL:
        pytest.skip(f"{fw} not installed")
    op = interop.op(cat.scale_kernel)
    with pytest.raises(
        interop.ArgumentError, match=rf"op 'scale_kernel': {kw} must be an int or a tuple of ints, got ndarray"
    ):
        _call(fw, op, np.ones(4, F), 2.0, **{kw: np.array([3])})


def test_non_native_byte_order_is_named():
    """A big-endian float32 array was refused as "expected ... float32, got ... dtype float32"."""
    with pytest.raises(interop.ArgumentError, match=r"dtype float32 \(big-endian: not this machine's byte order\)"):
        interop.op(cat.scale_kernel)(np.ones(2, ">f4"), 2.0)


def _reversed_accumulate_op():
    return interop.op(cat.reverse_accumulate_kernel, in_out=["acc"])


@pytest.mark.parametrize("fw", [f for f in ("numpy", "torch", "paddle", "warp") if f in ALL or f == "warp"])
@pytest.mark.parametrize("how", ["same", "overlapping views"])
def test_in_out_sharing_memory_with_an_input_is_refused(fw, how):
    """An in-out array that is (or overlaps) an input: the kernel's threads read what others had
    already written (``[51, 42, 33, 424, 515]`` for ``[51, 42, 33, 24, 15]``), on NumPy, torch,
    Paddle and Warp alike, eagerly and after a call that warmed the fast path. Refused, as torch's
    own in-place operators refuse such arguments. JAX (functional) reads the values from before."""
    op = _reversed_accumulate_op()
    base = np.arange(1, 7, dtype=F)
    ref = base[:5] + 10 * base[:5][::-1]

    def make(a):
        if fw == "numpy":
            return a.copy()
        if fw == "warp":
            import warp as wp

            return wp.array(a, dtype=float, device="cpu")
        return _to(fw, a.copy())  # (memory of its own: convert shares the NumPy array's)

    def view(t, lo, hi):
        return t[lo:hi]

    buf = make(base)
    x, acc = (view(buf, 0, 5), view(buf, 0, 5)) if how == "same" else (view(buf, 1, 6), view(buf, 0, 5))
    if how == "same" and fw != "warp":
        x = acc
    np.testing.assert_allclose(_np(op(make(base[:5]), make(base[:5]))), ref)  # distinct arrays (warms the fast path)
    with pytest.raises(
        interop.ArgumentError,
        match=r"op 'reverse_accumulate_kernel', parameter 'acc': .* shares memory with parameter 'x'",
    ):
        op(x, acc)
    np.testing.assert_array_equal(_np(buf), base)  # nothing written


@pytest.mark.parametrize("fw", [f for f in ("numpy", "torch", "paddle", "warp") if f in ALL or f == "warp"])
def test_in_out_interleaved_with_an_input_without_sharing_is_read(fw):
    """Two views of one buffer whose address ranges overlap but which share no element (the even and
    the odd elements, a matrix's two columns) are distinct arrays: called, eagerly and through the
    warmed fast path, with the right values (they were refused as sharing memory). Shifting the
    in-out by one element of the same stride makes them share: refused."""
    import warp as wp

    op = _reversed_accumulate_op()

    def make(a):
        if fw == "numpy":
            return a.copy()
        if fw == "warp":
            return wp.array(a, dtype=float, device="cpu")
        return _to(fw, a.copy())

    for _ in range(2):  # (the second call through the fast path)
        base = np.arange(1, 13, dtype=F)
        buf = make(base)
        if fw == "warp":
            x = wp.array(ptr=buf.ptr, shape=(6,), strides=(8,), dtype=float, device="cpu")
            acc = wp.array(ptr=buf.ptr + 4, shape=(6,), strides=(8,), dtype=float, device="cpu")
        else:
            x, acc = buf[0::2], buf[1::2]
        got = op(x, acc)
        want = base.copy()
        want[1::2] += 10 * base[0::2][::-1]
        np.testing.assert_allclose(_np(buf), want)
        np.testing.assert_allclose(_np(got), want[1::2])
    if fw == "warp":
        x = wp.array(ptr=buf.ptr, shape=(5,), strides=(8,), dtype=float, device="cpu")
        acc = wp.array(ptr=buf.ptr + 8, shape=(5,), strides=(8,), dtype=float, device="cpu")
    else:
        x, acc = buf[0:10:2], buf[2:12:2]
    with pytest.raises(interop.ArgumentError, match=r"parameter 'acc': .* shares memory with parameter 'x'"):
        op(x, acc)


@pytest.mark.parametrize("fw", ALL + ["warp"])
@pytest.mark.parametrize("kind", ["kernel", "function"])
def test_array_without_elements_is_a_null_array(fw, kind):
    """Warp's idiom for an optional array (``if idx:``) is false for Warp's empty arrays, which are
    null. A NumPy or JAX array without elements reached the kernel with its (non-null) pointer: the
    kernel read ``idx[tid]`` past the array (a segfault with NumPy, zeros with JAX). Every framework
    now hands it over as a null array: the else branch, on the first call and through the fast path."""
    import warp as wp

    if kind == "kernel":
        op = interop.op(cat.optional_gather_kernel, output_dims={"out": 4}, launch_dims=4)
    else:
        op = interop.op(cat.optional_gather_fn, output_dims={"out": 4})
    x = np.arange(4, dtype=F)
    for _ in range(3):
        if fw == "warp":
            got = op(wp.array(np.zeros(0, np.int32), dtype=wp.int32, device="cpu"), wp.array(x, device="cpu"))
        else:
            got = _call(fw, op, np.zeros(0, np.int32), x)
        np.testing.assert_array_equal(_np(got), 2 * x)
    idx = np.array([3, 2, 1, 0], np.int32)
    np.testing.assert_array_equal(_np(_call(fw if fw != "warp" else "numpy", op, idx, x)), 2 * x[::-1])


@pytest.mark.parametrize("fw", [f for f in ("torch", "paddle", "jax") if f in ALL])
@pytest.mark.parametrize("kernel", ["axpy_in_out_kernel", "axpy_in_out_no_adjoint_kernel"])
def test_in_out_gradient_alone_is_refused_where_the_adjoint_is_wrong(fw, kernel):
    """``y[i] = beta * y[i] + alpha * x[i]`` with only the in-out ``y`` needing a gradient: torch and
    Paddle passed ``y``'s gradient through (1 where beta = 2 is right) without running the adjoint,
    so neither the blind spot nor the missing adjoint (``enable_backward=False``) was refused; they
    were once ``x`` needed one too. Refused at the backward either way, as JAX refused. (A kernel
    without an adjoint that only accumulates into its in-out passes that gradient through:
    tests/test_no_backward.py.)"""
    op = interop.op(getattr(cat, kernel), outputs=0, in_out=["y"])
    match = "in-out parameter `y` is read as a value" + (
        "" if kernel == "axpy_in_out_kernel" else "|enable_backward=False"
    )
    xn, yn = np.ones(3, F), np.ones(3, F)
    if fw == "torch":
        import torch

        y0 = torch.tensor(yn, requires_grad=True, device="cpu")
        y = y0.clone()
        op(torch.tensor(xn, device="cpu"), y, 0.5, 2.0)
        with pytest.raises(interop.UnsupportedError, match=match):
            y.sum().backward()
    elif fw == "paddle":
        import paddle

        y0 = paddle.to_tensor(yn, stop_gradient=False, place=paddle.CPUPlace())
        y = y0 * 1.0
        op(paddle.to_tensor(xn, place=paddle.CPUPlace()), y, 0.5, 2.0)
        with pytest.raises(OSError, match=match):  # (Paddle hands a backward's error on as OSError)
            y.sum().backward()
    else:
        import jax
        import jax.numpy as jnp

        cpu = jax_device("cpu")
        with pytest.raises(interop.UnsupportedError, match=match):
            jax.grad(lambda v: op(jnp.asarray(xn, device=cpu), v, 0.5, 2.0).sum())(jnp.asarray(yn, device=cpu))


@pytest.mark.parametrize("fw", ALL)
@pytest.mark.parametrize("how", ["launch", "launch_tiled"])
def test_tile_launch_declared_as_warp_launches_it(fw, how):
    """Warp's test kernel for ``jax_kernel(block_dim=64)`` uses its thread index as an element index
    and a tile offset: read as a tile grid, the op gave ``[0, 64, 4096]`` where Warp's
    ``wp.launch(dim=256, block_dim=64)`` gives per-block sums, and no ``launch_dims`` spelling
    reproduced it. ``tile_launch=`` says which launch the kernel is written for: the values of
    ``wp.launch`` / ``wp.launch_tiled`` on the same device, every call."""
    import warp as wp

    op = interop.op(cat.tile_block_sum_kernel, launch_dims=256, output_dims=256, block_dim=64, tile_launch=how)
    want = wp.zeros(256, dtype=int, device="cpu")
    if how == "launch":
        wp.launch(cat.tile_block_sum_kernel, dim=256, inputs=[want], block_dim=64, device="cpu")
    else:
        wp.launch_tiled(cat.tile_block_sum_kernel, dim=[256], inputs=[want], block_dim=64, device="cpu")
    for _ in range(2):
        np.testing.assert_array_equal(_np(_call(fw, op, framework=fw.split(".")[0])), want.numpy())


def test_tile_launch_refusals():
    with pytest.raises(
        interop.ArgumentError, match=r"op 'tile_block_sum_kernel': tile_launch must be 'launch' .* got 'tiles'"
    ):
        interop.op(cat.tile_block_sum_kernel, launch_dims=256, tile_launch="tiles")
    with pytest.raises(
        interop.ArgumentError, match=r"op 'scale_kernel': tile_launch='launch' applies to a tile kernel"
    ):
        interop.op(cat.scale_kernel, tile_launch="launch")


@pytest.mark.parametrize("fw", ALL)
def test_op_without_call_arguments(fw):
    """An op whose every array is an output it sizes (``launch_dims`` given), called with no
    argument and ``framework=``: torch's generated signature matchers had no argument to unpack (a
    ``SyntaxError`` from generated code)."""
    op = interop.op(cat.iota_kernel, launch_dims=3)
    for _ in range(3):  # (the later calls through the fast path)
        np.testing.assert_array_equal(_np(_call(fw, op, framework=fw.split(".")[0])), [0.0, 1.0, 2.0])


@pytest.mark.parametrize("fw", ALL)
def test_tile_store_at_a_computed_offset_asks_for_output_dims(fw):
    """Warp's tile GEMM example stores each tile at ``offset=(i * TILE_M, j * TILE_N)``: the output
    was sized by the tile grid, a (2, 1) C for a (16, 4) product, its top-left corner, silently.
    Its shape is not the grid's: the call asks for ``output_dims`` (as for any write at a computed
    index), and with them gives ``A @ B``."""
    op = interop.op(cat.tile_matmul_kernel, block_dim=cat.TILE_BLOCK)
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (2 * cat.TMM_M, 2 * cat.TMM_K)).astype(F)
    b = rng.uniform(-1, 1, (2 * cat.TMM_K, cat.TMM_N)).astype(F)
    with pytest.raises(
        interop.ArgumentError,
        match=r"output 'C': the kernel writes it at an index that is not the thread's .*tile_store",
    ):
        _call(fw, op, a, b, launch_dims=(2, 1))
    got = _call(fw, op, a, b, launch_dims=(2, 1), output_dims={"C": (2 * cat.TMM_M, cat.TMM_N)})
    np.testing.assert_allclose(_np(got), a @ b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("fw", ALL)
def test_numpy_bool_and_warp_scalar_objects_are_numbers(fw):
    """``np.bool_(True)`` for a ``wp.bool`` parameter was refused as "expected bool (a number), got
    bool", and a Warp scalar object (``wp.float32(2.0)``) as "expected float32 (a number), got
    float32"; ``wp.launch`` takes both. Read as the numbers they are (a ``wp.float64`` as a
    ``np.float64`` is: checked against the parameter's range)."""
    import warp as wp

    x = np.arange(3, dtype=F)
    pick = interop.op(cat.bool_pick_kernel)
    for flag, sign in ((np.bool_(True), -1), (np.bool_(False), 1), (True, -1)):
        np.testing.assert_array_equal(_np(_call(fw, pick, x, flag)), sign * x)
    scale = interop.op(cat.scale_kernel)
    for s in (wp.float32(2.0), wp.float64(2.0), wp.int32(2)):
        np.testing.assert_array_equal(_np(_call(fw, scale, x, s)), 2 * x)
    with pytest.raises(interop.ArgumentError, match=r"parameter 's'.*float32"):
        _call(fw, scale, x, wp.float64(1e40))


def test_generic_scalars_of_another_type_name_the_overload_fix():
    """A generic kernel whose scalars need another type than its first generic array (warp.fem's
    mixed-precision axpy) cannot be built with the scalars the call resolves: the error says which
    type they took and to describe a concrete overload, which then runs."""
    import warp as wp

    x, y = np.arange(4, dtype=F), np.ones(4)
    with pytest.raises(interop.ArgumentError, match=r"Generic scalar\(s\) \['alpha', 'beta'\] took .*wp\.overload"):
        interop.op(cat.mixed_axpy_kernel, outputs=0, in_out=["y"])(x, y.copy(), 0.5, 2.0)
    k = wp.overload(
        cat.mixed_axpy_kernel,
        {"x": wp.array(dtype=wp.float32), "y": wp.array(dtype=wp.float64), "alpha": wp.float64, "beta": wp.float64},
    )
    np.testing.assert_array_equal(interop.op(k, outputs=0, in_out=["y"])(x, y, 0.5, 2.0), 2.0 + 0.5 * x)


@TORCH
@pytest.mark.parametrize("kind", ["kernel", "function"])
def test_torch_batched_upstream_gradients_are_refused_naming_the_op(kind):
    """``torch.autograd.grad(..., is_grads_batched=True)`` and ``jacobian(vectorize=True)`` hand the
    backward legacy-vmap batched gradients, which have no storage: torch's "Cannot access data
    pointer of Tensor that doesn't have storage" came from inside the op (or "Batching rule not
    implemented"). Refused naming the op and the alternative, on every call (the first, and those of
    a remembered signature); ``torch.func.jacrev`` gives the Jacobian."""
    import torch

    op = interop.op(cat.scale_kernel if kind == "kernel" else cat.clone_then_square_fn)
    args = (lambda x: (x, 1.5)) if kind == "kernel" else (lambda x: (x,))
    x = torch.linspace(-1, 1, 4, device="cpu", requires_grad=True)
    want = torch.diag(torch.full((4,), 1.5, device="cpu") if kind == "kernel" else 2 * x.detach())
    for _ in range(3):
        op(*args(x)).sum().backward()  # (a remembered signature from the second call on)
        with pytest.raises(interop.UnsupportedError, match=r"op '.*': batched upstream gradients .* torch.func.jacrev"):
            torch.autograd.grad(op(*args(x)), x, torch.eye(4, device="cpu"), is_grads_batched=True)
        with pytest.raises(interop.UnsupportedError, match=r"batched upstream gradients"):
            torch.autograd.functional.jacobian(lambda v: op(*args(v)), x.detach(), vectorize=True)
        got = torch.func.jacrev(lambda v: op(*args(v)))(x.detach())
        torch.testing.assert_close(got, want)


@TORCH
def test_torch_export_of_an_in_out_op_keeps_its_gradient():
    """A module calling an in-out op, exported with example inputs that need no gradient (the usual
    way): the program held the in-place operator, functionalized by torch, which dropped the
    gradient when it ran with one (``x.grad`` 1 for 1 + 2x). Exported, the op is its functional
    operator and a ``copy_``: the program's gradient is eager torch's. Calling the in-place
    operator itself with a tensor that wants a gradient is refused (torch would drop it)."""
    import torch

    op = interop.op(cat.square_accumulate_kernel, in_out=["a"], name="hostile::square_accumulate")

    class M(torch.nn.Module):
        def forward(self, x):
            a = x.clone()
            op(x, a)
            return a

    x = torch.arange(4.0, device="cpu")
    program = torch.export.export(M(), (x,))
    for run in (M(), program.module()):
        xr = x.clone().requires_grad_()
        out = run(xr)
        out.sum().backward()
        torch.testing.assert_close(out.detach(), x + x * x)
        torch.testing.assert_close(xr.grad, 1 + 2 * x)
    xr = x.clone().requires_grad_()
    with pytest.raises(
        interop.ArgumentError, match=r"in-place operator torch.ops.hostile.square_accumulate has no gradient"
    ):
        torch.ops.hostile.square_accumulate(xr, xr * 1.0)
    a = x.clone()
    with torch.no_grad():
        torch.ops.hostile.square_accumulate(xr, a)
    torch.testing.assert_close(a, x + x * x)


@TORCH
def test_torch_reverse_transforms_of_vmap_of_an_op():
    """``torch.func.grad`` / ``vjp`` / ``jacrev`` around ``vmap(op)``: inside the vmap the batched
    tensors hide that the outer transform tracks them; the registered operator's autograd then ran
    under the vmap rule and torch refused it ("must override the setup_context staticmethod",
    naming no op). The gradients are ``2 X``, as ``vmap(grad(op))`` gives."""
    import torch
    from torch.func import grad, jacrev, vjp, vmap

    op = interop.op(cat.square_kernel)
    X = torch.linspace(-1, 1, 12, device="cpu").reshape(3, 4)
    torch.testing.assert_close(grad(lambda X: vmap(op)(X).sum())(X), 2 * X)
    out, pull = vjp(vmap(op), X)
    torch.testing.assert_close(out, X * X)
    torch.testing.assert_close(pull(torch.ones_like(X))[0], 2 * X)
    jac = jacrev(vmap(op))(X)
    torch.testing.assert_close(torch.einsum("ijij->ij", jac), 2 * X)
    torch.testing.assert_close(vmap(grad(lambda x: op(x).sum()))(X), 2 * X)


@TORCH
def test_torch_compile_vector_value_tuple_with_a_tensor_component():
    """``op(x, (a, 2.0, 3.0))`` with ``a`` a 0-d tensor works eagerly; under
    ``torch.compile(fullgraph=True)`` Dynamo could not read the tensor as a number ("Unsupported
    ndarray attribute access", no op named). Read as eager calls read it; a component that wants a
    gradient is refused, as eagerly."""
    import torch

    op = interop.op(cat.vec_offset_kernel)
    x = torch.zeros(2, 3, device="cpu")
    a = torch.tensor(0.5, device="cpu")
    want = op(x, (a, 2.0, 3.0))
    torch._dynamo.reset()
    f = torch.compile(lambda x, a: op(x, (a, 2.0, 3.0)), fullgraph=True)
    for k in range(2):
        torch.testing.assert_close(f(x, a + k), want + torch.tensor([k, 0.0, 0.0], device="cpu"))
    with pytest.raises(Exception, match=r"parameter 'v'.*component 0, a torch tensor that requires a gradient"):
        f(x, a.clone().requires_grad_())


@JAX
def test_jax_export_with_symbolic_shapes_is_refused_naming_the_op():
    """``jax.export`` with a symbolic dimension failed inside JAX's dimension arithmetic or in a JSON
    encoder ("_DimExpr is not JSON serializable"), naming no op: refused naming the op, the
    parameter and the dimension; concrete shapes export."""
    import jax
    import jax.numpy as jnp
    from jax import export

    from adapters import jax as ij

    op = interop.op(cat.scale_kernel)
    (n,) = export.symbolic_shape("n")
    f = jax.jit(lambda x: op(x, 2.0))
    with pytest.raises(interop.UnsupportedError, match=r"op 'scale_kernel', parameter 'a': a symbolic dimension \(n\)"):
        export.export(f, disabled_checks=ij.disabled_checks(op))(jax.ShapeDtypeStruct((n,), jnp.float32))
    with pytest.raises(interop.UnsupportedError, match=r"op 'scale_kernel': a symbolic vmap batch size \(n\)"):
        export.export(jax.jit(jax.vmap(lambda x: op(x, 2.0))), disabled_checks=ij.disabled_checks(op))(
            jax.ShapeDtypeStruct((n, 4), jnp.float32)
        )
    e = export.export(f, disabled_checks=ij.disabled_checks(op))(jax.ShapeDtypeStruct((3,), jnp.float32))
    np.testing.assert_allclose(np.asarray(e.call(jnp.ones(3, jnp.float32, device=jax_device("cpu")))), [2.0] * 3)


@pytest.mark.parametrize("fw", [f for f in ALL if f != "numpy"])
def test_numpy_array_for_a_vector_value_beside_another_frameworks_arrays(fw):
    """A NumPy constant for a ``wp.vec3`` value (``g = np.array([0, -9.8, 0])``) beside torch, JAX or
    Paddle arrays was refused as "arrays from two frameworks in one call": it is a value, read as
    its numbers (as a tuple is); another shape is refused naming the parameter."""
    op = interop.op(cat.vec_offset_kernel)
    x = np.zeros((2, 3), F)
    g = np.array([1.0, -9.8, 0.5])
    xs = _to(fw, x)
    if fw == "jax.jit":
        import jax

        got = jax.jit(lambda a: op(a, g))(xs)
    else:
        got = op(xs, g)
    np.testing.assert_allclose(_np(got), x + g.astype(F))
    with pytest.raises(
        interop.ArgumentError,
        match=r"parameter 'v': .*a NumPy array of shape \(3,\)\), got a NumPy array of shape \(4,\)",
    ):
        op(xs, np.ones(4))


@pytest.mark.parametrize("fw", ALL + ["warp"])
def test_none_for_an_optional_input_array_is_a_null_array(fw):
    """``wp.launch`` takes ``None`` for an array parameter (a null array: Warp's optional array, as
    newton's ``eval_articulation_fk(articulation_mask=None, ...)`` is called); it was refused in
    every framework. An empty array of the parameter's dtype on the call's device stands for it:
    the kernel's ``if idx:`` takes its else branch, with gradients through the other inputs."""
    import warp as wp

    op = interop.op(cat.optional_gather_kernel, output_dims={"out": 4}, launch_dims=4)
    x = np.arange(4, dtype=F)
    for _ in range(2):
        if fw == "warp":
            got = op(None, wp.array(x, device="cpu"))
        elif fw == "jax.jit":
            import jax

            got = jax.jit(lambda v: op(None, v))(_to("jax", x))
        else:
            got = op(None, _to(fw, x))
        np.testing.assert_array_equal(_np(got), 2 * x)
    if fw == "torch":
        import torch

        xt = torch.tensor(x, requires_grad=True, device="cpu")
        op(None, xt).sum().backward()
        np.testing.assert_array_equal(xt.grad.numpy(), [2.0] * 4)


def test_none_is_refused_where_no_array_can_stand_for_it():
    """None for an in-out, or for a generic array (whose dtype the call gives), is refused naming
    the parameter."""
    with pytest.raises(interop.ArgumentError, match=r"parameter 'acc': .*got None for an in_out array parameter"):
        interop.op(cat.reverse_accumulate_kernel, in_out=["acc"])(np.ones(3, F), None)
    with pytest.raises(interop.ArgumentError, match=r"parameter 'x': .*got None for a generic array parameter"):
        interop.op(cat.mixed_axpy_kernel, outputs=0, in_out=["y"])(None, np.ones(3), 0.5, 2.0)


@pytest.mark.parametrize("fw", [f for f in ("torch", "paddle", "jax") if f in ALL])
def test_python_function_op_launching_on_views_of_its_own_arrays(fw):
    """A Python-function op launching on slices of its input and output (``x[1:]``, ``out[: n - 1]``):
    right on the first call, then every backward was refused (torch, Paddle) as "an array the
    function made without a gradient", which the function never made. The views get the same view
    of the op's gradients: ``wp.Tape``'s gradient, every call."""
    op = interop.op(cat.neighbours_fn)
    xn = np.array([1.0, 2.0, 3.0, 4.0], F)
    want = np.array([2.0, 4.0, 6.0, 3.0], F)  # d/dx of sum(x[i + 1] * x[i])
    for _ in range(3):
        np.testing.assert_allclose(grad_of_sum(fw, op, xn), want)


@pytest.mark.parametrize("fw", [f for f in ("torch", "jax") if f in ALL])
def test_python_function_op_forward_mode_follows_copies(fw):
    """``t = wp.clone(x)`` then a launch on ``t``: reverse mode gave 2x (``wp.Tape`` records the
    copy), forward mode x and the second derivative 1 (the tangent tape did not follow the copy):
    the two modes disagreed without a word. Both give 2x, and the Hessian 2."""
    op = interop.op(cat.clone_then_square_fn)
    xn = np.array([0.5, -1.0, 2.0], F)
    if fw == "torch":
        import torch

        x = torch.tensor(xn, device="cpu")
        fwd = torch.func.jacfwd(op)(x).diagonal().numpy()
        hess = torch.func.hessian(lambda v: op(v).sum())(x).diagonal().numpy()
    else:
        import jax
        import jax.numpy as jnp

        x = jnp.asarray(xn, device=jax_device("cpu"))
        fwd = np.diagonal(np.asarray(jax.jacfwd(op)(x)))
        hess = np.diagonal(np.asarray(jax.hessian(lambda v: op(v).sum())(x)))
    np.testing.assert_allclose(fwd, 2 * xn, rtol=1e-6)
    np.testing.assert_allclose(hess, [2.0] * 3, rtol=1e-6)


@JAX
def test_jax_in_out_op_under_sharded_jit_and_checkpoint():
    """An in-out op was a side-effecting call: under ``jax.jit`` on a mesh of 4 devices XLA failed
    ("Side-effect HLO must have sharding", naming no op), and ``jax.checkpoint`` refused it. It is
    functional now: the unsharded values, gradients through ``jax.checkpoint``."""
    from _subprocess import run_script

    run_script(
        """
import numpy as np, jax, jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
import interop, catalogue as cat
op = interop.op(cat.square_accumulate_kernel, in_out=["a"])
cpu = jax.devices("cpu")
x = jnp.arange(8.0, device=cpu[0]); a = jnp.ones(8, device=cpu[0])
want = np.asarray(op(x, a))
mesh = Mesh(np.array(cpu[:4]), ("d",))
for spec in (P("d"), P()):
    xs, as_ = (jax.device_put(v, NamedSharding(mesh, spec)) for v in (x, a))
    np.testing.assert_allclose(np.asarray(jax.jit(op)(xs, as_)), want)
f = lambda x, a: op(x, a).sum()
np.testing.assert_allclose(np.asarray(jax.grad(jax.checkpoint(f))(x, a)), 2 * np.arange(8.0))
""",
        env={"XLA_FLAGS": "--xla_force_host_platform_device_count=4"},
        timeout=300,
    )


@JAX
@pytest.mark.parametrize("method", ["loop", "sequential", "fold"])
def test_jax_vmap_of_an_empty_batch(method):
    """``vmap`` over a batch of 0 with ``vmap_method="fold"`` raised ``ZeroDivisionError`` from the
    fold's reshape; every method gives the empty result, as ``jnp`` does."""
    import jax
    import jax.numpy as jnp

    op = interop.op(cat.scale_kernel, vmap_method=method)
    out = jax.vmap(lambda a: op(a, 2.0))(jnp.zeros((0, 3), jnp.float32, device=jax_device("cpu")))
    assert out.shape == (0, 3)


@pytest.mark.parametrize("fw", [f for f in ALL if f != "numpy"])
def test_numpy_0d_array_for_a_scalar_beside_another_frameworks_arrays(fw):
    """A 0-d NumPy array for a scalar was refused beside JAX (or torch, Paddle) arrays as "arrays from
    two frameworks" while ``np.float64(2.0)`` was taken: a value, read as the number it holds."""
    op = interop.op(cat.scale_kernel)
    x = np.arange(3, dtype=F)
    np.testing.assert_allclose(_np(_call(fw, op, x, np.float64(2.0))), 2 * x)
    xs = _to(fw, x)
    got = op(xs, np.array(2.0)) if fw != "jax.jit" else __import__("jax").jit(lambda v: op(v, np.array(2.0)))(xs)
    np.testing.assert_allclose(_np(got), 2 * x)


@JAX
def test_jax_in_out_given_its_input_reads_the_values_before_the_call():
    import jax.numpy as jnp

    op = _reversed_accumulate_op()
    v = jnp.asarray(np.arange(1, 6, dtype=F), device=jax_device("cpu"))
    np.testing.assert_allclose(np.asarray(op(v, v)), np.arange(1, 6) + 10 * np.arange(5, 0, -1))


@pytest.mark.parametrize("fw", ALL)
def test_warp_vector_value_of_another_scalar_type_is_refused(fw):
    """A ``wp.vec3h`` for a ``wp.vec3`` parameter was read as its float16 bit patterns
    ([15360, 16384, 16896] for [1, 2, 3]); a ``wp.vec3d`` was cast to float32. Refused, as a scalar
    of another type is; a ``wp.vec3`` is read."""
    import warp as wp

    op = interop.op(cat.vec_offset_kernel)
    x = np.zeros((2, 3), F)
    for value, name in ((wp.vec3h(1.0, 2.0, 3.0), "vec3h"), (wp.vec3d(1.0, 2.0, 3.0), "vec3d")):
        with pytest.raises(interop.ArgumentError, match=rf"parameter 'v': .* got a {name} value .*never cast"):
            _call(fw, op, x, value)
    np.testing.assert_array_equal(_np(_call(fw, op, x, wp.vec3(1.0, 2.0, 3.0))), x + [1, 2, 3])


def test_python_function_op_returning_a_value_is_refused():
    """A Python-function op whose function returned its result instead of writing its output gave
    the zero-filled output."""
    with pytest.raises(interop.ArgumentError, match=r"op '.*returns_instead_fn': the function returned a value"):
        interop.op(cat.returns_instead_fn)(np.ones(3, F))


def test_python_function_op_struct_parameter_is_refused_when_described():
    """Described without complaint, then every call refused with an unreadable message."""
    with pytest.raises(interop.UnsupportedError, match=r"parameter 's' is a @wp.struct of a Python-function op"):
        interop.op(cat.struct_param_fn)


def test_jvp_tangent_of_another_shape_is_refused():
    """A (3, 4) tangent for a (2, 2) input was read in part (its top-left corner)."""
    op = interop.op(cat.scale_kernel)
    with pytest.raises(
        interop.ArgumentError,
        match=r"op 'scale_kernel', jvp: the tangent of parameter 'a' must have its shape \(4,\), got shape \(6,\)",
    ):
        op.jvp(np.ones(4, F), 2.0, tangents=[np.ones(6, F), None])
    # the tangent op's own refusals name the caller's op and the tangent's primal (they named the
    # generated tangent op and its parameter 'a__dot')
    with pytest.raises(interop.ArgumentError, match=r"op 'scale_kernel', jvp, the tangent of parameter 'a': .*float64"):
        op.jvp(np.ones(4, F), 2.0, tangents=[np.ones(4, np.float64), None])


@JAX
def test_jax_static_scalar_errors_come_at_trace_time():
    import jax
    import jax.numpy as jnp

    a = jnp.zeros(2, jnp.int32, device=jax_device("cpu"))
    # make_jaxpr never runs the FFI handler: these used to surface as JaxRuntimeError at run time
    with pytest.raises(interop.ArgumentError, match="parameter 's'"):
        jax.make_jaxpr(lambda a: interop.op(cat.int_offset_kernel)(a, 2**32 + 3))(a)
    with pytest.raises(interop.ArgumentError, match="parameter 'v'"):
        jax.make_jaxpr(lambda a: interop.op(cat.vec_offset_kernel)(a, (1.0, 2.0)))(
            jnp.ones((2, 3), device=jax_device("cpu"))
        )


@TORCH
@pytest.mark.parametrize("value", ["2", None, 1j, (1.0,)])
def test_torch_non_number_scalar_names_op_and_parameter(value):
    import torch

    op = interop.op(cat.scale_kernel)
    with pytest.raises(interop.ArgumentError, match=r"op 'scale_kernel', parameter 's': expected float32"):
        op(torch.ones(2, device="cpu"), value)


# ---- torch tensors torch itself would not write ---------------------------------------------------
@TORCH
def test_torch_inference_tensor_in_out_outside_inference_mode():
    import torch

    op = interop.op(cat.atomic_kernel, in_out=["acc"])
    with torch.inference_mode():
        acc, probe = torch.zeros(4, device="cpu"), torch.zeros(4, device="cpu")
    with pytest.raises(RuntimeError, match="Inplace update to inference tensor outside InferenceMode"):
        probe.add_(1.0)  # what torch says
    with pytest.raises(interop.ArgumentError, match=r"parameter 'acc': in-place update to an inference tensor"):
        op(torch.ones(4, device="cpu"), acc)
    assert acc.tolist() == [0, 0, 0, 0]
    with torch.inference_mode():
        op(torch.ones(4, device="cpu"), acc)
    assert acc.tolist() == [2, 2, 2, 2]


@TORCH
def test_torch_lazy_negative_view_gives_its_values():
    # z.conj().imag: torch's negative bit, memory +2, +4, values -2, -4. The eager path read the
    # memory (4, 8 instead of -4, -8); it now sends such a call through the operator, whose
    # dispatcher resolves the view, like torch.ops does; gradients flow back through the view too
    import torch

    op = interop.op(cat.scale_kernel, name="hostile::neg_scale")
    (
        op(torch.ones(2, device="cpu"), 2.0),
        op(torch.ones(2, device="cpu"), 2.0),
    )  # the eager signature of a (2,) float32 tensor is warm
    z = torch.tensor([1 + 2j, 3 + 4j], dtype=torch.complex64, requires_grad=True, device="cpu")
    im = z.conj().imag
    assert im.is_neg()
    want = torch.tensor([-4.0, -8.0], device="cpu")
    torch.testing.assert_close(op(im.detach(), 2.0), want)
    torch.testing.assert_close(torch.ops.hostile.neg_scale(im.detach(), 2.0), want)
    out = op(im, 2.0)
    torch.testing.assert_close(out.detach(), want)
    out.sum().backward()  # d/dz of sum(2 * imag(conj z)) = d/dz of -2 (y1 + y2): the gradient -2j per element
    torch.testing.assert_close(z.grad, torch.tensor([-2j, -2j], dtype=torch.complex64, device="cpu"))


@TORCH
def test_nested_tensor_is_refused():
    # was torch's "Internal error: NestedTensorImpl doesn't support sizes"
    import torch

    op = interop.op(cat.scale_kernel)
    op(torch.ones(3, device="cpu"), 2.0)  # the eager signature cache is warm
    for layout in (torch.strided, torch.jagged):
        nt = torch.nested.nested_tensor([torch.ones(2, device="cpu"), torch.ones(3, device="cpu")], layout=layout)
        with pytest.raises(interop.ArgumentError, match=r"op 'scale_kernel', parameter 'a': a nested tensor"):
            op(nt, 2.0)


@pytest.mark.parametrize("fw", [f for f in ("torch", "paddle") if f in ALL])
def test_sparse_tensor_is_refused(fw):
    op = interop.op(cat.scale_kernel)
    if fw == "torch":
        import torch

        x = torch.ones(4, device="cpu").to_sparse()
    else:
        import paddle

        x = paddle.to_tensor(np.ones(4, F), place=paddle.CPUPlace()).to_sparse_coo(1)
    with pytest.raises(interop.ArgumentError, match=r"parameter 'a': a .*sparse.* tensor has no dense strided memory"):
        op(x, 2.0)


# ---- empty vec arrays ---------------------------------------------------------------------------
@pytest.mark.parametrize("fw", ALL)
def test_empty_vec3_arrays(fw):
    op = interop.op(cat.vec3_kernel)
    out = _call(fw, op, np.zeros((0, 3), F), np.zeros((0, 3), F))
    assert tuple(out.shape) == (0, 3)


def test_empty_vec3_array_with_zero_strides():
    op = interop.op(cat.vec3_kernel)
    z = np.lib.stride_tricks.as_strided(np.zeros(1, F), shape=(0, 3), strides=(0, 0))
    assert op(z, z).shape == (0, 3)


# ---- Python-function ops and gradients ------------------------------------------------------------
@TORCH
def test_function_op_strided_leaf_backward_torch():
    import torch

    op = cat.case("function").op
    base = torch.rand(16, dtype=torch.float32, device="cpu")
    a = base[::2].requires_grad_()  # a strided leaf
    b = torch.rand(8, device="cpu")
    out = op(a, b)
    np.testing.assert_allclose(out.detach().numpy(), 3 * base[::2].numpy() ** 2 + b.numpy(), rtol=1e-6)
    out.sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), 6 * base[::2].numpy(), rtol=1e-6)


@PADDLE
def test_function_op_strided_input_backward_paddle():
    import paddle

    op = cat.case("function").op
    an = np.random.default_rng(0).random(16).astype(F)
    a = paddle.to_tensor(an, stop_gradient=False, place=paddle.CPUPlace())
    op(a[::2], paddle.ones([8])).sum().backward()
    expected = np.zeros(16, F)
    expected[::2] = 6 * an[::2]
    np.testing.assert_allclose(a.grad.numpy(), expected, rtol=1e-6)


@JAX
def test_function_op_array_gradient_with_traced_scalar_jax():
    import jax
    import jax.numpy as jnp

    op = interop.op(cat.function_scale_fn)
    a = jnp.arange(4.0, dtype=jnp.float32, device=jax_device("cpu"))
    g = jax.jit(jax.grad(lambda a, s: op(a, s).sum()))(a, 2.0)  # s is traced, only a's gradient is asked
    np.testing.assert_array_equal(np.asarray(g), [2, 2, 2, 2])
    with pytest.raises(NotImplementedError, match=r"traced scalar 's'"):
        jax.grad(lambda a, s: op(a, s).sum(), argnums=1)(a, 2.0)


@TORCH
def test_function_op_array_gradient_with_0d_tensor_scalar_torch():
    import torch

    op = interop.op(cat.function_scale_fn)
    a = torch.arange(4.0, requires_grad=True, device="cpu")
    op(a, torch.tensor(2.0, device="cpu")).sum().backward()
    assert a.grad.tolist() == [2, 2, 2, 2]
    s = torch.tensor(2.0, requires_grad=True, device="cpu")
    with pytest.raises(interop.UnsupportedError, match=r"no gradient for scalar 's'"):
        op(torch.arange(4.0, device="cpu"), s).sum().backward()


@pytest.mark.parametrize("fw", [f for f in ("torch", "jax", "jax.jit", "paddle") if f in ALL])
def test_backward_that_is_a_python_function_op(fw):
    op = interop.op(cat.square_kernel, backward=interop.op(cat.square_backward_fn))
    an = np.arange(5, dtype=F)
    if fw == "torch":
        import torch

        a = torch.from_numpy(an.copy()).requires_grad_()
        op(a).sum().backward()
        g = a.grad.numpy()
    elif fw.startswith("jax"):
        import jax

        f = jax.grad(lambda a: op(a).sum())
        g = np.asarray((jax.jit(f) if fw == "jax.jit" else f)(jax.numpy.asarray(an, device=jax_device("cpu"))))
    else:
        import paddle

        a = paddle.to_tensor(an, stop_gradient=False, place=paddle.CPUPlace())
        op(a).sum().backward()
        g = a.grad.numpy()
    np.testing.assert_array_equal(g, 2 * an)


# ---- conversions from JAX: immutable buffers ------------------------------------------------------
@JAX
def test_convert_from_jax_to_numpy_is_read_only():
    import jax.numpy as jnp

    x = jnp.arange(4.0, device=jax_device("cpu"))
    v = interop.convert(x, to="numpy")
    assert not v.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        v[0] = 1.0
