"""The two Paddle paths give the same answers: a call whose argument signature was validated before
(the op's eager hook, ``Op.eager_paths``: no checks, the remembered plan and launch record) against
the full path (framework detection, checks, the per-signature cache of the core), for every case of
the catalogue: values bit for bit, gradients through the op's PyLayer bit for bit.

Every test checks which path ran (the hook's call counter), so no parametrization can silently run
one path twice.
"""

from __future__ import annotations

import numpy as np
import pytest

paddle = pytest.importorskip("paddle", reason="paddlepaddle is not installed")

import catalogue  # noqa: E402
import warp as wp  # noqa: E402

import interop  # noqa: E402
from interop._frameworks import data_ptr  # noqa: E402


def _hook(op):
    return op.eager_paths[paddle.Tensor]


def _run(case, args, grad: bool, path: str):
    """Values (and, with ``grad``, gradients of a weighted sum) of one call on ``path``."""
    hook = _hook(case.op)
    if path == "full":
        hook.signatures.clear()  # forget the signature: this call takes the full path (and remembers it)
    leaves, pargs = [], []
    for k, a in enumerate(args):
        if not isinstance(a, np.ndarray):
            pargs.append(a)
            continue
        t = catalogue.to_paddle(a, stop_gradient=not (grad and catalogue.is_float_dtype(a.dtype)))
        leaves.append(t)
        pargs.append(t * 1.0 if k in case.in_out and not t.stop_gradient else t)
    before = hook.calls[0]
    out = case.op(*pargs, **case.call_kwargs)
    ran_hook = hook.calls[0] > before
    out = out if isinstance(out, tuple) else (out,)
    values = [catalogue.paddle_to_numpy(o) for o in out]
    grads = []
    if grad and any(not o.stop_gradient for o in out):
        weights = catalogue.loss_weights(case, tuple(values))
        loss = sum((o * catalogue.to_paddle(w.astype(np.float64)).astype(o.dtype)).sum() for o, w in zip(out, weights))
        loss.backward()
        grads = [None if t.grad is None else catalogue.paddle_to_numpy(t.grad) for t in leaves]
    return values, grads, ran_hook


def _hook_takes(case, args) -> bool:
    """Calls of this case can take the hook: Paddle tensors and Python numbers, no in-out, no options."""
    return not case.in_out and not case.call_kwargs and isinstance(args[0], np.ndarray)


@pytest.mark.parametrize("grad", [False, True], ids=["forward", "gradients"])
@pytest.mark.parametrize("case_id", catalogue.CASE_IDS)
def test_catalogue_same_values_and_gradients_on_both_paths(case_id, grad):
    case = catalogue.case(case_id)
    for dt in case.dtypes:
        args = case.make(np.random.default_rng(5), dt)
        full_values, full_grads, ran = _run(case, args, grad, "full")
        assert not ran, "the full path ran the hook"
        # the full path against the independent reference
        tol = catalogue.BF16_VALUE_TOL if catalogue.is_bf16(dt) else dict(rtol=1e-5, atol=1e-6)
        for v, r in zip(full_values, catalogue.reference_of(case, args)):
            np.testing.assert_allclose(v, r, **tol)
        values, grads, ran = _run(case, args, grad, "hook")
        assert ran == _hook_takes(case, args), f"hook ran: {ran}"
        assert len(values) == len(full_values) and len(grads) == len(full_grads)
        for v, r in zip(values, full_values):
            np.testing.assert_array_equal(v, r)
        for g, r in zip(grads, full_grads):
            assert (g is None) == (r is None)
            if g is not None:
                np.testing.assert_array_equal(g, r)


