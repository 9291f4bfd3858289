"""What the training benchmark's paths are measured beside, timed in the same interleaved rounds
(``benchmarks/training_paths.py``; not gated):

- **The step's kernels alone** (a floor: no path goes below it): the rollout's Warp kernels
  (forward, loss, adjoints in reverse, SGD) replayed from launch commands recorded once
  (``wp.launch(..., record_cmd=True)``), over arrays allocated once: Warp's own loop without its
  per-launch Python work and its tape.
- **torch.compile of a step of two no-op custom_ops** (a reference: what a compiled step costs
  torch with hand-written ``torch.library.custom_op`` s): the compiled one-step path of the
  benchmark (``make_torch_compile``) with each op replaced by a ``custom_op`` of the same
  arguments whose forward and backward operators only allocate their outputs: guards,
  AOTAutograd's runtime wrappers, the backward node, four dispatches to ``custom_op``'s Python
  implementations.

The benchmark prints their sum beside the compiled one-step path: the kernels plus what torch
costs a hand-written op. The path comes in below it where the ops' dispatch costs less than a
``custom_op``'s.

Each ``make_*`` takes a :class:`examples.cloth.Scene` and the SGD learning rate and returns
``(iteration, gradient)`` as the paths do; the custom_op step's gradient is None (its values
mean nothing).
"""

from typing import Any, Callable

import warp as wp

from examples import cloth


def make_kernels(sc: cloth.Scene, lr: float):
    """The rollout's kernels replayed from recorded launch commands (see the module's docstring):
    ``(iteration, gradient)``, the gradient w.r.t. the initial velocities as the paths give it."""
    d = "cpu"
    T, n, s = sc.steps, sc.n, len(sc.rest)

    def arr(value=None, dtype: Any = wp.vec3):
        if value is None:
            return wp.zeros(n, dtype=dtype, device=d, requires_grad=True)
        return wp.array(value, dtype=dtype, device=d, requires_grad=True)

    x = [arr(sc.x0)] + [arr() for _ in range(T)]
    v = [arr(sc.v0)] + [arr() for _ in range(T)]
    f = [arr() for _ in range(T)]
    springs = wp.array(sc.springs, dtype=wp.int32, device=d)
    rest = wp.array(sc.rest, dtype=float, device=d)
    target = wp.array(sc.target, dtype=wp.vec3, device=d)
    loss = wp.zeros(1, dtype=float, device=d, requires_grad=True)
    gravity = wp.vec3(*cloth.GRAVITY)

    def rec(kernel, dim, inputs, outputs, adj_inputs=None, adj_outputs=None):
        kw = {} if adj_inputs is None else {"adj_inputs": adj_inputs, "adj_outputs": adj_outputs, "adjoint": True}
        return wp.launch(kernel, dim=dim, inputs=inputs, outputs=outputs, device=d, record_cmd=True, **kw)

    forward, backward = [], []
    for t in range(T):
        si = [x[t], v[t], springs, rest, cloth.KE, cloth.KD]
        ii = [x[t], v[t], f[t], gravity, cloth.INV_MASS, cloth.DT]
        forward.append(rec(cloth.eval_springs, s, si, [f[t]]))
        forward.append(rec(cloth.integrate, n, ii, [x[t + 1], v[t + 1]]))
        backward.append(
            rec(cloth.eval_springs, s, si, [f[t]], [x[t].grad, v[t].grad, None, None, 0.0, 0.0], [f[t].grad])
        )
        backward.append(
            rec(
                cloth.integrate,
                n,
                ii,
                [x[t + 1], v[t + 1]],
                [x[t].grad, v[t].grad, f[t].grad, None, 0.0, 0.0],
                [x[t + 1].grad, v[t + 1].grad],
            )
        )
    backward.reverse()
    li = [x[T], target, 1.0 / n]
    loss_fw = rec(cloth._loss_kernel, n, li, [loss])
    loss_bw = rec(cloth._loss_kernel, n, li, [loss], [x[T].grad, None, 0.0], [loss.grad])
    sgd = rec(cloth._sgd_kernel, n, [v[0], v[0].grad, lr], [])
    zeroed = [a for a in (*x, *v, *f, loss) if a is not None]

    def iteration() -> float:
        for a in zeroed:  # what tape.reset() and the loop's zero_() calls clear
            a.grad.zero_()
        loss.zero_()
        for a in f:
            a.zero_()
        for c in forward:
            c.launch()
        loss_fw.launch()
        loss.grad.fill_(1.0)
        loss_bw.launch()
        for c in backward:
            c.launch()
        sgd.launch()
        return float(loss.numpy()[0])

    return iteration, lambda: v[0].grad.numpy().copy()


