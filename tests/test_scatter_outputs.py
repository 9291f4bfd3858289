"""Outputs written at other indices than the thread's (issue 50): a scatter (``f[idx[i]] += v``), an
atomic at a computed index (``wp.atomic_add(f, i, v)`` with ``i = springs[t, 0]``), a reduction into
``out[0]``: their shape is not inferred from the launch. A call without their ``output_dims`` raises an
``ArgumentError`` naming the op, the output, the kernel's line and asking for ``output_dims``; with
them (on the op or the call) every framework gives the scatter's values and gradients."""

from __future__ import annotations

import importlib.util
import inspect

import numpy as np
import pytest
import warp as wp
from _devices import jax_device
from catalogue import to_fw, to_np

import interop
from interop._extent import permuted_outputs, scattered_outputs

FRAMEWORKS = [
    f for f in ("numpy", "warp", "torch", "jax", "paddle") if f in ("numpy", "warp") or importlib.util.find_spec(f)
]


@wp.kernel
def segment_sum(x: wp.array(dtype=float), idx: wp.array(dtype=wp.int32), out: wp.array(dtype=float)):
    i = wp.tid()
    wp.atomic_add(out, idx[i], x[i])


@wp.kernel
def springs(pos: wp.array(dtype=wp.vec3), ij: wp.array2d(dtype=wp.int32), f: wp.array(dtype=wp.vec3)):
    t = wp.tid()
    i = ij[t, 0]
    j = ij[t, 1]
    d = pos[j] - pos[i]
    f[i] += d
    wp.atomic_sub(f, j, d)