@wp.kernel
def _saxpy(x: wp.array(dtype=float), y: wp.array(dtype=float), a: float, out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = a * x[i] * x[i] + y[i]


SAXPY = interop.op(_saxpy, name="tp_paths::saxpy")


def _xy(n=9, seed=0):
    rng = np.random.default_rng(seed)
    x = paddle.to_tensor(rng.random(n, dtype=np.float32), place=paddle.CPUPlace())
    y = paddle.to_tensor(rng.random(n, dtype=np.float32), place=paddle.CPUPlace())
    return x, y


def _calls() -> int:
    return _hook(SAXPY).calls[0]


def test_second_call_of_a_signature_takes_the_hook_with_its_own_outputs():
    x, y = _xy()
    SAXPY(x, y, 1.5)  # validated: remembered
    before = _calls()
    a = SAXPY(x, y, 1.5)
    b = SAXPY(x, y, 2.5)
    assert _calls() == before + 2
    assert data_ptr(a) != data_ptr(b)  # a new output per call
    np.testing.assert_allclose(a.numpy(), 1.5 * x.numpy() ** 2 + y.numpy(), rtol=1e-6)
    np.testing.assert_allclose(b.numpy(), 2.5 * x.numpy() ** 2 + y.numpy(), rtol=1e-6)
    assert a.stop_gradient and b.stop_gradient


@pytest.mark.parametrize(
    "change",
    ["shape", "dtype", "strides", "stop_gradient", "int_scalar", "tensor_scalar", "options"],
)
def test_any_other_signature_takes_the_full_path(change):
    x, y = _xy()
    SAXPY(x, y, 1.5)
    before = _calls()
    if change == "shape":
        x, y = _xy(n=5)
        out = SAXPY(x, y, 1.5)
    elif change == "dtype":
        with pytest.raises(interop.ArgumentError, match="parameter 'x'"):
            SAXPY(x.astype("float64"), y, 1.5)
        out = None
    elif change == "strides":
        base = paddle.to_tensor(np.random.default_rng(1).random(18, dtype=np.float32), place=paddle.CPUPlace())
        xs = base[::2]
        if xs.is_contiguous():  # Paddle copied the slice: make a strided view another way
            xs = paddle.as_strided(base, [9], [2])
        assert not xs.is_contiguous()
        out = SAXPY(xs, y, 1.5)
        np.testing.assert_allclose(out.numpy(), 1.5 * base.numpy()[::2] ** 2 + y.numpy(), rtol=1e-6)
    elif change == "stop_gradient":
        x.stop_gradient = False
        out = SAXPY(x, y, 1.5)
        assert not out.stop_gradient
    elif change == "int_scalar":
        out = SAXPY(x, y, 2)
    elif change == "tensor_scalar":
        out = SAXPY(x, y, paddle.to_tensor(1.5, place=paddle.CPUPlace()))
    else:
        out = SAXPY(x, y, 1.5, launch_dims=9)
    assert _calls() == before
    if out is not None and change not in ("strides", "int_scalar"):
        np.testing.assert_allclose(out.numpy(), 1.5 * x.numpy() ** 2 + y.numpy(), rtol=1e-6)


def _variant(change: str, pos: int):
    """The arguments of a remembered ``SAXPY(x, y, 1.5)`` call with one field of argument ``pos``
    changed (each field the hook compares with the last signature it used)."""
    args = [*_xy(), 1.5]
    base = paddle.to_tensor(np.random.default_rng(1).random(18, dtype=np.float32), place=paddle.CPUPlace())
    if change == "scalar":
        args[2] = 2  # an int for the float
        return args
    t = args[pos]
    if change == "shape":  # the same number of elements, other dimensions
        t = t.reshape([3, 3])
    elif change == "dtype":
        t = t.astype("float64")
    elif change == "strides":
        t = paddle.as_strided(base, [9], [2])
    elif change == "stop_gradient":
        t.stop_gradient = False
    elif change == "sparse":
        t = paddle.to_tensor(np.eye(3, dtype=np.float32), place=paddle.CPUPlace()).reshape([9]).to_sparse_coo(1)
    args[pos] = t
    return args


def _outcome(args):
    try:
        out = SAXPY(*args)
    except Exception as e:  # noqa: BLE001 - the error is the outcome compared
        return type(e), str(e).split("\n")[0]
    return out.numpy().tolist(), out.stop_gradient


@pytest.mark.parametrize(
    ("change", "pos"),
    [(c, pos) for c in ("shape", "dtype", "strides", "stop_gradient", "sparse") for pos in (0, 1)] + [("scalar", 2)],
)
def test_hook_compares_every_field_with_the_last_signature(change, pos):
    """The hook reuses the signature it used last when every field matches (no key built); a call
    differing from it in one field of one argument gives exactly what the full path gives."""
    hook = _hook(SAXPY)
    hook.signatures.clear()
    want = _outcome(_variant(change, pos))  # the full path (its signature is then remembered)
    hook.signatures.clear()
    x, y = _xy()
    SAXPY(x, y, 1.5)  # remembered
    SAXPY(x, y, 1.5)  # the hook: the last signature used
    assert hook.signatures.last is not None and hook.signatures.last[0] is hook.signatures[hook.key_of((x, y, 1.5))]
    before = _calls()
    assert _outcome(_variant(change, pos)) == want
    assert _calls() == before  # not the remembered signature
    assert _outcome(_variant(change, pos)) == want  # now the last signature used, if remembered
    if change in ("stop_gradient", "scalar"):
        assert _calls() == before + 1


def test_hook_checks_arguments_it_never_validated():
    """A remembered signature never lets another through: a wrong argument count, a symbolic value, a
    sparse tensor of the same shape and dtype each reach the full path and its error."""
    x, y = _xy()
    SAXPY(x, y, 1.5)
    before = _calls()
    with pytest.raises(interop.ArgumentError, match="takes 3 argument"):
        SAXPY(x, y)
    sparse = paddle.to_tensor(np.eye(3, dtype=np.float32), place=paddle.CPUPlace()).reshape([9]).to_sparse_coo(1)
    with pytest.raises(interop.ArgumentError, match="sparse"):
        SAXPY(sparse, y, 1.5)
    assert _calls() == before


def test_gradients_on_the_hook_path_and_retain_graph():
    x, y = _xy()
    x.stop_gradient = y.stop_gradient = False
    SAXPY(x, y, 1.5).sum().backward()  # the full path: remembered
    x.clear_gradient(False)
    y.clear_gradient(False)
    before = _calls()
    out = SAXPY(x, y, 1.5)
    assert _calls() == before + 1
    g1 = paddle.to_tensor(np.random.default_rng(2).random(9, dtype=np.float32), place=paddle.CPUPlace())
    g2 = g1 * 2.0 + 1.0
    for g in (g1, g2):
        gx, gy = paddle.grad(out, [x, y], g, retain_graph=True)
        np.testing.assert_allclose(gx.numpy(), 3.0 * x.numpy() * g.numpy(), rtol=1e-6)
        np.testing.assert_allclose(gy.numpy(), g.numpy(), rtol=1e-6)


def test_hook_path_no_grad_builds_no_node():
    x, y = _xy()
    x.stop_gradient = False
    SAXPY(x, y, 1.5)
    before = _calls()
    with paddle.no_grad():
        out = SAXPY(x, y, 1.5)
    assert _calls() == before + 1
    assert out.stop_gradient
    np.testing.assert_allclose(out.numpy(), 1.5 * x.numpy() ** 2 + y.numpy(), rtol=1e-6)


def test_hook_path_second_derivative_through_the_tangent_kernel():
    x, y = _xy()
    x.stop_gradient = False
    SAXPY(x, y, 1.5)
    before = _calls()
    out = SAXPY(x, y, 1.5)
    assert _calls() == before + 1
    (gx,) = paddle.grad(out.sum(), [x], create_graph=True)
    np.testing.assert_allclose(gx.numpy(), 3.0 * x.numpy(), rtol=1e-6)
    (gxx,) = paddle.grad((gx * gx).sum(), [x])
    np.testing.assert_allclose(gxx.numpy(), 2 * 3.0 * x.numpy() * 3.0, rtol=1e-5)


def test_hook_path_hand_written_backward_is_differentiable_twice():
    op = interop.op(catalogue.cube64, backward=catalogue.cube64_backward, name="tp_paths::cube")
    x = paddle.to_tensor(np.random.default_rng(3).random(6), place=paddle.CPUPlace())
    x.stop_gradient = False
    op(x)
    before = _hook(op).calls[0]
    out = op(x)
    assert _hook(op).calls[0] == before + 1
    (g,) = paddle.grad(out.sum(), [x], create_graph=True)
    np.testing.assert_allclose(g.numpy(), 3 * x.numpy() ** 2, rtol=1e-12)
    g.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 6 * x.numpy(), rtol=1e-12)


