"""The extent rule: arrays the kernel indexes directly with wp.tid() must cover the launch.

Each kernel below comes from the catalogue; the ones indexed any other way (offsets,
gathers, shape guards, loops, early returns) must stay silent and give NumPy's answer.
"""

from __future__ import annotations

import catalogue as cat
import numpy as np
import pytest
from _devices import jax_device

import interop

F = np.float32


def _err(op, *args, **kw) -> str:
    with pytest.raises(interop.ArgumentError) as ei:
        op(*args, **kw)
    return str(ei.value)


# ---- what the analysis finds ------------------------------------------------------------
@pytest.mark.parametrize(
    "kernel, kw, expected",
    [
        (cat.scale_kernel, {}, {("a", 0, -1), ("out", 0, -1)}),
        (cat.scalar_kernel, {}, {("x", 0, -1), ("y", 0, -1), ("out", 0, -1)}),
        (cat.transpose_kernel, {}, {("a", 0, 0), ("a", 1, 1), ("out", 0, 1), ("out", 1, 0)}),
        (cat.atomic_kernel, {"outputs": 1, "in_out": ["acc"]}, {("x", 0, -1), ("acc", 0, -1)}),
        (
            cat.inout_kernel,
            {"outputs": 2, "in_out": ["acc"]},
            {("x", 0, 0), ("x", 1, 1), ("acc", 0, 0)} | {("sq", 0, 0), ("sq", 1, 1)},
        ),
        (cat.shifted_kernel, {}, set()),
        (cat.gather_kernel, {}, {("idx", 0, -1), ("out", 0, -1)}),
        (cat.funky_kernel, {"outputs": 2}, set()),
        (cat.guarded_kernel, {}, set()),
        (cat.loop_kernel, {}, {("out", 0, -1)}),
        (cat.reassigned_kernel, {}, set()),
        (cat.function_op_fn, {}, set()),
    ],
)
def test_direct_indexing_found(kernel, kw, expected):
    assert set(interop.op(kernel, **kw).description.direct_index) == expected


# ---- inputs shorter than the launch -----------------------------------------------------
def test_input_shorter_than_launch_names_op_param_dim_extents():
    op = interop.op(cat.scalar_kernel)
    msg = _err(op, np.ones(8, F), np.ones(4, F), 2.0)
    assert "op 'scalar_kernel', parameter 'y'" in msg
    assert "dimension 0" in msg and "launch extent 8" in msg and "got extent 4" in msg


def test_launch_dims_larger_than_inputs():
    op = interop.op(cat.scale_kernel)
    msg = _err(op, np.ones(4, F), 2.0, launch_dims=1 << 26)
    assert "parameter 'a'" in msg and "launch extent 67108864" in msg and "got extent 4" in msg
    # smaller launches and equal ones are fine (only the first n elements are touched)
    np.testing.assert_array_equal(op(np.arange(4, dtype=F), 2.0, launch_dims=2), [0, 2])


def test_output_dims_smaller_than_launch():
    op = interop.op(cat.scale_kernel)
    msg = _err(op, np.ones(1 << 22, F), 2.0, output_dims=1)
    assert "parameter 'out'" in msg and "output" in msg and "launch extent 4194304" in msg and "got extent 1" in msg
    assert "output_dims" in msg
    # a larger output is fine: its tail stays zero
    np.testing.assert_array_equal(op(np.ones(2, F), 2.0, output_dims=4), [2, 2, 0, 0])


def test_in_out_shorter_than_launch():
    op = interop.op(cat.atomic_kernel, in_out=["acc"])
    msg = _err(op, np.ones(8, F), np.zeros(3, F))
    assert "parameter 'acc'" in msg and "in-out" in msg and "launch extent 8" in msg and "got extent 3" in msg


