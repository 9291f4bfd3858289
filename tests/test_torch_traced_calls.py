"""Calls traced by ``torch.compile`` (``adapters/torch/traced.py``): a call of plain tensors and Python
numbers is resolved at trace time by one function Dynamo takes as a constant, so the compiled
function's guards read none of the package's state; every other call takes the full path.

Sequences of compiled calls change what the trace depends on between calls (the vector's spelling
and values, a float Dynamo then makes dynamic, ``requires_grad``, grad mode, a 0-d tensor for a
scalar, a Parameter) and each result and gradient is compared with Warp's own
``wp.launch``/``wp.Tape`` on the same device: a stale graph would be a wrong answer here. Refusals
(a value a vec3 cannot hold, floats for an integer vector, a wrong count, a bool for a float) are
the full path's, naming the op and the parameter.
"""

from __future__ import annotations

import numpy as np
import pytest
import warp as wp

import interop

torch = pytest.importorskip("torch")
atorch = pytest.importorskip("adapters.torch")

from interop import _op as core  # noqa: E402

DEVICE = "cpu"
N = 6


@wp.kernel
def _move(
    x: wp.array(dtype=wp.vec3),
    v: wp.array(dtype=wp.vec3),
    g: wp.vec3,
    dt: float,
    x_out: wp.array(dtype=wp.vec3),
    v_out: wp.array(dtype=wp.vec3),
):
    i = wp.tid()
    v1 = v[i] + g * dt + wp.vec3(g[0] * x[i][1], 0.0, wp.sign(g[2]))
    v_out[i] = v1
    x_out[i] = x[i] + v1 * dt * wp.length(v1)


@wp.kernel
def _offset(a: wp.array(dtype=wp.vec3i), o: wp.vec3i, out: wp.array(dtype=wp.vec3i)):
    i = wp.tid()
    out[i] = a[i] + o


MOVE = interop.op(_move, outputs=["x_out", "v_out"])
OFFSET = interop.op(_offset, outputs=["out"])

needs_traced_path = pytest.mark.skipif(
    core._traced_call is None, reason="this torch's Dynamo cannot pass an op to assume_constant_result: full path"
)


def _reference(x, v, g, dt, wx_out, wv_out):
    """Warp's own launch and tape: outputs and the gradients of x and v for upstream ``wx_out``/``wv_out``."""
    ax = wp.array(x, dtype=wp.vec3, device=DEVICE, requires_grad=True)
    av = wp.array(v, dtype=wp.vec3, device=DEVICE, requires_grad=True)
    xo = wp.zeros(N, dtype=wp.vec3, device=DEVICE, requires_grad=True)
    vo = wp.zeros(N, dtype=wp.vec3, device=DEVICE, requires_grad=True)
    tape = wp.Tape()
    with tape:
        wp.launch(_move, dim=N, inputs=[ax, av, wp.vec3(*g), dt], outputs=[xo, vo], device=DEVICE)
    xo.grad = wp.array(wx_out, dtype=wp.vec3, device=DEVICE)
    vo.grad = wp.array(wv_out, dtype=wp.vec3, device=DEVICE)
    tape.backward()
    return xo.numpy(), vo.numpy(), ax.grad.numpy(), av.grad.numpy()


def _close(got, want):
    np.testing.assert_allclose(np.asarray(got), want, rtol=2e-6, atol=1e-6)


def _data(seed):
    rng = np.random.default_rng(seed)
    return tuple(rng.uniform(-1, 1, (N, 3)).astype(np.float32) for _ in range(4))


