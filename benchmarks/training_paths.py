"""The cloth rollout (``examples/cloth.py``) trained through each framework path of issue 49.

Each ``make_*`` takes a :class:`examples.cloth.Scene` and the SGD learning rate and returns
``(iteration, gradient)``: ``iteration()`` runs one training iteration (the rollout, the loss,
its backward, the SGD step on the initial velocities; synchronised) and returns the loss before
the step; ``gradient()`` the last iteration's gradient w.r.t. the initial velocities (NumPy).
Shared by the training benchmark (``benchmarks/training.py``) and ``tests/test_training.py``.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from examples import cloth

CHUNK = 10  # steps per checkpointed chunk
# the relative error to Warp's Tape gradient within which a path's gradient is "equal": float32
# round-off, and a bfloat16 gradient (8 significant bits: a relative rounding of up to 2^-9) for the
# autocast path
RTOL, RTOL_BF16 = 1e-4, 1e-2


def grad_rtol(make: Callable) -> float:
    return RTOL_BF16 if make is make_torch_autocast else RTOL


def _torch_state(sc: cloth.Scene):
    import torch

    dev = torch.device("cpu")
    t = {k: torch.tensor(getattr(sc, k), device=dev) for k in ("x0", "springs", "rest", "target")}
    v0 = torch.tensor(sc.v0, device=dev, requires_grad=True)
    return t, v0


def _torch_loop(sc: cloth.Scene, lr: float, rollout: Callable[[Any, Any], Any]):
    import torch

    t, v0 = _torch_state(sc)
    box: dict[str, Any] = {}

    def iteration() -> float:
        x = rollout(t["x0"], v0)
        loss = ((x - t["target"]) ** 2).sum(-1).mean()
        loss.backward()
        with torch.no_grad():
            box["g"] = v0.grad.clone()
            v0.sub_(lr * v0.grad)
        v0.grad = None
        return float(loss.detach())

    return iteration, lambda: box["g"].numpy()


def _torch_steps(sc: cloth.Scene, kind: str):
    """``rollout(x0, v0, steps) -> (x, v)``: two ops a step, or the Python-function op."""
    import torch

    springs_op, integrate_op, step_op = cloth.ops(sc.n)
    t, _ = _torch_state(sc)
    sp, rest = t["springs"], t["rest"]

    if kind == "two":

        def run(x, v, steps):
            for _ in range(steps):
                f = springs_op(x, v, sp, rest, cloth.KE, cloth.KD)
                x, v = integrate_op(x, v, f, cloth.GRAVITY, cloth.INV_MASS, cloth.DT)
            return x, v
    else:

        def run(x, v, steps):
            for _ in range(steps):
                x, v = step_op(x, v, sp, rest, cloth.GRAVITY, cloth.DT)
            return x, v

    del torch
    return run


def make_torch(sc: cloth.Scene, lr: float, kind: str = "two"):
    run = _torch_steps(sc, kind)
    return _torch_loop(sc, lr, lambda x0, v0: run(x0, v0, sc.steps)[0])


def make_torch_function(sc: cloth.Scene, lr: float):
    return make_torch(sc, lr, "function")


def make_torch_autocast(sc: cloth.Scene, lr: float):
    """A model under ``torch.autocast("cpu", torch.bfloat16)`` feeding the rollout: the initial
    velocities pass through a ``torch.nn.Linear`` (the identity, frozen), whose output autocast makes
    bfloat16; the first step's ops cast it to their float32 parameters and their gradient goes back
    to it in bfloat16 (:func:`examples.cloth.autocast_head`). Its gradient equals the Tape's to
    bfloat16 precision (:func:`grad_rtol`)."""
    import torch

    run = _torch_steps(sc, "two")
    head = cloth.autocast_head(torch.device("cpu"))

    def rollout(x0, v0):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return run(x0, head(v0), sc.steps)[0]

    return _torch_loop(sc, lr, rollout)


def make_torch_checkpoint(sc: cloth.Scene, lr: float):
    from torch.utils.checkpoint import checkpoint

    run = _torch_steps(sc, "two")

    def chunk(x, v, k):
        return run(x, v, k)

    def rollout(x0, v0):
        x, v = x0, v0
        done = 0
        while done < sc.steps:
            k = min(CHUNK, sc.steps - done)
            x, v = checkpoint(chunk, x, v, k, use_reentrant=False)
            done += k
        return x

    return _torch_loop(sc, lr, rollout)


def make_torch_compile(sc: cloth.Scene, lr: float, backend: str = "inductor"):
    import torch

    springs_op, integrate_op, _ = cloth.ops(sc.n)
    t, _ = _torch_state(sc)
    sp, rest = t["springs"], t["rest"]

    @torch.compile(fullgraph=True, backend=backend)
    def one_step(x, v):
        f = springs_op(x, v, sp, rest, cloth.KE, cloth.KD)
        return integrate_op(x, v, f, cloth.GRAVITY, cloth.INV_MASS, cloth.DT)

    def rollout(x0, v0):
        x, v = x0, v0
        for _ in range(sc.steps):
            x, v = one_step(x, v)
        return x

    return _torch_loop(sc, lr, rollout)


def make_torch_compile_chunks(sc: cloth.Scene, lr: float, backend: str = "inductor"):
    """``torch.compile(fullgraph=True)`` of ``CHUNK`` steps a call (the last chunk the remainder): a
    compiled call's own cost (guards, AOTAutograd's runtime wrappers, its backward node) paid once
    per chunk instead of once per step."""
    import torch

    run = _torch_steps(sc, "two")
    chunk = torch.compile(run, fullgraph=True, backend=backend)

    def rollout(x0, v0):
        x, v = x0, v0
        done = 0
        while done < sc.steps:
            k = min(CHUNK, sc.steps - done)
            x, v = chunk(x, v, k)
            done += k
        return x

    return _torch_loop(sc, lr, rollout)


def _jax_setup(sc: cloth.Scene, lr: float, rollout_of: Callable, function: bool = False):
    import jax
    import jax.numpy as jnp

    cpu = jax.devices("cpu")[0]
    put = lambda a: jax.device_put(a, cpu)  # noqa: E731
    x0, sp, rest, target = put(sc.x0), put(sc.springs), put(sc.rest), put(sc.target)
    springs_op, integrate_op, step_op = cloth.ops(sc.n)

    def step(x, v):
        if function:
            return step_op(x, v, sp, rest, cloth.GRAVITY, cloth.DT)
        f = springs_op(x, v, sp, rest, cloth.KE, cloth.KD)
        return integrate_op(x, v, f, cloth.GRAVITY, cloth.INV_MASS, cloth.DT)

    rollout = rollout_of(step)

    def loss_fn(v0):
        x = rollout(x0, v0)
        return jnp.mean(jnp.sum((x - target) ** 2, axis=-1))

    vg = jax.jit(jax.value_and_grad(loss_fn))
    box = {"v0": put(sc.v0)}

    def iteration() -> float:
        loss, g = vg(box["v0"])
        box["v0"] = box["v0"] - lr * g
        box["g"] = g
        return float(jax.block_until_ready(loss))

    return iteration, lambda: np.asarray(box["g"])


def make_jax_loop(sc: cloth.Scene, lr: float):
    def rollout_of(step):
        def rollout(x, v):
            for _ in range(sc.steps):
                x, v = step(x, v)
            return x

        return rollout

    return _jax_setup(sc, lr, rollout_of)


def make_jax_scan(sc: cloth.Scene, lr: float, remat: bool = False, function: bool = False):
    import jax

    def rollout_of(step):
        def body(c, _):
            return step(*c), None

        body_ = jax.checkpoint(body) if remat else body

        def rollout(x, v):
            (x, v), _ = jax.lax.scan(body_, (x, v), None, length=sc.steps)
            return x

        return rollout

    return _jax_setup(sc, lr, rollout_of, function)


def make_jax_scan_checkpoint(sc: cloth.Scene, lr: float):
    return make_jax_scan(sc, lr, remat=True)


def make_jax_scan_function(sc: cloth.Scene, lr: float):
    return make_jax_scan(sc, lr, function=True)


def make_paddle(sc: cloth.Scene, lr: float, kind: str = "two"):
    import paddle

    springs_op, integrate_op, step_op = cloth.ops(sc.n)
    place = paddle.CPUPlace()
    t = {k: paddle.to_tensor(getattr(sc, k), place=place) for k in ("x0", "springs", "rest", "target")}
    v0 = paddle.to_tensor(sc.v0, place=place, stop_gradient=False)
    sp, rest = t["springs"], t["rest"]
    box: dict[str, Any] = {}

    def rollout(x, v):
        for _ in range(sc.steps):
            if kind == "two":
                f = springs_op(x, v, sp, rest, cloth.KE, cloth.KD)
                x, v = integrate_op(x, v, f, cloth.GRAVITY, cloth.INV_MASS, cloth.DT)
            else:
                x, v = step_op(x, v, sp, rest, cloth.GRAVITY, cloth.DT)
        return x

    def iteration() -> float:
        x = rollout(t["x0"], v0)
        loss = ((x - t["target"]) ** 2).sum(-1).mean()
        loss.backward()
        with paddle.no_grad():
            box["g"] = v0.grad.numpy().copy()
            v0.set_value(v0 - lr * v0.grad)
        v0.clear_gradient(False)
        return float(loss)

    return iteration, lambda: box["g"]


def make_paddle_function(sc: cloth.Scene, lr: float):
    return make_paddle(sc, lr, "function")


# (row name, framework module, bar, factory)
PATHS: list[tuple[str, str, float, Callable]] = [
    ("torch eager (2 ops a step)", "torch", 1.2, make_torch),
    ("torch eager, Python-function op a step", "torch", 1.2, make_torch_function),
    ("torch.autocast(bfloat16): a Linear feeds the rollout", "torch", 1.2, make_torch_autocast),
    ("torch.utils.checkpoint, 10-step chunks (non-reentrant)", "torch", 1.4, make_torch_checkpoint),
    ("torch.compile(fullgraph=True) of a step", "torch", 1.2, make_torch_compile),
    ("torch.compile(fullgraph=True) of 10-step chunks", "torch", 1.2, make_torch_compile_chunks),
    ("JAX jit(value_and_grad), Python loop", "jax", 1.2, make_jax_loop),
    ("JAX jit(value_and_grad), lax.scan", "jax", 1.2, make_jax_scan),
    ("JAX lax.scan(jax.checkpoint(body))", "jax", 1.4, make_jax_scan_checkpoint),
    ("JAX lax.scan, Python-function op a step", "jax", 1.2, make_jax_scan_function),
    ("Paddle eager (2 ops a step)", "paddle", 1.2, make_paddle),
    ("Paddle, Python-function op a step", "paddle", 1.2, make_paddle_function),
]
