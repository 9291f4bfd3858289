"""JAX rows: our op under jit, eager, and jit(grad), against Warp's own ``wp.jax_kernel``,
raw ``wp.launch`` and the same math in plain ``jnp``. All rows are measured round-robin in one
process (see ``harness.interleaved``).

Targets (issue 22), per call at n=1024: the op under ``jax.jit`` at most 2.0x a plain ``jnp`` jit
of the same arithmetic; ``jax.jit(jax.grad(...))`` at most 2.5x the plain ``jnp`` gradient; an
eager call at most 1.5x the jitted call. Forward mode (issue 34, printed, not gated): a
``jit(jvp)`` against the forward (``jit``) and the VJP (``jit(grad)``).
"""

# no `from __future__ import annotations` here: wp.jax_kernel(enable_backward=True) reads the
# kernel's raw annotations and refuses strings
import numpy as np
import warp as wp

import interop

from .harness import clock, gate, interleaved, ratios, report, sizes


@wp.kernel
def saxpy(x: wp.array(dtype=float), y: wp.array(dtype=float), a: float, out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = a * x[i] + y[i]


JIT = "interop op inside jit"
EAGER = "interop op, eager call"
GRAD = "interop op jit(grad)"
PLAIN = "plain jnp inside jit (reference)"
PLAIN_GRAD = "plain jnp jit(grad) (reference)"
JVP = "interop op jit(jvp) (tangent kernel)"
PLAIN_JVP = "plain jnp jit(jvp) (reference)"
TARGETS = [(JIT, PLAIN, 2.0), (GRAD, PLAIN_GRAD, 2.5), (EAGER, JIT, 1.5)]


def run(quick: bool = False) -> dict:
    import jax
    import jax.numpy as jnp

    results = {}
    op = interop.op(saxpy)
    jk = wp.jax_kernel(saxpy)
    jk_grad = wp.jax_kernel(saxpy, enable_backward=True)
    kw = {"rounds": 5, "batch_time": 0.01} if quick else {}
    for n in sizes():
        xn = np.random.default_rng(0).random(n, dtype=np.float32)
        x, y = jnp.asarray(xn), jnp.ones(n, jnp.float32)
        wx, wy, wout = (wp.array(a, device="cpu") for a in (xn, np.ones(n, np.float32), np.zeros(n, np.float32)))

        ours = jax.jit(lambda x, y: op(x, y, 2.0))
        theirs = jax.jit(lambda x, y: jk(x, y, 2.0)[0])
        plain = jax.jit(lambda x, y: 2.0 * x + y)
        ours_grad = jax.jit(jax.grad(lambda x, y: jnp.sum(op(x, y, 2.0)), argnums=(0, 1)))
        theirs_grad = jax.jit(jax.grad(lambda x, y: jnp.sum(jk_grad(x, y, 2.0)[0]), argnums=(0, 1)))
        plain_grad = jax.jit(jax.grad(lambda x, y: jnp.sum(2.0 * x + y), argnums=(0, 1)))
        # forward mode (issue 34): one launch of the generated tangent kernel (results and tangents)
        ours_jvp = jax.jit(lambda x, y, t: jax.jvp(lambda x: op(x, y, 2.0), (x,), (t,)))
        plain_jvp = jax.jit(lambda x, y, t: jax.jvp(lambda x: 2.0 * x + y, (x,), (t,)))

        np.testing.assert_allclose(np.asarray(ours(x, y)), np.asarray(plain(x, y)), rtol=1e-6)
        np.testing.assert_allclose(np.asarray(op(x, y, 2.0)), np.asarray(plain(x, y)), rtol=1e-6)
        np.testing.assert_allclose(np.asarray(ours_grad(x, y)[0]), np.asarray(plain_grad(x, y)[0]), rtol=1e-6)
        np.testing.assert_allclose(np.asarray(ours_grad(x, y)[0]), np.asarray(theirs_grad(x, y)[0]), rtol=1e-6)
        np.testing.assert_allclose(np.asarray(ours_jvp(x, y, y)[1]), np.asarray(plain_jvp(x, y, y)[1]), rtol=1e-6)

        def block(f):
            return lambda: jax.block_until_ready(f())

        rows = [
            (
                "raw wp.launch, prebuilt Warp arrays",
                lambda: wp.launch(saxpy, dim=n, inputs=[wx, wy, 2.0, wout], device="cpu"),
            ),
            ("wp.jax_kernel inside jit", block(lambda: theirs(x, y))),
            (JIT, block(lambda: ours(x, y))),
            (EAGER, block(lambda: op(x, y, 2.0))),
            (PLAIN, block(lambda: plain(x, y))),
            ("wp.jax_kernel jit(grad) (enable_backward=True)", block(lambda: theirs_grad(x, y))),
            (GRAD, block(lambda: ours_grad(x, y))),
            (PLAIN_GRAD, block(lambda: plain_grad(x, y))),
            (JVP, block(lambda: ours_jvp(x, y, y))),
            (PLAIN_JVP, block(lambda: plain_jvp(x, y, y))),
        ]
        table = report(f"JAX (CPU), saxpy, n={n}, {clock()[0]}", interleaved(rows, **kw), "wp.jax_kernel inside jit")
        found = ratios(
            "targets (issue 22: jit <= 2.0x plain jnp, jit(grad) <= 2.5x plain jnp, eager <= 1.5x jit)",
            table,
            [(a, b) for a, b, _ in TARGETS]
            + [(JIT, "wp.jax_kernel inside jit"), (GRAD, "wp.jax_kernel jit(grad) (enable_backward=True)")]
            + [(JVP, JIT), (JVP, GRAD), (JVP, PLAIN_JVP)],
        )
        if n == 1024:
            for a, b, _ in TARGETS:
                gate("jax", f"{a} / {b}", found[f"{a} / {b}"])
        results[n] = table
    return results