# (gravity as given, dt, requires_grad of x, v, grad mode, dt as a 0-d tensor, x as a Parameter)
SEQUENCE = [
    ((0.0, -9.8, 0.0), 0.01, True, True, True, False, False),
    ((0.0, -9.8, 0.0), 0.01, True, True, True, False, False),  # the same: the graph found again
    ([0.0, -9.8, 0.0], 0.01, True, True, True, False, False),  # a list: another graph, the same values
    ((1.5, -0.0, -0.0), 0.02, True, True, True, False, False),  # -0.0 reaches wp.sign; dt changed
    ((1.5, -0.0, -0.0), 0.03, False, True, True, False, False),  # dt dynamic now; x needs no gradient
    ((0.25, 2.0, 3.0), 0.02, False, False, True, False, False),  # nothing needs a gradient
    ((0.25, 2.0, 3.0), 0.02, True, True, False, False, False),  # under no_grad
    ("vec3", 0.01, True, True, True, False, False),  # a wp.vec3 object: the full path
    ((0.0, -9.8, 0.0), 0.01, True, True, True, True, False),  # dt a 0-d tensor: another operator
    ((0.0, -9.8, 0.0), 0.01, True, True, True, False, True),  # x a Parameter
    ((0.0, -9.8, 0.0), 0.01, True, True, True, False, False),  # back to the first
]


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    """Each test's compiled functions start without graphs, and a sequence may recompile often."""
    torch._dynamo.reset()
    with torch._dynamo.config.patch(recompile_limit=64):
        yield
    torch._dynamo.reset()


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_sequence_of_compiled_calls_against_tape(backend):
    @torch.compile(fullgraph=True, backend=backend)
    def step(x, v, g, dt):
        return MOVE(x, v, g, dt)

    for k, (g, dt, rx, rv, grad_mode, dt_tensor, param) in enumerate(SEQUENCE):
        x_np, v_np, wx, wv = _data(k)
        gval = (0.5, -1.0, 2.0) if g == "vec3" else tuple(g)
        ref = _reference(x_np, v_np, gval, dt, wx, wv)
        x = torch.tensor(x_np, device=DEVICE, requires_grad=rx)
        if param:
            x = torch.nn.Parameter(x, requires_grad=rx)
        v = torch.tensor(v_np, device=DEVICE, requires_grad=rv)
        garg = wp.vec3(*gval) if g == "vec3" else g
        darg = torch.tensor(dt, dtype=torch.float32, device=DEVICE) if dt_tensor else dt
        with torch.set_grad_enabled(grad_mode):
            xo, vo = step(x, v, garg, darg)
        _close(xo.detach(), ref[0])
        _close(vo.detach(), ref[1])
        if grad_mode and (rx or rv):
            wrt = [t for t in (x, v) if t.requires_grad]
            grads = torch.autograd.grad(
                (xo, vo), wrt, (torch.tensor(wx, device=DEVICE), torch.tensor(wv, device=DEVICE))
            )
            for t, got in zip(wrt, grads):
                _close(got, ref[2] if t is x else ref[3])
        else:
            assert not xo.requires_grad and not vo.requires_grad


@needs_traced_path
def test_compiled_step_guards_read_no_package_state():
    """The guards of a compiled step of two calls: the inputs, the ops by identity, the call's
    constants; nothing of the package's registries, hooks, parameters or value ranges."""
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list

    @torch.compile(fullgraph=True, backend="aot_eager")
    def step(x, v):
        x1, v1 = MOVE(x, v, (0.0, -9.8, 0.0), 0.01)
        return MOVE(x1, v1, [0.5, 0.0, 0.0], 0.02)

    x = torch.rand(N, 3, device=DEVICE, requires_grad=True)
    v = torch.rand(N, 3, device=DEVICE)
    step(x, v)
    xo, vo = step(x, v)
    entries = _debug_get_cache_entry_list(step._torchdynamo_orig_callable.__code__)
    assert len(entries) == 1
    text = str(entries[0].guard_manager)
    for internal in ("eager_paths", "_type_cache", "_BINDINGS", "_VALUE_RANGES", "call_params", "description"):
        assert internal not in text, internal
    # and the step computes what two launches do
    a = _reference(x.detach().numpy(), v.numpy(), (0.0, -9.8, 0.0), 0.01, np.zeros((N, 3)), np.zeros((N, 3)))
    b = _reference(a[0], a[1], (0.5, 0.0, 0.0), 0.02, np.zeros((N, 3)), np.zeros((N, 3)))
    _close(xo.detach(), b[0])
    _close(vo.detach(), b[1])


