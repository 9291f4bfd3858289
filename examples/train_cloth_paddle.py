"""Train the initial velocities of a falling cloth through a differentiable rollout in Paddle.

    python examples/train_cloth_paddle.py [--side 16] [--steps 50] [--iters 10] [--function]

Each step is two interop ops (``examples/cloth.py``: springs, then integrate with a ``wp.vec3``
gravity given as a tuple); ``--function`` uses the Python-function op that launches both kernels
(its forward keeps its ``wp.Tape`` for the backward). Small and fast by default.
"""

from __future__ import annotations

import argparse
import os
import sys

import paddle

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from examples import cloth  # noqa: E402


def train(side: int = 16, steps: int = 50, iters: int = 10, lr: float = 1000.0, function: bool = False):
    """Returns the loss of each iteration and the initial velocities learnt."""
    sc = cloth.scene(side, steps)
    springs_op, integrate_op, step_op = cloth.ops(sc.n)
    cpu = paddle.CPUPlace()
    x0, target = paddle.to_tensor(sc.x0, place=cpu), paddle.to_tensor(sc.target, place=cpu)
    springs, rest = paddle.to_tensor(sc.springs, place=cpu), paddle.to_tensor(sc.rest, place=cpu)
    v0 = paddle.create_parameter([sc.n, 3], "float32", default_initializer=paddle.nn.initializer.Assign(sc.v0))
    opt = paddle.optimizer.SGD(learning_rate=lr, parameters=[v0])
    losses = []
    for _ in range(iters):
        x, v = x0, v0
        for _ in range(steps):
            if function:
                x, v = step_op(x, v, springs, rest, cloth.GRAVITY, cloth.DT)
            else:
                f = springs_op(x, v, springs, rest, cloth.KE, cloth.KD)
                x, v = integrate_op(x, v, f, cloth.GRAVITY, cloth.INV_MASS, cloth.DT)
        loss = ((x - target) ** 2).sum(-1).mean()
        loss.backward()
        opt.step()
        opt.clear_grad()
        losses.append(float(loss))
    return losses, v0.detach()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--side", type=int, default=16)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--function", action="store_true")
    a = ap.parse_args()
    losses, _ = train(a.side, a.steps, a.iters, function=a.function)
    for i, loss in enumerate(losses):
        print(f"iteration {i}: loss {loss:.4e}")