_FLOOR_OPS: dict[str, Any] = {}


def _floor_ops():
    """``(springs, integrate)``: ``torch.library.custom_op`` s with the ops' arguments, whose forward
    and backward operators only allocate their outputs; registered once per process."""
    if _FLOOR_OPS:
        return _FLOOR_OPS["springs"], _FLOOR_OPS["integrate"]
    import torch

    Tensor = torch.Tensor  # (the annotations are read by torch.library: no postponed evaluation here)
    ns = "interop_training_floor"

    @torch.library.custom_op(f"{ns}::springs", mutates_args=())
    def springs(x: Tensor, v: Tensor, sp: Tensor, rest: Tensor, ke: float, kd: float) -> Tensor:
        return torch.empty_like(x)

    @springs.register_fake
    def _(x, v, sp, rest, ke, kd):
        return torch.empty_like(x)

    @torch.library.custom_op(f"{ns}::springs_backward", mutates_args=())
    def springs_backward(
        x: Tensor, v: Tensor, sp: Tensor, rest: Tensor, ke: float, kd: float, g: Tensor
    ) -> list[Tensor]:
        return [torch.empty_like(x), torch.empty_like(v)]

    @springs_backward.register_fake
    def _(x, v, sp, rest, ke, kd, g):
        return [torch.empty_like(x), torch.empty_like(v)]

    def springs_setup(ctx, inputs, output):
        ctx.save_for_backward(*inputs[:4])
        ctx.scalars = inputs[4:]

    def springs_bw(ctx, g):
        gx, gv = springs_backward(*ctx.saved_tensors, *ctx.scalars, g)
        return gx, gv, None, None, None, None

    springs.register_autograd(springs_bw, setup_context=springs_setup)

    @torch.library.custom_op(f"{ns}::integrate", mutates_args=())
    def integrate(
        x: Tensor, v: Tensor, f: Tensor, gravity: list[float], inv_mass: float, dt: float
    ) -> tuple[Tensor, Tensor]:
        return torch.empty_like(x), torch.empty_like(v)

    @integrate.register_fake
    def _(x, v, f, gravity, inv_mass, dt):
        return torch.empty_like(x), torch.empty_like(v)

    @torch.library.custom_op(f"{ns}::integrate_backward", mutates_args=())
    def integrate_backward(
        x: Tensor, v: Tensor, f: Tensor, gravity: list[float], inv_mass: float, dt: float, gx: Tensor, gv: Tensor
    ) -> list[Tensor]:
        return [torch.empty_like(x), torch.empty_like(v), torch.empty_like(f)]

    @integrate_backward.register_fake
    def _(x, v, f, gravity, inv_mass, dt, gx, gv):
        return [torch.empty_like(x), torch.empty_like(v), torch.empty_like(f)]

    def integrate_setup(ctx, inputs, output):
        ctx.save_for_backward(*inputs[:3])
        ctx.scalars = inputs[3:]

    def integrate_bw(ctx, gx, gv):
        a, b, c = integrate_backward(*ctx.saved_tensors, *ctx.scalars, gx, gv)
        return a, b, c, None, None, None

    integrate.register_autograd(integrate_bw, setup_context=integrate_setup)
    _FLOOR_OPS.update(springs=springs, integrate=integrate)
    return springs, integrate


def make_torch_compile_floor(sc: cloth.Scene, lr: float, backend: str = "inductor"):
    """The compiled one-step path with two ``custom_op`` s doing nothing (see the module's docstring):
    ``(iteration, None)`` (its values mean nothing)."""
    import torch

    from .training_paths import _torch_loop, _torch_state

    springs, integrate = _floor_ops()
    t, _ = _torch_state(sc)
    sp, rest = t["springs"], t["rest"]
    gravity = list(cloth.GRAVITY)

    @torch.compile(fullgraph=True, backend=backend)
    def one_step(x, v):
        f = springs(x, v, sp, rest, cloth.KE, cloth.KD)
        return integrate(x, v, f, gravity, cloth.INV_MASS, cloth.DT)

    def rollout(x0, v0):
        x, v = x0, v0
        for _ in range(sc.steps):
            x, v = one_step(x, v)
        return x

    return _torch_loop(sc, lr, rollout)[0], None


# (row name, framework module, factory): a floor, then a reference
FLOORS: list[tuple[str, str, Callable]] = [
    ("floor: the kernels alone (recorded wp.launch commands)", "warp", make_kernels),
    ("reference: torch.compile of a step of 2 no-op custom_ops", "torch", make_torch_compile_floor),
]
