"""Demo runner for JAX: forward under jax.jit, gradients with jax.grad."""

import numpy as np


class Unavailable(Exception):
    pass


def run(op, inputs):
    try:
        import jax
        import jax.numpy as jnp
    except ImportError as e:  # pragma: no cover - demo.py checks find_spec first
        raise Unavailable(str(e)) from e
    x, v, a = inputs
    jx, jv = jnp.asarray(x), jnp.asarray(v)
    y, w = jax.jit(lambda x, v: op(x, v, a))(jx, jv)

    def loss(x, v):
        y, w = op(x, v, a)
        return jnp.sum(y) + jnp.sum(w)

    gx, gv = jax.grad(loss, argnums=(0, 1))(jx, jv)
    return {"outputs": [np.asarray(y), np.asarray(w)], "grads": [np.asarray(gx), np.asarray(gv)]}