@wp.kernel
def total(x: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    wp.atomic_add(out, 0, x[i])


# kernels only analysed (never launched): each writes `out` one way
@wp.kernel
def _at_thread(x: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = x[i]


@wp.kernel
def _at_thread_2d(x: wp.array2d(dtype=float), out: wp.array2d(dtype=float)):
    i, j = wp.tid()
    out[i, j] = x[i, j]
    wp.atomic_add(out, i, j, 1.0)


@wp.kernel
def _component(x: wp.array(dtype=wp.vec3), out: wp.array(dtype=wp.vec3)):
    tid = wp.tid()
    k = tid
    out[k][0] = x[tid][1]
    out[wp.tid()].y = 2.0


@wp.kernel
def _hash_sorted(grid: wp.uint64, x: wp.array(dtype=wp.vec3), out: wp.array(dtype=float)):
    tid = wp.tid()
    i = wp.hash_grid_point_id(grid, tid)
    out[i] = wp.length(x[i])


@wp.kernel
def _transposed(x: wp.array2d(dtype=float), out: wp.array2d(dtype=float)):
    i, j = wp.tid()
    out[j, i] = x[i, j]


@wp.kernel
def _shifted(x: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    out[i + 1] = x[i]


@wp.kernel
def _reassigned(x: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    i = i // 2
    out[i] = x[i]


@wp.kernel
def _scatter_store(x: wp.array(dtype=float), idx: wp.array(dtype=int), out: wp.array(dtype=float)):
    i = wp.tid()
    if x[i] > 0.0:
        out[idx[i]] = x[i]


@wp.kernel
def _both_orders(x: wp.array2d(dtype=float), out: wp.array2d(dtype=float)):
    i, j = wp.tid()
    out[i, j] = x[i, j]
    out[j, i] = x[i, j]


@pytest.mark.parametrize(
    "kernel, expected",
    [
        (_at_thread, ()),
        (_at_thread_2d, ()),
        (_component, ()),
        (_hash_sorted, ()),
        (_transposed, ()),  # a permutation of the thread indices: sized from the launch permuted
        (_both_orders, ("out", "out[j, i] = x[i, j]")),
        (_shifted, ("out", "out[i + 1] = x[i]")),
        (_reassigned, ("out", "out[i] = x[i]")),
        (_scatter_store, ("out", "out[idx[i]] = x[i]")),
        (segment_sum, ("out", "wp.atomic_add(out, idx[i], x[i])")),
        (springs, ("f", "f[i] += d")),
        (total, ("out", "wp.atomic_add(out, 0, x[i])")),
    ],
)
def test_analysis_finds_writes_at_other_indices(kernel, expected):
    names = [(a.label, a.type.ndim) for a in kernel.adj.args[-1:]]
    found = scattered_outputs(kernel, "kernel", names)
    if not expected:
        assert found == ()
        return
    ((name, line, text),) = found
    assert (name, text) == expected
    src, first = inspect.getsourcelines(kernel.func)
    assert src[line - first].strip().startswith(text.split(" = ")[0].split("(")[0])  # the line in this file


def test_message_names_op_output_line_and_asks_for_output_dims():
    op = interop.op(segment_sum)
    x, idx = np.ones(6, np.float32), np.array([0, 1, 1, 2, 0, 1], np.int32)
    with pytest.raises(interop.ArgumentError) as ei:
        op(x, idx)
    line = inspect.getsourcelines(segment_sum.func)[1] + 3  # (the decorator, def, i = wp.tid(), the atomic)
    assert str(ei.value) == (
        f"op 'segment_sum', output 'out': the kernel writes it at an index that is not the thread's (line {line} "
        f"of {__file__}: wp.atomic_add(out, idx[i], x[i])), so its shape cannot be inferred from the launch; "
        "pass output_dims={'out': shape} (to interop.op or the call) with the shape it is written into"
    )
    # launch_dims alone do not size it either
    with pytest.raises(interop.ArgumentError, match="output 'out'.*output_dims"):
        op(x, idx, launch_dims=6)
    np.testing.assert_array_equal(op(x, idx, output_dims=3), [2, 3, 1])
    np.testing.assert_array_equal(op(x, idx, output_dims={"out": 4}), [2, 3, 1, 0])
    np.testing.assert_array_equal(interop.op(segment_sum, output_dims=3)(x, idx), [2, 3, 1])


def _springs_case(n_particles=4):
    rng = np.random.default_rng(0)
    pos = rng.standard_normal((n_particles, 3)).astype(np.float32)
    ij = np.array([[0, 1], [1, 2], [2, 3], [3, 0], [0, 2], [1, 3], [2, 0]], np.int32)  # 7 springs, 4 particles
    f = np.zeros((n_particles, 3), np.float32)
    for i, j in ij:
        f[i] += pos[j] - pos[i]
        f[j] -= pos[j] - pos[i]
    return pos, ij, f


def _springs_grad(ij, w):
    """d sum(w * f) / d pos: for a spring (i, j), f[i] gets pos[j] - pos[i] and f[j] loses it."""
    ref = np.zeros(w.shape, np.float32)
    for i, j in ij:
        ref[j] += w[i] - w[j]
        ref[i] -= w[i] - w[j]
    return ref


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_every_framework_refuses_without_output_dims_and_scatters_with_them(fw, device):
    op = interop.op(springs)
    pos, ij, want = _springs_case()
    args = (to_fw(fw, pos, wp.vec3, device=device), to_fw(fw, ij, device=device))
    with pytest.raises(interop.ArgumentError, match=r"op 'springs', output 'f': .*f\[i\] \+= d.*output_dims"):
        op(*args)
    np.testing.assert_allclose(to_np(op(*args, output_dims=4)).reshape(4, 3), want, rtol=1e-6, atol=1e-6)


def test_torch_gradient_and_compile():
    torch = pytest.importorskip("torch")
    op = interop.op(springs)
    pos, ij, want = _springs_case()
    p = torch.tensor(pos, device="cpu", requires_grad=True)
    t_ij = torch.tensor(ij, device="cpu")
    w = torch.linspace(-1, 1, 12, device="cpu").reshape(4, 3)
    f = op(p, t_ij, output_dims=4)
    (g,) = torch.autograd.grad((f * w).sum(), [p])
    np.testing.assert_allclose(g.numpy(), _springs_grad(ij, w.numpy()), rtol=1e-6, atol=1e-6)
    compiled = torch.compile(lambda a, b: op(a, b), backend="eager", fullgraph=True)
    with pytest.raises(Exception, match="output 'f'.*output_dims"):  # refused while Dynamo traces
        compiled(p, t_ij)
    ok = torch.compile(lambda a, b: op(a, b, output_dims=4), backend="eager", fullgraph=True)
    np.testing.assert_allclose(ok(p, t_ij).detach().numpy(), want, rtol=1e-6, atol=1e-6)


def test_jax_jit_and_grad():
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    op = interop.op(springs)
    pos, ij, want = _springs_case()
    cpu = jax_device("cpu")
    p, j_ij = jax.device_put(pos, cpu), jax.device_put(ij, cpu)
    with pytest.raises(interop.ArgumentError, match="output 'f'.*output_dims"):
        jax.jit(lambda a, b: op(a, b))(p, j_ij)
    np.testing.assert_allclose(jax.jit(lambda a, b: op(a, b, output_dims=4))(p, j_ij), want, rtol=1e-6, atol=1e-6)
    w = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)
    g = jax.grad(lambda a: jnp.sum(op(a, j_ij, output_dims=4) * jax.device_put(w, cpu)))(p)
    np.testing.assert_allclose(np.asarray(g), _springs_grad(ij, w), rtol=1e-6, atol=1e-6)


def test_analysis_finds_the_permutation_of_a_transpose():
    assert permuted_outputs(_transposed, "kernel", [("out", 2)]) == (("out", (1, 0)),)
    assert permuted_outputs(_both_orders, "kernel", [("out", 2)]) == ()  # two orders: refused instead


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_a_transpose_is_sized_from_the_launch_permuted(fw, device):
    """``out[j, i] = x[i, j]`` over a (3, 4) launch: a (4, 3) output in every framework (values), its
    gradient the upstream gradient transposed (torch, JAX, Paddle), and the same under torch.compile
    and jax.jit."""
    op = interop.op(_transposed)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_array_equal(to_np(op(to_fw(fw, x, device=device))), x.T)
    w = np.random.default_rng(0).random((4, 3)).astype(np.float32)
    if fw == "torch":
        import torch

        t = to_fw(fw, x, device=device, requires_grad=True)
        (op(t) * to_fw(fw, w, device=device)).sum().backward()
        np.testing.assert_array_equal(to_np(t.grad), w.T)
        compiled = torch.compile(lambda a: op(a), fullgraph=True, backend="aot_eager")
        np.testing.assert_array_equal(to_np(compiled(to_fw(fw, x, device=device))), x.T)
    if fw == "jax":
        import jax

        dev = jax_device(device)
        xj, wj = jax.device_put(x, dev), jax.device_put(w, dev)
        np.testing.assert_array_equal(np.asarray(jax.jit(op)(xj)), x.T)
        np.testing.assert_array_equal(np.asarray(jax.grad(lambda a: (op(a) * wj).sum())(xj)), w.T)
    if fw == "paddle":
        t = to_fw(fw, x, device=device, requires_grad=True)
        (op(t) * to_fw(fw, w, device=device)).sum().backward()
        np.testing.assert_array_equal(to_np(t.grad), w.T)
