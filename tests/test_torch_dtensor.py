"""DTensor through ops: two gloo ranks on the CPU, values and gradients equal to one process,
collectives counted with CommDebugMode.

One launch of two processes runs every scenario (a launch costs seconds of start-up and Warp
module loading). Each rank compares what it got with the same work done on plain tensors in
that process, counts the collectives of the forward and of the backward
(``torch.distributed.tensor.debug.CommDebugMode``), notes the placements, and writes it all to
a JSON file; the tests below assert on both ranks' files. The ranks are started with a
deadline and killed by their own PIDs if they miss it.
"""

from __future__ import annotations

import json
import os
import socket
import time
import traceback

import numpy as np
import pytest
import warp as wp

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

import catalogue  # noqa: E402

import interop  # noqa: E402
from adapters.torch import compat as _torch_compat  # noqa: E402

WORLD = 2
DEADLINE_S = 900  # both ranks, every scenario (Warp compiles this module's kernels the first time)


# ---- kernels and ops ----------------------------------------------------------------------
@wp.kernel
def scale_square(a: wp.array2d(dtype=float), s: float, out: wp.array2d(dtype=float)):
    i, j = wp.tid()
    out[i, j] = s * a[i, j] * a[i, j]


@wp.kernel
def vscale(v: wp.array(dtype=wp.vec3), s: float, out: wp.array(dtype=wp.vec3)):
    i = wp.tid()
    out[i] = v[i] * s


@wp.kernel
def sin_cube(a: wp.array(dtype=float), c: wp.array(dtype=float), d: wp.array(dtype=float)):
    i = wp.tid()
    c[i] = wp.sin(a[i])
    d[i] = a[i] * a[i] * a[i]


