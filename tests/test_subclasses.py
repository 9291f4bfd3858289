"""Array subclasses defined in user code: a ``torch.Tensor``, ``np.ndarray`` or ``paddle.Tensor``
subclass belongs to its base's framework (found through its MRO, never by importing a framework).

NumPy subclasses (``np.matrix`` too: a 2-d array) work as their base, outputs are plain
``np.ndarray``; torch subclasses go through the registered operator (so ``__torch_function__``
sees ``torch.ops.<namespace>.<name>``), with gradients.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
from catalogue import affine2d_op, case, to_np

from interop._frameworks import framework_of

SCALAR = case("scalar")
IN_OUT = case("in_out")


class MyArray(np.ndarray):
    """A NumPy subclass as users write them (extra attributes, no change to memory)."""


@functools.cache
def _torch_subclasses():
    """Two torch.Tensor subclasses, made once (torch's default __torch_function__ refuses to mix
    two unrelated subclasses in one call, as it does for torch.add)."""
    torch = pytest.importorskip("torch")

    class MyTensor(torch.Tensor):
        pass

    class Logging(torch.Tensor):
        seen: list = []

        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            cls.seen.append(func)
            return super().__torch_function__(func, types, args, kwargs or {})

    return MyTensor, Logging


@functools.cache
def _paddle_subclass():
    paddle = pytest.importorskip("paddle")

    class MyPaddle(paddle.Tensor):
        pass

    return MyPaddle


def _make(fw: str, a: np.ndarray, grad: bool = False):
    if fw == "numpy":
        return a.copy().view(MyArray)
    if fw == "torch":
        import torch

        MyTensor, _ = _torch_subclasses()
        return torch.tensor(a, device="cpu").as_subclass(MyTensor).requires_grad_(grad)
    t = _paddle_subclass()(a.copy())
    t.stop_gradient = not grad
    return t


def _base(fw: str, a: np.ndarray, grad: bool = False):
    if fw == "numpy":
        return a.copy()
    if fw == "torch":
        import torch

        return torch.tensor(a, requires_grad=grad, device="cpu")
    import paddle

    t = paddle.to_tensor(a.copy(), place=paddle.CPUPlace())
    t.stop_gradient = not grad
    return t


@pytest.mark.parametrize("fw", ["numpy", "torch", "paddle"])
def test_subclass_is_its_base_frameworks_array(fw):
    if fw != "numpy":
        pytest.importorskip(fw)
    x, y, s = SCALAR.make(np.random.default_rng(0), np.float32)
    sx = _make(fw, x, grad=fw != "numpy")
    assert type(sx).__module__ == __name__ and framework_of(sx) == fw
    got = SCALAR.op(sx, _make(fw, y), s)
    bx = _base(fw, x, grad=fw != "numpy")
    want = SCALAR.op(bx, _base(fw, y), s)
    np.testing.assert_array_equal(to_np(got), to_np(want))
    np.testing.assert_allclose(to_np(got), SCALAR.reference(x, y, s)[0], rtol=1e-6)
    if fw == "numpy":
        assert type(got) is np.ndarray  # outputs are the base type
        return
    got.sum().backward()
    want.sum().backward()
    np.testing.assert_array_equal(to_np(sx.grad), to_np(bx.grad))


def test_numpy_subclass_in_out_is_updated_in_place_without_a_copy():
    x, acc = IN_OUT.make(np.random.default_rng(1), np.float32)
    sacc = acc.copy().view(MyArray)
    ptr = sacc.__array_interface__["data"][0]
    got_acc, sq = IN_OUT.op(x.copy().view(MyArray), sacc)
    assert got_acc is sacc and sacc.__array_interface__["data"][0] == ptr
    want_acc, want_sq = IN_OUT.reference(x, acc)
    np.testing.assert_allclose(sacc, want_acc, rtol=1e-5)
    np.testing.assert_allclose(sq, want_sq, rtol=1e-6)


@pytest.mark.filterwarnings("ignore:the matrix subclass:PendingDeprecationWarning")
def test_numpy_matrix_is_a_2d_array():
    """np.matrix (always 2-d, ``*`` is the matrix product) is read as the 2-d array it holds."""
    a = np.random.default_rng(2).random((3, 4))
    b = np.random.default_rng(3).random((3, 4))
    got = affine2d_op(np.asmatrix(a), np.asmatrix(b), 2.0)
    assert type(got) is np.ndarray
    np.testing.assert_allclose(got, a * 2.0 + b * b, rtol=1e-12)


def test_torch_subclass_goes_through_the_registered_operator():
    """Its __torch_function__ sees the op's operator (nothing bypasses the subclass's override), the
    eager fast path is not taken, and the gradient flows."""
    torch = pytest.importorskip("torch")
    import adapters.torch as at

    _, Logging = _torch_subclasses()
    x, y, s = SCALAR.make(np.random.default_rng(4), np.float32)
    b = at._binding(SCALAR.op)
    before = b.eager_calls
    Logging.seen.clear()
    lx = torch.tensor(x, device="cpu").as_subclass(Logging).requires_grad_(True)
    out = SCALAR.op(lx, torch.tensor(y, device="cpu").as_subclass(Logging), s)
    assert b.eager_calls == before
    operator = getattr(getattr(torch.ops, b.ns), b.base).default  # torch.ops.<namespace>.<name>
    assert operator in Logging.seen
    out.sum().backward()
    np.testing.assert_allclose(to_np(lx.grad), s * np.cos(x), rtol=1e-5)
