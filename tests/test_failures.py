"""Failures and processes: the caller gets the original exception, naming the op; the next call works.

A kernel that does not compile, a Python-function op that raises (NumPy, torch, Paddle, JAX eager and
under jax.jit) and an exception inside a backward. Then ``os.fork`` after use and ``multiprocessing``
with ``spawn`` (in child processes).
"""

from __future__ import annotations

import numpy as np
import pytest
import warp as wp
from _devices import jax_device
from _subprocess import run_script

import interop

torch = pytest.importorskip("torch")


# module="unique": Warp records a build failure against the whole module, so a kernel that does not
# compile breaks every kernel of its module (Warp's rule, documented in docs/guarantees.md)
@wp.kernel(module="unique")
def does_not_compile(a: wp.array(dtype=float), out: wp.array(dtype=float)):
    out[wp.tid()] = a[wp.tid()] + wp.vec3(1.0, 2.0, 3.0)


@pytest.mark.parametrize("framework", ["numpy", "torch"])
def test_kernel_that_fails_to_compile(framework):
    o = interop.op(does_not_compile, name="failures::does_not_compile")
    x = np.ones(3, np.float32) if framework == "numpy" else torch.ones(3, device="cpu")
    for _ in range(2):  # the second call reports the same failure (no half-built state)
        with pytest.raises(wp.WarpCodegenError, match=r"(?s)op 'failures::does_not_compile': .*Couldn't find function"):
            o(x)
    ok = _function_op(f"after_compile_failure_{framework}", fail_on=())
    np.testing.assert_array_equal(np.asarray(ok(x)), 2 * np.ones(3))


class Flaky:
    """A Python-function op's body that raises on chosen calls (counted)."""

    def __init__(self, fail_on):
        self.calls = 0
        self.fail_on = set(fail_on)

    def __call__(self, a: wp.array(dtype=float), out: wp.array(dtype=float)):
        self.calls += 1
        if self.calls in self.fail_on:
            raise RuntimeError(f"user failure #{self.calls}")
        wp.launch(_double, dim=a.shape, inputs=[a], outputs=[out], device=a.device)


@wp.kernel
def _double(a: wp.array(dtype=float), out: wp.array(dtype=float)):
    out[wp.tid()] = 2.0 * a[wp.tid()]


def _function_op(name, fail_on):
    body = Flaky(fail_on)

    def fn(a: wp.array(dtype=float), out: wp.array(dtype=float)):
        body(a, out)

    fn.__name__ = fn.__qualname__ = name
    return interop.op(fn, name=f"failures::{name}")


def _frameworks():
    out = ["numpy", "torch"]
    for name in ("paddle", "jax"):
        try:
            __import__(name)
            out.append(name)
        except ImportError:
            pass
    return out


def _make(framework, x):
    if framework == "numpy":
        return x
    if framework == "torch":
        return torch.tensor(x, device="cpu")
    if framework == "paddle":
        import paddle

        return paddle.to_tensor(x, place=paddle.CPUPlace())
    import jax.numpy as jnp

    return jnp.asarray(x, device=jax_device("cpu"))


@pytest.mark.parametrize("framework", _frameworks())
def test_python_function_op_that_raises(framework):
    """The original type (RuntimeError) and message, naming the op; the next call is right."""
    o = _function_op(f"raises_{framework}", fail_on={1})
    x = np.arange(4, dtype=np.float32)
    with pytest.raises(RuntimeError, match=rf"(?s)op 'failures::raises_{framework}': .*user failure #1") as info:
        o(_make(framework, x))
    assert str(info.value.__cause__) == "user failure #1"  # the original, chained
    np.testing.assert_array_equal(np.asarray(o(_make(framework, x))), 2 * x)