def _refused(fn, args, match, fullgraph):
    """A compiled call refused: without fullgraph the call leaves the graph and the eager call raises
    the op's ArgumentError; with it, torch raises its own error around the op's message."""
    if fullgraph:
        # the full path (torch < 2.12) reads a refused vector with NumPy, which Dynamo cannot trace:
        # torch's error then names neither the op nor the parameter
        with pytest.raises(Exception, match=match if core._traced_call is not None else None):
            fn(*args)
    else:
        with pytest.raises(interop.ArgumentError, match=match):
            fn(*args)


@pytest.mark.parametrize("fullgraph", [True, False])
@pytest.mark.parametrize(
    "g, match",
    [
        ((1e39, 0.0, 0.0), r"op '_move', parameter 'g': expected .* got 1e\+39"),  # beyond float32: never inf
        ((1.0, 2.0), r"op '_move', parameter 'g'"),  # two components for a vec3
        ((1.0, 2.0, 3.0, 4.0), r"op '_move', parameter 'g'"),
    ],
)
def test_compiled_vector_refused_as_eager(g, match, fullgraph):
    @torch.compile(fullgraph=fullgraph, backend="aot_eager")
    def step(x, v):
        return MOVE(x, v, g, 0.01)

    x = torch.rand(N, 3, device=DEVICE)
    with pytest.raises(interop.ArgumentError, match=match):
        MOVE(x, x, g, 0.01)
    _refused(step, (x, x), match, fullgraph)


@wp.kernel
def _accumulate(x: wp.array(dtype=float), acc: wp.array(dtype=float)):
    i = wp.tid()
    wp.atomic_add(acc, i, 2.0 * x[i])


ACCUMULATE = interop.op(_accumulate, in_out=["acc"])


@pytest.mark.parametrize("fullgraph", [True, False])
@pytest.mark.parametrize("dynamic", [None, True], ids=["static", "dynamic"])
@pytest.mark.parametrize(
    "case", ["float64", "int64", "ndim", "trailing dims", "in-out float64"], ids=lambda c: c.replace(" ", "-")
)
def test_compiled_tensor_of_another_dtype_or_shape_refused_as_eager(case, dynamic, fullgraph):
    """A tensor whose dtype, number of dims or vec trailing dims does not fit its array parameter:
    refused where the call is traced, with the eager call's error (it was raised inside torch's
    fake-tensor call, as torch's TorchRuntimeError, also without fullgraph)."""
    x = torch.rand(N, 3, device=DEVICE)
    if case == "in-out float64":
        args = (torch.rand(N, device=DEVICE), torch.zeros(N, dtype=torch.float64, device=DEVICE))
        call, match = ACCUMULATE, r"op '_accumulate', parameter 'acc': expected .*dtype float64"
    else:
        bad = {
            "float64": x.double(),
            "int64": x.long(),
            "ndim": x.reshape(-1),
            "trailing dims": torch.rand(N, 4, device=DEVICE),
        }[case]
        args = (bad, x)
        call, match = (lambda a, b: MOVE(a, b, (0.0, -9.8, 0.0), 0.01)), r"op '_move', parameter 'x': expected"
    with pytest.raises(interop.ArgumentError, match=match):
        call(*args)
    step = torch.compile(lambda a, b: call(a, b), fullgraph=fullgraph, dynamic=dynamic, backend="aot_eager")
    _refused(step, args, match, fullgraph)


@pytest.mark.parametrize("fullgraph", [True, False])
def test_compiled_bool_for_float_refused(fullgraph):
    @torch.compile(fullgraph=fullgraph, backend="aot_eager")
    def step(x):
        return MOVE(x, x, (0.0, 0.0, 0.0), True)

    _refused(step, (torch.rand(N, 3, device=DEVICE),), r"op '_move', parameter 'dt'.*got bool", fullgraph)