def test_two_dims_each_checked_against_its_launch_dim():
    op = interop.op(cat.transpose_kernel)
    a = np.arange(12, dtype=F).reshape(3, 4)
    np.testing.assert_array_equal(op(a, output_dims=(4, 3)), a.T)
    # out[j, i] is written at the thread indices in the other order: sized from the launch permuted
    np.testing.assert_array_equal(op(a), a.T)
    # a launch of another rank than the order the kernel writes in does not size it
    msg = _err(op, np.arange(4, dtype=F).reshape(2, 2), launch_dims=(2, 2, 1))
    assert "output 'out'" in msg and "another order" in msg and "pass output_dims={'out': shape}" in msg
    # an output_dims too short in dimension 0 for out[j, i]
    msg = _err(op, a, output_dims=(3, 3))
    assert "parameter 'out'" in msg and "dimension 0" in msg and "launch extent 4" in msg and "got extent 3" in msg
    # out[j, i]: output dim 1 follows launch dim 0
    msg = _err(op, a, output_dims=(4, 2))
    assert "parameter 'out'" in msg and "dimension 1" in msg and "wp.tid() dimension 0" in msg
    assert "launch extent 3" in msg and "got extent 2" in msg
    msg = _err(op, a, launch_dims=(3, 5), output_dims=(5, 3))
    assert "parameter 'a'" in msg and "dimension 1" in msg and "launch extent 5" in msg and "got extent 4" in msg


def test_vec_arrays_compare_outer_dims():
    op = interop.op(cat.vec3_kernel)
    a = np.ones((5, 3), F)
    msg = _err(op, a, np.ones((2, 3), F))
    assert "parameter 'b'" in msg and "launch extent 5" in msg and "got extent 2" in msg


def test_zero_length_launch_is_not_an_error():
    op = interop.op(cat.scalar_kernel)
    assert op(np.ones(0, F), np.ones(0, F), 1.0).shape == (0,)


@pytest.mark.parametrize("fw", ["torch", "jax", "jax.jit", "paddle"])
def test_every_framework_refuses_before_launching(fw):
    op = interop.op(cat.scalar_kernel)
    x, y = np.ones(8, F), np.ones(4, F)
    if fw == "torch":
        torch = pytest.importorskip("torch")
        call = lambda: op(torch.from_numpy(x), torch.from_numpy(y), 2.0)  # noqa: E731
    elif fw.startswith("jax"):
        jax = pytest.importorskip("jax")
        f = (lambda a, b: op(a, b, 2.0)) if fw == "jax" else jax.jit(lambda a, b: op(a, b, 2.0))
        call = lambda: f(jax.numpy.asarray(x, device=jax_device("cpu")), jax.numpy.asarray(y, device=jax_device("cpu")))  # noqa: E731
    else:
        paddle = pytest.importorskip("paddle")
        cpu = paddle.CPUPlace()
        call = lambda: op(paddle.to_tensor(x, place=cpu), paddle.to_tensor(y, place=cpu), 2.0)  # noqa: E731
    with pytest.raises(interop.ArgumentError, match=r"parameter 'y'.*launch extent 8.*got extent 4"):
        call()


# ---- Warp's launch limits -----------------------------------------------------------------
def test_launch_beyond_warp_thread_limit():
    op = interop.op(cat.scale_kernel)
    msg = _err(op, np.ones(4, F), 2.0, launch_dims=(2**21, 2**21, 2**21), output_dims=4)
    assert "9223372036854775808 threads" in msg and "Warp's limit" in msg
    msg = _err(op, np.ones(4, F), 2.0, launch_dims=(2**31, 1), output_dims=4)
    assert "extent 2147483648 in dimension 0" in msg


def test_output_beyond_warp_array_limit():
    op = interop.op(cat.vec3_kernel)
    msg = _err(op, np.ones((4, 3), F), np.ones((4, 3), F), launch_dims=2**40)
    assert "output 'out'" in msg and "extent 1099511627776" in msg and "array limit" in msg


@pytest.mark.parametrize("fw", ["numpy", "torch"])
def test_input_byte_stride_beyond_warps_32_bit_strides(fw):
    """A byte stride of 2**31 or more (a row of 2**29 + 1 float32) wrapped negative in Warp's 32-bit
    array descriptor: a segfault, for a column view and for the packed 2-d array alike. (NumPy's
    zeros are allocated lazily: little memory is touched.)"""
    big = np.zeros((2, 2**29 + 1), F)
    if fw == "torch":
        torch = pytest.importorskip("torch")
        big = torch.from_numpy(big)
    op = interop.op(cat.scale_kernel)
    with pytest.raises(
        interop.ArgumentError, match=r"op 'scale_kernel', parameter 'a': shape \(2,\): the byte stride 2147483652"
    ):
        op(big[:, 0], 1.0)
    sub = interop.op(cat.subscript_kernel)
    with pytest.raises(
        interop.ArgumentError, match=r"parameter 'x': shape \(2, 536870913\): the byte stride 2147483652 of dimension 0"
    ):
        w = np.zeros(2**29 + 1, F)
        sub(big, w if fw == "numpy" else torch.from_numpy(w), launch_dims=(2, 1))


