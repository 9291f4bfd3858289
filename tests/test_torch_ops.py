"""PyTorch adapter: calls, registration, in-out parameters, launch/output dims, layouts and bad input."""

from __future__ import annotations

import typing

import numpy as np
import pytest
import warp as wp

torch = pytest.importorskip("torch")

from _cuda import require_cuda, torch_spin_fill  # noqa: E402
from catalogue import norm3_kernel as vnorm  # noqa: E402
from guide_kernels import saxpy  # noqa: E402

import adapters.torch as atorch  # noqa: E402
import interop  # noqa: E402


@wp.kernel
def diagonal(m: wp.array2d(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = m[i, i]


@wp.kernel
def outer(a: wp.array(dtype=float), b: wp.array(dtype=float), out: wp.array2d(dtype=float)):
    i, j = wp.tid()
    out[i, j] = a[i] * b[j]


@wp.kernel
def rowsum(x: wp.array2d(dtype=float), acc: wp.array(dtype=float)):
    i, j = wp.tid()
    wp.atomic_add(acc, i, x[i, j])


@wp.kernel
def split_vec(v: wp.array(dtype=wp.vec3), s: wp.vec3, out: wp.array(dtype=wp.vec3), n: wp.array(dtype=wp.int32)):
    i = wp.tid()
    out[i] = wp.cw_mul(v[i], s)
    n[i] = wp.int32(i)


@wp.kernel
def generic_scale(a: wp.array(dtype=typing.Any), s: typing.Any, out: wp.array(dtype=typing.Any)):
    i = wp.tid()
    out[i] = a[i] * s


SAXPY = interop.op(saxpy, name="tt_ops::saxpy")
VNORM = interop.op(vnorm, name="tt_ops::vnorm")
ROWSUM = interop.op(rowsum, outputs=1, in_out=["acc"], name="tt_ops::rowsum")


def _t(a):
    return torch.from_numpy(np.ascontiguousarray(a))


# ---- calls ----------------------------------------------------------------------------
def test_saxpy_goes_through_the_registered_operator():
    x, y = torch.rand(16, device="cpu"), torch.rand(16, device="cpu")
    out = SAXPY(x, y, 2.0)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32 and out.shape == (16,)
    torch.testing.assert_close(out, 2.0 * x + y)
    # the same operator, reached through torch.ops and through bind / op.bound
    torch.testing.assert_close(torch.ops.tt_ops.saxpy(x, y, 2.0), out)
    assert atorch.bind(SAXPY) is SAXPY.bound("torch")
    assert atorch.bind(SAXPY)._qualname == "tt_ops::saxpy"
    torch.testing.assert_close(SAXPY.bound("torch")(x, y, 2.0), out)


def test_scalar_as_python_number_numpy_number_or_0d_tensor():
    x, y = torch.rand(8, device="cpu"), torch.rand(8, device="cpu")
    ref = 1.5 * x + y
    torch.testing.assert_close(SAXPY(x, y, 1.5), ref)
    torch.testing.assert_close(SAXPY(x, y, np.float32(1.5)), ref)
    torch.testing.assert_close(SAXPY(x, y, torch.tensor(1.5, device="cpu")), ref)
    # the tensor-scalar signature is its own operator
    assert hasattr(torch.ops.tt_ops, "saxpy__t_a")
    torch.testing.assert_close(torch.ops.tt_ops.saxpy__t_a(x, y, torch.tensor(1.5, device="cpu")), ref)


def test_vec_trailing_dims_and_vec_scalar_value_and_int_output():
    op = interop.op(split_vec, outputs=2, name="tt_ops::split_vec")
    v = torch.rand(5, 3, device="cpu")
    out, n = op(v, wp.vec3(1.0, 2.0, 3.0))
    torch.testing.assert_close(out, v * torch.tensor([1.0, 2.0, 3.0], device="cpu"))
    assert n.dtype == torch.int32 and n.tolist() == [0, 1, 2, 3, 4]
    out2, _ = op(v, (1.0, 2.0, 3.0))
    torch.testing.assert_close(out2, out)


def test_generic_kernel_serves_float32_and_float64():
    op = interop.op(generic_scale, name="tt_ops::generic_scale")
    for dt in (torch.float32, torch.float64):
        a = torch.rand(6, dtype=dt, device="cpu")
        out = op(a, 3.0)
        assert out.dtype == dt
        torch.testing.assert_close(out, a * 3.0)


def test_launch_dims_and_output_dims_per_call_and_described():
    m = torch.rand(4, 6, device="cpu")
    diag = interop.op(diagonal, launch_dims=4, name="tt_ops::diagonal")
    torch.testing.assert_close(diag(m), torch.diagonal(m)[:4])
    torch.testing.assert_close(diag(m, launch_dims=3), torch.diagonal(m)[:3])
    op = interop.op(outer, name="tt_ops::outer")
    a, b = torch.rand(3, device="cpu"), torch.rand(5, device="cpu")
    res = op(a, b, launch_dims=(3, 5), output_dims={"out": (3, 5)})
    torch.testing.assert_close(res, torch.outer(a, b))
    res = op(a, b, launch_dims=(3, 5), output_dims=(3, 5))
    torch.testing.assert_close(res, torch.outer(a, b))


def test_output_dims_either_convention_for_vec_outputs():
    @wp.kernel
    def fill3(a: wp.array(dtype=float), out: wp.array(dtype=wp.vec3)):
        i = wp.tid()
        out[i] = wp.vec3(a[0], a[0], a[0])

    op = interop.op(fill3, launch_dims=4, name="tt_ops::fill3")
    a = torch.tensor([2.0], device="cpu")
    assert op(a, output_dims=4).shape == (4, 3)
    assert op(a, output_dims=(4, 3)).shape == (4, 3)
    with pytest.raises(ValueError, match=r"output 'out': output_dims\['out'\] \(4, 2\) does not fit"):
        op(a, output_dims={"out": (4, 2)})
    with pytest.raises(ValueError, match="output_dims names 'nope', which is not an output"):
        op(a, output_dims={"nope": 4})


def test_in_out_is_updated_in_place_and_returned_as_the_same_object():
    x = torch.rand(3, 4, device="cpu")
    acc = torch.ones(3, device="cpu")
    ptr = acc.data_ptr()
    res = ROWSUM(x, acc)
    assert res is acc and acc.data_ptr() == ptr
    torch.testing.assert_close(acc, 1.0 + x.sum(dim=1))
    # the registered operator declares the mutation
    schema = atorch.bind(ROWSUM)._opoverload._schema
    assert [a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write] == ["acc"]
    v = acc._version
    ROWSUM(x, acc)
    assert acc._version > v  # the dispatcher bumped the version counter


def test_redescribing_the_same_kernel_returns_the_same_registered_op():
    again = interop.op(saxpy, name="tt_ops::saxpy")
    assert again is SAXPY
    assert atorch.bind(again) is atorch.bind(SAXPY)
    x = torch.rand(4, device="cpu")
    torch.testing.assert_close(again(x, x, 1.0), 2 * x)


def test_default_name_registers_under_interop_namespace():
    op = interop.op(vnorm)
    v = torch.rand(4, 3, device="cpu")
    torch.testing.assert_close(op(v), v.norm(dim=1))
    ns, name = op.name.split("::")
    assert ns == "interop" and hasattr(getattr(torch.ops, ns), name)


def test_strided_outer_views_are_read_in_place():
    base = torch.rand(20, device="cpu")
    x = base[::2]
    y = torch.rand(10, device="cpu")
    assert not x.is_contiguous()
    torch.testing.assert_close(SAXPY(x, y, 3.0), 3.0 * x + y)
    v = torch.rand(10, 3, device="cpu")[::3]  # outer stride 9 elements, vec components packed
    torch.testing.assert_close(VNORM(v), v.norm(dim=1))


def test_outputs_are_fresh_tensors_allocated_by_torch():
    x, y = torch.rand(8, device="cpu"), torch.rand(8, device="cpu")
    a = SAXPY(x, y, 1.0)
    b = SAXPY(x, y, 1.0)
    assert a.data_ptr() != b.data_ptr()
    assert a.data_ptr() not in (x.data_ptr(), y.data_ptr())


def test_no_grad_and_inference_mode():
    x = torch.rand(8, requires_grad=True, device="cpu")
    y = torch.rand(8, device="cpu")
    with torch.no_grad():
        out = SAXPY(x, y, 2.0)
    assert not out.requires_grad and out.grad_fn is None
    with torch.inference_mode():
        xi, yi = torch.rand(8, device="cpu"), torch.rand(8, device="cpu")
        out = SAXPY(xi, yi, 2.0)
        assert out.is_inference()
        torch.testing.assert_close(out, 2 * xi + yi)
        acc = torch.zeros(2, device="cpu")
        assert ROWSUM(torch.ones(2, 3, device="cpu"), acc) is acc
        torch.testing.assert_close(acc, torch.full((2,), 3.0, device="cpu"))


# ---- bad input ------------------------------------------------------------------------
def test_float64_tensor_for_float32_parameter():
    with pytest.raises(
        TypeError, match=r"op 'tt_ops::saxpy', parameter 'x': expected .*float32.* got .*float64.*never cast"
    ):
        SAXPY(torch.rand(4, dtype=torch.float64, device="cpu"), torch.rand(4, device="cpu"), 1.0)


def test_wrong_trailing_vec_dim():
    with pytest.raises(TypeError, match=r"op 'tt_ops::vnorm', parameter 'v': .*trailing dims \(4,\), expected \(3,\)"):
        VNORM(torch.rand(5, 4, device="cpu"))


def test_wrong_ndim_and_wrong_argument_count_and_non_tensor():
    with pytest.raises(TypeError, match=r"parameter 'x': expected a 1-d array of float32"):
        SAXPY(torch.rand(2, 2, device="cpu"), torch.rand(2, 2, device="cpu"), 1.0)
    with pytest.raises(TypeError, match=r"op 'tt_ops::saxpy' takes 3 argument\(s\) \['x', 'y', 'a'\]"):
        SAXPY(torch.rand(2, device="cpu"), torch.rand(2, device="cpu"))
    with pytest.raises(TypeError, match=r"parameter 'y': expected a 1-d array of float32 \(a tensor\), got list"):
        SAXPY(torch.rand(2, device="cpu"), [1.0, 2.0], 1.0)


def test_tensors_on_two_devices():
    # the meta device stands in for a second device on a CPU-only machine (CUDA below)
    with pytest.raises(ValueError, match=r"op 'tt_ops::saxpy': parameter 'x' is on cpu but parameter 'y' is on meta"):
        SAXPY(torch.rand(4, device="cpu"), torch.empty(4, device="meta"), 1.0)


@pytest.mark.cuda
def test_tensors_on_cpu_and_cuda():
    require_cuda("torch")
    with pytest.raises(ValueError, match=r"parameter 'x' is on cpu but parameter 'y' is on cuda:0"):
        SAXPY(torch.rand(4, device="cpu"), torch.rand(4, device="cuda"), 1.0)


def test_meta_tensors_give_shapes_without_running():
    out = SAXPY(torch.empty(7, device="meta"), torch.empty(7, device="meta"), 1.0)
    assert out.device.type == "meta" and out.shape == (7,)


def test_non_contiguous_vec_components_are_refused():
    v = torch.rand(3, 6, device="cpu").t()  # shape (6, 3), components 6 elements apart
    with pytest.raises(
        ValueError,
        match=r"op 'tt_ops::vnorm', parameter 'v': the vec/mat components of each element must be contiguous",
    ):
        VNORM(v)


def test_unsupported_tensor_dtype_names_the_parameter():
    with pytest.raises(TypeError, match=r"op 'tt_ops::saxpy', parameter 'x': .*dtype torch.complex64"):
        SAXPY(torch.rand(4, dtype=torch.complex64, device="cpu"), torch.rand(4, device="cpu"), 1.0)
    # bfloat16 has a Warp type: refused as a dtype mismatch (tests/test_bfloat16.py), never cast
    with pytest.raises(TypeError, match=r"op 'tt_ops::saxpy', parameter 'x': .*dtype bfloat16; arrays are never cast"):
        SAXPY(torch.rand(4, dtype=torch.bfloat16, device="cpu"), torch.rand(4, device="cpu"), 1.0)


def test_unexpected_keyword():
    with pytest.raises(TypeError, match=r"unexpected keyword argument\(s\) \['stream'\]"):
        SAXPY(torch.rand(4, device="cpu"), torch.rand(4, device="cpu"), 1.0, stream=None)


# ---- CUDA -------------------------------------------------------------------------------
@pytest.mark.cuda
def test_cuda_launches_on_torchs_current_stream():
    require_cuda("torch")
    n = 1 << 20
    x = torch.rand(n, device="cuda")
    y = torch.rand(n, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())  # x and y were made on the default stream
    with torch.cuda.stream(s):
        # slow work queued on s before the op: the op must run after it, on s (on any other
        # stream it would read x before the fill)
        torch_spin_fill(x, 3.0)
        out = SAXPY(x, y, 1.0)
        done = torch.cuda.Event()
        done.record(s)
        assert atorch._current_stream(x.device).cuda_stream == s.cuda_stream
    done.synchronize()
    torch.testing.assert_close(out, 3.0 + y)
    with torch.cuda.stream(s):
        acc = torch.zeros(4, device="cuda")
        res = ROWSUM(torch.ones(4, 8, device="cuda"), acc)
    torch.cuda.current_stream().wait_stream(s)
    assert res is acc
    torch.testing.assert_close(acc.cpu(), torch.full((4,), 8.0, device="cpu"))


# ---- an op dropped right after its call -----------------------------------------------------------
@wp.kernel
def _square_dropped(a: wp.array(dtype=float), out: wp.array(dtype=float)):
    out[wp.tid()] = a[wp.tid()] * a[wp.tid()]


@wp.kernel
def _cube_other(a: wp.array(dtype=float), out: wp.array(dtype=float)):
    out[wp.tid()] = a[wp.tid()] * a[wp.tid()] * a[wp.tid()]


@pytest.mark.parametrize("path", ["eager", "eager_remembered", "operator"])
def test_op_dropped_before_its_backward_still_differentiates(path):
    """``interop.op(k)(x).sum().backward()``: a dropped anonymous op's operators are unregistered when
    the next op registers (tests/test_bounds.py), but an autograd graph still alive keeps its op."""
    import gc

    x = torch.arange(4.0, requires_grad=True, device="cpu")
    op = interop.op(_square_dropped)
    if path == "eager_remembered":
        op(x)
    ns, name = op.name.split("::")
    y = getattr(getattr(torch.ops, ns), name)(x) if path == "operator" else op(x)
    del op
    gc.collect()
    interop.op(_cube_other)(x)  # registers: releases dropped ops
    gc.collect()
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * np.arange(4.0))
