"""Training through an op (issue 49): the cloth rollout of ``examples/cloth.py`` trained through
every path of the training benchmark gives Warp's Tape gradient; a Python-function op's forward
keeps its ``wp.Tape`` for the backward (the function runs once per forward+backward) and releases
it. Small sizes (a 4x4 cloth, 4 steps): the timing is the benchmark's (``--training``)."""

from __future__ import annotations

import gc
import importlib
import importlib.util
import os
import weakref

import numpy as np
import pytest
import warp as wp
from _grads import grad_of_sum

import interop
from benchmarks.training_paths import PATHS, grad_rtol
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
    kw = {}
    if make.__name__ in ("make_torch_compile", "make_torch_compile_chunks"):
        kw = {"backend": "aot_eager"}  # the first call is compiled cold: the vec3 is a tuple
    it, grad = make(SCENE, 0.0, **kw)
    losses = [it() for _ in range(2)]
    assert losses[0] == pytest.approx(losses[1], rel=1e-6)  # lr 0: the same iteration twice
    assert np.abs(tape_gradient).max() > 0
    g = grad()
    assert g.dtype == np.float32  # the caller's dtype (the autocast path's leaf is float32)
    assert cloth.rel_err(g, tape_gradient) <= grad_rtol(make)
    if make.__name__ == "make_torch_autocast":
        # the ops' gradient went back to the Linear's bfloat16 output (the Tape's, rounded to
        # bfloat16) and through the identity to the float32 leaf: exactly the rounded Tape gradient
        import torch

        rounded = torch.from_numpy(tape_gradient).bfloat16().float().numpy()
        assert not np.array_equal(rounded, tape_gradient)
        np.testing.assert_array_equal(g, rounded)
    else:
        np.testing.assert_allclose(g, tape_gradient, rtol=1e-4, atol=1e-7)


def test_kernel_floor_is_the_tape_loop_without_its_launches(tape_gradient):
    """The training benchmark's kernel floor (recorded launch commands, replayed) computes what
    Warp's Tape loop computes: the same gradient, bit for bit, and the same loss."""
    from benchmarks.training_floors import make_kernels

    it, grad = make_kernels(SCENE, 0.0)
    ref = cloth.WarpTapeLoop(SCENE, "cpu", lr=0.0)
    losses = [it() for _ in range(2)]  # a second iteration: the gradients were cleared between
    assert losses[0] == losses[1] == ref.iteration()
    np.testing.assert_array_equal(grad(), tape_gradient)


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch not installed")
def test_torch_compile_floor_runs_as_one_graph():
    """The compiled floor (two custom_ops doing nothing) traces as one graph (``fullgraph=True``),
    its backward reaching the initial velocities."""
    from benchmarks.training_floors import make_torch_compile_floor

    it, grad = make_torch_compile_floor(SCENE, 0.0, backend="aot_eager")
    assert grad is None
    it()
    it()


@pytest.mark.parametrize("fw", [f for f in ("torch", "paddle", "jax") if importlib.util.find_spec(f)])
@pytest.mark.parametrize("fn", ["clone_then_square_fn", "struct_then_square_fn"])
def test_function_op_handing_its_input_on_keeps_the_gradient(fw, fn):
    """A function that copies its input (``wp.clone``) or puts it in a struct it makes, then launches:
    the kept tape's forward ran it over inputs without a gradient, so Warp recorded no copy (the
    struct kept none): zero gradients from the second call on (torch, Paddle; JAX always for the
    copy). Every call gives wp.Tape's gradient, 2 x."""
    import catalogue as cat

    op = interop.op(getattr(cat, fn))
    xn = np.linspace(-1, 1, 5).astype(np.float32)
    for _ in range(3):
        np.testing.assert_allclose(grad_of_sum(fw, op, xn), 2 * xn, rtol=1e-6)


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


def _tensors(fw: str, device: str) -> dict:
    names = ("x0", "springs", "rest", "target")
    if fw == "torch":
        import torch

        return {k: torch.tensor(getattr(SCENE, k), device=torch.device(device)) for k in names}
    import paddle

    place = paddle.CPUPlace() if device == "cpu" else paddle.CUDAPlace(0)
    return {k: paddle.to_tensor(getattr(SCENE, k), place=place) for k in names}