@wp.kernel
def scale_by_count(x: wp.array(dtype=float), k: wp.array(dtype=wp.int32), out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = x[i] * float(k[i])


@wp.kernel
def row_sum(x: wp.array2d(dtype=float), acc: wp.array(dtype=float), twice: wp.array2d(dtype=float)):
    i, j = wp.tid()
    wp.atomic_add(acc, i, x[i, j] * x[i, j])
    twice[i, j] = 2.0 * x[i, j]


@wp.kernel
def total(x: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    wp.atomic_add(out, 0, x[i] * x[i])


@wp.kernel
def soft_wave(h: wp.array2d(dtype=float), out: wp.array2d(dtype=float)):
    i, j = wp.tid()
    out[i, j] = wp.sin(h[i, j]) * 0.5 + h[i, j] * h[i, j]


PLAIN = interop.op(scale_square, name="tt_dtensor::plain")
ROWS = interop.op(scale_square, name="tt_dtensor::rows", partition="rows")
ELEM = interop.op(scale_square, name="tt_dtensor::elem", partition="elementwise")
ROWS_STATIC = interop.op(
    scale_square, name="tt_dtensor::rows_static", partition="rows", launch_dims=(7, 3), output_dims=(7, 3)
)
ROWS_VEC = interop.op(vscale, name="tt_dtensor::rows_vec", partition="rows")
ROWS_MULTI = interop.op(sin_cube, name="tt_dtensor::rows_multi", outputs=2, partition="rows")
ROWS_INDEX = interop.op(scale_by_count, name="tt_dtensor::rows_index", partition="rows")
ROWS_INOUT = interop.op(row_sum, name="tt_dtensor::rows_inout", in_out=["acc"], outputs=2, partition="rows")
PLAIN_INOUT = interop.op(row_sum, name="tt_dtensor::plain_inout", in_out=["acc"], outputs=2)
ROWS_TOTAL = interop.op(total, name="tt_dtensor::rows_total", partition="rows", output_dims=1)
WAVE = interop.op(soft_wave, name="tt_dtensor::wave")
WAVE_ELEM = interop.op(soft_wave, name="tt_dtensor::wave_elem", partition="elementwise")


# ---- what each rank runs ----------------------------------------------------------------------
def _comms(cm) -> dict:
    if cm is None:
        return {"not counted": 0}
    return {str(k).split("'")[1] if "'" in str(k) else str(k): int(v) for k, v in cm.get_comm_counts().items()}


def _err(got, ref) -> float:
    got = got.full_tensor() if hasattr(got, "full_tensor") else got
    return float((got.detach().double() - ref.detach().double()).abs().max()) if ref.numel() else 0.0


def _placements(t) -> list:
    return [repr(p) for p in t.placements] if hasattr(t, "placements") else ["plain"]


def _compare(op, make_args, place, *, kwargs=None, grad=True, in_out=(), count=True):
    """Run ``op`` on DTensors (``place(k, tensor)`` -> DTensor or None to keep a number) and on plain
    tensors; the errors of values and gradients, the collectives and the placements."""
    import contextlib

    from torch.distributed.tensor.debug import CommDebugMode

    # torch.compile refuses to trace under a TorchDispatchMode such as CommDebugMode
    comms = CommDebugMode if count else contextlib.nullcontext
    kwargs = kwargs or {}
    plain = make_args()
    dargs = [place(k, a) if isinstance(a, torch.Tensor) else a for k, a in enumerate(make_args())]
    leaves = [
        k
        for k, a in enumerate(plain)
        if grad and k not in in_out and isinstance(a, torch.Tensor) and a.is_floating_point()
    ]
    for k in leaves:
        plain[k].requires_grad_(True)
        dargs[k].requires_grad_(True)
    ref = op(*plain, **kwargs)
    ref = ref if isinstance(ref, tuple) else (ref,)
    with comms() as fwd:
        got = op(*dargs, **kwargs)
    got = got if isinstance(got, tuple) else (got,)
    r = {
        "err": max(_err(g, x) for g, x in zip(got, ref)),
        "fwd": _comms(fwd),
        "out": [_placements(g) for g in got],
    }
    if leaves:
        weights = [torch.linspace(-1.0, 1.0, x.numel(), device="cpu").reshape(x.shape) for x in ref]
        torch.autograd.backward(ref, weights)
        # the same upstream gradients on every rank, placed like the outputs (a local slice)
        dweights = [_placed_like(w, g) for w, g in zip(weights, got)]
        with comms() as bwd:
            torch.autograd.backward(got, dweights)
        r["bwd"] = _comms(bwd)
        r["grad_err"] = max(_err(dargs[k].grad, plain[k].grad) for k in leaves)
        r["grads"] = [_placements(dargs[k].grad) for k in leaves]
    return r


def _placed_like(w, like):
    """``w`` as a DTensor placed like ``like``: replicated, then sliced on each rank (no collective)."""
    from torch.distributed.tensor import DTensor, Replicate

    if not hasattr(like, "placements"):
        return w
    mesh = like.device_mesh
    return DTensor.from_local(w, mesh, [Replicate()] * mesh.ndim, run_check=False).redistribute(mesh, like.placements)


class _Layer(torch.nn.Module):
    """An op between two linear layers; notes the placements it saw."""

    def __init__(self, op):
        super().__init__()
        self.op = op
        self.seen: list = []

    def forward(self, h):
        out = self.op(h)
        self.seen = [_placements(h), _placements(out)]
        return out


def _mlp(op):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), _Layer(op), torch.nn.Linear(8, 3))


def _tensor_parallel(mesh, op) -> dict:
    """parallelize_module: ColwiseParallel keeps its output a DTensor (Shard(-1)), the op runs on it,
    RowwiseParallel takes it; loss and gradients as one process."""
    from torch.distributed.tensor.debug import CommDebugMode
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    ref, tp = _mlp(op), _mlp(op)  # the same seeded initial parameters
    parallelize_module(tp, mesh, {"0": ColwiseParallel(use_local_output=False), "2": RowwiseParallel()})
    x = torch.linspace(-1.0, 1.0, 5 * 4, device="cpu").reshape(5, 4)
    y_ref = ref(x)
    y_ref.square().sum().backward()
    with CommDebugMode() as cm:
        y = tp(x)
        y.square().sum().backward()
    named = dict(ref.named_parameters())
    return {
        "err": _err(y, y_ref),
        "grad_err": max(_err(p.grad, named[n].grad) for n, p in tp.named_parameters()),
        "seen": tp[1].seen,
        "comms": _comms(cm),
    }


