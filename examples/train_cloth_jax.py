"""Train the initial velocities of a falling cloth through a differentiable rollout in JAX.

    python examples/train_cloth_jax.py [--side 16] [--steps 50] [--iters 10] [--loop] [--remat]

The rollout is a ``jax.lax.scan`` over steps of two interop ops (``examples/cloth.py``: springs,
then integrate with a ``wp.vec3`` gravity given as a tuple), its gradient ``jax.value_and_grad``
under ``jax.jit``; ``--loop`` unrolls a Python loop instead, ``--remat`` wraps the scan body in
``jax.checkpoint`` (recomputed in the backward). Small and fast by default.
"""

from __future__ import annotations

import argparse
import os
import sys

import jax
import jax.numpy as jnp

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from examples import cloth  # noqa: E402


def train(
    side: int = 16, steps: int = 50, iters: int = 10, lr: float = 1000.0, loop: bool = False, remat: bool = False
):
    """Returns the loss of each iteration and the initial velocities learnt."""
    sc = cloth.scene(side, steps)
    springs_op, integrate_op, _ = cloth.ops(sc.n)
    cpu = jax.devices("cpu")[0]
    x0, target = jax.device_put(sc.x0, cpu), jax.device_put(sc.target, cpu)
    springs, rest = jax.device_put(sc.springs, cpu), jax.device_put(sc.rest, cpu)

    def step(x, v):
        f = springs_op(x, v, springs, rest, cloth.KE, cloth.KD)
        return integrate_op(x, v, f, cloth.GRAVITY, cloth.INV_MASS, cloth.DT)

    def rollout(v):
        x = x0
        if loop:
            for _ in range(steps):
                x, v = step(x, v)
            return x

        def body(carry, _):
            return step(*carry), None

        (x, v), _ = jax.lax.scan(jax.checkpoint(body) if remat else body, (x, v), None, length=steps)
        return x

    def loss_fn(v):
        return jnp.mean(jnp.sum((rollout(v) - target) ** 2, axis=-1))

    value_and_grad = jax.jit(jax.value_and_grad(loss_fn))
    v0 = jax.device_put(sc.v0, cpu)
    losses = []
    for _ in range(iters):
        loss, g = value_and_grad(v0)
        v0 = v0 - lr * g
        losses.append(float(loss))
    return losses, v0


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--side", type=int, default=16)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--loop", action="store_true")
    ap.add_argument("--remat", action="store_true")
    a = ap.parse_args()
    losses, _ = train(a.side, a.steps, a.iters, loop=a.loop, remat=a.remat)
    for i, loss in enumerate(losses):
        print(f"iteration {i}: loss {loss:.4e}")