def test_forward_only_calls_with_gradients_free_their_outputs():
    """A node whose backward never runs frees its output (Paddle keeps a PyLayer that saves its own
    output forever: the adapter keeps a detached view instead)."""
    import gc
    import weakref

    x, y = _xy(n=1 << 16)
    x.stop_gradient = False
    SAXPY(x, y, 1.5)
    refs = []
    for _ in range(5):
        out = SAXPY(x, y, 1.5)
        refs.append(weakref.ref(out))
        del out
    gc.collect()
    assert all(r() is None for r in refs)


def test_hook_path_checks_each_integer_value():
    """The hook skips the checks of the signature, not of the values: an int32 scalar out of range
    is refused as on the full path (Warp would wrap it)."""
    op = interop.op(catalogue.int_offset_kernel, name="tp_paths::int_offset")
    a = paddle.to_tensor(np.arange(4, dtype=np.int32), place=paddle.CPUPlace())
    op(a, 1)
    before = _hook(op).calls[0]
    np.testing.assert_array_equal(op(a, 7).numpy(), np.arange(4) + 7)
    with pytest.raises(interop.ArgumentError, match="out of range"):
        op(a, 2**40)
    assert _hook(op).calls[0] == before + 2


# ---- the generated code's own launch records (adapters/paddle/eager.py, interop/_launch.py) -------
MULTI = interop.op(catalogue.multi_kernel, outputs=2, name="tp_paths::multi")


