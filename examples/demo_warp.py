"""Demo runner for Warp arrays: the op is recorded on a wp.Tape, whose backward gives the gradients."""

import numpy as np
import warp as wp

import interop


class Unavailable(Exception):
    pass


def run(op, inputs):
    x, v, a = inputs
    wx = wp.array(x, dtype=float, device="cpu", requires_grad=True)
    wv = wp.array(v, dtype=wp.vec3, device="cpu", requires_grad=True)
    tape = wp.Tape()
    with tape:
        y, w = op(wx, wv, a)
    # loss = sum(y) + sum(w): seed both outputs with ones
    tape.backward(grads={y: wp.ones(y.shape, dtype=float), w: wp.array(np.ones(v.shape, np.float32), dtype=wp.vec3)})
    assert interop.convert(wv, to="numpy").shape == v.shape
    return {"outputs": [y.numpy(), w.numpy()], "grads": [wx.grad.numpy(), wv.grad.numpy()]}
