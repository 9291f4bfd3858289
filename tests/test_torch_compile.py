"""PyTorch adapter under torch.compile: no graph breaks, no recompiles, compiled == eager, training."""

from __future__ import annotations

import numpy as np
import pytest
import warp as wp

torch = pytest.importorskip("torch")
dynamo_testing = pytest.importorskip("torch._dynamo.testing")

from user_kernels import eval_rosenbrock  # noqa: E402 (the guide's Rosenbrock kernel)

import interop  # noqa: E402


@wp.kernel
def scaled_sin(x: wp.array(dtype=float), y: wp.array(dtype=float), s: float, out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = wp.sin(x[i]) * s + y[i] * y[i]


@wp.kernel
def vec_len(v: wp.array(dtype=wp.vec3), out: wp.array(dtype=float), w: wp.array(dtype=wp.vec3)):
    i = wp.tid()
    out[i] = wp.length(v[i])
    w[i] = v[i] * 2.0


@wp.kernel
def row_acc(x: wp.array2d(dtype=float), acc: wp.array(dtype=float)):
    i, j = wp.tid()
    wp.atomic_add(acc, i, x[i, j] * x[i, j])


TORCH_BEFORE_2_13 = tuple(int(v) for v in torch.__version__.split("+")[0].split(".")[:2]) < (2, 13)

SIN = interop.op(scaled_sin, name="tt_compile::scaled_sin")
VLEN = interop.op(vec_len, outputs=2, name="tt_compile::vec_len")
ROWACC = interop.op(row_acc, in_out=["acc"], name="tt_compile::row_acc")
ROSEN = interop.op(eval_rosenbrock, name="tt_compile::rosenbrock")


def _explain(fn, *args):
    torch._dynamo.reset()
    ex = torch._dynamo.explain(fn)(*args)
    torch._dynamo.reset()
    return ex


def test_zero_graph_breaks():
    x, y = torch.rand(8, device="cpu"), torch.rand(8, device="cpu")

    def f(x, y):
        return SIN(x, y, 1.5) * 2 + 1

    ex = _explain(f, x, y)
    assert (ex.graph_count, ex.graph_break_count) == (1, 0), ex.break_reasons
    v = torch.rand(5, 3, device="cpu")
    ex = _explain(lambda v: VLEN(v)[0].sum() + VLEN(v)[1].sum(), v)
    assert (ex.graph_count, ex.graph_break_count) == (1, 0), ex.break_reasons
    s = torch.tensor(0.5, device="cpu")
    ex = _explain(lambda x, y, s: SIN(x, y, s) + 1, x, y, s)
    assert (ex.graph_count, ex.graph_break_count) == (1, 0), ex.break_reasons


@pytest.mark.parametrize("dynamic", [False, True])
def test_forward_compiled_equals_eager_without_recompiling(dynamic):
    torch._dynamo.reset()
    cnt = dynamo_testing.CompileCounterWithBackend("inductor")

    def f(x, y):
        return SIN(x, y, 1.5) * 2 + 1

    cf = torch.compile(f, backend=cnt, fullgraph=True, dynamic=dynamic)
    x, y = torch.rand(16, device="cpu"), torch.rand(16, device="cpu")
    for _ in range(3):
        torch.testing.assert_close(cf(x, y), f(x, y))
    x2, y2 = torch.rand(16, device="cpu"), torch.rand(16, device="cpu")
    torch.testing.assert_close(cf(x2, y2), f(x2, y2))
    assert cnt.frame_count == 1  # same shapes: compiled once
    if dynamic:
        x3, y3 = torch.rand(23, device="cpu"), torch.rand(23, device="cpu")
        torch.testing.assert_close(cf(x3, y3), f(x3, y3))
        assert cnt.frame_count == 1  # symbolic sizes: a new n does not recompile
    torch._dynamo.reset()


@pytest.mark.parametrize("dynamic", [False, True])
def test_forward_and_backward_compiled_equal_eager(dynamic):
    torch._dynamo.reset()
    cnt = dynamo_testing.CompileCounterWithBackend("aot_eager")

    def loss(x, v):
        y = SIN(x, x * 0.5, 2.0)
        length, w = VLEN(v)
        return (y * y).sum() + length.sum() + (w * w).sum()

    closs = torch.compile(loss, backend=cnt, fullgraph=True, dynamic=dynamic)
    for n in (6, 6, 9) if dynamic else (6, 6):
        x = torch.rand(n, requires_grad=True, device="cpu")
        v = torch.rand(n, 3, requires_grad=True, device="cpu")
        ref = loss(x, v)
        gx, gv = torch.autograd.grad(ref, (x, v))
        got = closs(x, v)
        cx, cv = torch.autograd.grad(got, (x, v))
        torch.testing.assert_close(got, ref)
        torch.testing.assert_close(cx, gx)
        torch.testing.assert_close(cv, gv)
    assert cnt.frame_count == 1
    torch._dynamo.reset()


def test_backward_compiled_with_inductor():
    torch._dynamo.reset()
    x = torch.rand(10, requires_grad=True, device="cpu")
    y = torch.rand(10, device="cpu")
    cf = torch.compile(lambda x, y: SIN(x, y, 3.0).sum(), fullgraph=True)
    cf(x, y).backward()
    torch.testing.assert_close(x.grad, 3.0 * torch.cos(x.detach()))
    torch._dynamo.reset()


def test_compiled_scalar_tensor_gradient_and_dims_arguments():
    torch._dynamo.reset()
    x, y = torch.rand(7, device="cpu"), torch.rand(7, device="cpu")
    s = torch.tensor(1.25, requires_grad=True, device="cpu")
    cf = torch.compile(lambda x, y, s: SIN(x, y, s), backend="aot_eager", fullgraph=True)
    cf(x, y, s).sum().backward()
    torch.testing.assert_close(s.grad, torch.sin(x).sum())
    # per-call output_dims / launch_dims are operator arguments, symbolic under dynamic=True
    cf2 = torch.compile(
        lambda v, n: VLEN(v, launch_dims=n, output_dims=n)[0], backend="aot_eager", fullgraph=True, dynamic=True
    )
    v = torch.rand(9, 3, device="cpu")
    torch.testing.assert_close(cf2(v, 4), v[:4].norm(dim=1))
    torch._dynamo.reset()


def test_compiled_in_out_updates_the_callers_tensor():
    torch._dynamo.reset()

    def f(x, acc):
        return ROWACC(x, acc) * 1.0

    cf = torch.compile(f, backend="aot_eager", fullgraph=True)
    x = torch.rand(3, 5, device="cpu")
    acc = torch.ones(3, device="cpu")
    res = cf(x, acc)
    torch.testing.assert_close(acc, 1.0 + (x * x).sum(1))
    torch.testing.assert_close(res, acc)
    torch._dynamo.reset()


def test_rosenbrock_with_adam_through_the_compiled_op_converges():
    # the guide's custom-operator example (fewer points and steps, so it runs in seconds)
    torch._dynamo.reset()
    rng = np.random.default_rng(42)
    xy = torch.tensor(rng.normal(size=(16, 2)), dtype=torch.float32, requires_grad=True, device="cpu")
    opt = torch.optim.Adam([xy], lr=0.1)

    @torch.compile(fullgraph=True)
    def forward():
        return ROSEN(xy)

    for _ in range(4000):
        opt.zero_grad()
        z = forward()
        z.backward(torch.ones_like(z))
        opt.step()
    mean = xy.detach().mean(0)
    torch.testing.assert_close(mean, torch.tensor([1.0, 1.0], device="cpu"), atol=0.02, rtol=0)
    torch._dynamo.reset()


# ---------------------------------------------------------------------------------------
# vector and matrix scalar parameters, first call compiled (issue 49, item 3)
# ---------------------------------------------------------------------------------------
@wp.kernel
def drift(x: wp.array(dtype=wp.vec3), g: wp.vec3, m: wp.mat22, dt: float, out: wp.array(dtype=wp.vec3)):
    i = wp.tid()
    out[i] = x[i] + g * dt * (m[0, 0] + m[1, 1] * 2.0 + m[0, 1] * 3.0)


_G = (0.0, -9.8, 0.5)
_M = ((1.0, 0.5), (0.0, 2.0))


def _spelled(spelling: str, value, device: str, grad: bool = False):
    flat = torch.tensor(value, device=device).flatten().tolist()
    if spelling == "tuple":
        return tuple(value)
    if spelling == "list":
        return [list(r) if isinstance(r, tuple) else r for r in value]
    if spelling == "warp":
        return wp.vec3(*flat) if len(flat) == 3 else wp.mat22(*flat)
    return torch.tensor(value, device=device, requires_grad=grad)


def _cold(*values) -> None:
    """The compiled call below is the first the process makes with these types, as at a user's first
    call: only what the torch adapter knows at import (tensor types, Warp's named value types) is known."""
    import adapters.torch
    from interop import _frameworks

    torch._dynamo.reset()
    for v in values:
        _frameworks._type_cache.pop(type(v), None)
    adapters.torch._seed_type_cache()


# (torch 2.11's Dynamo hands a constant function an object by id only: a Warp value no eager call
# made known is found by its id at trace time, adapters/torch/compat.assume_constant_result_of)
@pytest.mark.parametrize("spelling", ["tuple", "list", "warp", "tensor"])
def test_vector_parameter_first_call_compiled(spelling):
    op = interop.op(drift)  # a fresh op: nothing of it cached by an eager call
    x = torch.rand(5, 3, device="cpu")
    g, m = _spelled(spelling, _G, "cpu"), _spelled(spelling, _M, "cpu")
    _cold(g, m)
    cnt = dynamo_testing.CompileCounterWithBackend("aot_eager")
    cf = torch.compile(lambda x, g, m: op(x, g, m, 0.5) * 1.0, backend=cnt, fullgraph=True)
    got = cf(x, g, m)
    ref = x + torch.tensor(_G, device="cpu") * 0.5 * (1.0 + 4.0 + 1.5)
    torch.testing.assert_close(got, ref)
    torch.testing.assert_close(got, op(x, g, m, 0.5))  # eager
    out = wp.zeros(5, dtype=wp.vec3, device="cpu")
    wp.launch(
        drift, 5, [wp.from_torch(x, dtype=wp.vec3), wp.vec3(*_G), wp.mat22(1.0, 0.5, 0.0, 2.0), 0.5, out], device="cpu"
    )
    torch.testing.assert_close(got, wp.to_torch(out))
    cf(x, g, m)
    assert cnt.frame_count == 1  # the same arguments again: no recompile
    torch._dynamo.reset()


def test_vector_tensor_parameter_gradient_first_call_compiled():
    op = interop.op(drift)
    x = torch.rand(4, 3, device="cpu", requires_grad=True)
    g, m = _spelled("tensor", _G, "cpu", grad=True), _spelled("tensor", _M, "cpu", grad=True)
    _cold(g, m)
    cf = torch.compile(lambda x, g, m: (op(x, g, m, 0.5) ** 2).sum(), backend="aot_eager", fullgraph=True)
    grads = torch.autograd.grad(cf(x, g, m), (x, g, m))
    ref = torch.autograd.grad((op(x, g, m, 0.5) ** 2).sum(), (x, g, m))
    for a, b in zip(grads, ref):
        torch.testing.assert_close(a, b)
    s = 1.0 + 4.0 + 1.5  # independent formula for g: d/dg sum((x + g*dt*s)^2) = 2*dt*s*sum_i(out_i)
    out = x.detach() + g.detach() * 0.5 * s
    torch.testing.assert_close(grads[1], 2 * 0.5 * s * out.sum(0))
    torch._dynamo.reset()


def test_vector_warp_value_is_read_when_compiling():
    # a Warp value is read at trace time and guarded by identity: the documented behaviour (torch guide)
    op = interop.op(drift)
    x = torch.rand(3, 3, device="cpu")
    cnt = dynamo_testing.CompileCounterWithBackend("aot_eager")
    cf = torch.compile(lambda x, g: op(x, g, _M, 1.0), backend=cnt, fullgraph=True)
    g1, g2 = wp.vec3(1.0, 2.0, 3.0), wp.vec3(-1.0, 0.0, 1.0)
    torch.testing.assert_close(cf(x, g1), op(x, g1, _M, 1.0))
    torch.testing.assert_close(cf(x, g2), op(x, g2, _M, 1.0))  # another object: traced again
    assert cnt.frame_count == 2
    torch._dynamo.reset()


def test_rollout_step_recompiles_for_requires_grad_as_plain_torch_does():
    # torch.compile of one step: x0 has no grad, later x has: Dynamo's requires_grad guard recompiles
    # once, for a plain torch function too; the fix shown in the torch guide (x0.requires_grad_()) avoids it
    op = interop.op(drift)

    def step(x, v):
        v = v + 0.1 * torch.sin(x)
        return op(x, v.sum(0) * 0 + torch.tensor(_G, device="cpu"), _M, 0.1) + 0.1 * v, v

    def plain(x, v):
        v = v + 0.1 * torch.sin(x)
        return x + 0.1 * v, v

    counts = []
    for fn, fix in ((step, False), (plain, False), (step, True)):
        torch._dynamo.reset()
        cnt = dynamo_testing.CompileCounterWithBackend("aot_eager")
        cs = torch.compile(fn, backend=cnt, fullgraph=True)
        x = torch.rand(4, 3, device="cpu", requires_grad=fix)
        v = torch.rand(4, 3, device="cpu", requires_grad=True)
        for _ in range(3):
            x, v = cs(x, v)
        x.sum().backward()
        counts.append(cnt.frame_count)
    assert counts == [2, 2, 1]
    torch._dynamo.reset()


def _sin_tape(x0: np.ndarray, y0: np.ndarray, s: float, of_square: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(out, gradient of x, gradient of y)`` of ``scaled_sin`` by ``wp.launch``/``wp.Tape`` on the
    CPU, for the loss ``sum(out**2)`` (``of_square``) or ``sum(out)``."""
    n = x0.shape[0]
    xw = wp.array(x0, dtype=float, device="cpu", requires_grad=True)
    yw = wp.array(y0, dtype=float, device="cpu", requires_grad=True)
    ow = wp.zeros(n, dtype=float, device="cpu", requires_grad=True)
    tape = wp.Tape()
    with tape:
        wp.launch(scaled_sin, dim=n, inputs=[xw, yw, s], outputs=[ow], device="cpu")
    upstream = 2.0 * ow.numpy() if of_square else np.ones(n, np.float32)
    tape.backward(grads={ow: wp.array(upstream, dtype=float, device="cpu")})
    return ow.numpy(), xw.grad.numpy(), yw.grad.numpy()


def test_operator_kernels_run_untraced_while_dynamo_callback_is_set(monkeypatch):
    """An operator called outside a compiled graph but inside a compiled function's frames (here a
    frame Dynamo skips, whose callees it still compiles) runs its kernels untraced: Dynamo compiles
    no frame of the kernel or below it (the forward's, and the backward operator's that
    ``.backward()`` runs there), and the values and gradients are Warp's."""
    import os

    import torch._dynamo.convert_frame as convert_frame

    import adapters

    ours_at = (os.path.dirname(interop.__file__), os.path.dirname(adapters.__file__))
    compiled: list[str] = []
    original = convert_frame._compile

    def recording(code, *args, **kwargs):
        where = code.co_filename
        mine = where.startswith("<interop") or os.path.dirname(os.path.abspath(where)).startswith(ours_at)
        compiled.append(f"{'ours ' if mine else ''}{os.path.basename(where)}:{code.co_name}")
        return original(code, *args, **kwargs)

    monkeypatch.setattr(convert_frame, "_compile", recording)
    x0 = np.linspace(-1.0, 1.0, 6).astype(np.float32)
    y0 = np.linspace(0.5, 2.0, 6).astype(np.float32)
    cpu = torch.device("cpu")
    SIN(torch.tensor(x0, device=cpu), torch.tensor(y0, device=cpu), 2.0)  # registers the operators
    ops = torch.ops.tt_compile

    def probe(t):  # a plain function Dynamo compiles when it runs there: the callback is set
        return t + 0.0

    def skipped(x, y):
        torch._dynamo.skip_frame()
        probe(x)
        out = ops.scaled_sin(x, y, 2.0)
        out.sum().backward()
        return out

    def fn(x, y):
        return skipped(x * 1.0, y)

    x = torch.tensor(x0, device=cpu, requires_grad=True)
    y = torch.tensor(y0, device=cpu, requires_grad=True)
    torch._dynamo.reset()
    try:
        got = torch.compile(fn, backend="aot_eager")(x, y)
    finally:
        torch._dynamo.reset()
    assert any(c.endswith(":probe") for c in compiled), compiled  # the scenario has the callback set
    ours = [c for c in compiled if c.startswith("ours ")]
    assert ours == [], ours
    out, gx, gy = _sin_tape(x0, y0, 2.0, of_square=False)
    np.testing.assert_array_equal(got.detach().numpy(), out)
    np.testing.assert_array_equal(x.grad.numpy(), gx)
    np.testing.assert_array_equal(y.grad.numpy(), gy)


def test_compiled_autograd_backward_through_the_op_equals_the_tape():
    """``torch._dynamo.config.compiled_autograd``: a compiled step whose ``loss.backward()`` is
    captured by compiled autograd (which traces the op's backward) gives Warp's gradients, step after
    step (the second call runs the cached graphs)."""
    cpu = torch.device("cpu")
    x0 = np.linspace(-1.0, 1.0, 8).astype(np.float32)
    y0 = np.linspace(0.5, 2.0, 8).astype(np.float32)

    def step(x, y):
        out = SIN(x, y, 1.5)
        loss = (out * out).sum()
        loss.backward()
        return loss.detach()

    out, gx, gy = _sin_tape(x0, y0, 1.5, of_square=True)
    torch._dynamo.reset()
    try:
        from torch._dynamo.utils import counters

        captures = counters["compiled_autograd"]["captures"]
        with torch._dynamo.config.patch(compiled_autograd=True):  # read when torch.compile wraps the step
            compiled = torch.compile(step, backend="aot_eager")
            for _ in range(2):
                x = torch.tensor(x0, device=cpu, requires_grad=True)
                y = torch.tensor(y0, device=cpu, requires_grad=True)
                loss = compiled(x, y)
                np.testing.assert_allclose(loss.numpy(), float((out**2).sum()), rtol=1e-6)
                np.testing.assert_allclose(x.grad.numpy(), gx, rtol=1e-6)
                np.testing.assert_allclose(y.grad.numpy(), gy, rtol=1e-6)
        assert counters["compiled_autograd"]["captures"] > captures  # compiled autograd took the backward
    finally:
        torch._dynamo.reset()


@pytest.mark.parametrize("fullgraph", [False, True])
def test_compiled_reverse_mode_transforms_through_the_op(fullgraph):
    """``torch.compile`` of ``torch.func.grad``/``jacrev``/``vjp`` through the op: the traced tensors
    do not say they are tracked, so the call would take the registered operator, whose ``custom_op``
    Function torch refuses under a transform. The transform runs eagerly instead (Dynamo's graph
    break, the package's reason in it: ``fullgraph=True`` raises that) and gives the Tape's
    gradients. A compiled function called plainly, then inside ``torch.func.grad``, then plainly
    again keeps each context's answer. On torch < 2.13 torch's refusal stays (there the graph break
    gave a zero ``jacrev``)."""
    cpu = torch.device("cpu")
    x0 = np.linspace(-1.0, 1.0, 5).astype(np.float32)
    y0 = np.linspace(0.5, 2.0, 5).astype(np.float32)
    out, gx, gy = _sin_tape(x0, y0, 1.5, of_square=True)
    x = torch.tensor(x0, device=cpu)
    y = torch.tensor(y0, device=cpu)

    def loss(x, y):
        return (SIN(x, y, 1.5) ** 2).sum()

    def vjp_of(x, y):
        o, pull = torch.func.vjp(lambda a, b: SIN(a, b, 1.5), x, y)
        return pull(2.0 * o)

    def run(fn, *args):
        compiled = torch.compile(fn, backend="aot_eager", fullgraph=fullgraph)
        if fullgraph:
            with pytest.raises(torch._dynamo.exc.Unsupported, match="warp-interop: a torch.func reverse-mode"):
                compiled(*args)
            return None
        return compiled(*args)

    torch._dynamo.reset()
    try:
        if TORCH_BEFORE_2_13:  # torch's own refusal stays (docs/limitations.md): no silent answer
            with pytest.raises(Exception, match="fake tensor"):
                torch.compile(torch.func.grad(loss), backend="aot_eager", fullgraph=fullgraph)(x, y)
            return
        grads = run(torch.func.grad(loss, argnums=(0, 1)), x, y)
        jac = run(torch.func.jacrev(lambda x: SIN(x, y, 1.5)), x)
        got = run(vjp_of, x, y)
        if not fullgraph:
            np.testing.assert_allclose(grads[0].numpy(), gx, rtol=1e-6)
            np.testing.assert_allclose(grads[1].numpy(), gy, rtol=1e-6)
            np.testing.assert_allclose(torch.diagonal(jac).numpy(), gx / (2.0 * out), rtol=1e-5)
            assert np.count_nonzero(jac.numpy() - np.diag(np.diag(jac.numpy()))) == 0
            np.testing.assert_allclose(got[0].numpy(), gx, rtol=1e-6)
            np.testing.assert_allclose(got[1].numpy(), gy, rtol=1e-6)
            compiled_loss = torch.compile(loss, backend="aot_eager")
            for _ in range(2):
                np.testing.assert_allclose(compiled_loss(x, y).numpy(), float((out**2).sum()), rtol=1e-6)
                g = torch.func.grad(compiled_loss)(x, y)
                np.testing.assert_allclose(g.numpy(), gx, rtol=1e-6)
    finally:
        torch._dynamo.reset()


def test_compiled_vmap_through_the_op_stays_in_the_graph():
    """``torch.vmap`` is not a reverse-mode transform: compiled with ``fullgraph=True`` its calls stay in
    the graph (the operator's vmap rule), row by row equal to the op's own calls."""
    cpu = torch.device("cpu")
    x = torch.linspace(-1.0, 1.0, 12, device=cpu).reshape(3, 4)
    y = torch.linspace(0.5, 2.0, 12, device=cpu).reshape(3, 4)
    torch._dynamo.reset()
    try:
        cnt = dynamo_testing.CompileCounterWithBackend("aot_eager")
        got = torch.compile(torch.vmap(lambda a, b: SIN(a, b, 1.5)), backend=cnt, fullgraph=True)(x, y)
    finally:
        torch._dynamo.reset()
    assert cnt.frame_count == 1
    want = torch.stack([SIN(x[i], y[i], 1.5) for i in range(3)])
    np.testing.assert_array_equal(got.numpy(), want.numpy())