def test_input_extent_beyond_warps_32_bit_shapes():
    """An input of 2**32 + 3 elements (a zero-stride view) was seen by the kernel as 3 long (Warp's
    shapes are 32-bit): checked mode then raised a false BoundsError."""
    x = np.broadcast_to(np.ones(1, F), (2**32 + 3,))
    op = interop.op(cat.scale_kernel)
    with pytest.raises(
        interop.ArgumentError, match=r"op 'scale_kernel', parameter 'a': shape \(4294967299,\): extent 4294967299"
    ):
        op(x, 1.0, launch_dims=1, output_dims=1)


def test_output_byte_stride_beyond_warps_32_bit_strides():
    op = interop.op(cat.subscript_kernel)
    msg = _err(op, np.ones((2, 3), F), np.ones(3, F), output_dims=(2, 2**29 + 1))
    assert "output 'out'" in msg and "byte stride 2147483652 of dimension 0" in msg


@pytest.mark.parametrize("checked", [False, True])
def test_tile_kernel_single_thread_index_launch_beyond_the_rows(checked):
    """``i = wp.tid(); wp.tile_load(x[i], ...)`` launched over 5 blocks with 3 rows of ``x``: blocks 3
    and 4 read past ``x`` (garbage, no error, checked mode too). Refused as a non-tile kernel's
    ``x[i, 0]`` is; within the rows the sums are right."""
    op = interop.op(cat.tile_row_sum_kernel, block_dim=cat.TILE_BLOCK, checked=checked)
    x = np.arange(3 * cat.TILE, dtype=F).reshape(3, cat.TILE)
    with pytest.raises(
        interop.ArgumentError, match=r"parameter 'x': the kernel indexes dimension 0 .* launch extent 5"
    ):
        op(x, launch_dims=5)
    np.testing.assert_allclose(op(x, launch_dims=3), x.sum(axis=1))


# ---- must stay silent ---------------------------------------------------------------------
def test_offset_index_guarded_is_silent():
    op = interop.op(cat.shifted_kernel)
    a = np.arange(5, dtype=F)
    np.testing.assert_array_equal(op(a, launch_dims=8), [1, 2, 3, 4, 0, 0, 0, 0])


def test_gather_is_silent_for_the_gathered_array():
    op = interop.op(cat.gather_kernel)
    a = np.arange(3, dtype=F) * 10
    idx = np.array([2, 0, 1, 2, 2], np.int32)
    np.testing.assert_array_equal(op(a, idx, launch_dims=5), a[idx])
    # the index array itself is indexed directly
    msg = _err(op, a, idx, launch_dims=6)
    assert "parameter 'idx'" in msg and "launch extent 6" in msg and "got extent 5" in msg


def test_shape_guarded_funky_kernel_is_silent():
    op = interop.op(cat.funky_kernel, outputs=2)
    a = np.arange(6, dtype=F)
    b, c = op(a, launch_dims=8, output_dims={"b": 8, "c": 3})
    np.testing.assert_array_equal(b, a[np.arange(8) % 6] + 1)
    np.testing.assert_array_equal(c, 2 * a[:3])


def test_early_return_guard_is_silent():
    op = interop.op(cat.guarded_kernel)
    np.testing.assert_array_equal(op(np.arange(3, dtype=F), launch_dims=5), [0, 1, 2, 0, 0])


def test_loop_over_an_array_is_silent():
    op = interop.op(cat.loop_kernel)
    np.testing.assert_array_equal(op(np.arange(3, dtype=F), launch_dims=4, output_dims=4), [3, 3, 3, 3])


def test_reassigned_thread_index_is_silent():
    op = interop.op(cat.reassigned_kernel)
    out = op(np.arange(3, dtype=F) + 1, launch_dims=8, output_dims=8)  # out[0] = ...: sized by the call
    assert out.shape == (8,) and out[0] in (1.0, 2.0, 3.0)


