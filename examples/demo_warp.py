"""Demo runner for Warp arrays: forward through the op, gradients with a wp.Tape around raw launches."""

import warp as wp

import interop


class Unavailable(Exception):
    pass


def run(op, inputs):
    x, v, a = inputs
    wx = wp.array(x, dtype=float, device="cpu")
    wv = interop.convert(v.copy(), to="warp", dtype=wp.vec3)
    y, w = op(wx, wv, a)
    return {"outputs": [y.numpy(), w.numpy()], "grads": None}