@pytest.mark.parametrize("fullgraph", [True, False])
def test_compiled_integer_vector(fullgraph):
    """A vec3i value: ints pass as they are, floats and ints beyond int32 are refused as the eager
    call refuses them."""

    @torch.compile(fullgraph=fullgraph, backend="aot_eager")
    def shift(a, o):
        return OFFSET(a, o)

    a = torch.arange(3 * N, dtype=torch.int32, device=DEVICE).reshape(N, 3)
    for o in ((1, -2, 3), [4, 5, -6], (2**31 - 1 - 3 * N, 0, -(2**31))):
        want = a.numpy().astype(np.int64) + np.array(o)
        np.testing.assert_array_equal(shift(a, o).numpy(), want)
    for bad in ((1.0, 2.0, 3.0), (2**31, 0, 0)):
        torch._dynamo.reset()  # the values constants of a first trace (not dynamic ones: see traced._refuse)
        _refused(shift, (a, bad), r"op '_offset', parameter 'o': expected", fullgraph)


@pytest.mark.parametrize("fullgraph", [True, False])
def test_compiled_wrong_argument_count_refused(fullgraph):
    @torch.compile(fullgraph=fullgraph, backend="aot_eager")
    def step(x):
        return MOVE(x, x, (0.0, 0.0, 0.0))

    _refused(step, (torch.rand(N, 3, device=DEVICE),), r"op '_move' takes 4 argument", fullgraph)


@wp.kernel
def _scaled(x: wp.array(dtype=wp.vec3), g: wp.vec3, s: float, n: int, y: wp.array(dtype=wp.vec3)):
    i = wp.tid()
    y[i] = x[i] * s + g * float(n)


SCALED = interop.op(_scaled, outputs=["y"])


def test_dynamic_shapes_and_numbers():
    """``dynamic=True``: the rows, the float and the int are symbols of one graph; each call equals eager."""
    f = torch.compile(lambda x, s, n: SCALED(x, (1.0, 2.0, 3.0), s, n), dynamic=True, fullgraph=True)
    for rows in (5, 7, 9):
        x = torch.rand(rows, 3, device=DEVICE)
        for s, n in ((0.5, 2), (0.25, 3), (-1.0, -4)):
            torch.testing.assert_close(f(x, s, n), SCALED(x, (1.0, 2.0, 3.0), s, n), rtol=0, atol=0)


class _Shift(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.rand(N, 3, device=DEVICE))

    def forward(self, x):
        return SCALED(x + self.w, [0.5, -1.0, 0.0], 2.0, 3) * self.w


def test_module_compiled_and_exported():
    """A module whose parameter reaches the op: compiled (values and the parameter's gradient equal
    eager's), and exported strict and non-strict (the program's values equal eager's)."""
    m = _Shift()
    x = torch.rand(N, 3, device=DEVICE)
    want = m(x)
    want.sum().backward()
    want_grad = m.w.grad.clone()
    m.w.grad = None
    got = torch.compile(m, fullgraph=True, backend="aot_eager")(x)
    got.sum().backward()
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(m.w.grad, want_grad)
    for strict in (True, False):
        ep = torch.export.export(m, (x,), strict=strict)
        torch.testing.assert_close(ep.module()(x), want.detach())


def test_compiled_float_beyond_float32_refused():
    """A number the float32 parameter cannot hold is refused inside torch.compile as eagerly (never inf)."""
    x = torch.rand(N, 3, device=DEVICE)
    for fullgraph in (False, True):
        torch._dynamo.reset()
        f = torch.compile(lambda x: SCALED(x, (1.0, 2.0, 3.0), 1e39, 2), fullgraph=fullgraph)
        with pytest.raises(interop.ArgumentError, match=r"op '_scaled', parameter 's'.*1e\+39"):
            f(x)