def test_python_function_op_that_raises_under_jax_jit():
    """Under the user's jax.jit, XLA reports the failure: JAX's runtime error carries the original
    type and message naming the op (documented); the next call is right."""
    jax = pytest.importorskip("jax")
    o = _function_op("raises_jit", fail_on={1})
    f = jax.jit(lambda a: o(a))
    x = np.arange(4, dtype=np.float32)
    with pytest.raises(
        jax.errors.JaxRuntimeError, match=r"(?s)RuntimeError: .*op 'failures::raises_jit': .*user failure #1"
    ):
        np.asarray(f(jax.numpy.asarray(x, device=jax_device("cpu"))))
    np.testing.assert_array_equal(np.asarray(f(jax.numpy.asarray(x, device=jax_device("cpu")))), 2 * x)


def test_exception_inside_backward():
    """The tape backward re-runs the function: it raises there (call 2); the caller of backward()
    gets the original exception naming the op, and the next forward+backward is right."""
    o = _function_op("raises_in_backward", fail_on={2})
    x = torch.arange(4.0, requires_grad=True, device="cpu")
    out = o(x)
    with pytest.raises(RuntimeError, match=r"(?s)op 'failures::raises_in_backward': .*user failure #2"):
        out.sum().backward()
    x.grad = None
    out = o(x)
    out.sum().backward()
    np.testing.assert_array_equal(out.detach().numpy(), 2 * np.arange(4.0))
    np.testing.assert_array_equal(x.grad.numpy(), np.full(4, 2.0))


def test_fork_after_use():
    """A forked child (CPU) uses the parent's ops, cached launch records included."""
    if wp.get_cuda_device_count() > 0:
        # the child script initialises Warp, which initialises CUDA where a GPU is present; a child
        # forked after that cannot use CUDA (torch's own rule: "Cannot re-initialize CUDA in forked
        # subprocess"), whatever INTEROP_TEST_DEVICES says
        pytest.skip("fork after CUDA was initialised is unsupported by CUDA itself; use spawn (tested below)")
    p = run_script(
        """
        import os
        import numpy as np, torch
        from catalogue import case
        c = case("scalar")
        x, y = np.linspace(0, 1, 9, dtype=np.float32), np.full(9, 0.5, np.float32)
        want = c.reference(x, y, 2.0)[0]
        assert np.allclose(c.op(x, y, 2.0), want, atol=1e-6)
        xt = torch.tensor(x, requires_grad=True, device="cpu")
        c.op(xt, torch.tensor(y, device="cpu"), 2.0).sum().backward()
        pid = os.fork()
        if pid == 0:
            ok = np.allclose(c.op(x, y, 2.0), want, atol=1e-6)
            xt = torch.tensor(x, requires_grad=True, device="cpu")
            out = c.op(xt, torch.tensor(y, device="cpu"), 2.0)
            out.sum().backward()
            ok = ok and np.allclose(xt.grad.numpy(), 2.0 * np.cos(x), atol=1e-5)
            ok = ok and np.allclose(c.op(x[:5], y[:5], 2.0), want[:5], atol=1e-6)  # a new plan in the child
            os._exit(0 if ok else 3)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, status
        print("OK")
        """
    )
    assert "OK" in p.stdout


def test_multiprocessing_spawn():
    """Ops cannot be pickled (a clear error); a spawned worker describes its own and uses it."""
    p = run_script(
        """
        import multiprocessing as mp
        import pickle
        import numpy as np
        import interop

        def work(n):
            from catalogue import case
            c = case("scalar")
            x, y = np.linspace(0, 1, n, dtype=np.float32), np.full(n, 0.5, np.float32)
            return bool(np.allclose(c.op(x, y, 2.0), c.reference(x, y, 2.0)[0], atol=1e-6))

        if __name__ == "__main__":
            from catalogue import case
            try:
                pickle.dumps(case("scalar").op)
                raise SystemExit("pickled")
            except interop.ArgumentError as e:
                assert "cannot be pickled; describe it again with interop.op in each process" in str(e)
            with mp.get_context("spawn").Pool(2) as pool:
                assert pool.map(work, [3, 8]) == [True, True]
            print("OK")
        """
    )
    assert "OK" in p.stdout