def _fsdp2(mesh, rank: int) -> dict:
    """fully_shard: two SGD steps of an MLP with an op, each rank on its half of the batch, as one
    process on the whole batch."""
    from torch.distributed.fsdp import fully_shard

    ref, model = _mlp(WAVE_ELEM), _mlp(WAVE_ELEM)  # the same seeded initial parameters
    fully_shard(model[0], mesh=mesh)
    fully_shard(model[2], mesh=mesh)
    fully_shard(model, mesh=mesh)
    g = torch.Generator().manual_seed(1)
    xs, ys = torch.rand(2, 8, 4, generator=g, device="cpu"), torch.rand(2, 8, 3, generator=g, device="cpu")
    per = 8 // WORLD
    for m, part in ((ref, slice(None)), (model, slice(rank * per, (rank + 1) * per))):
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        for x, y in zip(xs, ys):
            opt.zero_grad()
            torch.nn.functional.mse_loss(m(x[part]), y[part]).backward()
            opt.step()
    named = dict(ref.named_parameters())
    moved = max(_err(p, q) for p, q in zip(ref.parameters(), _mlp(WAVE_ELEM).parameters()))
    return {"err": max(_err(p, named[n]) for n, p in model.named_parameters()), "moved": moved}


def _compiled(mesh, backend: str) -> dict:
    """torch.compile(fullgraph=True) of a rows op on a Shard(0) DTensor: values and gradients."""
    from torch.distributed.tensor import Shard

    torch._dynamo.reset()
    f = torch.compile(lambda a: ROWS(a, 2.0), backend=backend, fullgraph=True)
    # rank 1 compiles first, then rank 0 (uneven shards: 3 rows there, 4 here): with one on-disk
    # cache for both, rank 0 would load rank 1's graph (see _worker)
    a = _placer(mesh, Shard(0))(0, _x73())
    if dist.get_rank() == 0:
        dist.barrier()
    assert tuple(f(a).to_local().shape) == tuple(a.to_local().shape)
    if dist.get_rank() == 1:
        dist.barrier()
    return _compare(f, lambda: [_x73()], _placer(mesh, Shard(0)), count=False)


def _x73():
    return torch.linspace(-1.0, 1.0, 21, device="cpu").reshape(7, 3)


def _placer(mesh, *placements):
    """Arrays get ``placements``; scalars passed as 0-d tensors are replicated."""
    from torch.distributed.tensor import Replicate, distribute_tensor

    def place(k, t):
        return distribute_tensor(t, mesh, [Replicate()] * mesh.ndim if t.ndim == 0 else list(placements))

    return place


def _mutating_operator_refuses(mesh) -> dict:
    """The mutating operator itself (adapters.torch.bind) cannot move an in-out DTensor."""
    from torch.distributed.tensor import Shard, distribute_tensor

    import adapters.torch as atorch

    x = distribute_tensor(_x73(), mesh, [Shard(0)])
    acc = distribute_tensor(torch.zeros(7, device="cpu"), mesh, [Shard(0)])
    try:
        atorch.bind(PLAIN_INOUT)(x, acc)
    except Exception as e:
        return {"raised": f"{type(e).__name__}: {e}"}
    return {"raised": None}