def _sig(op, *args):
    return _hook(op).signatures[_hook(op).key_of(args)]


@pytest.mark.parametrize("used", [0, 1], ids=["only-c", "only-d"])
def test_unused_output_of_several_has_no_upstream_gradient(used):
    """One of two outputs in the loss: the other's upstream gradient is None (no pointer), on the
    hook path as on the full path, and the gradient is that of the used output alone."""
    a = paddle.to_tensor(np.linspace(0.1, 1.0, 7, dtype=np.float32), place=paddle.CPUPlace())
    a.stop_gradient = False
    MULTI(a)[used].sum().backward()  # full path: remembered
    full = a.grad.numpy().copy()
    a.clear_gradient(False)
    before = _hook(MULTI).calls[0]
    MULTI(a)[used].sum().backward()
    assert _hook(MULTI).calls[0] == before + 1
    x = a.numpy().astype(np.float64)
    want = np.cos(x) if used == 0 else 3.0 * x**2
    np.testing.assert_allclose(a.grad.numpy(), want, rtol=1e-5)
    np.testing.assert_array_equal(a.grad.numpy(), full)


def test_strided_upstream_gradient_on_the_hook_path():
    """An upstream gradient that is a strided view (every second element) is read as the values
    it holds (packed first), on the hook path."""
    x, y = _xy(16)
    x.stop_gradient = y.stop_gradient = False
    SAXPY(x, y, 1.5).sum().backward()
    base = paddle.to_tensor(np.arange(32, dtype=np.float32), place=paddle.CPUPlace())
    g = base[::2]
    before = _calls()
    out = SAXPY(x, y, 1.5)
    gx, gy = paddle.grad(out, [x, y], g)
    assert _calls() == before + 1
    np.testing.assert_allclose(gx.numpy(), 3.0 * x.numpy() * np.arange(0, 32, 2), rtol=1e-6)
    np.testing.assert_array_equal(gy.numpy(), np.arange(0, 32, 2, dtype=np.float32))


def test_busy_record_falls_back_to_the_shared_launch():
    """While the thread's own launch records of a signature are busy (a call re-entering from a
    callback in the middle of a launch), a call runs the plan's shared recorded launch instead:
    same values and gradients."""
    x, y = _xy(33)
    x.stop_gradient = y.stop_gradient = False
    ref = SAXPY(x, y, 1.5)
    ref_grads = [t.numpy() for t in paddle.grad(ref.sum(), [x, y])]
    again = SAXPY(x, y, 1.5)  # the signature's records are made by this call and its backward
    paddle.grad(again.sum(), [x, y])
    env = _sig(SAXPY, x, y, 1.5).forward.__globals__
    records = [env["DF"].d, env["DA"].d]  # this thread's, made by the calls above
    x2, y2 = x.detach().clone(), y.detach().clone()  # the same signature, other memory
    x2.stop_gradient = y2.stop_gradient = False
    for r in records:
        r.busy = True
    try:
        before = _calls()
        out = SAXPY(x2, y2, 1.5)
        grads = paddle.grad(out.sum(), [x2, y2])
        assert _calls() == before + 1
        assert all(r.v0.data != x2.data_ptr() for r in records), "a busy record was filled again"
    finally:
        for r in records:
            r.busy = False
    np.testing.assert_array_equal(out.numpy(), ref.numpy())
    for got, want in zip(grads, ref_grads):
        np.testing.assert_array_equal(got.numpy(), want)


