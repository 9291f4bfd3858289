"""A differentiable cloth rollout: the kernels, the scene, and Warp's own Tape loop (the reference).

Shared by the training examples (``examples/train_cloth_*.py``), the training benchmark
(``python -m benchmarks --training``) and ``tests/test_training.py``. A square cloth of
``n x n`` particles joined by structural and shear springs falls under gravity (a ``wp.vec3``
parameter) onto the ground; the loss is the mean squared distance of the final positions to a
target, the parameters are the initial velocities. Each step runs two kernels: ``eval_springs``
(gather by spring indices, scatter forces with ``atomic_add``) and ``integrate`` (gravity, ground
contact, semi-implicit Euler); ``step`` is the same two launches as one Python-function op.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import warp as wp

import interop

GRAVITY = (0.0, -9.8, 0.0)
DT = 0.005
KE, KD = 100.0, 1.0  # spring stiffness and damping
INV_MASS = 1.0


@wp.kernel(module="unique")
def eval_springs(
    x: wp.array(dtype=wp.vec3),
    v: wp.array(dtype=wp.vec3),
    springs: wp.array(dtype=wp.int32),
    rest: wp.array(dtype=float),
    ke: float,
    kd: float,
    f: wp.array(dtype=wp.vec3),
):
    s = wp.tid()
    i = springs[2 * s]
    j = springs[2 * s + 1]
    d = x[i] - x[j]
    length = wp.length(d)
    e = d / length
    fs = e * (ke * (length - rest[s]) + kd * wp.dot(e, v[i] - v[j]))
    wp.atomic_sub(f, i, fs)
    wp.atomic_add(f, j, fs)


@wp.kernel(module="unique")
def integrate(
    x: wp.array(dtype=wp.vec3),
    v: wp.array(dtype=wp.vec3),
    f: wp.array(dtype=wp.vec3),
    gravity: wp.vec3,
    inv_mass: float,
    dt: float,
    x_out: wp.array(dtype=wp.vec3),
    v_out: wp.array(dtype=wp.vec3),
):
    i = wp.tid()
    p = x[i]
    # ground contact: a penalty force below y = 0
    contact = wp.vec3(0.0, -wp.min(p[1], 0.0) * 1000.0, 0.0)
    v1 = v[i] + (f[i] * inv_mass + gravity + contact * inv_mass) * dt
    x_out[i] = p + v1 * dt
    v_out[i] = v1


def step(
    x: wp.array(dtype=wp.vec3),
    v: wp.array(dtype=wp.vec3),
    springs: wp.array(dtype=wp.int32),
    rest: wp.array(dtype=float),
    gravity: wp.vec3,
    dt: float,
    x_out: wp.array(dtype=wp.vec3),
    v_out: wp.array(dtype=wp.vec3),
):
    """One step as a Python-function op: both launches, the forces an intermediate array."""
    f = wp.zeros(x.shape[0], dtype=wp.vec3, device=x.device, requires_grad=True)
    wp.launch(eval_springs, dim=rest.shape[0], inputs=[x, v, springs, rest, KE, KD], outputs=[f], device=x.device)
    wp.launch(
        integrate, dim=x.shape[0], inputs=[x, v, f, gravity, INV_MASS, dt], outputs=[x_out, v_out], device=x.device
    )


@wp.kernel(module="unique")
def _loss_kernel(
    x: wp.array(dtype=wp.vec3), target: wp.array(dtype=wp.vec3), scale: float, loss: wp.array(dtype=float)
):
    i = wp.tid()
    d = x[i] - target[i]
    wp.atomic_add(loss, 0, wp.dot(d, d) * scale)


@wp.kernel(module="unique")
def _sgd_kernel(p: wp.array(dtype=wp.vec3), g: wp.array(dtype=wp.vec3), lr: float):
    i = wp.tid()
    p[i] = p[i] - lr * g[i]


@dataclass
class Scene:
    """The cloth's initial state, springs and target, as NumPy arrays (float32 / int32)."""

    x0: np.ndarray  # (N, 3)
    v0: np.ndarray  # (N, 3)
    springs: np.ndarray  # (2 S,) pairs of particle indices
    rest: np.ndarray  # (S,)
    target: np.ndarray  # (N, 3)
    steps: int

    @property
    def n(self) -> int:
        return self.x0.shape[0]


def scene(side: int = 32, steps: int = 100) -> Scene:
    """A ``side x side`` cloth 1 m above the ground (spacing 0.1 m), at rest; the target: the cloth
    lying on the ground shifted by half a metre. ``side=32``: N = 1,024 particles, 3,906 springs."""
    h = 0.1
    ii, jj = np.meshgrid(np.arange(side), np.arange(side), indexing="ij")
    x0 = np.stack([ii * h, np.full(ii.shape, 1.0), jj * h], axis=-1).reshape(-1, 3).astype(np.float32)
    idx = np.arange(side * side).reshape(side, side)
    pairs = [
        np.stack([idx[:-1, :], idx[1:, :]], -1).reshape(-1, 2),  # structural
        np.stack([idx[:, :-1], idx[:, 1:]], -1).reshape(-1, 2),
        np.stack([idx[:-1, :-1], idx[1:, 1:]], -1).reshape(-1, 2),  # shear
        np.stack([idx[1:, :-1], idx[:-1, 1:]], -1).reshape(-1, 2),
    ]
    springs = np.concatenate(pairs).astype(np.int32)
    rest = np.linalg.norm(x0[springs[:, 0]] - x0[springs[:, 1]], axis=-1).astype(np.float32)
    target = (x0 + np.array([0.5, -1.0, 0.0], np.float32)).astype(np.float32)
    return Scene(x0, np.zeros_like(x0), springs.reshape(-1).copy(), rest, target, steps)


