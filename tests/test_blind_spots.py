"""Warp's reverse-mode blind spots (:mod:`interop._blind_spots`): for each pattern, Warp's own
``wp.Tape`` is compared with central finite differences on this Warp, and the package refuses the
kernel's backward exactly where the tape is wrong; an op with a blind spot runs forward in every
framework and raises at its first backward naming the local, the line and the rewrite; the rewrite
gives the right gradient; no catalogue kernel is refused."""

import importlib.util

import numpy as np
import pytest
import warp as wp
from _devices import jax_device
from catalogue import CASES

import interop
from interop import _blind_spots


@wp.func
def _pair(x: float):
    return x * x, 3.0 * x


@wp.func
def _looped_sum(a: wp.array(dtype=float), n: int):
    acc = float(0.0)  # noqa: UP018 - a Warp variable the loop mutates
    for j in range(n):
        acc += a[j] * a[j]
    return acc


@wp.func
def _looped_scaled(a: wp.array(dtype=float), n: int, s: float):
    acc = float(0.0)  # noqa: UP018 - a Warp variable the loop mutates
    for j in range(n):
        acc += a[j]
    return s * acc


@wp.kernel
def after_loop(a: wp.array(dtype=float), w: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    n = a.shape[0]
    acc = float(0.0)  # noqa: UP018 - a Warp variable the loop mutates
    for j in range(n):
        acc += a[j] * a[j]
    out[i] = w[i] * acc


@wp.kernel
def inside_loop(a: wp.array(dtype=float), w: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    n = a.shape[0]
    acc = float(0.0)  # noqa: UP018 - a Warp variable the loop mutates
    for j in range(n):
        acc += w[i] * a[j] * a[j]
    out[i] = acc


@wp.kernel
def linear_after(a: wp.array(dtype=float), w: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    n = a.shape[0]
    acc = float(0.0)  # noqa: UP018 - a Warp variable the loop mutates
    for j in range(n):
        acc += a[j] * w[j]
    out[i] = 2.0 * acc + w[i]


@wp.kernel
def static_loop(a: wp.array(dtype=float), w: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    acc = float(1.0)  # noqa: UP018 - a Warp variable the loop mutates
    for j in range(4):
        acc = acc * a[j]
    out[i] = w[i] * acc


@wp.kernel
def constant_local_bound(a: wp.array(dtype=float), w: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    n = 4
    acc = float(1.0)  # noqa: UP018 - a Warp variable the loop mutates
    for j in range(n):
        acc = acc * a[j]
    out[i] = w[i] * acc


@wp.kernel
def product_in_loop(a: wp.array(dtype=float), w: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    n = a.shape[0]
    acc = float(1.0)  # noqa: UP018 - a Warp variable the loop mutates
    for j in range(n):
        acc = acc * a[j]
    out[i] = acc + w[i]


@wp.kernel
def break_makes_dynamic(a: wp.array(dtype=float), w: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    acc = float(1.0)  # noqa: UP018 - a Warp variable the loop mutates
    for j in range(4):
        acc = acc * a[j]
        if j > 10:
            break
    out[i] = acc + w[i]


@wp.kernel
def sqrt_after(a: wp.array(dtype=float), w: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    n = a.shape[0]
    acc = float(0.0)  # noqa: UP018 - a Warp variable the loop mutates
    for j in range(n):
        acc += a[j] * a[j]
    out[i] = wp.sqrt(acc) + w[i]


@wp.kernel
def while_counter(a: wp.array(dtype=float), w: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    n = a.shape[0]
    acc = float(0.0)  # noqa: UP018 - a Warp variable the loop mutates
    j = int(0)  # noqa: UP018 - a Warp variable the loop mutates
    while j < n:
        acc += a[j] * w[i]
        j += 1
    out[i] = acc


@wp.kernel
def branch_after(a: wp.array(dtype=float), w: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    n = a.shape[0]
    acc = float(0.0)  # noqa: UP018 - a Warp variable the loop mutates
    for j in range(n):
        acc += a[j] * a[j]
    out[i] = w[i]
    if acc > 0.5:
        out[i] = 2.0 * w[i]


@wp.kernel
def first_in_loop(a: wp.array(dtype=float), w: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    n = a.shape[0]
    for j in range(n):
        last = a[j]
    out[i] = w[i] * last


@wp.kernel
def reassigned_per_iteration(a: wp.array(dtype=float), w: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    n = a.shape[0]
    s = float(0.0)  # noqa: UP018 - a Warp variable the loop mutates
    v = float(0.0)  # noqa: UP018 - a Warp variable the loop mutates
    for j in range(n):
        v = 2.0 * a[j]
        s += v * w[i]
    out[i] = s


@wp.kernel
def guarded_reassign(a: wp.array(dtype=float), w: wp.array(dtype=float), out: wp.array(dtype=float)):
    # newton's forward kinematics: `if parent >= 0: X_wp = ...`, later `if parent >= 0:` reads it
    i = wp.tid()
    n = a.shape[0]
    x = float(0.0)  # noqa: UP018 - a Warp variable the loop mutates
    s = float(0.0)  # noqa: UP018 - a Warp variable the loop mutates
    for j in range(n):
        if j > 0:
            x = a[j - 1] * a[j]
        if j > 0:
            s += x * w[i]
    out[i] = s


@wp.kernel
def nested_loops(a: wp.array(dtype=float), w: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    n = a.shape[0]
    tot = float(0.0)  # noqa: UP018 - a Warp variable the loop mutates
    for k in range(n):
        acc = float(0.0)  # noqa: UP018 - a Warp variable the loop mutates
        for j in range(n):
            acc += a[j]
        tot += acc * w[k]
    out[i] = tot


@wp.kernel
def func_returns_sum(a: wp.array(dtype=float), w: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = w[i] * _looped_sum(a, a.shape[0])


@wp.kernel
def func_scales_after(a: wp.array(dtype=float), w: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = _looped_scaled(a, a.shape[0], w[i])


@wp.kernel
def tuple_one_name(a: wp.array(dtype=float), w: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    r = _pair(a[i])
    out[i] = r[0] + w[i] * r[1]


@wp.kernel
def tuple_unpacked(a: wp.array(dtype=float), w: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    p, q = _pair(a[i])
    out[i] = p + w[i] * q


@wp.kernel
def component_scaled(a: wp.array(dtype=float), w: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    v = wp.vec2(a[i], w[i])
    v.x *= w[i]  # a component overwritten while v carries a gradient: Warp passes it to the old value too
    out[i] = v.x + v.y


@wp.kernel
def component_rebuilt(a: wp.array(dtype=float), w: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    v = wp.vec2(a[i], w[i])
    v = wp.vec2(v.x * w[i], v.y)  # the rewrite: the new value as a whole
    out[i] = v.x + v.y


@wp.kernel
def component_from_constants(a: wp.array(dtype=float), w: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    v = wp.vec2()
    v.x = a[i] * w[i]  # filled in component by component from constants: right
    v.y = w[i]
    out[i] = v.x + v.y


PATTERNS = [
    after_loop,
    inside_loop,
    linear_after,
    static_loop,
    constant_local_bound,
    product_in_loop,
    break_makes_dynamic,
    sqrt_after,
    while_counter,
    branch_after,
    first_in_loop,
    reassigned_per_iteration,
    guarded_reassign,
    nested_loops,
    func_returns_sum,
    func_scales_after,
    tuple_one_name,
    tuple_unpacked,
    component_scaled,
    component_rebuilt,
    component_from_constants,
]
REFUSED = {
    "after_loop",
    "product_in_loop",
    "break_makes_dynamic",
    "sqrt_after",
    "while_counter",
    "branch_after",
    "first_in_loop",
    "nested_loops",
    "func_scales_after",
    "tuple_one_name",
    "component_scaled",
}
A = np.array([0.9, -0.6, 1.3, 0.7])
W = np.array([0.5, -1.5, 2.0, 0.25])
V = np.array([1.0, -2.0, 0.5, 3.0])  # the upstream gradient


def _forward(kernel, a, w):
    arrs = [wp.array(x.astype(np.float32), dtype=float, device="cpu") for x in (a, w)]
    out = wp.zeros(4, dtype=float, device="cpu")
    wp.launch(kernel, 4, inputs=arrs, outputs=[out], device="cpu")
    return out.numpy().astype(np.float64)


def _tape_and_fd(kernel):
    a = wp.array(A.astype(np.float32), dtype=float, requires_grad=True, device="cpu")
    w = wp.array(W.astype(np.float32), dtype=float, requires_grad=True, device="cpu")
    out = wp.zeros(4, dtype=float, requires_grad=True, device="cpu")
    tape = wp.Tape()
    with tape:
        wp.launch(kernel, 4, inputs=[a, w], outputs=[out], device="cpu")
    tape.backward(grads={out: wp.array(V.astype(np.float32), dtype=float, device="cpu")})
    tape_grads = np.concatenate([a.grad.numpy(), w.grad.numpy()])
    eps, fd = 1e-2, []
    for k in range(8):
        e = np.zeros(8)
        e[k] = eps
        hi, lo = _forward(kernel, A + e[:4], W + e[4:]), _forward(kernel, A - e[:4], W - e[4:])
        fd.append((hi - lo) @ V / (2 * eps))
    return tape_grads, np.array(fd)


@pytest.mark.parametrize("kernel", PATTERNS, ids=lambda k: k.key)
def test_refused_exactly_where_warps_own_tape_is_wrong(kernel):
    tape_grads, fd = _tape_and_fd(kernel)
    tape_right = bool(np.allclose(tape_grads, fd, rtol=2e-2, atol=2e-2))
    assert tape_right == (kernel.key not in REFUSED), (kernel.key, tape_grads, fd)
    spot = _blind_spots.find(kernel)
    assert (spot is None) == tape_right, (kernel.key, spot)


def test_the_message_names_the_local_the_line_and_the_rewrite():
    with pytest.raises(interop.UnsupportedError) as info:
        interop.op(after_loop).description.check_adjoint()
    msg = str(info.value)
    assert "op 'after_loop'" in msg and "local `acc`" in msg and "dynamic `for` loop at line" in msg
    assert "test_blind_spots.py:" in msg and "`out[i] = w[i] * acc`" in msg
    assert "accumulate the product inside the loop" in msg and "wp.static" in msg
    with pytest.raises(interop.UnsupportedError, match=r"`r`, a tuple .*`r = _pair\(a\[i\]\)`.*unpack"):
        interop.op(tuple_one_name).description.check_adjoint()
    with pytest.raises(interop.UnsupportedError, match=r"local `acc`.* in _looped_scaled: `return s \* acc`"):
        interop.op(func_scales_after).description.check_adjoint()


def test_no_catalogue_kernel_is_refused():
    kernels = [c.op.description for c in CASES if c.op.description.kind == "kernel"]
    assert len(kernels) > 20
    assert [d.label for d in kernels if d.blind_spot is not None] == []


def _frameworks():
    out = []
    for fw in ("torch", "jax", "jax-jit", "paddle", "warp"):
        mod = fw.split("-")[0]
        marks = [] if mod == "warp" or importlib.util.find_spec(mod) else [pytest.mark.skip(reason=f"{mod} missing")]
        out.append(pytest.param(fw, marks=marks, id=fw))
    return out


def _run(fw: str, op, grad: bool):
    """(forward value, gradient of sum(V * op(a, w)) w.r.t. (a, w) or None) through ``fw``."""
    a, w = A.astype(np.float32), W.astype(np.float32)
    if fw == "torch":
        import torch

        ta, tw = (torch.tensor(x, requires_grad=grad, device="cpu") for x in (a, w))
        out = op(ta, tw)
        if not grad:
            return out.detach().numpy(), None
        (out * torch.tensor(V, dtype=torch.float32, device="cpu")).sum().backward()
        return out.detach().numpy(), np.concatenate([ta.grad.numpy(), tw.grad.numpy()])
    if fw.startswith("jax"):
        import jax
        import jax.numpy as jnp

        dev = jax_device("cpu")
        ja, jw, jv = (jnp.asarray(x, dtype=jnp.float32, device=dev) for x in (a, w, V))
        fwd = jax.jit(op) if fw == "jax-jit" else op
        g = jax.grad(lambda a, w: jnp.sum(jv * op(a, w)), argnums=(0, 1))
        g = jax.jit(g) if fw == "jax-jit" else g
        value = np.asarray(fwd(ja, jw))
        return value, (np.concatenate([np.asarray(x) for x in g(ja, jw)]) if grad else None)
    if fw == "paddle":
        import paddle

        pa, pw = (paddle.to_tensor(x, place=paddle.CPUPlace(), stop_gradient=not grad) for x in (a, w))
        out = op(pa, pw)
        if not grad:
            return out.numpy(), None
        (out * paddle.to_tensor(V.astype(np.float32), place=paddle.CPUPlace())).sum().backward()
        return out.numpy(), np.concatenate([pa.grad.numpy(), pw.grad.numpy()])
    wa, ww = (wp.array(x, dtype=float, requires_grad=grad, device="cpu") for x in (a, w))
    if not grad:
        return op(wa, ww).numpy(), None
    tape = wp.Tape()
    with tape:
        out = op(wa, ww)
    out.grad = wp.array(V.astype(np.float32), dtype=float, device="cpu")
    tape.backward()
    return out.numpy(), np.concatenate([wa.grad.numpy(), ww.grad.numpy()])


AFTER = interop.op(after_loop)
INSIDE = interop.op(inside_loop)


@pytest.mark.parametrize("fw", _frameworks())
def test_forward_runs_and_the_first_backward_raises(fw):
    value, _ = _run(fw, AFTER, grad=False)
    np.testing.assert_allclose(value, W * np.sum(A**2), rtol=1e-5)
    # Paddle wraps any error raised in a backward in its own OSError (the message is kept)
    with pytest.raises(OSError if fw == "paddle" else interop.UnsupportedError, match=r"local `acc`.*Rewrite"):
        _run(fw, AFTER, grad=True)


@pytest.mark.parametrize("fw", _frameworks())
def test_the_rewrite_gives_the_right_gradient(fw):
    value, grad = _run(fw, INSIDE, grad=True)
    np.testing.assert_allclose(value, W * np.sum(A**2), rtol=1e-5)
    expected = np.concatenate([2 * A * np.dot(V, W), V * np.sum(A**2)])
    np.testing.assert_allclose(grad, expected, rtol=1e-5)


@wp.kernel
def scaled_sum(a: wp.array(dtype=float), s: float, out: wp.array(dtype=float)):
    i = wp.tid()
    n = a.shape[0]
    acc = float(0.0)  # noqa: UP018 - a Warp variable the loop mutates
    for j in range(n):
        acc += a[j] * a[j]
    # Warp's SPH density: only the gradient of the scalar `s` needs acc's value
    out[i] = s * acc


def test_a_blind_spot_of_a_scalar_alone_is_refused_only_when_the_scalar_is_differentiated():
    torch = pytest.importorskip("torch")
    spot = _blind_spots.find(scaled_sum)
    assert spot is not None and spot.scalars == {"s"}
    op = interop.op(scaled_sum)
    a = torch.tensor(A, dtype=torch.float32, requires_grad=True, device="cpu")
    op(a, 1.5).sum().backward()  # the scalar is a number: a's gradient is right
    np.testing.assert_allclose(a.grad.numpy(), 2 * A * 1.5 * 4, rtol=1e-5)
    s = torch.tensor(1.5, requires_grad=True, device="cpu")
    with pytest.raises(interop.UnsupportedError, match=r"scalar parameter\(s\) \['s'\].*`out\[i\] = s \* acc`"):
        op(a, s).sum().backward()


@pytest.mark.parametrize("how", ["compile", "func"])
def test_torch_compile_and_torch_func_refuse_too(how):
    torch = pytest.importorskip("torch")
    a = torch.tensor(A, dtype=torch.float32, device="cpu")
    w = torch.tensor(W, dtype=torch.float32, requires_grad=True, device="cpu")
    with pytest.raises(interop.UnsupportedError, match=r"op 'after_loop'.*local `acc`"):
        if how == "compile":
            torch._dynamo.reset()
            torch.compile(lambda a, w: AFTER(a, w).sum(), fullgraph=True)(a, w).backward()
        else:
            torch.func.grad(lambda w: AFTER(a, w).sum())(w.detach())
    assert w.grad is None  # nothing was written


@wp.kernel
def reads_in_out(a: wp.array(dtype=float), w: wp.array(dtype=float)):
    i = wp.tid()
    wp.atomic_add(w, i, a[i] * w[i])  # reads the in-out's value


@wp.kernel
def reads_old_value(a: wp.array(dtype=float), w_old: wp.array(dtype=float), w: wp.array(dtype=float)):
    i = wp.tid()
    wp.atomic_add(w, i, a[i] * w_old[i])  # the rewrite: the old value passed as an input


def _in_out_run(fw: str, op, rewrite: bool):
    """(w + a * w, gradient of sum(V * that) w.r.t. (a, w)) through ``fw``; ``rewrite``: ``op`` takes
    the old value as an input too."""
    a, w = A.astype(np.float32), W.astype(np.float32)
    if fw == "torch":
        import torch

        ta, tw = (torch.tensor(x, requires_grad=True, device="cpu") for x in (a, w))
        out = op(ta, tw, tw * 1.0) if rewrite else op(ta, tw * 1.0)
        (out * torch.tensor(V, dtype=torch.float32, device="cpu")).sum().backward()
        return out.detach().numpy(), np.concatenate([ta.grad.numpy(), tw.grad.numpy()])
    if fw.startswith("jax"):
        import jax
        import jax.numpy as jnp

        dev = jax_device("cpu")
        ja, jw, jv = (jnp.asarray(x, dtype=jnp.float32, device=dev) for x in (a, w, V))
        f = (lambda a, w: op(a, w, w)) if rewrite else op
        g = jax.grad(lambda a, w: jnp.sum(jv * f(a, w)), argnums=(0, 1))
        g = jax.jit(g) if fw == "jax-jit" else g
        return np.asarray(f(ja, jw)), np.concatenate([np.asarray(x) for x in g(ja, jw)])
    if fw == "paddle":
        import paddle

        pa, pw = (paddle.to_tensor(x, place=paddle.CPUPlace(), stop_gradient=False) for x in (a, w))
        out = op(pa, pw, pw * 1.0) if rewrite else op(pa, pw * 1.0)
        (out * paddle.to_tensor(V.astype(np.float32), place=paddle.CPUPlace())).sum().backward()
        return out.numpy(), np.concatenate([pa.grad.numpy(), pw.grad.numpy()])
    wa, ww, wn = (wp.array(x, dtype=float, requires_grad=True, device="cpu") for x in (a, w, w))
    tape = wp.Tape()
    with tape:
        out = op(wa, ww, wn) if rewrite else op(wa, wn)
    out.grad = wp.array(V.astype(np.float32), dtype=float, device="cpu")
    tape.backward()
    return out.numpy(), np.concatenate([wa.grad.numpy(), ww.grad.numpy() + wn.grad.numpy()])


@pytest.mark.parametrize("fw", _frameworks())
def test_a_kernel_reading_its_in_out_is_refused_at_the_backward(fw):
    """A kernel that reads its in-out's value (``wp.atomic_add(w, i, a[i] * w[i])``): torch and
    Paddle gave ``a`` the gradient of the updated value and ``w`` the upstream gradient alone (no
    error); JAX's ``acc[i] = acc[i] + x[i]`` gave 2 for 1. Its backward is refused, naming the read
    and the rewrite (the old value as an input), whose gradients are right."""
    expected_value = W + A * W
    expected_grad = np.concatenate([V * W, V * (1.0 + A)])
    value, grad = _in_out_run(fw, interop.op(reads_old_value, in_out=["w"]), rewrite=True)
    np.testing.assert_allclose(value, expected_value, rtol=1e-5)
    np.testing.assert_allclose(grad, expected_grad, rtol=1e-5)
    op = interop.op(reads_in_out, in_out=["w"])
    with pytest.raises(
        OSError if fw == "paddle" else interop.UnsupportedError,
        match=r"in-out parameter `w` is read as a value.*Rewrite",
    ):
        _in_out_run(fw, op, rewrite=False)


@pytest.mark.parametrize("fw", [f for f in ("torch", "jax", "paddle") if importlib.util.find_spec(f)])
@pytest.mark.parametrize("kernel", ["parameter_bound", "local_bound", "in_out_read_through_alias"])
def test_names_hiding_globals_and_aliases_do_not_hide_a_blind_spot(fw, kernel):
    """A loop bound named like a module global (a parameter ``n``, a local ``count``) was read as the
    global's value: the loop passed as unrolled and ``w`` got Warp's zero gradient (1.64 is right);
    an in-out read through a local alias (``a = acc; a[i]``) passed, giving ``x`` the updated value's
    gradient. Both refused at the first backward, as their plain spellings are."""
    import blind_spot_shadows as bs

    k = getattr(bs, kernel)
    alias = kernel == "in_out_read_through_alias"
    op = interop.op(k, in_out=["acc"], outputs=["out"]) if alias else interop.op(k)
    xn, wn = np.array([0.3, 0.9, 0.5, 0.7], np.float32), np.array([1.0, 2.0, 0.5, 1.5], np.float32)
    args = (lambda x, w: (x, w)) if alias else (lambda x, w: (x, w, 4) if kernel == "parameter_bound" else (x, w))
    match = "in-out parameter `acc` is read as a value" if alias else "dynamic `for` loop"
    if fw == "torch":
        import torch

        x = torch.tensor(xn, requires_grad=True, device="cpu")
        out = op(*args(x, torch.tensor(wn, requires_grad=not alias, device="cpu")))
        with pytest.raises(interop.UnsupportedError, match=match):
            (out[1] if alias else out).sum().backward()
    elif fw == "paddle":
        import paddle

        x = paddle.to_tensor(xn, stop_gradient=False, place=paddle.CPUPlace())
        w = paddle.to_tensor(wn, stop_gradient=alias, place=paddle.CPUPlace())
        out = op(*args(x, w))
        with pytest.raises(OSError, match=match):  # (Paddle hands a backward's error on as OSError)
            (out[1] if alias else out).sum().backward()
    else:
        import jax
        import jax.numpy as jnp

        cpu = jax_device("cpu")
        w = jnp.asarray(wn, device=cpu)

        def loss(x):
            out = op(*args(x, w))
            return (out[1] if alias else out).sum()

        with pytest.raises(interop.UnsupportedError, match=match):
            jax.grad(loss)(jnp.asarray(xn, device=cpu))


def test_struct_kernel_blind_spot_names_the_users_lines():
    """A kernel with a struct parameter is launched as a generated flat kernel: its blind spot was
    named at ``<interop flat kernel of ...>:6 in ..._interop_flat`` and "line 4", lines of the
    generated source. It names the user's file, lines and kernel."""
    import inspect

    import blind_spot_shadows as bs

    lines, first = inspect.getsourcelines(bs.struct_loop_after.func)
    loop = first + next(k for k, text in enumerate(lines) if "for j in" in text)
    read = first + next(k for k, text in enumerate(lines) if "out[i] = acc" in text)
    spot = interop.op(bs.struct_loop_after).description.blind_spot
    assert spot is not None
    msg = spot.message("struct_loop_after")
    assert f"loop at line {loop}," in msg, msg
    assert f"blind_spot_shadows.py:{read} in struct_loop_after: `out[i] = acc * x[i]`" in msg, msg
