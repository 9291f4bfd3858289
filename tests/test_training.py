"""Training through an op (issue 49): the cloth rollout of ``examples/cloth.py`` trained through
every path of the training benchmark gives Warp's Tape gradient; a Python-function op's forward
keeps its ``wp.Tape`` for the backward (the function runs once per forward+backward) and releases
it. Small sizes (a 4x4 cloth, 4 steps): the timing is the benchmark's (``--training``)."""

from __future__ import annotations

import gc
import importlib.util
import weakref

import numpy as np
import pytest
import warp as wp

import interop
from benchmarks.training_paths import PATHS
from examples import cloth

SCENE = cloth.scene(4, 4)


@pytest.fixture(scope="module")
def tape_gradient():
    ref = cloth.WarpTapeLoop(SCENE, "cpu", lr=0.0)
    ref.iteration()
    return ref.gradient()


@pytest.mark.parametrize("path", PATHS, ids=[p[0] for p in PATHS])
def test_path_gradient_equals_the_tape(path, tape_gradient):
    name, module, _, make = path
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} not installed")
    kw = {"backend": "aot_eager"} if make.__name__ == "make_torch_compile" else {}
    it, grad = make(SCENE, 0.0, **kw)
    losses = [it() for _ in range(2)]
    assert losses[0] == pytest.approx(losses[1], rel=1e-6)  # lr 0: the same iteration twice
    assert np.abs(tape_gradient).max() > 0
    np.testing.assert_allclose(grad(), tape_gradient, rtol=1e-4, atol=1e-7)


# ---- a Python-function op keeps its tape --------------------------------------------------------
RUNS: list = []  # a weak reference to each run's intermediate forces (the tape keeps them alive)


def counted_step(
    x: wp.array(dtype=wp.vec3),
    v: wp.array(dtype=wp.vec3),
    springs: wp.array(dtype=wp.int32),
    rest: wp.array(dtype=float),
    gravity: wp.vec3,
    dt: float,
    x_out: wp.array(dtype=wp.vec3),
    v_out: wp.array(dtype=wp.vec3),
):
    f = wp.zeros(x.shape[0], dtype=wp.vec3, device=x.device, requires_grad=True)
    RUNS.append(weakref.ref(f))
    wp.launch(
        cloth.eval_springs,
        dim=rest.shape[0],
        inputs=[x, v, springs, rest, cloth.KE, cloth.KD],
        outputs=[f],
        device=x.device,
    )
    wp.launch(
        cloth.integrate,
        dim=x.shape[0],
        inputs=[x, v, f, gravity, cloth.INV_MASS, dt],
        outputs=[x_out, v_out],
        device=x.device,
    )


COUNTED = interop.op(counted_step, outputs=["x_out", "v_out"], output_dims={"x_out": SCENE.n, "v_out": SCENE.n})


def _torch_rollout(torch, v0):
    dev = torch.device("cpu")
    x = torch.tensor(SCENE.x0, device=dev)
    sp, rest = torch.tensor(SCENE.springs, device=dev), torch.tensor(SCENE.rest, device=dev)
    v = v0
    for _ in range(SCENE.steps):
        x, v = COUNTED(x, v, sp, rest, cloth.GRAVITY, cloth.DT)
    return ((x - torch.tensor(SCENE.target, device=dev)) ** 2).sum(-1).mean()


def test_torch_function_op_runs_once_per_forward_and_backward(tape_gradient):
    torch = pytest.importorskip("torch")
    for k in range(3):  # the first rollout validates each call signature; later ones take the eager fast path
        RUNS.clear()
        v0 = torch.tensor(SCENE.v0, device=torch.device("cpu"), requires_grad=True)
        _torch_rollout(torch, v0).backward()
        if k:
            assert len(RUNS) == SCENE.steps  # the forward's runs only: the backward ran the kept tapes
        np.testing.assert_allclose(v0.grad.numpy(), tape_gradient, rtol=1e-5, atol=1e-8)


def test_torch_kept_tape_is_released():
    torch = pytest.importorskip("torch")
    for _ in range(2):
        _torch_rollout(torch, torch.tensor(SCENE.v0, device=torch.device("cpu"), requires_grad=True)).backward()
    # kept until the backward: the graph holds the tapes, which hold the intermediates
    RUNS.clear()
    loss = _torch_rollout(torch, torch.tensor(SCENE.v0, device=torch.device("cpu"), requires_grad=True))
    gc.collect()
    assert all(r() is not None for r in RUNS)
    loss.backward()
    gc.collect()
    assert all(r() is None for r in RUNS)  # released by the backward, though the loss is still held
    # a graph dropped without a backward frees its tapes with it
    RUNS.clear()
    loss = _torch_rollout(torch, torch.tensor(SCENE.v0, device=torch.device("cpu"), requires_grad=True))
    del loss
    gc.collect()
    assert RUNS and all(r() is None for r in RUNS)


def test_torch_kept_tape_second_backward_replays(tape_gradient):
    torch = pytest.importorskip("torch")
    for _ in range(2):
        _torch_rollout(torch, torch.tensor(SCENE.v0, device=torch.device("cpu"), requires_grad=True)).backward()
    v0 = torch.tensor(SCENE.v0, device=torch.device("cpu"), requires_grad=True)
    loss = _torch_rollout(torch, v0)
    loss.backward(retain_graph=True)
    first = v0.grad.clone()
    v0.grad = None
    loss.backward()  # the tapes were released: the function is replayed under new ones
    np.testing.assert_allclose(v0.grad.numpy(), first.numpy(), rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(first.numpy(), tape_gradient, rtol=1e-5, atol=1e-8)
