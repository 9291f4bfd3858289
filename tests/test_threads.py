"""Threads: first use, describing ops and Warp module reloads racing, in a subprocess each.

A crash (the worst bug) kills only the child; the test then fails with the signal.
"""

from __future__ import annotations

import re
import sys
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
import interop, torch, jax, jax.numpy as jnp

try:  # optional: the GPU machine has no Paddle
    import paddle
except ImportError:
    paddle = None
from catalogue import case

N_THREADS = 8
saxpy = case("scalar").op  # out = sin(x) * s + y * y
ref = case("scalar").reference


def make_kernel(k):
    scale = wp.constant(float(k + 1))

    @wp.kernel(module="unique")
    def scaled(a: wp.array(dtype=float), out: wp.array(dtype=float)):
        out[wp.tid()] = a[wp.tid()] * scale

    return scaled


# The user's kernels are decorated here, in one thread: Warp parses a kernel's source when it is
# decorated, and on CPython 3.11 two threads parsing at once can break each other's parse
# (gh-106905), a race between the user's own decorations that no library can prevent.
KERNELS = [make_kernel(k) for k in range(4)]


def make_scaled(k):
    # a new op per thread (first registration with torch/paddle/jax racing the other threads)
    return interop.op(KERNELS[k], name=f"threads::scaled{k}")


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


def pd(a):
    return paddle.to_tensor(a, place=paddle.CPUPlace())


def worker(k):
    try:
        barrier.wait()
        cpu = jax.devices("cpu")[0]
        check("numpy", saxpy(x, y, 2.0), expect)
        xt = torch.tensor(x, requires_grad=True, device="cpu")
        out = saxpy(xt, torch.tensor(y, device="cpu"), 2.0)
        out.sum().backward()
        check("torch", out.detach().numpy(), expect)
        check("torch grad", xt.grad.numpy(), np.cos(x) * 2.0)
        xj, yj = jnp.asarray(x, device=cpu), jnp.asarray(y, device=cpu)
        check("jax eager", saxpy(xj, yj, 2.0), expect)
        f = jax.jit(lambda a, b: saxpy(a, b, 2.0))
        check("jax jit", f(xj, yj), expect)
        g = jax.jit(jax.grad(lambda a, b: saxpy(a, b, 2.0).sum()))
        check("jax grad", g(xj, yj), np.cos(x) * 2.0)
        if paddle is not None:
            check("paddle", saxpy(pd(x), pd(y), 2.0).numpy(), expect)
        op = make_scaled(k % 4)
        check("new numpy", op(x), x * (k % 4 + 1))
        xt = torch.tensor(x, requires_grad=True, device="cpu")
        op(xt).sum().backward()
        check("new torch grad", xt.grad.numpy(), np.full_like(x, k % 4 + 1))
        check("new jax jit", jax.jit(op)(xj), x * (k % 4 + 1))
        if paddle is not None:
            check("new paddle", op(pd(x)).numpy(), x * (k % 4 + 1))
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
    (forward+backward), JAX (eager, jit, grad), Paddle (where installed), and a new op described in
    each thread."""
    pytest.importorskip("torch")
    pytest.importorskip("jax")
    p = run_script(FIRST_USE)
    assert "OK" in p.stdout
    # Warp initialised once: one banner, a kernel-cache path not built several times over
    assert p.stdout.count("Warp 1.") <= 1, p.stdout
    assert not re.search(r"(\d+\.\d+\.\d+)/\1", p.stdout), p.stdout


def test_a_parse_broken_by_cpythons_ast_race_is_parsed_again():
    """On CPython 3.11 an ``ast.parse`` that starts while another is half-way breaks that one
    (``SystemError: AST constructor recursion depth mismatch``, gh-106905; CI hit it once with 8
    threads). The package makes Warp parse a kernel's source when it builds the variant that takes
    a scalar by reference; a garbage-collector callback here parses once in the middle of exactly
    that parse, as another thread would, and the call must still give the right value and gradient."""
    p = run_script(
        """
        import ast, gc, sys
        import numpy as np, torch, warp as wp
        import interop
        from catalogue import scalar_kernel

        state = {"armed": False, "fired": []}

        def interrupt(phase, info):
            # parse once in the middle of Warp's own ast.parse (its frame is the innermost one)
            if not state["armed"] or phase != "start":
                return
            f = sys._getframe(1)
            if f.f_code.co_name == "parse" and f.f_code.co_filename.endswith("ast.py"):
                state["armed"] = False
                caller = f.f_back.f_code
                state["fired"].append(caller.co_filename.rsplit("/", 2)[-2:])
                ast.parse("x = 1")

        gc.callbacks.append(interrupt)
        gc.set_threshold(1)  # a collection on every allocation, so one lands inside the parse

        # the race is real on this Python: a plain parse broken this way raises
        state["armed"] = True
        try:
            ast.parse("\\n".join(f"y{i} = [{i}, ({i},)]" for i in range(200)))
            broken = False
        except SystemError as e:
            broken = "recursion depth mismatch" in str(e)
        assert state["fired"] and not state["armed"]
        print("BROKEN", broken, sys.version_info[:2])

        op = interop.op(scalar_kernel, name="threads::astrace")
        x = torch.linspace(-1, 1, 9, requires_grad=True, device="cpu")
        y = torch.linspace(0, 2, 9, device="cpu")
        s = torch.tensor(1.5, requires_grad=True, device="cpu")  # a tensor scalar: passed by reference
        state["armed"], state["fired"] = True, []
        out = op(x, y, s)
        out.sum().backward()
        assert state["fired"] and state["fired"][0][-1] == "codegen.py", state["fired"]  # Warp's parse was the one broken
        gc.set_threshold(700)
        torch.testing.assert_close(out, torch.sin(x) * 1.5 + y * y)
        torch.testing.assert_close(s.grad, torch.sin(x).sum())
        torch.testing.assert_close(x.grad, torch.cos(x) * 1.5)
        print("OK")
        """
    )
    assert "OK" in p.stdout
    if sys.version_info[:2] == (3, 11):
        assert "BROKEN True" in p.stdout, p.stdout
