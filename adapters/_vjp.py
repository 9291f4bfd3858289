"""Reverse mode of one call through each framework's own autograd, for
:func:`interop.check_gradients`: ``vjp(fw, op, args, diff, cotangents)`` calls ``op(*args)`` and
returns the gradients of ``sum_k <cotangents[k], result_k>`` with respect to ``args[i]`` for ``i`` in
``diff`` (None for one the result does not depend on). Each framework is imported only here, when
its arrays were passed. NumPy and CuPy arrays go through Warp's ``wp.Tape`` (their views as Warp
arrays)."""

from __future__ import annotations

from typing import Any, Sequence

import warp as wp

import interop


def _results(res: Any) -> tuple:
    return res if isinstance(res, tuple) else (res,)


def vjp(fw: str, op: Any, args: Sequence[Any], diff: Sequence[int], cotangents: Sequence[Any]) -> list:
    return _BY_FRAMEWORK.get(fw, _warp)(op, list(args), diff, cotangents)


def _torch(op, args, diff, cts):
    import torch

    for i in diff:
        args[i] = args[i].detach().clone().requires_grad_(True)
    outs = _results(op(*args))
    grads = torch.autograd.grad(outs, [args[i] for i in diff], grad_outputs=list(cts), allow_unused=True)
    return list(grads)


def _jax(op, args, diff, cts):
    import jax

    def f(*d):
        full = list(args)
        for i, x in zip(diff, d):
            full[i] = x
        return _results(op(*full))

    _, back = jax.vjp(f, *[args[i] for i in diff])
    return list(back(tuple(cts)))


def _paddle(op, args, diff, cts):
    import paddle

    for i in diff:
        args[i] = args[i].detach().clone()
        args[i].stop_gradient = False
    outs = _results(op(*args))
    return list(paddle.grad(list(outs), [args[i] for i in diff], grad_outputs=list(cts), allow_unused=True))


def _warp(op, args, diff, cts):
    fw_args = [interop.convert(a, to="warp") if interop._frameworks.framework_of(a) else a for a in args]
    for i in diff:
        fw_args[i] = wp.clone(fw_args[i], requires_grad=True)
    tape = wp.Tape()
    with tape:
        outs = _results(op(*fw_args))
    seeds = {}
    for o, c in zip(outs, cts):
        g = interop.convert(c, to="warp")
        seeds[o] = g if g.dtype == o.dtype else wp.array(g.numpy(), dtype=o.dtype, shape=o.shape, device=o.device)
    tape.backward(grads=seeds)
    return [fw_args[i].grad for i in diff]


_BY_FRAMEWORK = {"torch": _torch, "jax": _jax, "paddle": _paddle}
