"""Train the initial velocities of a falling cloth through a differentiable rollout in PyTorch.

    python examples/train_cloth_torch.py [--side 16] [--steps 50] [--iters 10] [--checkpoint 10 | --compile 10]
                                         [--function] [--autocast]

Each step is two interop ops (``examples/cloth.py``: springs, then integrate with a ``wp.vec3``
gravity given as a tuple); ``--function`` uses the Python-function op that launches both kernels
(its forward keeps its ``wp.Tape`` for the backward); ``--checkpoint K`` recomputes chunks of K
steps in the backward (``torch.utils.checkpoint``, non-reentrant); ``--compile K`` runs the rollout as
``torch.compile(fullgraph=True)`` calls of K steps each; ``--autocast`` runs the iteration under
``torch.autocast("cpu", torch.bfloat16)`` with the initial velocities passed through a
``torch.nn.Linear`` (a stand-in for a model feeding the simulation): its output is bfloat16, the
ops cast it to their float32 parameters and send its gradient back in bfloat16. Small and fast by
default.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
from torch.utils.checkpoint import checkpoint

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from examples import cloth  # noqa: E402


def train(
    side: int = 16,
    steps: int = 50,
    iters: int = 10,
    lr: float = 1000.0,
    function: bool = False,
    chunk: int = 0,
    compiled: int = 0,
    backend: str = "inductor",
    autocast: bool = False,
):
    """Returns the loss of each iteration and the initial velocities learnt. ``chunk``: steps per
    checkpointed chunk; ``compiled``: steps per ``torch.compile`` call (0: neither), compiled by
    ``backend``; ``autocast``: the iteration under ``torch.autocast`` (bfloat16), the velocities
    through a Linear first."""
    sc = cloth.scene(side, steps)
    springs_op, integrate_op, step_op = cloth.ops(sc.n)
    cpu = torch.device("cpu")
    x0, target = torch.tensor(sc.x0, device=cpu), torch.tensor(sc.target, device=cpu)
    springs, rest = torch.tensor(sc.springs, device=cpu), torch.tensor(sc.rest, device=cpu)
    v0 = torch.tensor(sc.v0, device=cpu, requires_grad=True)
    # a model whose output feeds the simulation (here the identity, frozen): under autocast a Linear
    # computes in bfloat16, so the first step's ops receive bfloat16 velocities
    head = cloth.autocast_head(cpu) if autocast else None

    def run(x, v, k):
        for _ in range(k):
            if function:
                x, v = step_op(x, v, springs, rest, cloth.GRAVITY, cloth.DT)
            else:
                f = springs_op(x, v, springs, rest, cloth.KE, cloth.KD)
                x, v = integrate_op(x, v, f, cloth.GRAVITY, cloth.INV_MASS, cloth.DT)
        return x, v

    # one compiled call runs k steps (k is a constant of the compiled code: the last, shorter chunk
    # compiles once more); its per-call cost (guards, AOTAutograd's wrappers, the backward node) is
    # paid once per chunk instead of once per step
    run_compiled = torch.compile(run, fullgraph=True, backend=backend) if compiled else None

    def rollout(v):
        if not chunk and not compiled:
            return run(x0, v, steps)[0]
        x, done = x0, 0
        while done < steps:
            k = min(chunk or compiled, steps - done)
            if compiled:
                x, v = run_compiled(x, v, k)
            else:
                x, v = checkpoint(run, x, v, k, use_reentrant=False)
            done += k
        return x

    opt = torch.optim.SGD([v0], lr=lr)
    losses = []
    for _ in range(iters):
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            loss = ((rollout(head(v0) if autocast else v0) - target) ** 2).sum(-1).mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, v0.detach()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--side", type=int, default=16)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--function", action="store_true")
    ap.add_argument("--checkpoint", type=int, default=0, metavar="K")
    ap.add_argument("--compile", type=int, default=0, metavar="K")
    ap.add_argument("--autocast", action="store_true")
    a = ap.parse_args()
    if a.checkpoint and a.compile:
        ap.error("--checkpoint and --compile are two ways to run the rollout: pick one")
    losses, _ = train(
        a.side, a.steps, a.iters, function=a.function, chunk=a.checkpoint, compiled=a.compile, autocast=a.autocast
    )
    for i, loss in enumerate(losses):
        print(f"iteration {i}: loss {loss:.4e}")