def test_threads_share_one_signature():
    """Four threads call one signature at once, no gradient (each with a launch record of its own):
    every result right. Forward only: Paddle 3.3.1's own autograd crashes when threads run
    backward passes at once (plain ``1.5*x*x+y`` with ``paddle.grad`` in four threads segfaults)."""
    from _threads import in_threads

    x0, y0 = _xy(257)
    SAXPY(x0, y0, 1.5)
    before = _calls()

    def worker(k):
        rng = np.random.default_rng(k)
        ok, cpu = True, paddle.CPUPlace()
        for _ in range(500):
            xn, yn = rng.random(257, dtype=np.float32), rng.random(257, dtype=np.float32)
            out = SAXPY(paddle.to_tensor(xn, place=cpu), paddle.to_tensor(yn, place=cpu), 1.5)
            ok &= np.allclose(out.numpy(), 1.5 * xn**2 + yn, rtol=1e-6)
        return ok

    problems = in_threads(worker)
    assert not problems, problems[:5]
    assert _calls() == before + 2000


def test_signature_key_with_places_tells_places_apart():
    """The key a Paddle built with devices uses (written out with each tensor's place): here, with
    one place, it equals the CPU-only key but for the place, and a hook built with it runs the
    remembered signature's code like the CPU-only hook."""
    from adapters import paddle as apd
    from adapters.paddle.eager import Remembered, fast_entry, hook_code

    x, y = _xy(5)
    SAXPY(x, y, 1.5)
    hook = _hook(SAXPY)
    env = {
        "TT": apd._TENSOR_TYPES,
        "PN": apd._PLAIN_NUMBERS,
        "PK": apd._place_key,
        "NOT_EAGER": interop._op.NOT_EAGER,
        "dynamic": paddle.in_dynamic_mode,
        "grad_enabled": paddle.is_grad_enabled,
        "signatures": Remembered(),
        "calls": [0],
        "general": apd._apply,
    }
    placed_hook, key_of = hook_code(SAXPY.description, env, places=True)
    placed, plain = key_of((x, y, 1.5)), hook.key_of((x, y, 1.5))
    assert placed[0][2] == apd._place_key(x) and placed[0][:2] + placed[0][3:] == plain[0]
    assert key_of((x, y)) is None and key_of((x, 1.5, 1.5)) is None
    sig = hook.signatures[plain]
    env["signatures"][placed] = sig
    plain_fast = sig.fast
    sig.fast = fast_entry(placed, sig, True, (x, y, 1.5))  # what the placed hook compares a call with
    try:
        out = placed_hook((x, y, 1.5))  # by the key
        again = placed_hook((x, y, 1.5))  # by the comparison with the last signature
    finally:
        sig.fast = plain_fast
    assert env["calls"][0] == 2 and env["signatures"].last[0] is sig
    np.testing.assert_array_equal(out.numpy(), SAXPY(x, y, 1.5).numpy())
    np.testing.assert_array_equal(again.numpy(), out.numpy())


# ---- what a node keeps for the adjoint ------------------------------------------------------------
READS_OUTPUT = interop.op(catalogue.reads_output_kernel, outputs=2, name="tp_paths::reads_output")
SCALE = interop.op(catalogue.scale_kernel, name="tp_paths::scale")
READS_OUTPUT_HW = catalogue.reads_output_hand_written