def _rollout(fw: str, v0, device: str = "cpu"):
    """The loss of a rollout of the counted Python-function op from velocities ``v0``."""
    t = _tensors(fw, device)
    x, v = t["x0"], v0
    for _ in range(SCENE.steps):
        x, v = COUNTED(x, v, t["springs"], t["rest"], cloth.GRAVITY, cloth.DT)
    return ((x - t["target"]) ** 2).sum(-1).mean()


def _v0(fw: str, device: str = "cpu"):
    if fw == "torch":
        import torch

        return torch.tensor(SCENE.v0, device=torch.device(device), requires_grad=True)
    import paddle

    place = paddle.CPUPlace() if device == "cpu" else paddle.CUDAPlace(0)
    return paddle.to_tensor(SCENE.v0, place=place, stop_gradient=False)


def _skip_without_cuda_build(fw: str, device: str) -> None:
    if device != "cpu":
        from _cuda import framework_cuda_missing

        why = framework_cuda_missing(fw)
        if why is not None:
            pytest.skip(why)


FRAMEWORKS = [
    pytest.param(fw, marks=pytest.mark.skipif(importlib.util.find_spec(fw) is None, reason=f"{fw} not installed"))
    for fw in ("torch", "paddle")
]


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_function_op_runs_once_per_forward_and_backward(fw, device, tape_gradient):
    _skip_without_cuda_build(fw, device)
    for k in range(3):  # the first rollout validates each call signature; later ones take the eager fast path
        RUNS.clear()
        v0 = _v0(fw, device)
        _rollout(fw, v0, device).backward()
        if k:
            assert len(RUNS) == SCENE.steps  # the forward's runs only: the backward ran the kept tapes
        g = v0.grad.cpu().numpy() if fw == "torch" else v0.grad.numpy()
        np.testing.assert_allclose(g, tape_gradient, rtol=1e-4 if device != "cpu" else 1e-5, atol=1e-8)


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_kept_tape_is_released(fw, device):
    _skip_without_cuda_build(fw, device)
    for _ in range(2):
        _rollout(fw, _v0(fw, device), device).backward()
    # kept until the backward: the graph holds the tapes, which hold the intermediates
    RUNS.clear()
    loss = _rollout(fw, _v0(fw, device), device)
    gc.collect()
    assert len(RUNS) == SCENE.steps and all(r() is not None for r in RUNS)
    loss.backward()
    gc.collect()
    assert all(r() is None for r in RUNS)  # released by the backward, though the loss is still held
    # a graph dropped without a backward frees its tapes with it
    RUNS.clear()
    loss = _rollout(fw, _v0(fw, device), device)
    del loss
    gc.collect()
    assert RUNS and all(r() is None for r in RUNS)


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_kept_tape_second_backward_replays(fw, tape_gradient):
    for _ in range(2):
        _rollout(fw, _v0(fw)).backward()
    v0 = _v0(fw)
    loss = _rollout(fw, v0)
    if fw == "torch":
        import torch

        first = torch.autograd.grad(loss, v0, retain_graph=True)[0].numpy()
        RUNS.clear()
        again = torch.autograd.grad(loss, v0)[0].numpy()  # the tapes were released: replayed under new ones
    else:
        import paddle

        first = paddle.grad(loss, v0, retain_graph=True)[0].numpy()
        RUNS.clear()
        again = paddle.grad(loss, v0)[0].numpy()
    assert len(RUNS) == SCENE.steps
    np.testing.assert_allclose(again, first, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(first, tape_gradient, rtol=1e-5, atol=1e-8)


# ---- the examples train as Warp's own loop does ---------------------------------------------------
EXAMPLES = [
    ("torch", "train_cloth_torch", {}),
    ("torch", "train_cloth_torch", {"function": True}),
    ("torch", "train_cloth_torch", {"chunk": 3}),
    # torch.utils.checkpoint recomputes the function op's saved tensors elsewhere: its kept tape moves
    ("torch", "train_cloth_torch", {"function": True, "chunk": 2}),
    # torch.compile of 2-step chunks (aot_eager: inductor's C++ build takes seconds)
    ("torch", "train_cloth_torch", {"compiled": 2, "backend": "aot_eager"}),
    # a Linear under torch.autocast (bfloat16) feeds the rollout: eager, compiled, the function op
    ("torch", "train_cloth_torch", {"autocast": True}),
    ("torch", "train_cloth_torch", {"autocast": True, "compiled": 2, "backend": "aot_eager"}),
    ("torch", "train_cloth_torch", {"autocast": True, "function": True, "chunk": 2}),
    ("jax", "train_cloth_jax", {}),
    ("jax", "train_cloth_jax", {"remat": True}),
    ("paddle", "train_cloth_paddle", {"function": True}),
]


@pytest.mark.parametrize("fw, name, kw", EXAMPLES, ids=[f"{n}-{'-'.join(k) or 'plain'}" for _, n, k in EXAMPLES])
def test_example_loss_curve_is_warps(fw, name, kw):
    if importlib.util.find_spec(fw) is None:
        pytest.skip(f"{fw} not installed")
    mod = importlib.import_module(f"examples.{name}")
    losses, _ = mod.train(side=4, steps=4, iters=3, lr=1000.0, **kw)
    ref = cloth.WarpTapeLoop(cloth.scene(4, 4), "cpu", lr=1000.0)
    expected = [ref.iteration() for _ in range(3)]
    assert expected[-1] < expected[0]
    if kw.get("autocast"):
        # the first iteration starts from velocities bfloat16 holds exactly (zeros): Warp's loss; then
        # the velocities learnt pass through bfloat16, and the losses follow Warp's to its precision
        assert losses[0] == pytest.approx(expected[0], rel=1e-6)
        np.testing.assert_allclose(losses, expected, rtol=1e-2)
    else:
        np.testing.assert_allclose(losses, expected, rtol=1e-4)


# ---- kept tapes with strided inputs and upstream gradients ----------------------------------------
def _catalogue_function_op():
    import sys

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import catalogue

    return interop.op(catalogue.function_op_fn)  # out = 3 a^2 + b, two launches and an intermediate


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_kept_tape_strided_inputs_and_gradients(fw):
    """Strided inputs (a packed copy carries the gradient) and a strided upstream gradient, on the
    eager fast path (the second and third calls): the gradients are the formula's."""
    op = _catalogue_function_op()
    rng = np.random.default_rng(0)
    a_np, b_np, w_np = (rng.standard_normal(16).astype(np.float32) for _ in range(3))
    for _ in range(3):
        if fw == "torch":
            import torch

            cpu = torch.device("cpu")
            a = torch.tensor(np.repeat(a_np, 2), device=cpu, requires_grad=True)
            b = torch.tensor(b_np, device=cpu, requires_grad=True)
            w = torch.tensor(np.stack([w_np, w_np], 1), device=cpu)[:, 0]  # strided weights
            out = op(a[::2], b)
            (out * w).sum().backward()
            ga, gb = a.grad.numpy()[::2], b.grad.numpy()
        else:
            import paddle

            cpu = paddle.CPUPlace()
            a = paddle.to_tensor(np.repeat(a_np, 2), place=cpu, stop_gradient=False)
            b = paddle.to_tensor(b_np, place=cpu, stop_gradient=False)
            out = op(a[::2], b)
            (out * paddle.to_tensor(w_np, place=cpu)).sum().backward()
            ga, gb = a.grad.numpy()[::2], b.grad.numpy()
        np.testing.assert_allclose(out.detach().numpy(), 3 * a_np**2 + b_np, rtol=1e-6)
        np.testing.assert_allclose(ga, 6 * a_np * w_np, rtol=1e-5)
        np.testing.assert_allclose(gb, w_np, rtol=1e-6)


def _pack_clone(t):
    return t.clone()


def _unpack_same(t):
    return t


def _unpack_strided(t):
    # the same values in another layout (every other element of a buffer twice the size)
    if type(t).__module__.startswith("paddle"):
        import paddle

        return paddle.stack([t, t], axis=-1)[..., 0]
    import torch

    return torch.stack([t, t], -1)[..., 0]


@pytest.mark.parametrize("fw", FRAMEWORKS)
@pytest.mark.parametrize("unpack", [_unpack_same, _unpack_strided], ids=["same-layout", "strided"])
def test_kept_tape_under_saved_tensor_hooks(fw, unpack):
    """Saved-tensor hooks (here: pack a copy) hand the node's backward other tensors than the
    forward's, and the forward's are freed (then overwritten) before the backward: the kept tape
    is moved onto the saved copies (the same layout) or the function replays over them (another
    layout). It read the freed memory before: NaN or wrong gradients from the second call on."""
    op = _catalogue_function_op()
    rng = np.random.default_rng(1)
    a_np, b_np, w_np = (rng.standard_normal(4096).astype(np.float32) for _ in range(3))
    for _ in range(3):  # the first call takes the dispatcher; the later ones the eager fast path
        if fw == "torch":
            import torch

            cpu = torch.device("cpu")
            p = torch.tensor(a_np, device=cpu, requires_grad=True)
            b = torch.tensor(b_np, device=cpu, requires_grad=True)
            with torch.autograd.graph.saved_tensors_hooks(_pack_clone, unpack):
                out = op(p * 1.0, b)  # (p * 1.0: a tensor only the node's saved copy outlives)
            junk = [torch.full((4096,), float("nan"), device=cpu) for _ in range(8)]
            (out * torch.tensor(w_np, device=cpu)).sum().backward()
        else:
            import paddle

            cpu = paddle.CPUPlace()
            p = paddle.to_tensor(a_np, place=cpu, stop_gradient=False)
            b = paddle.to_tensor(b_np, place=cpu, stop_gradient=False)
            with paddle.autograd.saved_tensors_hooks(_pack_clone, unpack):
                out = op(p * 1.0, b)
            junk = [paddle.to_tensor(np.full(4096, np.nan, np.float32), place=cpu) for _ in range(8)]
            (out * paddle.to_tensor(w_np, place=cpu)).sum().backward()
        del junk
        np.testing.assert_allclose(out.detach().numpy(), 3 * a_np**2 + b_np, rtol=1e-6)
        np.testing.assert_allclose(p.grad.numpy(), 6 * a_np * w_np, rtol=1e-5)
        np.testing.assert_allclose(b.grad.numpy(), w_np, rtol=1e-6)


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_saved_tensor_hook_with_another_dtype_is_refused_not_read(fw):
    """A saved-tensor hook that hands the backward a float64 copy of a float32 tensor: the backward
    refuses it with the op's own error (a call would), on the first call and on the eager fast
    path, where it was read as float32 bytes before (a wrong gradient). Paddle raises a backward's
    error as its OSError, the op's message inside."""
    op = _catalogue_function_op()
    for _ in range(3):
        if fw == "torch":
            import torch

            cpu = torch.device("cpu")
            p = torch.ones(8, device=cpu, requires_grad=True)
            b = torch.ones(8, device=cpu, requires_grad=True)
            with torch.autograd.graph.saved_tensors_hooks(lambda t: t.double(), lambda t: t):
                out = op(p * 1.0, b)
            with pytest.raises(interop.ArgumentError, match="float64"):
                out.sum().backward()
        else:
            import paddle

            cpu = paddle.CPUPlace()
            p = paddle.to_tensor(np.ones(8, np.float32), place=cpu, stop_gradient=False)
            b = paddle.to_tensor(np.ones(8, np.float32), place=cpu, stop_gradient=False)
            with paddle.autograd.saved_tensors_hooks(lambda t: t.astype("float64"), lambda t: t):
                out = op(p * 1.0, b)
            with pytest.raises(OSError, match="ArgumentError.*float64"):
                out.sum().backward()


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_vector_tuple_on_the_fast_path_is_still_checked(fw):
    """A vec3 given as a tuple of numbers takes the eager fast path once its signature is known
    (tuple length and component types are part of it): a tuple of another length is refused."""
    for _ in range(2):
        _rollout(fw, _v0(fw)).backward()
    x = _v0(fw)
    if fw == "torch":
        import torch

        cpu = torch.device("cpu")
        sp, rest = torch.tensor(SCENE.springs, device=cpu), torch.tensor(SCENE.rest, device=cpu)
    else:
        import paddle

        sp, rest = (paddle.to_tensor(a, place=paddle.CPUPlace()) for a in (SCENE.springs, SCENE.rest))
    with pytest.raises(Exception, match=r"counted_step.*gravity"):
        COUNTED(x, x, sp, rest, (0.0, -9.8), cloth.DT)
    RUNS.clear()
    COUNTED(x, x, sp, rest, (0, -9.8, 0.0), cloth.DT)  # other component types: a signature of its own
    assert len(RUNS) == 1