def _scenarios(mesh, rank):
    from torch.distributed.tensor import Replicate, Shard

    R, S0, S1 = Replicate(), Shard(0), Shard(1)
    x7 = torch.linspace(-1.0, 1.0, 7, device="cpu")
    yield "plain_replicate", lambda: _compare(PLAIN, lambda: [_x73(), 2.0], _placer(mesh, R))
    yield "plain_shard0", lambda: _compare(PLAIN, lambda: [_x73(), 2.0], _placer(mesh, S0))
    yield "rows_shard0", lambda: _compare(ROWS, lambda: [_x73(), 2.0], _placer(mesh, S0))
    yield "rows_replicate", lambda: _compare(ROWS, lambda: [_x73(), 2.0], _placer(mesh, R))
    yield "rows_shard1", lambda: _compare(ROWS, lambda: [_x73(), 2.0], _placer(mesh, S1))
    yield "elementwise_shard1", lambda: _compare(ELEM, lambda: [_x73(), 2.0], _placer(mesh, S1))
    yield "elementwise_shard0", lambda: _compare(ELEM, lambda: [_x73(), 2.0], _placer(mesh, S0))
    yield (
        "rows_tensor_scalar",
        lambda: _compare(ROWS, lambda: [_x73(), torch.tensor(2.0, device="cpu")], _placer(mesh, S0)),
    )
    yield "rows_static_dims", lambda: _compare(ROWS_STATIC, lambda: [_x73(), 2.0], _placer(mesh, S0))
    yield (
        "rows_call_dims",
        lambda: _compare(
            ROWS, lambda: [_x73(), 2.0], _placer(mesh, S0), kwargs={"launch_dims": (7, 3), "output_dims": (7, 3)}
        ),
    )
    yield "rows_vec3", lambda: _compare(ROWS_VEC, lambda: [_x73(), 3.0], _placer(mesh, S0))
    yield "rows_multi_output", lambda: _compare(ROWS_MULTI, lambda: [x7.clone()], _placer(mesh, S0))
    yield (
        "rows_index",
        lambda: _compare(
            ROWS_INDEX, lambda: [x7.clone(), torch.arange(7, dtype=torch.int32, device="cpu")], _placer(mesh, S0)
        ),
    )
    yield (
        "rows_inout",
        lambda: _compare(ROWS_INOUT, lambda: [_x73(), torch.ones(7, device="cpu")], _placer(mesh, S0), in_out=(1,)),
    )
    yield (
        "rows_inout_no_grad",
        lambda: _compare(ROWS_INOUT, lambda: [_x73(), torch.ones(7, device="cpu")], _placer(mesh, S0), grad=False),
    )
    yield (
        "plain_inout_shard0_no_grad",
        lambda: _compare(PLAIN_INOUT, lambda: [_x73(), torch.ones(7, device="cpu")], _placer(mesh, S0), grad=False),
    )
    yield "rows_output_not_rows", lambda: _compare(ROWS_TOTAL, lambda: [x7.clone()], _placer(mesh, S0))
    yield "mutating_operator_refuses", lambda: _mutating_operator_refuses(mesh)
    for case in catalogue.CASES:
        args = case.make(np.random.default_rng(0), case.dtypes[0])
        for name, pl in (("replicate", R), ("shard0", S0)):
            yield (
                f"catalogue_{case.id}_{name}",
                lambda case=case, args=args, pl=pl: _compare(
                    case.op,
                    lambda: catalogue.to_torch_args(case, args, False),
                    _placer(mesh, pl),
                    kwargs=case.call_kwargs,
                    grad=case.differentiable,
                    in_out=case.in_out,
                ),
            )
    yield "tensor_parallel_elementwise", lambda: _tensor_parallel(mesh, WAVE_ELEM)
    yield "tensor_parallel_undeclared", lambda: _tensor_parallel(mesh, WAVE)
    yield "fsdp2", lambda: _fsdp2(mesh, rank)
    for backend in ("aot_eager", "inductor"):
        yield f"compile_{backend}", lambda backend=backend: _compiled(mesh, backend)


