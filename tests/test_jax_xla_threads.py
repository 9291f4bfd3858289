"""An op inside a larger XLA program on the CPU (issue 49): XLA's CPU client runs an executable
whose cost analysis counts 1,000 flops or more on a worker thread of its own, so the op's handler
runs there, a thread Python did not start. A handler there used to get a Python thread state for
the call and lose it on return (20-25 us a call, and every ``threading.local`` of the handlers
built anew); now the first call keeps it (``adapters/jax/ffi.py``). These tests check the
mechanism without timing: a ``threading.local`` set by one call on a thread is seen by the next
call on that thread. Values and gradients are compared with the same op run on the caller's
thread (an op alone) and with the kernel's analytic derivative."""

from __future__ import annotations

import threading
from collections import Counter

import numpy as np
import pytest
import warp as wp

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from _devices import jax_device  # noqa: E402
from catalogue import function_op_fn, scalar_kernel  # noqa: E402

import adapters.jax as interop_jax  # noqa: E402
import interop  # noqa: E402
from adapters.jax import ffi as _jax_ffi  # noqa: E402

#: enough elements that a jnp operation after the op costs XLA's cost analysis 1,000 flops or more
N = 1024


class _Spy:
    """Wraps the forward handler of ``op``: each call records (thread, calls this thread's Python
    state has seen, as counted in a ``threading.local``)."""

    def __init__(self, op):
        self.slot = _jax_ffi._slots[interop_jax.targets(op)[0]][0]
        self.calls: list[tuple[int, int]] = []
        self.local = threading.local()

    def __enter__(self):
        self.original = self.slot.ref
        handler = self.original()

        def run(p, platform):
            self.local.seen = getattr(self.local, "seen", 0) + 1
            self.calls.append((threading.get_ident(), self.local.seen))
            return handler(p, platform)

        self.slot.ref = lambda: run
        return self

    def __exit__(self, *exc):
        self.slot.ref = self.original

    def assert_kept(self) -> None:
        """Every thread's state saw each call made on it, and some thread ran several calls."""
        per_thread = Counter(t for t, _ in self.calls)
        last = {t: seen for t, seen in self.calls}
        assert last == dict(per_thread), f"a thread's Python state was lost between calls: {self.calls}"
        assert max(per_thread.values()) >= 2


def _inputs():
    rng = np.random.default_rng(7)
    x, y = rng.random(N, dtype=np.float32), rng.random(N, dtype=np.float32)
    dev = jax_device("cpu")
    return x, y, jax.device_put(x, dev), jax.device_put(y, dev)


def test_a_handler_on_xla_threads_keeps_its_thread_state():
    op = interop.op(scalar_kernel)
    x, y, jx, jy = _inputs()
    alone = jax.jit(lambda x, y: op(x, y, 2.0))
    mixed = jax.jit(lambda x, y: jnp.sum(op(x, y, 2.0)))
    main = threading.get_ident()
    with _Spy(op) as spy:
        ref = alone(jx, jy)
        assert spy.calls[0][0] == main  # an op alone: a custom call counts no flops, XLA runs it inline
        for _ in range(20):
            total = mixed(jx, jy).block_until_ready()
    off = [t for t, _ in spy.calls[1:] if t != main]
    assert off, "XLA ran jnp.sum(op(...)) on the caller's thread: this test no longer sees its worker threads"
    spy.assert_kept()
    expected = np.sin(x) * 2.0 + y * y
    np.testing.assert_allclose(np.asarray(ref), expected, rtol=1e-6)
    np.testing.assert_allclose(float(total), float(np.sum(np.asarray(ref), dtype=np.float64)), rtol=1e-5)


def test_gradient_and_python_function_op_on_xla_threads():
    op = interop.op(function_op_fn, name="xla_threads::function_op")
    x, y, jx, jy = _inputs()
    main = threading.get_ident()
    alone = np.asarray(jax.jit(op)(jx, jy))  # on the caller's thread
    vg = jax.jit(jax.value_and_grad(lambda a, b: jnp.sum(op(a, b) * 2.0), argnums=(0, 1)))
    with _Spy(op) as spy:
        for _ in range(10):
            total, (gx, gy) = jax.block_until_ready(vg(jx, jy))
    assert any(t != main for t, _ in spy.calls)
    spy.assert_kept()
    np.testing.assert_allclose(float(total), 2.0 * float(np.sum(alone, dtype=np.float64)), rtol=1e-5)
    # function_op_fn: out = 3 a^2 + b (square, then axpy with s = 3)
    np.testing.assert_allclose(np.asarray(gx), 2.0 * 6.0 * x, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(gy), np.full(N, 2.0, np.float32), rtol=1e-6)


def _raises(a: wp.array(dtype=float), out: wp.array(dtype=float)):
    raise ValueError("raised on an XLA thread")


def test_an_error_on_an_xla_thread_reaches_the_caller():
    op = interop.op(_raises, name="xla_threads::raises")
    _, _, jx, _ = _inputs()
    f = jax.jit(lambda a: jnp.sum(op(a) * 2.0))
    for _ in range(2):  # the second time on a thread whose state a callback has kept
        with pytest.raises(Exception, match="ValueError: raised on an XLA thread"):
            jax.block_until_ready(f(jx))
