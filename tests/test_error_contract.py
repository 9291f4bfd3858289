"""One error contract on every device (docs/contract.md, "Devices"; issue 31 item 5, issue 33
rows a and b): an exception raised inside a Python-function op reaches the caller with its original
type and message, at the call when called eagerly (JAX's asynchronous dispatch on a GPU included),
after that signature once succeeded too, and from the backward of an eager ``jax.grad``; a scalar
handed to a Python-function op as a device value (a Python number JAX made an operand of, a traced
value) is read, on the CPU and on CUDA alike. Each on every device of ``INTEROP_TEST_DEVICES``.
"""

from __future__ import annotations

import numpy as np
import pytest
import warp as wp
from _cuda import require_cuda

import interop


class Refused(RuntimeError):
    """The user's own exception type: it must come back as itself."""


STATE = {"raise_on": None, "calls": 0}


@wp.kernel
def _scale_k(a: wp.array(dtype=float), s: float, out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = s * a[i] * a[i]


def moody_scale(a: wp.array(dtype=float), s: float, out: wp.array(dtype=float)):
    """Raises Refused on its ``raise_on``-th call from now (counting every run: the backward re-runs it)."""
    STATE["calls"] += 1
    if STATE["raise_on"] is not None and STATE["calls"] >= STATE["raise_on"]:
        raise Refused(f"refused on call {STATE['calls']}")
    wp.launch(_scale_k, dim=a.shape, inputs=[a, s], outputs=[out], device=a.device)


OP = interop.op(moody_scale)


@pytest.fixture(autouse=True)
def _reset():
    STATE.update(raise_on=None, calls=0)
    yield
    STATE.update(raise_on=None, calls=0)


def _raise_from(n: int) -> None:
    STATE.update(raise_on=n, calls=0)


def _jax(device: str):
    jax = pytest.importorskip("jax")
    require_cuda("jax", device)
    dev = jax.devices("cpu" if device == "cpu" else "gpu")[0]
    x = jax.device_put(np.arange(1.0, 5.0, dtype=np.float32), dev)
    return jax, x


@pytest.mark.parametrize("first", ["first call", "after a success"])
def test_jax_eager_exception_has_its_type_at_the_call(device, first):
    jax, x = _jax(device)
    if first == "after a success":
        np.testing.assert_allclose(np.asarray(OP(x, 2.0)), 2.0 * np.arange(1.0, 5.0) ** 2)
    _raise_from(1)
    with pytest.raises(Refused, match=r"refused on call"):
        OP(x, 2.0)  # raised here, not when a result is read
    STATE.update(raise_on=None)
    np.testing.assert_allclose(np.asarray(OP(x, 3.0)), 3.0 * np.arange(1.0, 5.0) ** 2)


def test_jax_exception_under_jit_names_op_and_message(device):
    jax, x = _jax(device)
    f = jax.jit(lambda a: OP(a, 2.0) * 2.0)
    np.testing.assert_allclose(np.asarray(f(x)), 4.0 * np.arange(1.0, 5.0) ** 2)
    _raise_from(1)
    with pytest.raises(Exception) as info:
        jax.block_until_ready(f(x))
    text = str(info.value)
    assert "moody_scale" in text and "Refused" in text and "refused on call" in text, text


def test_jax_eager_grad_exception_in_the_backward_has_its_type(device, monkeypatch):
    """The backward (a wp.Tape over the function, which runs it again) raises: an eager jax.grad
    gets the op's exception, not JAX's report of it (issue 33 row b). (No forward tape is kept
    here, ``KEPT.limit = 0``: the backward replays the function, as it does where a kept tape was
    evicted or already used.)"""
    from interop._function_calls import KEPT

    monkeypatch.setattr(KEPT, "limit", 0)
    jax, x = _jax(device)
    g = jax.grad(lambda a: OP(a, 2.0).sum())
    np.testing.assert_allclose(np.asarray(g(x)), 4.0 * np.arange(1.0, 5.0), rtol=1e-6)
    _raise_from(2)  # the forward passes, the backward's run of the function raises
    with pytest.raises(Refused, match=r"refused on call 2"):
        jax.block_until_ready(g(x))


@pytest.mark.parametrize("how", ["eager", "jit traced scalar"])
def test_jax_function_op_scalar_as_device_value(device, how):
    """A Python-function op takes its scalars as host numbers: a device value is read back (one
    sync on CUDA), never refused on one device and taken on the other."""
    jax, x = _jax(device)
    if how == "eager":
        got = OP(x, 2.5)
    else:
        s = jax.device_put(np.float32(2.5), x.devices().pop())
        got = jax.jit(lambda a, s: OP(a, s))(x, s)
    np.testing.assert_allclose(np.asarray(got), 2.5 * np.arange(1.0, 5.0) ** 2, rtol=1e-6)


def test_torch_eager_exception_has_its_type(device):
    torch = pytest.importorskip("torch")
    require_cuda("torch", device)
    x = torch.arange(1.0, 5.0, device=device)
    torch.testing.assert_close(OP(x, 2.0), 2.0 * x * x)
    _raise_from(1)
    with pytest.raises(Refused, match=r"refused on call"):
        OP(x, 2.0)


def test_warp_eager_exception_has_its_type(device):
    x = wp.array(np.arange(1.0, 5.0, dtype=np.float32), dtype=float, device=device)
    _raise_from(1)
    with pytest.raises(Refused, match=r"refused on call"):
        OP(x, 2.0)
