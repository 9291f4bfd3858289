"""JAX rows: our op under jit, eager, and jit(grad), against Warp's own ``wp.jax_kernel``,
raw ``wp.launch`` and the same math in plain ``jnp``."""

# no `from __future__ import annotations` here: wp.jax_kernel(enable_backward=True) reads the
# kernel's raw annotations and refuses strings
import numpy as np
import warp as wp

import interop

from .harness import SIZES, per_call, report


@wp.kernel
def saxpy(x: wp.array(dtype=float), y: wp.array(dtype=float), a: float, out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = a * x[i] + y[i]


def run(quick: bool = False) -> dict:
    import jax
    import jax.numpy as jnp

    results = {}
    op = interop.op(saxpy)
    jk = wp.jax_kernel(saxpy)
    jk_grad = wp.jax_kernel(saxpy, enable_backward=True)
    kw = {"min_time": 0.05, "repeat": 3} if quick else {}
    for n in SIZES:
        xn = np.random.default_rng(0).random(n, dtype=np.float32)
        x, y = jnp.asarray(xn), jnp.ones(n, jnp.float32)
        wx, wy, wout = (wp.array(a, device="cpu") for a in (xn, np.ones(n, np.float32), np.zeros(n, np.float32)))

        ours = jax.jit(lambda x, y: op(x, y, 2.0))
        theirs = jax.jit(lambda x, y: jk(x, y, 2.0)[0])
        plain = jax.jit(lambda x, y: 2.0 * x + y)
        ours_grad = jax.jit(jax.grad(lambda x, y: jnp.sum(op(x, y, 2.0)), argnums=(0, 1)))
        theirs_grad = jax.jit(jax.grad(lambda x, y: jnp.sum(jk_grad(x, y, 2.0)[0]), argnums=(0, 1)))
        plain_grad = jax.jit(jax.grad(lambda x, y: jnp.sum(2.0 * x + y), argnums=(0, 1)))

        np.testing.assert_allclose(np.asarray(ours(x, y)), np.asarray(plain(x, y)), rtol=1e-6)
        np.testing.assert_allclose(np.asarray(ours_grad(x, y)[0]), np.asarray(theirs_grad(x, y)[0]), rtol=1e-6)

        def block(f):
            return lambda: jax.block_until_ready(f())

        rows = [
            (
                "raw wp.launch, prebuilt Warp arrays",
                per_call(lambda: wp.launch(saxpy, dim=n, inputs=[wx, wy, 2.0, wout], device="cpu"), **kw),
            ),
            ("wp.jax_kernel inside jit", per_call(block(lambda: theirs(x, y)), **kw)),
            ("interop op inside jit", per_call(block(lambda: ours(x, y)), **kw)),
            ("interop op, eager call", per_call(block(lambda: op(x, y, 2.0)), **kw)),
            ("plain jnp inside jit (reference)", per_call(block(lambda: plain(x, y)), **kw)),
            ("wp.jax_kernel jit(grad) (enable_backward=True)", per_call(block(lambda: theirs_grad(x, y)), **kw)),
            ("interop op jit(grad)", per_call(block(lambda: ours_grad(x, y)), **kw)),
            ("plain jnp jit(grad) (reference)", per_call(block(lambda: plain_grad(x, y)), **kw)),
        ]
        res = report(f"JAX, saxpy, n={n} (CPU)", rows, "wp.jax_kernel inside jit")
        t = dict(rows)
        print(
            f"  ratios: ours/jax_kernel jitted forward {t['interop op inside jit'] / t['wp.jax_kernel inside jit']:.2f}x "
            f"(target <= 0.75); ours/jax_kernel jit(grad) "
            f"{t['interop op jit(grad)'] / t['wp.jax_kernel jit(grad) (enable_backward=True)']:.2f}x (target <= 0.5); "
            f"eager/jitted {t['interop op, eager call'] / t['interop op inside jit']:.2f}x (target <= 2)"
        )
        results[n] = res
    return results
