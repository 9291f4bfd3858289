"""The conformance catalogue through PyTorch (values and gradients vs NumPy / finite differences),
and torch.library.opcheck on every registered forward and backward operator."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import catalogue  # noqa: E402

import adapters.torch as atorch  # noqa: E402
from interop import UnsupportedError  # noqa: E402


def _params(dtypes=True):
    out = []
    for c in catalogue.CASES:
        for dt in c.dtypes if dtypes else c.dtypes[:1]:
            out.append(pytest.param(c.id, dt, id=f"{c.id}-{np.dtype(dt).name}"))
    return out


def _torch_args(args, grad: bool, case, device: str = "cpu"):
    return catalogue.to_torch_args(case, args, grad, device)


@pytest.mark.parametrize("case_id, dtype", _params())
def test_values_and_gradients(case_id, dtype, device):
    from _cuda import require_cuda

    require_cuda("torch", device)
    case = catalogue.case(case_id)
    rng = np.random.default_rng(3)
    args = case.make(rng, dtype)
    ref = catalogue.reference_of(case, args)
    targs = _torch_args(args, case.differentiable, case, device)
    out = case.op(*targs, **case.call_kwargs)
    out = out if isinstance(out, tuple) else (out,)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-10)
    if catalogue.is_bf16(dtype):
        tol = catalogue.BF16_VALUE_TOL
    for o, r in zip(out, ref):
        assert isinstance(o, torch.Tensor) and o.dtype == targs[0].dtype and o.device == targs[0].device
        np.testing.assert_allclose(o.detach().double().cpu().numpy(), r, **tol)
    for k in case.in_out:  # updated in place, returned as the same object
        assert any(o is targs[k] for o in out)
    if not case.differentiable:
        return
    weights = catalogue.loss_weights(case, ref)
    loss = sum((torch.from_numpy(w).to(o.dtype).to(o.device) * o).sum() for w, o in zip(weights, out))
    leaves = [(k, t) for k, t in enumerate(targs) if isinstance(t, torch.Tensor) and t.requires_grad]
    grads = torch.autograd.grad(loss, [t for _, t in leaves])
    fd = catalogue.fd_grad(case, args, weights)
    gtol = dict(rtol=2e-3, atol=2e-3) if dtype == np.float32 else dict(rtol=1e-6, atol=1e-6)
    if catalogue.is_bf16(dtype):
        gtol = catalogue.BF16_GRAD_TOL
    for (k, t), g in zip(leaves, grads):
        assert g.dtype == t.dtype and g.device == t.device
        np.testing.assert_allclose(
            g.double().cpu().numpy(), fd[k], **gtol, err_msg=f"{case_id}: gradient of argument {k}"
        )


@pytest.mark.parametrize("case_id, dtype", _params(dtypes=False))
@pytest.mark.parametrize("requires_grad", [False, True])
def test_opcheck_forward_and_backward_operators(case_id, dtype, requires_grad):
    case = catalogue.case(case_id)
    rng = np.random.default_rng(5)
    args = case.make(rng, dtype)
    targs = _torch_args(args, requires_grad and case.differentiable, case)
    ops = atorch.operators(case.op)
    torch.library.opcheck(ops["functional"], tuple(targs))
    if "mutable" in ops:
        torch.library.opcheck(
            ops["mutable"], tuple(t.detach().clone() if isinstance(t, torch.Tensor) else t for t in targs)
        )
    if "backward" not in ops:
        return
    b = atorch._binding(case.op)
    with torch.no_grad():
        results = ops["functional"](*targs)
    results = results if isinstance(results, tuple) else (results,)
    grads = [torch.rand_like(r) for r in results]
    needs = [
        isinstance(t, torch.Tensor) and t.dtype.is_floating_point and p.differentiable and p.role == "input"
        for t, p in zip(targs, b.call_params)
    ]
    dims = [None] * (1 + len(b.outputs))
    call = [t.detach() if isinstance(t, torch.Tensor) else t for t in targs]
    if requires_grad:
        call = [
            t.requires_grad_(True) if isinstance(t, torch.Tensor) and t.dtype.is_floating_point else t for t in call
        ]
    bargs = (*call, *results, *grads, *dims, needs)
    if not requires_grad:
        torch.library.opcheck(ops["backward"], bargs)
        return
    # the backward of Warp's generated adjoint is differentiated through the op's tangent kernel
    # (second order); an op without one (the generator refuses it: a tile kernel, a Python
    # function) meets the error naming the op in the check that differentiates through it
    try:
        case.op.tangent()
        has_tangent = True
    except UnsupportedError:
        has_tangent = False
    if has_tangent:
        torch.library.opcheck(ops["backward"], bargs)
        return
    torch.library.opcheck(
        ops["backward"], bargs, test_utils=("test_schema", "test_autograd_registration", "test_faketensor")
    )
    with pytest.raises(Exception, match=r"second derivatives are not available"):
        torch.library.opcheck(ops["backward"], bargs, test_utils="test_aot_dispatch_dynamic")


ISSUE8_CASES = ["subscript", "overload_float32", "outputs_middle", "in_out_first", "tile", "tile_block_dim_per_call"]


@pytest.mark.parametrize("case_id", ISSUE8_CASES)
def test_compiled_equals_eager_with_gradients(case_id):
    """torch.compile(fullgraph=True) of the kernels as others write them: values and gradients as eager."""
    dynamo_testing = pytest.importorskip("torch._dynamo.testing")
    case = catalogue.case(case_id)
    args = case.make(np.random.default_rng(11), np.float32)

    def run(*targs):
        out = case.op(*targs, **case.call_kwargs)
        out = out if isinstance(out, tuple) else (out,)
        return sum((o * (j + 1.0)).sum() for j, o in enumerate(out))

    # the leaves are taken before the call: an in-out tensor updated in place from values that require
    # grad requires grad afterwards, and under torch.compile that new version is not part of the
    # loss's graph (PyTorch's own rule for in-place updates of compiled-graph inputs)
    eager_args = _torch_args(args, True, case)
    leaves = [t for t in eager_args if isinstance(t, torch.Tensor) and t.requires_grad]
    ref = run(*eager_args)
    ref_grads = torch.autograd.grad(ref, leaves)
    torch._dynamo.reset()
    cnt = dynamo_testing.CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(run, backend=cnt, fullgraph=True)
    cargs = _torch_args(args, True, case)
    cleaves = [t for t in cargs if isinstance(t, torch.Tensor) and t.requires_grad]
    got = compiled(*cargs)
    got_grads = torch.autograd.grad(got, cleaves)
    assert len(got_grads) == len(ref_grads)
    torch.testing.assert_close(got, ref)
    for k in case.in_out:  # the caller's in-out tensor was updated in place, as in eager
        torch.testing.assert_close(cargs[k], eager_args[k])
    for g, r in zip(got_grads, ref_grads):
        torch.testing.assert_close(g, r)
    assert cnt.frame_count == 1
    torch._dynamo.reset()


def test_tile_gradient_of_a_strided_input_raises():
    """Warp's tile adjoints write through the array's own grad pointer with the array's strides: a
    strided input whose gradient buffer is laid out otherwise is refused, never given a wrong gradient."""
    case = catalogue.case("tile")
    big = torch.rand(4, 2 * catalogue.TILE, requires_grad=True, device="cpu")
    x = big[:, ::2]
    out = case.op(x)
    torch.testing.assert_close(out, (x * x).sum(1))  # the forward reads strided arrays
    with pytest.raises(
        ValueError,
        match=r"op 'tile_kernel', parameter 'x': the kernel's adjoint \(tiles, or a struct value built from "
        r"the array\) needs the array and its gradient laid out alike, got strides .*; pass a contiguous array",
    ):
        out.sum().backward()
    xc = x.detach().contiguous().requires_grad_(True)
    case.op(xc).sum().backward()
    torch.testing.assert_close(xc.grad, 2 * xc.detach())
