"""Threads: first use, describing ops and Warp module reloads racing, in a subprocess each.

A crash (the worst bug) kills only the child; the test then fails with the signal.
"""

from __future__ import annotations

import re
from collections import Counter

import pytest
from _subprocess import run_script

pytestmark = pytest.mark.timeout(900)


def test_generic_op_module_reload_races_replayed_launches():
    """Issue 9: 3 threads calling with new lengths, 1 with new dtypes (Warp rebuilds the module): no
    crash, every result right, and Warp loads each module build once (duplicate loads of one hash
    under one name were the segfault: dropping one copy unloaded the code the other's records call)."""
    p = run_script(
        """
        import threading, typing
        import numpy as np, warp as wp, interop

        @wp.kernel
        def gcopy(a: wp.array(dtype=typing.Any), out: wp.array(dtype=typing.Any)):
            out[wp.tid()] = a[wp.tid()]

        op = interop.op(gcopy, name="threads::gcopy")
        op(np.ones(3, np.float32))
        errors = []

        def user():
            for n in range(1, 400):
                r = op(np.arange(n, dtype=np.float32))
                if r.shape != (n,) or not np.array_equal(r, np.arange(n, dtype=np.float32)):
                    errors.append(("len", n))

        def other():
            for dt in (np.int32, np.float16, np.uint8, np.int64, np.float64):
                x = np.arange(5).astype(dt)
                r = op(x)
                if r.dtype != dt or not np.array_equal(r, x):
                    errors.append(("dtype", dt))

        ts = [threading.Thread(target=user) for _ in range(3)] + [threading.Thread(target=other)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert not errors, errors
        print("OK")
        """
    )
    assert "OK" in p.stdout
    loads = Counter(re.findall(r"Module (\S+ [0-9a-f]+) load on device '(\S+)'", p.stdout))
    assert loads and max(loads.values()) == 1, loads


FIRST_USE = """
import sys, threading
import numpy as np, warp as wp
import interop, torch, jax, jax.numpy as jnp, paddle
from catalogue import case

N_THREADS = 8
saxpy = case("scalar").op  # out = sin(x) * s + y * y
ref = case("scalar").reference


def make_scaled(k):
    # a new op per thread (first registration with torch/paddle/jax racing the other threads)
    scale = wp.constant(float(k + 1))

    @wp.kernel(module="unique")
    def scaled(a: wp.array(dtype=float), out: wp.array(dtype=float)):
        out[wp.tid()] = a[wp.tid()] * scale

    return interop.op(scaled, name=f"threads::scaled{k}")


rng = np.random.default_rng(0)
x = rng.standard_normal(33).astype(np.float32)
y = rng.standard_normal(33).astype(np.float32)
expect = ref(x, y, 2.0)[0]
errors = []
barrier = threading.Barrier(N_THREADS)


def check(tag, got, want, tol=1e-5):
    got = np.asarray(got)
    if got.shape != want.shape or not np.allclose(got, want, rtol=tol, atol=tol):
        errors.append((tag, got, want))


def worker(k):
    try:
        barrier.wait()
        check("numpy", saxpy(x, y, 2.0), expect)
        xt = torch.tensor(x, requires_grad=True)
        out = saxpy(xt, torch.tensor(y), 2.0)
        out.sum().backward()
        check("torch", out.detach().numpy(), expect)
        check("torch grad", xt.grad.numpy(), np.cos(x) * 2.0)
        check("jax eager", saxpy(jnp.asarray(x), jnp.asarray(y), 2.0), expect)
        f = jax.jit(lambda a, b: saxpy(a, b, 2.0))
        check("jax jit", f(jnp.asarray(x), jnp.asarray(y)), expect)
        g = jax.jit(jax.grad(lambda a, b: saxpy(a, b, 2.0).sum()))
        check("jax grad", g(jnp.asarray(x), jnp.asarray(y)), np.cos(x) * 2.0)
        check("paddle", saxpy(paddle.to_tensor(x), paddle.to_tensor(y), 2.0).numpy(), expect)
        op = make_scaled(k % 4)
        check("new numpy", op(x), x * (k % 4 + 1))
        xt = torch.tensor(x, requires_grad=True)
        op(xt).sum().backward()
        check("new torch grad", xt.grad.numpy(), np.full_like(x, k % 4 + 1))
        check("new jax jit", jax.jit(op)(jnp.asarray(x)), x * (k % 4 + 1))
        check("new paddle", op(paddle.to_tensor(x)).numpy(), x * (k % 4 + 1))
    except BaseException as e:  # reported by the main thread
        errors.append(("raised", k, repr(e)))


ts = [threading.Thread(target=worker, args=(k,)) for k in range(N_THREADS)]
for t in ts:
    t.start()
for t in ts:
    t.join()
assert not errors, errors[:5]
print("OK")
"""


@pytest.mark.parametrize("run", range(3))
def test_first_use_from_eight_threads(run):
    """8 threads start at once, before Warp is initialised or any adapter imported: NumPy, torch
    (forward+backward), JAX (eager, jit, grad), Paddle, and a new op described in each thread."""
    p = run_script(FIRST_USE)
    assert "OK" in p.stdout
    # Warp initialised once: one banner, a kernel-cache path not built several times over
    assert p.stdout.count("Warp 1.") <= 1, p.stdout
    assert not re.search(r"(\d+\.\d+\.\d+)/\1", p.stdout), p.stdout