_OPS: dict[int, tuple] = {}


def ops(n: int) -> tuple[interop.Op, interop.Op, interop.Op]:
    """``(springs_op, integrate_op, step_op)`` for a cloth of ``n`` particles (the forces and the
    new state have ``n`` rows; the spring kernel runs over the springs), made once per ``n``.

    ``springs_op(x, v, springs, rest, KE, KD) -> f``;
    ``integrate_op(x, v, f, gravity, INV_MASS, dt) -> (x1, v1)``;
    ``step_op(x, v, springs, rest, gravity, dt) -> (x1, v1)`` (both kernels, one Python-function op)."""
    got = _OPS.get(n)
    if got is None:
        got = _OPS[n] = (
            interop.op(eval_springs, output_dims={"f": n}),
            interop.op(integrate, outputs=["x_out", "v_out"]),
            interop.op(step, outputs=["x_out", "v_out"], output_dims={"x_out": n, "v_out": n}),
        )
    return got


def autocast_head(device):
    """A stand-in for a PyTorch model whose output feeds the rollout under ``torch.autocast``: a
    ``torch.nn.Linear(3, 3)`` without bias on ``device``, the identity, frozen. Under
    ``torch.autocast(..., dtype=torch.bfloat16)`` its output is bfloat16 (autocast runs ``linear``
    in the low precision); the ops cast it to their float32 parameters and send its gradient back in
    bfloat16 (:mod:`examples.train_cloth_torch`, ``--autocast``)."""
    import torch

    head = torch.nn.Linear(3, 3, bias=False, device=device)
    with torch.no_grad():
        head.weight.copy_(torch.eye(3, device=device))
    return head.requires_grad_(False)


class WarpTapeLoop:
    """Warp's own training loop, as Warp's examples write it: arrays allocated once, ``wp.launch``
    under ``wp.Tape``, ``tape.backward(loss)``, SGD on the initial velocities, ``tape.zero()``."""

    def __init__(self, sc: Scene, device: str = "cpu", lr: float = 0.0):
        self.sc, self.device, self.lr = sc, device, lr
        T = sc.steps
        self.x = [wp.array(sc.x0, dtype=wp.vec3, device=device, requires_grad=True) for _ in range(T + 1)]
        self.v = [wp.array(sc.v0, dtype=wp.vec3, device=device, requires_grad=True) for _ in range(T + 1)]
        self.f = [wp.zeros(sc.n, dtype=wp.vec3, device=device, requires_grad=True) for _ in range(T)]
        self.springs = wp.array(sc.springs, dtype=wp.int32, device=device)
        self.rest = wp.array(sc.rest, dtype=float, device=device)
        self.target = wp.array(sc.target, dtype=wp.vec3, device=device)
        self.loss = wp.zeros(1, dtype=float, device=device, requires_grad=True)
        self.gravity = wp.vec3(*GRAVITY)
        self.tape = wp.Tape()

    def iteration(self) -> float:
        """One training iteration; returns the loss (that of the velocities before the SGD step)."""
        sc, d = self.sc, self.device
        tape = self.tape
        tape.reset()
        self.loss.zero_()
        with tape:
            for t in range(sc.steps):
                self.f[t].zero_()
                wp.launch(
                    eval_springs,
                    dim=len(sc.rest),
                    inputs=[self.x[t], self.v[t], self.springs, self.rest, KE, KD],
                    outputs=[self.f[t]],
                    device=d,
                )
                wp.launch(
                    integrate,
                    dim=sc.n,
                    inputs=[self.x[t], self.v[t], self.f[t], self.gravity, INV_MASS, DT],
                    outputs=[self.x[t + 1], self.v[t + 1]],
                    device=d,
                )
            wp.launch(
                _loss_kernel, dim=sc.n, inputs=[self.x[-1], self.target, 1.0 / sc.n], outputs=[self.loss], device=d
            )
        tape.backward(self.loss)
        wp.launch(_sgd_kernel, dim=sc.n, inputs=[self.v[0], self.v[0].grad, self.lr], device=d)
        return float(self.loss.numpy()[0])

    def gradient(self) -> np.ndarray:
        """The gradient of the loss w.r.t. the initial velocities from the last iteration."""
        return self.v[0].grad.numpy().copy()


def rel_err(got: np.ndarray, ref: np.ndarray) -> float:
    """``|got - ref| / |ref|`` (Frobenius)."""
    return float(np.linalg.norm(np.asarray(got, np.float64) - ref) / max(np.linalg.norm(ref), 1e-30))
