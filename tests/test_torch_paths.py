"""The two PyTorch paths give the same answers: the eager fast path (plain eager tensors skip
the dispatcher) against the registered operator, reached eagerly (under a pass-through
TorchFunctionMode), through ``torch.compile(fullgraph=True)`` and through ``torch.func``.

Every test checks which path ran (the binding's ``eager_calls`` counter and the autograd
node's type), so no parametrization can silently run one path twice.
"""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import catalogue  # noqa: E402
from _cuda import require_cuda, torch_spin_fill  # noqa: E402
from _subprocess import run_script  # noqa: E402
from _threads import in_threads  # noqa: E402
from torch.overrides import TorchFunctionMode  # noqa: E402

import adapters.torch as atorch  # noqa: E402
import interop  # noqa: E402


class _PassThrough(TorchFunctionMode):
    """Changes nothing, but an active TorchFunctionMode sends the op through its registered operator."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


SAXPY = interop.op(catalogue.square_axpy_kernel, name="tt_paths::saxpy")
CUBE = interop.op(catalogue.cube64, backward=catalogue.cube64_backward, name="tt_paths::cube")
PATHS = ("eager", "operator", "compile")


def _eager_calls(op) -> int:
    """Fast-path calls of ``op`` and of its per-call ``block_dim`` variants."""
    op = getattr(op, "op", op)  # the op a catalogue.StructCall (struct cases) calls with structures
    ops = [op, *op._block_dim_variants.values()]
    return sum(atorch._binding(o).eager_calls for o in ops)


def _run(path: str, op, fn, *args):
    """``fn(*args)`` on ``path``, asserting that ``op`` took the fast path exactly when path == "eager"."""
    before = _eager_calls(op)
    if path == "eager":
        out = fn(*args)
        assert _eager_calls(op) > before, "the eager path did not run"
        return out
    if path == "operator":
        with _PassThrough():
            out = fn(*args)
    elif path == "compile":
        torch.compiler.reset()  # each case compiles afresh (one code object serves every case)
        out = torch.compile(fn, fullgraph=True, dynamic=False)(*args)
    else:
        raise AssertionError(path)
    assert _eager_calls(op) == before, f"the {path} path ran the eager fast path"
    return out


def _node_kind(t: torch.Tensor) -> str:
    return "eager" if type(t.grad_fn).__name__.endswith("_eagerBackward") else "operator"


def _torch_args(case, args, grad: bool):
    return catalogue.to_torch_args(case, args, grad)


# ---- the catalogue on every path -------------------------------------------------------------
def _catalogue_result(case, dtype, path):
    """Values, in-out values and gradients of the weighted loss, on one path."""
    rng = np.random.default_rng(11)
    args = case.make(rng, dtype)
    targs = _torch_args(case, args, case.differentiable)

    def f(*a):
        return case.op(*a, **case.call_kwargs)

    if path == "func":
        leaves = [k for k, t in enumerate(targs) if isinstance(t, torch.Tensor) and t.requires_grad]
        plain = [t.detach() if isinstance(t, torch.Tensor) else t for t in targs]
        before = _eager_calls(case.op)

        def g(*leaf_values):
            a = list(plain)
            for k, v in zip(leaves, leaf_values):
                a[k] = v
            for k in case.in_out:  # functional inside a transform: update a copy
                a[k] = a[k].clone()
            out = f(*a)
            return out if isinstance(out, tuple) else (out,)

        outs, vjp = torch.func.vjp(g, *[plain[k] for k in leaves])
        assert _eager_calls(case.op) == before, "torch.func ran the eager fast path"
        if not case.differentiable:
            return [o.detach() for o in outs], []
        weights = catalogue.loss_weights(case, tuple(o.detach().float().numpy() for o in outs))
        grads = vjp(tuple(torch.from_numpy(w).to(o.dtype) for w, o in zip(weights, outs)))
        return [o.detach() for o in outs], list(grads)
    leaves = [t for t in targs if isinstance(t, torch.Tensor) and t.requires_grad]  # before in-out updates
    out = _run(path, case.op, f, *targs)
    outs = out if isinstance(out, tuple) else (out,)
    if not case.differentiable:
        return [o.detach() for o in outs], []
    if path != "compile" and not case.in_out:
        assert _node_kind(outs[0]) == path
    weights = catalogue.loss_weights(case, tuple(o.detach().float().numpy() for o in outs))
    loss = sum((torch.from_numpy(w).to(o.dtype) * o).sum() for w, o in zip(weights, outs))
    return [o.detach() for o in outs], list(torch.autograd.grad(loss, leaves))


@pytest.mark.parametrize("case_id", catalogue.CASE_IDS)
@pytest.mark.parametrize("path", ["operator", "compile", "func"])
def test_catalogue_same_values_and_gradients_as_the_eager_path(case_id, path):
    case = catalogue.case(case_id)
    dtype = case.dtypes[0]
    ref_outs, ref_grads = _catalogue_result(case, dtype, "eager")
    # a signature's first eager call is validated in full; from the second on it runs the
    # signature's own generated Function (adapters/torch/eager.py): the same answers
    again_outs, again_grads = _catalogue_result(case, dtype, "eager")
    for a, r in zip(again_outs + again_grads, ref_outs + ref_grads):
        torch.testing.assert_close(a, r, rtol=0, atol=0)
    # the eager path against the independent reference
    args = case.make(np.random.default_rng(11), dtype)
    tol = catalogue.BF16_VALUE_TOL if catalogue.is_bf16(dtype) else dict(rtol=1e-5, atol=1e-5)
    for o, r in zip(ref_outs, catalogue.reference_of(case, args)):
        np.testing.assert_allclose(o.double().numpy(), r, **tol)
    outs, grads = _catalogue_result(case, dtype, path)
    assert len(outs) == len(ref_outs) and len(grads) == len(ref_grads)
    for o, r in zip(outs, ref_outs):
        torch.testing.assert_close(o, r, rtol=0, atol=0)
    for g, r in zip(grads, ref_grads):
        torch.testing.assert_close(g, r, rtol=1e-6, atol=1e-6)


# ---- autograd scenarios on every path ------------------------------------------------------------
def _xy(n=9, grad=True, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, generator=g, device="cpu").requires_grad_(grad)
    y = torch.rand(n, generator=g, device="cpu").requires_grad_(grad)
    return x, y


@pytest.mark.parametrize("path", PATHS)
def test_retain_graph_with_two_upstream_gradients(path):
    x, y = _xy()
    out = _run(path, SAXPY, lambda x, y: SAXPY(x, y, 1.5), x, y)
    g1, g2 = torch.rand(9, device="cpu"), torch.rand(9, device="cpu") + 1.0
    a = torch.autograd.grad(out, (x, y), g1, retain_graph=True)
    b = torch.autograd.grad(out, (x, y), g2)
    for (gx, gy), g in ((a, g1), (b, g2)):
        torch.testing.assert_close(gx, 3.0 * x.detach() * g)
        torch.testing.assert_close(gy, g)


@pytest.mark.parametrize("path", PATHS)
def test_scalar_as_a_0d_tensor_gets_its_gradient(path):
    x, y = _xy()
    s = torch.tensor(1.5, requires_grad=True, device="cpu")
    out = _run(path, SAXPY, lambda x, y, s: SAXPY(x, y, s), x, y, s)
    gx, gs = torch.autograd.grad(out.sum(), (x, s))
    torch.testing.assert_close(gs, (x.detach() ** 2).sum())
    torch.testing.assert_close(gx, 3.0 * x.detach())


def test_tensor_kept_from_an_exited_torch_func_transform():
    """A tensor kept from inside ``torch.func.grad`` is, afterwards, a "dead" functorch wrapper with
    no storage of its own; torch's operators read the tensor inside it, and so does the op: the first
    call (full path) and the next ones (the remembered signature). (Gradients through such a tensor
    are torch's own refusal: ``requires_grad_()`` on it does not reach the tensor inside.)"""
    kept = []

    def f(x):
        kept.append(x * 2.0)
        return SAXPY(x, x, 1.5).sum()

    torch.func.grad(f)(torch.arange(1.0, 6.0, device="cpu"))
    dead, y = kept[0], torch.rand(5, device="cpu")
    assert torch._C._functorch.is_functorch_wrapped_tensor(dead)  # what this test is about
    inside = torch.arange(2.0, 12.0, 2.0, device="cpu")
    before = _eager_calls(SAXPY)
    for _ in range(3):
        torch.testing.assert_close(SAXPY(dead, y, 1.5), 1.5 * inside**2 + y)
        torch.testing.assert_close(SAXPY(y, dead, 1.5), 1.5 * y**2 + inside)
    assert _eager_calls(SAXPY) > before


@pytest.mark.parametrize("path", ["eager", "operator"])
def test_hand_written_backward_and_second_order(path):
    x = torch.rand(6, dtype=torch.float64, requires_grad=True, device="cpu")

    def first_and_second(x):
        (g,) = torch.autograd.grad(CUBE(x).sum(), x, create_graph=True)
        (h,) = torch.autograd.grad(g.sum(), x)
        return g, h

    g, h = _run(path, CUBE, first_and_second, x)
    torch.testing.assert_close(g, 3 * x.detach() ** 2)
    torch.testing.assert_close(h, 6 * x.detach())


def test_hand_written_backward_under_compile():
    x = torch.rand(6, dtype=torch.float64, requires_grad=True, device="cpu")
    out = _run("compile", CUBE, CUBE, x)
    (g,) = torch.autograd.grad(out.sum(), x)
    torch.testing.assert_close(g, 3 * x.detach() ** 2)


_CACHED_COMPILE = """
import torch, interop
from catalogue import cube64, cube64_backward

op = interop.op(cube64, backward=cube64_backward, name="tt_cached::cube")
x = torch.rand(6, dtype=torch.float64, requires_grad=True, device="cpu")
(g,) = torch.autograd.grad(torch.compile(op, fullgraph=True, dynamic=False)(x).sum(), x)
torch.testing.assert_close(g, 3 * x.detach() ** 2)
print("ok")
"""


@pytest.mark.slow
def test_hand_written_backward_compiled_from_torch_compile_cache(tmp_path):
    """A second process loads the compiled backward from torch.compile's caches (no trace): the hand-written
    backward's operator must already be registered (it was registered lazily, by the trace, before)."""
    env = {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    for run in ("first (traces, fills the cache)", "second (loads from the cache)"):
        r = run_script(_CACHED_COMPILE, env=env)  # fails the test, with its output, if the child fails
        assert r.stdout.strip().endswith("ok"), (run, r.stdout[-2000:] + r.stderr[-4000:])


@pytest.mark.parametrize("path", ["eager", "operator"])
@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_no_grad_and_inference_mode(path, mode):
    x, y = _xy()
    ctx = torch.no_grad if mode == "no_grad" else torch.inference_mode
    with ctx():
        out = _run(path, SAXPY, lambda x, y: SAXPY(x, y, 1.5), x, y)
    assert not out.requires_grad and out.grad_fn is None
    assert out.is_inference() == (mode == "inference_mode")
    torch.testing.assert_close(out, 1.5 * x.detach() ** 2 + y.detach())


@pytest.mark.parametrize("path", PATHS)
def test_non_contiguous_inputs(path):
    base = torch.rand(18, 2, device="cpu")
    x = base[:, 1][::2].clone().requires_grad_(True)
    xs = torch.rand(9, 3, device="cpu")[:, 0]  # strided, not contiguous
    assert not xs.is_contiguous()
    out = _run(path, SAXPY, lambda x, y: SAXPY(x, y, 2.0), x, xs)
    torch.testing.assert_close(out, 2.0 * x.detach() ** 2 + xs)
    (gx,) = torch.autograd.grad(
        out, x, torch.rand(9, device="cpu")[None, :].expand(3, 9)[0]
    )  # a strided upstream gradient
    assert gx.shape == x.shape


@pytest.mark.parametrize("path", PATHS)
def test_autocast_region(path):
    x, y = _xy()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = _run(path, SAXPY, lambda x, y: SAXPY(x, y, 1.5), x, y)
    assert out.dtype == torch.float32  # a Warp kernel of float32 arrays: not cast
    torch.testing.assert_close(out, 1.5 * x.detach() ** 2 + y.detach())
    (gx,) = torch.autograd.grad(out.sum(), x)
    torch.testing.assert_close(gx, 3.0 * x.detach())


@pytest.mark.parametrize("path", ["eager", "operator"])
def test_saved_tensor_hooks_see_the_same_tensors(path):
    x, y = _xy()
    packed = []

    def pack(t):
        packed.append((tuple(t.shape), t.dtype))
        return t.clone()

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = _run(path, SAXPY, lambda x, y: SAXPY(x, y, 1.5), x, y)
    gx, gy = torch.autograd.grad(out.sum(), (x, y))
    torch.testing.assert_close(gx, 3.0 * x.detach())
    torch.testing.assert_close(gy, torch.ones(9, device="cpu"))
    # x and y: the kernel only stores into its output, which Warp's adjoint never reads
    assert packed == [((9,), torch.float32)] * 2


READS_OUTPUT = interop.op(catalogue.reads_output_kernel, outputs=2, name="tt_paths::reads_output")
READS_OUTPUT_HW = catalogue.reads_output_hand_written


@pytest.mark.parametrize("hand_written", [False, True], ids=["warp_adjoint", "hand_written"])
@pytest.mark.parametrize("path", ["eager", "operator"])
def test_saved_tensors_are_the_inputs_and_the_outputs_the_adjoint_reads(path, hand_written):
    """An output the kernel reads back (``sq``) is saved for Warp's adjoint; one it only writes
    (``twice``) is not, and its upstream gradient stands in for it: the gradients are right. A
    hand-written backward reads no output: only ``x`` is saved."""
    op = READS_OUTPUT_HW if hand_written else READS_OUTPUT
    x = torch.rand(9, dtype=torch.float32, requires_grad=True, device="cpu")
    op(x)  # the signature is validated once; from then on eager calls take the fast path
    packed = []

    def pack(t):
        packed.append(tuple(t.shape))
        return t.clone()

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        sq, twice = _run(path, op, op, x)
    assert packed == ([(9,)] if hand_written else [(9,), (9,)])  # x (and sq)
    (gx,) = torch.autograd.grad(sq.sum() + 2.0 * twice.sum(), x)
    torch.testing.assert_close(gx, 10.0 * x.detach() + 2.0)


def test_saved_tensor_hooks_count_is_the_same_on_both_paths():
    counts = {}
    for path in ("eager", "operator"):
        x, y = _xy()
        n = [0]

        def pack(t, n=n):
            n[0] += 1
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            _run(path, SAXPY, lambda x, y: SAXPY(x, y, 1.5), x, y)
        counts[path] = n[0]
    assert counts["eager"] == counts["operator"] > 0


@pytest.mark.parametrize("path", ["eager", "operator"])
def test_anomaly_mode(path):
    x, y = _xy()
    with torch.autograd.detect_anomaly():
        out = _run(path, SAXPY, lambda x, y: SAXPY(x, y, 1.5), x, y)
        gx, gy = torch.autograd.grad(out.sum(), (x, y))
    torch.testing.assert_close(gx, 3.0 * x.detach())


@pytest.mark.parametrize("path", ["eager", "operator"])
def test_in_out_no_grad_bumps_the_version_counter(path):
    case = catalogue.case("in_out")
    x = torch.rand(3, 4, device="cpu")
    acc = torch.zeros(3, device="cpu")
    v = acc._version
    res = _run(path, case.op, case.op, x, acc)
    assert res[0] is acc and acc._version > v
    torch.testing.assert_close(acc, (x * x).sum(1))


@pytest.mark.parametrize("path", ["eager", "operator"])
def test_in_out_overwriting_a_saved_tensor_is_caught(path):
    case = catalogue.case("in_out")
    w = torch.rand(3, requires_grad=True, device="cpu")
    acc = torch.zeros(3, device="cpu")
    loss = (w * acc).sum()  # saves acc for the backward
    with torch.no_grad():
        _run(path, case.op, case.op, torch.rand(3, 4, device="cpu"), acc)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


# ---- which path, and what the tools see ------------------------------------------------------------
def test_plain_eager_takes_the_fast_path_and_tracers_the_operator():
    x, y = _xy()
    out = SAXPY(x, y, 1.5)
    assert _node_kind(out) == "eager"
    with _PassThrough():
        assert _node_kind(SAXPY(x, y, 1.5)) == "operator"
    before = _eager_calls(SAXPY)
    torch.func.grad(lambda x: SAXPY(x, y.detach(), 1.5).sum())(x.detach())
    assert _eager_calls(SAXPY) == before


def test_only_plain_tensors_qualify_for_the_fast_path():
    from adapters.torch.compat import plain_eager

    class Sub(torch.Tensor):
        pass

    x = torch.rand(3, device="cpu")
    assert plain_eager([x, 1.0, torch.nn.Parameter(torch.rand(3, device="cpu"))])
    assert not plain_eager([x, x.as_subclass(Sub)])
    with _PassThrough():
        assert not plain_eager([x])
    with torch.device("cpu"):  # a TorchFunctionMode too
        assert not plain_eager([x])


def test_a_dispatch_mode_sees_the_operator_by_name():
    from torch.utils._python_dispatch import TorchDispatchMode

    seen = []

    class Log(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(str(func))
            return func(*args, **(kwargs or {}))

    x, y = _xy()
    with Log():
        out = SAXPY(x, y, 1.5)
        out.sum().backward()
    assert any("tt_paths.saxpy.default" in s for s in seen), seen
    assert any("tt_paths.saxpy_backward.default" in s for s in seen), seen


@pytest.mark.parametrize("grad_mode", ["no_grad", "no_input_requires_grad"])
def test_a_call_needing_no_autograd_node_still_reaches_a_dispatch_mode(grad_mode):
    """Such a call (every call inside a compiled graph) runs the implementation from the operator's
    Autograd kernel without torch's second dispatch, unless something below Autograd must see it: a
    dispatch mode still does, and the values are the direct call's."""
    from torch.utils._python_dispatch import TorchDispatchMode

    seen = []

    class Log(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(str(func))
            return func(*args, **(kwargs or {}))

    x, y = _xy(grad=False)
    registered = atorch.bind(SAXPY)
    with torch.no_grad() if grad_mode == "no_grad" else contextlib.nullcontext():
        direct = registered(x, y, 1.5)
        with Log():
            logged = registered(x, y, 1.5)
    assert any("tt_paths.saxpy.default" in s for s in seen), seen
    torch.testing.assert_close(logged, direct, rtol=0, atol=0)
    torch.testing.assert_close(direct, 1.5 * x * x + y)


def test_registered_operator_never_serves_the_last_call_to_one_that_differs():
    """The operator's implementation reuses its last call's validated entry when a call matches it:
    calls in turn that differ in shape, strides or requires_grad each get their own."""
    registered = atorch.bind(SAXPY)
    g = torch.Generator().manual_seed(3)
    base = torch.rand(2, 12, generator=g, device="cpu")
    calls = [
        (base[0], base[1]),  # contiguous, 12
        (base[0, ::2], base[1, ::2]),  # strided, 6
        (base[0, :6], base[1, :6]),  # contiguous, 6
        (base[:, 0], base[:, 1]),  # stride 12, 2
        (base[0], base[1].clone().requires_grad_(True)),  # 12 again, another requires_grad
        (base[0], base[1]),
    ]
    with torch.no_grad():
        for _ in range(2):
            for x, y in calls:
                torch.testing.assert_close(registered(x, y, 1.5), 1.5 * x * x + y)


def test_profiler_shows_the_op_by_name_on_the_eager_path():
    x, y = _xy()
    before = _eager_calls(SAXPY)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        SAXPY(x, y, 1.5).sum().backward()
    assert _eager_calls(SAXPY) == before + 1
    names = {e.name for e in prof.events()}
    assert "tt_paths::saxpy" in names, sorted(names)
    assert "tt_paths::saxpy_backward" in names, sorted(names)


@pytest.mark.cuda
def test_cuda_fast_path_launches_on_torchs_current_stream():
    require_cuda("torch")
    n = 1 << 20
    x = torch.rand(n, device="cuda", requires_grad=True)
    y = torch.rand(n, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())  # x and y were made on the default stream
    before = _eager_calls(SAXPY)
    # the first call is validated in full; the second runs the signature's generated Function
    for k in range(2):
        with torch.cuda.stream(s):
            # slow work queued on s before the op: the op (and its backward) must run after it, on s
            x2 = torch.empty_like(y)
            torch_spin_fill(x2, 2.0 + k)
            x2 = x2 * x
            out = SAXPY(x2, y, 1.0)
            (gx,) = torch.autograd.grad(out.sum(), x)
            done = torch.cuda.Event()
            done.record(s)
        done.synchronize()
        assert _eager_calls(SAXPY) == before + 1 + k
        c = 2.0 + k
        torch.testing.assert_close(out, (c * x.detach()) ** 2 + y)
        torch.testing.assert_close(gx, 2 * c * c * x.detach())


# ---- the generated code's own launch record (adapters/torch/eager.py, interop/_launch.py) ----------
TRANSPOSE = interop.op(catalogue.transpose_kernel, name="tt_paths::transpose")
VSCALE = interop.op(catalogue.vscale_kernel, name="tt_paths::vscale")


def _layouts(shape):
    """Upstream gradients of one shape in every layout: an expanded scalar (the gradient of
    ``.sum()``: read in place when small), contiguous, strided (copied packed), expanded again."""
    g = torch.Generator().manual_seed(3)
    n = int(np.prod(shape))
    strided = (
        torch.rand(2 * n, generator=g, device="cpu")[::2].reshape(shape)
        if len(shape) == 1
        else torch.rand(shape[::-1], generator=g, device="cpu").T
    )
    return [
        torch.tensor(2.0, device="cpu").expand(shape),
        torch.rand(shape, generator=g, device="cpu"),
        strided,
        torch.tensor(-3.0, device="cpu").expand(shape),
        torch.rand(shape, generator=g, device="cpu"),
    ]


@pytest.mark.parametrize(
    ("op", "shape"),
    [(SAXPY, (9,)), (SAXPY, (5000,)), (TRANSPOSE, (5, 5)), (VSCALE, (7, 3))],
    ids=["saxpy-small", "saxpy-above-in-place-size", "transpose-2d", "vec3"],
)
def test_upstream_gradient_layouts_in_turn_on_one_signature(op, shape):
    """The signature's adjoint record switches between a gradient read in place (all strides 0)
    and a packed one from call to call; every gradient is right, on the eager path each time."""
    g = torch.Generator().manual_seed(5)
    if op is SAXPY:
        x, y = (
            torch.rand(shape, generator=g, requires_grad=True, device="cpu"),
            torch.rand(shape, generator=g, requires_grad=True, device="cpu"),
        )
        args, leaves = (x, y, 1.5), (x, y)

        def expected(up):
            return 3.0 * x.detach() * up, up
    elif op is TRANSPOSE:
        a = torch.rand(shape[::-1], generator=g, requires_grad=True, device="cpu")
        args, leaves = (a,), (a,)

        def expected(up):
            return (up.T,)
    else:
        v = torch.rand(shape, generator=g, requires_grad=True, device="cpu")
        args, leaves = (v, 0.5), (v,)

        def expected(up):
            return (0.5 * up,)

    op(*args)  # validated in full: the calls below run the signature's generated code
    for up in _layouts(shape):
        before = _eager_calls(op)
        out = op(*args)
        assert _eager_calls(op) == before + 1 and _node_kind(out) == "eager"
        grads = torch.autograd.grad(out, leaves, up)
        for got, want in zip(grads, expected(up)):
            torch.testing.assert_close(got, want.contiguous())


CUBE_AUTO = interop.op(catalogue.cube64, name="tt_paths::cube_auto")  # Warp's own adjoint


@pytest.mark.parametrize("op", [SAXPY, CUBE_AUTO], ids=["float32", "float64"])
def test_expanded_upstream_gradients_of_changing_values_in_turn(op):
    """An expanded-scalar upstream gradient reaches the adjoint as the record's packed buffer,
    filled with its element only when that element changed: a sequence of backwards whose
    expanded values repeat, change, differ only in their bits (0.0, -0.0), or are NaN, interleaved
    with packed gradients, gives each backward its own gradients."""
    n = 37
    dtype = torch.float32 if op is SAXPY else torch.float64
    x = torch.rand(n, dtype=dtype, generator=torch.Generator().manual_seed(2), requires_grad=True, device="cpu")
    y = torch.rand(n, dtype=dtype, requires_grad=True, device="cpu")
    args = (x, y, 1.5) if op is SAXPY else (x,)
    leaves = (x, y) if op is SAXPY else (x,)
    op(*args)  # validated in full: the calls below run the signature's generated code

    def expected(up):
        return (3.0 * x.detach() * up, up) if op is SAXPY else (3.0 * x.detach() ** 2 * up,)

    values = [1.0, 1.0, 2.5, 2.5, -0.0, 0.0, float("nan"), float("nan"), None, 1.0, None, -4.0, 1.0]
    for v in values:
        up = (
            torch.rand(n, dtype=dtype, device="cpu")
            if v is None
            else torch.tensor(v, dtype=dtype, device="cpu").expand(n)
        )
        out = op(*args)
        assert _node_kind(out) == "eager"
        grads = torch.autograd.grad(out, leaves, up)
        for got, want in zip(grads, expected(up)):
            torch.testing.assert_close(got, want.contiguous(), rtol=1e-6, atol=0, equal_nan=True)


def test_sum_backward_reads_the_expanded_gradient_like_a_packed_one():
    """``.sum().backward()`` (the upstream gradient an expanded scalar, read in place) gives the
    gradients of the same call with that gradient packed."""
    x, y = _xy(64)
    SAXPY(x, y, 1.5)
    a = torch.autograd.grad(SAXPY(x, y, 1.5).sum(), (x, y))
    b = torch.autograd.grad(SAXPY(x, y, 1.5), (x, y), torch.ones(64, device="cpu"))
    for got, want in zip(a, b):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_busy_record_falls_back_to_the_shared_launch():
    """While the thread's own launch records of a signature are busy (a call re-entering from a
    callback in the middle of a launch), a call runs the plan's shared recorded launch instead:
    same values and gradients."""
    x, y = _xy(33)
    SAXPY(x, y, 1.5)  # validated in full: the calls below run the signature's Function
    ref = SAXPY(x, y, 1.5)
    ref_grads = torch.autograd.grad(ref.sum(), (x, y))
    key = atorch._signature((x, y, 1.5))
    function = atorch._binding(SAXPY).eager_runs[key].apply.__self__  # the signature's Function
    env = function.forward.__globals__
    records = [env["DF"].d, env["DA"].d]  # this thread's, made by the call above
    x2, y2 = x.detach().clone().requires_grad_(), y.detach().clone().requires_grad_()  # same key
    for r in records:
        r.busy = True
    try:
        before = _eager_calls(SAXPY)
        out = SAXPY(x2, y2, 1.5)
        grads = torch.autograd.grad(out.sum(), (x2, y2))
        assert _eager_calls(SAXPY) == before + 1
        assert all(r.v0.data != x2.data_ptr() for r in records), "a busy record was filled again"
    finally:
        for r in records:
            r.busy = False
    torch.testing.assert_close(out, ref, rtol=0, atol=0)
    for got, want in zip(grads, ref_grads):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_threads_share_one_signature():
    """Four threads call one signature forward and backward at once (each with launch records of
    its own): every result right."""
    x0, y0 = _xy(257)
    SAXPY(x0, y0, 1.5)

    def worker(k):
        g = torch.Generator().manual_seed(k)
        ok = True
        for _ in range(200):
            x = torch.rand(257, generator=g, requires_grad=True, device="cpu")
            y = torch.rand(257, generator=g, requires_grad=True, device="cpu")
            out = SAXPY(x, y, 1.5)
            gx, gy = torch.autograd.grad(out.sum(), (x, y))
            ok &= torch.allclose(out, 1.5 * x.detach() ** 2 + y.detach())
            ok &= torch.allclose(gx, 3.0 * x.detach()) and torch.equal(gy, torch.ones(257, device="cpu"))
        return ok

    problems = in_threads(worker)
    assert not problems, problems[:5]


def _variants(n: int):
    """Calls of SAXPY that differ from ``(x, y, 1.5)`` (float32, length n, contiguous, both
    requiring grad) in one property each; a ``None`` result means the call must be refused."""
    g = torch.Generator().manual_seed(7)

    def r(*shape, dtype=torch.float32):
        return torch.rand(*shape, generator=g, dtype=dtype, device="cpu")

    big = r(3 * n)
    z = torch.complex(r(n), r(n))
    with torch.inference_mode():
        inference = r(n)
    return {
        "shape": lambda: (r(n + 1).requires_grad_(), r(n + 1).requires_grad_(), 1.5),
        "stride": lambda: (big[::2][:n].detach().requires_grad_(), r(n).requires_grad_(), 1.5),
        "offset": lambda: (big[1 : n + 1].detach().requires_grad_(), r(n).requires_grad_(), 1.5),
        "requires_grad": lambda: (r(n).requires_grad_(), r(n), 1.5),
        "no_grad_inputs": lambda: (r(n), r(n), 1.5),
        "parameter": lambda: (torch.nn.Parameter(r(n)), r(n).requires_grad_(), 1.5),
        "negated_view": lambda: (z.conj().imag, r(n), 1.5),
        "conj_real": lambda: (z.conj().real, r(n), 1.5),
        "int_scalar": lambda: (r(n).requires_grad_(), r(n).requires_grad_(), 2),
        "inference_tensor": lambda: (inference, r(n), 1.5),
        "float64": lambda: (r(n, dtype=torch.float64).requires_grad_(), r(n).requires_grad_(), 1.5),
        "two_dims": lambda: (r(n, 1).requires_grad_(), r(n).requires_grad_(), 1.5),
        "meta_device": lambda: (r(n).to("meta").requires_grad_(), r(n).to("meta").requires_grad_(), 1.5),
        "list": lambda: ([0.5] * n, r(n), 1.5),
    }


@pytest.fixture(params=["c++", "python"])
def signature_matcher(request, monkeypatch):
    """The fast path's signature check in C++ (torch's TensorGuards), or its Python fallback."""
    import adapters.torch.eager_path as path

    b = atorch._binding(SAXPY)
    b.eager_runs.clear()  # signatures remembered afresh, with this matcher
    b.eager_last = None
    if request.param == "python":
        monkeypatch.setattr(path, "tensors_matcher", lambda tensors: None)
    yield request.param
    b.eager_runs.clear()
    b.eager_last = None


@pytest.mark.parametrize("variant", sorted(_variants(1)))
def test_last_signature_is_never_served_to_a_call_that_differs(variant, signature_matcher):
    """The fast path checks a call against the op's last signature first (in C++ where torch can):
    a call that differs from it in one property (shape, strides, offset, requires_grad, tensor
    type, a lazily negated view, the Python number's type, an inference tensor, dtype, rank,
    device),
    between two calls of that signature, gets its own right answer and gradients, or its error;
    and the calls of the signature around it take the fast path."""
    n = 11
    make = _variants(n)[variant]

    def check(x, y, a):
        want = a * x.detach() ** 2 + y.detach()
        out = SAXPY(x, y, a)
        torch.testing.assert_close(out.detach(), want, rtol=1e-6, atol=1e-6)
        if out.requires_grad:
            gout = torch.rand(out.shape, device="cpu")
            grads = torch.autograd.grad(out, [t for t in (x, y) if t.requires_grad], gout)
            want_grads = [2 * a * x.detach() * gout if t is x else gout for t in (x, y) if t.requires_grad]
            for got, exp in zip(grads, want_grads):
                torch.testing.assert_close(got, exp, rtol=1e-6, atol=1e-6)
        return out

    for _ in range(3):
        x, y = _xy(n, seed=1)
        before = _eager_calls(SAXPY)
        assert _node_kind(check(x, y, 1.5)) == "eager"
        assert _eager_calls(SAXPY) == before + 1
        args = make()
        if variant in ("float64", "two_dims", "list"):
            with pytest.raises(interop.ArgumentError, match=r"parameter 'x'"):
                SAXPY(*args)
        elif variant == "meta_device":  # no memory: the operator's fake implementation answers
            out = SAXPY(*args)
            assert out.device.type == "meta" and out.shape == (n,) and _node_kind(out) == "operator"
        else:
            check(*args)