def _worker(rank: int, world: int, port: int, out_dir: str) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    # torch.compile's on-disk caches of its own per rank (inside the run's, removed with it): torch
    # 2.13's AOTAutograd cache keys a DTensor input by its global shape, so the rank compiling second
    # loads the other rank's graph for its uneven shard and fails ("expected size 4==3"; the same
    # with plain torch operators: docs/limitations.md, DTensor)
    base = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if base:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(base, f"dtensor-rank{rank}")
    dist.init_process_group("gloo", rank=rank, world_size=world)
    results = {}
    try:
        from torch.distributed.tensor import init_device_mesh

        mesh = init_device_mesh("cpu", (world,))
        for name, run in _scenarios(mesh, rank):
            t0 = time.monotonic()
            try:
                results[name] = run()
            except Exception as e:
                results[name] = {"error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()[-3000:]}
            results[name]["seconds"] = round(time.monotonic() - t0, 2)
    finally:
        with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
            json.dump(results, f)
        dist.destroy_process_group()
    os._exit(0)  # results are on disk; skip the interpreter's teardown (see test_torch_distributed.py)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    """Both ranks' results: two spawned processes, a deadline, and each killed by its PID if it misses it."""
    out = tmp_path_factory.mktemp("dtensor")
    # the kernels compiled once here, before two processes would compile them at the same time
    ROWS(torch.ones(2, 2, device="cpu"), 1.0)
    ctx = torch.multiprocessing.start_processes(
        _worker, args=(WORLD, _free_port(), str(out)), nprocs=WORLD, join=False, start_method="spawn"
    )
    deadline = time.monotonic() + DEADLINE_S
    try:
        while not ctx.join(timeout=5):
            if time.monotonic() > deadline:
                raise AssertionError(f"the {WORLD} ranks did not finish within {DEADLINE_S} s")
    finally:
        for p in ctx.processes:
            if p.is_alive():
                os.kill(p.pid, 9)
            p.join(10)
    results = [json.loads((out / f"rank{r}.json").read_text()) for r in range(WORLD)]
    return results


def _ok(ranks, name) -> list[dict]:
    """``name``'s result on every rank, failing with the rank's error if it raised."""
    got = [r[name] for r in ranks]
    # every rank's error: a rank that failed first makes the other's collective fail with "Connection
    # closed by peer", which alone does not say what happened
    errors = [
        f"rank {rank}, {name}: {res['error']}\n{res.get('trace', '')}" for rank, res in enumerate(got) if "error" in res
    ]
    assert not errors, "\n".join(errors)
    return got


TOL = 1e-5
S0, S1, R, P = ["Shard(dim=0)"], ["Shard(dim=1)"], ["Replicate()"], ["Partial(sum)"]

# declared ops on inputs they can take as they lie: (output placements, gradient placements);
# no collective in the forward or the backward
PER_SHARD = {
    "rows_shard0": ([S0], [S0]),
    "rows_replicate": ([R], [R]),
    "plain_replicate": ([R], [R]),
    "elementwise_shard0": ([S0], [S0]),
    "elementwise_shard1": ([S1], [S1]),
    # the gradient of a replicated scalar: each rank's sum over its rows, summed when read
    "rows_tensor_scalar": ([S0], [S0, P]),
    "rows_static_dims": ([S0], [S0]),
    "rows_call_dims": ([S0], [S0]),
    "rows_vec3": ([S0], [S0]),
    "rows_multi_output": ([S0, S0], [S0]),
    "rows_index": ([S0], [S0]),
    "rows_inout": ([S0, S0], [S0]),
    "rows_inout_no_grad": ([S0, S0], None),
}

# sharded where the op declared nothing that fits: redistributed first (the documented cost);
# the placement of each output (None: DTensor picks the cheaper of gathering and moving to Shard(0))
REDISTRIBUTED = {
    "plain_shard0": [R],
    "rows_shard1": None,
    "rows_output_not_rows": [R],  # an output whose first dim is not the launch's: replicated strategy only
    "plain_inout_shard0_no_grad": [S0, R],  # the in-out array is updated where it lies
}

# torch 2.11/2.12 have no DTensor hook that rewrites fixed launch/output dims to a shard's
# (adapters/torch/compat.py: rewrites_dims): there such calls get the replicated strategy only
if _torch_compat.TORCH_VERSION < (2, 13):
    for _name in ("rows_static_dims", "rows_call_dims"):
        del PER_SHARD[_name]
        REDISTRIBUTED[_name] = [R]


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(PER_SHARD))
def test_declared_op_runs_per_shard_without_collectives(ranks, name):
    outs, grads = PER_SHARD[name]
    for res in _ok(ranks, name):
        assert res["err"] < TOL and res.get("grad_err", 0.0) < TOL, res
        assert res["fwd"] == {} and res.get("bwd", {}) == {}, f"{name}: collectives {res}"
        assert res["out"] == outs, res
        assert res.get("grads") == grads, res


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(REDISTRIBUTED))
def test_sharded_input_of_undeclared_op_is_redistributed(ranks, name):
    for res in _ok(ranks, name):
        assert res["err"] < TOL and res.get("grad_err", 0.0) < TOL, res
        assert res["fwd"], f"{name}: a sharded input reached an undeclared op without a collective: {res}"
        if REDISTRIBUTED[name] is not None:
            assert res["out"] == REDISTRIBUTED[name], res