@pytest.mark.parametrize("create_graph", [False, True], ids=["backward", "create_graph"])
@pytest.mark.parametrize("path", ["full", "hook"])
@pytest.mark.parametrize("which", ["write_only", "reads_output", "hand_written"])
def test_nodes_keep_only_the_outputs_warps_adjoint_reads(which, path, create_graph):
    """Warp's adjoint never reads an output the kernel only stores into (``Runner.unread_outputs``):
    on both paths the node saves the tensor arguments and the outputs the kernel reads back, no
    more (Paddle's saved-tensor hooks see them), and the gradients are right either way. A
    hand-written backward reads no output at all: only the arguments are saved."""
    x = paddle.to_tensor(np.random.default_rng(1).random(9, dtype=np.float32), place=paddle.CPUPlace())
    x.stop_gradient = False
    xn = x.numpy().astype(np.float64)
    if which == "write_only":  # out = s * a
        op, args, saved, want = SCALE, (x, 2.0), [(9,)], 2.0 * np.ones(9)
    elif which == "reads_output":  # sq = x*x, twice = 2*sq + x: loss = sum(sq) + 2 * sum(twice)
        op, args, saved, want = READS_OUTPUT, (x,), [(9,), (9,)], 10.0 * xn + 2.0
    else:  # the same op with a hand-written backward
        op, args, saved, want = READS_OUTPUT_HW, (x,), [(9,)], 10.0 * xn + 2.0
    hook = _hook(op)
    if path == "full":
        hook.signatures.clear()
    else:
        op(*args)  # remembered: the next call takes the hook
    before = hook.calls[0]
    packed = []

    def pack(t):
        packed.append(tuple(t.shape))
        return t

    with paddle.autograd.saved_tensors_hooks(pack, lambda t: t):
        out = op(*args)
    assert (hook.calls[0] > before) == (path == "hook")
    assert packed == saved
    outs = out if isinstance(out, tuple) else (out,)
    loss = sum((k + 1.0) * o.sum() for k, o in enumerate(outs))
    (g,) = paddle.grad([loss], [x], create_graph=create_graph)
    np.testing.assert_allclose(g.numpy(), want, rtol=1e-5)


def test_write_only_outputs_follow_warps_adjoint():
    """Which outputs count as never read: the kernel's only uses are stores or atomic adds, on a
    Warp version whose adjoint of those was checked (``_warp_compat``); tile kernels and
    Python-function ops keep every output."""
    from interop import _warp_compat

    x = paddle.to_tensor(np.arange(4, dtype=np.float32), place=paddle.CPUPlace())
    x.stop_gradient = False
    READS_OUTPUT(x)
    SCALE(x, 2.0)
    MULTI(x)
    checked = _warp_compat.ADJOINT_SKIPS_WRITE_ONLY_OUTPUTS
    assert _sig(READS_OUTPUT, x).kept == ((0,) if checked else (0, 1))  # sq is read back, twice is not
    assert _sig(SCALE, x, 2.0).kept == (() if checked else (0,))
    assert _sig(MULTI, x).kept == (() if checked else (0, 1))
    for case_id in ("tile", "function"):
        case = catalogue.case(case_id)
        case.op(*case.make(np.random.default_rng(0), np.float32), **case.call_kwargs)
        plans = list(case.op._plans.values())
        assert plans and all(not p.runner.unread_outputs for p in plans)


def test_a_second_tensor_backward_through_a_call_raises_instead_of_crashing():
    # Paddle releases a PyLayer node's context when Tensor.backward runs it (retain_graph=True
    # notwithstanding): a second backward reaching the node was a segmentation fault. In a child
    # process, so that a crash fails this test instead of ending the run. Every differentiable
    # case of the catalogue, on the full path and on the hook; paddle.grad (which runs copies of
    # the nodes) works before, and Tensor.backward gives the same gradients.
    from _subprocess import run_script

    out = run_script(
        """
        import numpy as np, paddle
        import catalogue

        def leaves_and_args(case, args):
            leaves, pargs = [], []
            for k, a in enumerate(args):
                if not isinstance(a, np.ndarray):
                    pargs.append(a)
                    continue
                t = catalogue.to_paddle(a, stop_gradient=not catalogue.is_float_dtype(a.dtype))
                leaves.append(t)
                pargs.append(t * 1.0 if k in case.in_out and not t.stop_gradient else t)
            return leaves, pargs

        checked = 0
        for case in catalogue.CASES:
            if not case.differentiable:
                continue
            args = case.make(np.random.default_rng(0), case.dtypes[0])
            hook = case.op.eager_paths.get(paddle.Tensor)
            for path in ("full", "hook"):
                if path == "full" and hook is not None:
                    hook.signatures.clear()
                leaves, pargs = leaves_and_args(case, args)
                res = case.op(*pargs, **case.call_kwargs)
                res = res if isinstance(res, tuple) else (res,)
                used = [o for o in res if not o.stop_gradient]
                if not used or not any(not t.stop_gradient for t in leaves):
                    continue
                loss = sum((o.astype("float64") * float(k + 1)).sum() for k, o in enumerate(used))
                wrt = [t for t in leaves if not t.stop_gradient]
                first = paddle.grad(loss, wrt, retain_graph=True, allow_unused=True)
                again = paddle.grad(loss, wrt, retain_graph=True, allow_unused=True)
                loss.backward(retain_graph=True)
                for a, b, t in zip(first, again, wrt):
                    if a is not None:
                        np.testing.assert_array_equal(a.numpy(), b.numpy())
                        np.testing.assert_array_equal(a.numpy(), t.grad.numpy())
                try:
                    loss.backward()
                except Exception as e:  # Paddle reports it as OSError("(External) RuntimeError: ...")
                    assert "a second backward through the same call" in str(e), (case.id, path, str(e)[-400:])
                else:
                    raise AssertionError((case.id, path, "no error"))
                checked += 1
        print("checked", checked)
        """,
        timeout=900,
    )
    checked = int(out.stdout.split("checked")[-1])
    assert checked >= 2 * 10, out.stdout


