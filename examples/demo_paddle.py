"""Demo runner for Paddle: forward through the op, gradients of sum(y) + sum(w) through Paddle's autograd."""

import paddle


class Unavailable(Exception):
    pass


def run(op, inputs):
    x, v, a = inputs
    px, pv = paddle.to_tensor(x.copy()), paddle.to_tensor(v.copy())
    px.stop_gradient = pv.stop_gradient = False
    y, w = op(px, pv, a)
    assert isinstance(y, paddle.Tensor) and isinstance(w, paddle.Tensor)
    (y.sum() + w.sum()).backward()
    return {"outputs": [y.numpy(), w.numpy()], "grads": [px.grad.numpy(), pv.grad.numpy()]}