@pytest.mark.slow
@pytest.mark.parametrize("case_id", catalogue.CASE_IDS)
@pytest.mark.parametrize("placement", ["replicate", "shard0"])
def test_catalogue_on_dtensors_as_one_process(ranks, case_id, placement):
    """Every catalogue kernel (vec/mat, several outputs, in-out, generic, Python-function, tile,
    index arrays, output_dims) on DTensors: values and gradients of the plain call; replicated
    inputs move nothing."""
    case = next(c for c in catalogue.CASES if c.id == case_id)
    tol = 2e-2 if catalogue.is_bf16(case.dtypes[0]) else TOL
    for res in _ok(ranks, f"catalogue_{case_id}_{placement}"):
        assert res["err"] < tol and res.get("grad_err", 0.0) < tol, res
        if placement == "replicate":
            assert res["fwd"] == {} and res.get("bwd", {}) == {}, res


@pytest.mark.slow
def test_tensor_parallel_activation_stays_a_dtensor(ranks):
    """parallelize_module(ColwiseParallel(use_local_output=False), op, RowwiseParallel): an
    elementwise op keeps the Shard(-1) activation where it lies; an undeclared one gathers it."""
    elem = _ok(ranks, "tensor_parallel_elementwise")
    undeclared = _ok(ranks, "tensor_parallel_undeclared")
    for e, u in zip(elem, undeclared):
        for res in (e, u):
            assert res["err"] < TOL and res["grad_err"] < TOL, res
        assert e["seen"] == [S1, S1], e
        assert u["seen"] == [S1, R], u
        assert sum(e["comms"].values()) < sum(u["comms"].values()), (e["comms"], u["comms"])


@pytest.mark.slow
def test_fsdp2_training_as_one_process(ranks):
    for res in _ok(ranks, "fsdp2"):
        assert res["err"] < TOL, res
        assert res["moved"] > 1e-3, res  # the parameters did train


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_dtensor_under_torch_compile(ranks, backend):
    for res in _ok(ranks, f"compile_{backend}"):
        assert res["err"] < TOL and res["grad_err"] < TOL, res
        assert res["out"] == [S0] and res["grads"] == [S0], res


@pytest.mark.slow
def test_mutating_operator_refuses_to_move_an_in_out_dtensor(ranks):
    for res in _ok(ranks, "mutating_operator_refuses"):
        msg = res["raised"]
        assert msg and msg.startswith("UnsupportedError"), res
        assert "'tt_dtensor::plain_inout'" in msg and "'acc'" in msg and "Shard(dim=0)" in msg, msg