# ---- a tensor the backward reads, modified in place between the forward and the backward ---------
@wp.kernel
def _mul(a: wp.array(dtype=float), b: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = a[i] * b[i]


MUL = interop.op(_mul, name="tp_paths::mul")
MUL_HW = interop.op(catalogue.reads_output_kernel, outputs=2, backward=catalogue.reads_output_backward_kernel)


def _modified_setup(which: str):
    """(op, args, the leaf a, the tensor to modify (from the outputs), how the message names it,
    d loss / d a when unmodified)."""
    a = paddle.to_tensor([1.0, 2.0, 3.0], place=paddle.CPUPlace())
    a.stop_gradient = False
    b = paddle.to_tensor([4.0, 5.0, 6.0], place=paddle.CPUPlace())
    if which == "input_without_gradient":  # plain Paddle's own case: d(a*b)/da reads b
        return MUL, (a, b), a, lambda out, args: args[1], "parameter 'b'", b.numpy()
    if which == "input_with_gradient":  # a non-leaf that requires grad, read by d/db
        b.stop_gradient = False
        a2 = a * 1.0
        return MUL, (a2, b), a, lambda out, args: args[0], "parameter 'a'", b.numpy()
    if which == "output_read_back":  # sq = a*a is read back by twice = 2 sq + a: Warp's adjoint reads sq
        return READS_OUTPUT, (a,), a, lambda out, args: out[0], "output 'sq'", 10.0 * a.numpy() + 2.0
    # the hand-written backward reads the call's input a (the general node on both paths)
    return MUL_HW, (a * 1.0,), a, lambda out, args: args[0], "parameter 'x'", 10.0 * a.numpy() + 2.0


def _loss(out):
    outs = out if isinstance(out, tuple) else (out,)
    return sum((k + 1.0) * o.sum() for k, o in enumerate(outs))


@pytest.mark.parametrize("path", ["full", "hook"])
@pytest.mark.parametrize("which", ["input_without_gradient", "input_with_gradient", "output_read_back", "hand_written"])
def test_tensor_modified_in_place_before_backward_raises(which, path):
    """Plain Paddle refuses a backward whose saved tensor was modified in place after the forward
    (its gradient would silently use the new values); so does the op's node, on both paths, for
    the arguments and the outputs it keeps. The same modification made before the call is fine."""
    op, args, leaf, target, name, want = _modified_setup(which)
    hook = _hook(op)
    if path == "full":
        hook.signatures.clear()
    else:
        op(*args)  # remembered: the next call takes the hook
    before = hook.calls[0]
    out = op(*args)
    assert (hook.calls[0] > before) == (path == "hook")
    t = target(out, args)
    t.add_(paddle.ones_like(t))  # what `x += 1` does
    # Paddle hands an error raised in a PyLayer's backward on as OSError, with the original text
    with pytest.raises((RuntimeError, OSError), match=rf"op '[^']*', {name}: the tensor was modified in place"):
        _loss(out).backward()

    # modified before the call: the call reads the new values, and its gradient is right
    op, args, leaf, target, name, want = _modified_setup(which)
    if which == "input_without_gradient":
        args[1].add_(paddle.ones_like(args[1]))
        want = args[1].numpy()
    out = op(*args)
    _loss(out).backward()
    np.testing.assert_allclose(leaf.grad.numpy(), want, rtol=1e-6)
