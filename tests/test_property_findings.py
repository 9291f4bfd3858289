"""Regression tests for bugs the property suite (tests/test_properties_*.py) found, each reduced
to its smallest failing call."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
from catalogue import case, to_fw, to_np

import interop

TORCH = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch not installed")


@pytest.mark.parametrize("fw", [f for f in ("torch", "paddle") if importlib.util.find_spec(f)])
@pytest.mark.parametrize("how", ["strided", "broadcast"])
def test_function_op_gradient_with_a_strided_input_that_needs_none(fw, how):
    # a Python-function op; a requires a gradient, b (strided or broadcast) does not. The tape's
    # throwaway gradient buffer for b was packed while b is not: Warp refused it ("The given
    # gradient array is incompatible: expected strides (8,), got (4,)") at backward
    op = case("function").op  # out = 3 a^2 + b
    a_np = np.arange(4, dtype=np.float32)
    a = to_fw(fw, a_np, requires_grad=True)
    b_base = to_fw(fw, np.ones(8, np.float32))
    b = b_base[0:8:2] if how == "strided" else b_base[:1].expand([4])
    out = op(a, b)
    np.testing.assert_allclose(to_np(out), 3 * a_np**2 + 1)
    out.sum().backward()
    np.testing.assert_allclose(to_np(a.grad), 6 * a_np)


@TORCH
def test_torch_vmap_in_out_whose_batch_elements_share_memory_is_refused():
    # the batch elements of acc are one row (expanded along the batched dimension): the loop over
    # the batch accumulated into it three times and returned [3, 3, 3] for each element, silently
    import torch

    op = case("in_out_first").op  # acc += x^2, out = 3 x
    acc0 = torch.zeros(1, 3, device="cpu")
    with pytest.raises(
        interop.ArgumentError, match=r"op 'inout_first_kernel', parameter 'acc': torch.vmap .* share memory"
    ):
        torch.func.vmap(op)(acc0.expand(3, 3), torch.ones(3, 3, device="cpu"))
    assert acc0.tolist() == [[0.0, 0.0, 0.0]]
    # batch elements of their own are updated, each with its own x
    acc = torch.zeros(3, 3, device="cpu")
    torch.func.vmap(op)(acc, torch.arange(9.0, device="cpu").reshape(3, 3))
    assert acc.tolist() == (torch.arange(9.0, device="cpu").reshape(3, 3) ** 2).tolist()


@pytest.mark.skipif(importlib.util.find_spec("paddle") is None, reason="paddle not installed")
def test_paddle_in_out_requiring_grad_with_no_input_requiring_grad():
    # the in-out tensor is a non-leaf that requires a gradient, no input does: the PyLayer makes no
    # node and registering the second-backward guard on its output crashed the process (SIGSEGV in
    # egr::GradNodeBase::RegisterGradientHook). In a child process: a crash fails the test.
    from _subprocess import run_script

    p = run_script(
        """
        import numpy as np, paddle
        from catalogue import case
        op = case("in_out_first").op  # acc += x^2, out = 3 x
        for view in (lambda t: t[0:3], lambda t: t[0:6:2], lambda t: t[0:3].clone()):
            leaf = paddle.to_tensor(np.arange(6, dtype=np.float32), place=paddle.CPUPlace())
            leaf.stop_gradient = False
            acc = view(leaf.clone())
            acc2, out = op(acc, paddle.full([3], 2.0))
            assert acc2 is acc
            (acc2.sum() * 2 + out.sum()).backward()
            print(acc.numpy().tolist(), leaf.grad.numpy().tolist())
        """
    )
    lines = p.stdout.strip().splitlines()[-3:]
    assert lines == [
        "[4.0, 5.0, 6.0] [2.0, 2.0, 2.0, 0.0, 0.0, 0.0]",
        "[4.0, 6.0, 8.0] [2.0, 0.0, 2.0, 0.0, 2.0, 0.0]",
        "[4.0, 5.0, 6.0] [2.0, 2.0, 2.0, 0.0, 0.0, 0.0]",
    ], lines