def test_docs_bounds_checks_example_runs(tmp_path):
    import os
    import re
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    section = open(os.path.join(root, "docs", "bounds.md")).read()
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    path = tmp_path / "readme_bounds.py"
    path.write_text(code)
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "op 'scale', parameter 'a'" in r.stdout and "launch extent 8" in r.stdout and "got extent 4" in r.stdout


# ---- outputs the launch writes entirely are not zero-filled first --------------------------
@pytest.mark.parametrize(
    "kernel, kw, expected",
    [
        (cat.scale_kernel, {}, {("out", (-1,))}),
        (cat.scalar_kernel, {}, {("out", (-1,))}),
        (cat.transpose_kernel, {}, {("out", (1, 0))}),
        (cat.atomic_kernel, {"in_out": ["acc"]}, set()),  # an atomic accumulates into the old value
        (cat.inout_kernel, {"outputs": 2, "in_out": ["acc"]}, {("sq", (0, 1))}),
        (cat.shifted_kernel, {}, set()),  # a conditional store
        (cat.gather_kernel, {}, {("out", (-1,))}),
        (cat.funky_kernel, {"outputs": 2}, set()),
        (cat.guarded_kernel, {}, set()),  # after an early return
        (cat.loop_kernel, {}, {("out", (-1,))}),
        (cat.reassigned_kernel, {}, set()),  # written twice, the second time not by thread
        (cat.tile_kernel, {"block_dim": 8}, set()),  # tile kernels: threads cooperate
        (cat.function_op_fn, {}, set()),
    ],
)
def test_written_outputs_found(kernel, kw, expected):
    assert set(interop.op(kernel, **kw).description.written) == expected


def test_zero_fill_only_where_the_launch_does_not_cover_the_output():
    op = interop.op(cat.transpose_kernel)
    spec = [interop._plan.ArraySpec((3, 4), np.dtype(F))]
    assert op.plan(spec, None, {"out": (4, 3)}).zero == (False,)  # out[j, i] covers (4, 3)
    assert op.plan(spec, None, {"out": (4, 5)}).zero == (True,)  # a larger output: its tail is zero
    assert interop.op(cat.transpose_kernel, zero_outputs=False).plan(spec, None, {"out": (4, 5)}).zero == (False,)
    scale = interop.op(cat.scale_kernel)
    s = [interop._plan.ArraySpec((4,), np.dtype(F)), interop._plan.ScalarSpec("py", float)]
    assert scale.plan(s).zero == (False,)
    assert scale.plan(s, (2,)).zero == (False,)  # the output follows the launch
    assert scale.plan(s, (2,), 4).zero == (True,)  # a launch over half the output


def _dirty(fw: str) -> None:
    """Leave freed memory full of NaN where the next allocations come from."""
    for n in (4, 8, 64, 1024):
        if fw == "torch":
            import torch

            torch.full((n,), float("nan"), device="cpu")
        elif fw == "paddle":
            import paddle

            paddle.full([n], float("nan"))
        else:
            np.full(n, np.nan, F)


@pytest.mark.parametrize("fw", ["numpy", "torch", "paddle"])
def test_elements_the_kernel_does_not_write_are_zero(fw):
    """A wrongly skipped zero fill shows as NaN (the freed memory reused by the next output)."""
    a = np.arange(1, 9, dtype=F)

    def call(kernel, *args, **kw):
        x = a if fw == "numpy" else interop.convert(a.copy(), to=fw, copy=True)
        out = interop.op(kernel)(x, *args, **kw)
        return out if fw == "numpy" else np.asarray(interop.convert(out, to="numpy", copy=True))

    for _ in range(20):  # allocators hand freed blocks back in various orders
        _dirty(fw)
        got = call(cat.scale_kernel, 2.0, output_dims=12)
        np.testing.assert_array_equal(got, np.r_[2 * a, np.zeros(4, F)])
        _dirty(fw)
        got = call(cat.shifted_kernel)
        np.testing.assert_array_equal(got, np.r_[a[1:], 0])
        _dirty(fw)
        got = call(cat.guarded_kernel, output_dims=8)
        np.testing.assert_array_equal(got, a)
