"""Indexed arrays (issue 51): kernels with ``wp.indexedarray`` parameters, wrapped as shipped, called
with ``interop.indexed(data, indices)`` from every framework (and a ``wp.indexedarray`` from NumPy and
Warp): values against ``wp.launch`` with a ``wp.indexedarray`` on the same device, gradients into the data
against an independent scatter formula (repeated indices accumulate), forward mode, writes through the
view, and the errors a caller meets.
"""

from __future__ import annotations

import contextlib
import importlib.util
import typing
import warnings

import numpy as np
import pytest
import warp as wp
from catalogue import to_fw, to_np

import interop

FRAMEWORKS = [
    f
    for f in ("numpy", "warp", "torch", "jax", "paddle", "cupy")
    if f in ("numpy", "warp") or importlib.util.find_spec(f)
]
GRAD_FRAMEWORKS = [f for f in ("torch", "jax", "paddle") if importlib.util.find_spec(f)]


# ---- the kernels, as shipped ------------------------------------------------------------------
@wp.kernel
def _gather_mass_matrix_port_kernel(
    port: wp.indexedarray(dtype=wp.float32, ndim=3),  # view selecting robots from a larger set of blocks
    out: wp.array3d[wp.float32],  # (controlled_robot_count, max_controlled_dofs, max_controlled_dofs)
):
    # verbatim from newton's controller ports
    robot, row, col = wp.tid()
    out[robot, row, col] = port[robot, row, col]


@wp.kernel
def _scatter_port_kernel(
    values: wp.array[wp.float32],  # one entry per element the view addresses
    port: wp.indexedarray[wp.float32],  # view of a simulation-sized array
):
    # verbatim from newton's controller ports
    dof = wp.tid()
    port[dof] = values[dof]


@wp.kernel
def reset_root_pos_kernel(
    initial_root_pos: wp.indexedarray(dtype=wp.float32, ndim=2),
    offsets: wp.array2d(dtype=wp.float32),
    scale: wp.float32,
    root_pos: wp.indexedarray(dtype=wp.float32, ndim=2),
):
    # an RL environment reset: the rows of the environments being reset are overwritten by their
    # initial state (both views select those environments' rows of the all-environment arrays)
    env, k = wp.tid()
    root_pos[env, k] = initial_root_pos[env, k] + scale * offsets[env, k]


@wp.kernel
def _gather_rank1_port_kernel(
    port: wp.indexedarray(dtype=typing.Any),  # view of a simulation-sized array
    out: wp.array[typing.Any],  # one entry per element the view addresses
):
    # verbatim from newton's controller ports (generic over dtype)
    dof = wp.tid()
    out[dof] = port[dof]


@wp.kernel
def vec3_view_kernel(p: wp.indexedarray(dtype=wp.vec3), out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = wp.length(p[i]) + p[i][2]  # a vector element, then one of its components


GATHER = interop.op(_gather_mass_matrix_port_kernel, name="indexed_test::gather")
SCATTER = interop.op(_scatter_port_kernel, outputs=0, in_out=["port"], name="indexed_test::scatter")


@wp.struct
class ViewModel:
    v: wp.indexedarray(dtype=float)
    k: float


@wp.kernel
def struct_view_kernel(s: ViewModel, out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = s.k * s.v[i] * s.v[i]


STRUCT_VIEW = interop.op(struct_view_kernel, name="indexed_test::struct_view")
VEC3 = interop.op(vec3_view_kernel, name="indexed_test::vec3")
RANK1 = interop.op(_gather_rank1_port_kernel, name="indexed_test::rank1")
RESET = interop.op(reset_root_pos_kernel, outputs=0, in_out=["root_pos"], name="indexed_test::reset")

BLOCKS = np.random.default_rng(0).uniform(-1, 1, (4, 3, 3)).astype(np.float32)
ROBOTS = np.array([2, 0, 2], np.int32)  # a repeated robot: its gradient accumulates
COLS = np.array([2, 0], np.int32)


def _skip_numpy_on_cuda(fw: str, device: str) -> None:
    if fw == "numpy" and device != "cpu":
        pytest.skip("NumPy arrays live on the CPU")


def _gather_reference(device: str) -> np.ndarray:
    data = wp.array(BLOCKS, dtype=wp.float32, device=device)
    view = wp.indexedarray(data, [wp.array(ROBOTS, dtype=wp.int32, device=device), None, wp.array(COLS, device=device)])
    out = wp.zeros(view.shape, dtype=wp.float32, device=device)
    wp.launch(_gather_mass_matrix_port_kernel, dim=view.shape, inputs=[view], outputs=[out], device=device)
    return out.numpy()


def _gather_grad_formula(w: np.ndarray) -> np.ndarray:
    g = np.zeros_like(BLOCKS)
    r, c = np.meshgrid(ROBOTS, COLS, indexing="ij")
    for j in range(BLOCKS.shape[1]):
        np.add.at(g, (r, j, c), w[:, j, :])
    return g


def _ix(fw: str, a: np.ndarray, device: str):
    return to_fw(fw, a, device=device)


# ---- values: every framework, both devices ----------------------------------------------------
@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_gather_values_equal_warp_launch_with_an_indexedarray(fw, device):
    _skip_numpy_on_cuda(fw, device)
    data = to_fw(fw, BLOCKS, device=device)
    out = GATHER(interop.indexed(data, [_ix(fw, ROBOTS, device), None, _ix(fw, COLS, device)]))
    assert type(out).__module__.split(".")[0] == type(data).__module__.split(".")[0]
    np.testing.assert_array_equal(to_np(out), _gather_reference(device))
    np.testing.assert_array_equal(to_np(data), BLOCKS)  # read through the view, not written


@pytest.mark.parametrize("fw", ["numpy", "warp"])
def test_numpy_and_warp_calls_take_a_wp_indexedarray(fw, device):
    _skip_numpy_on_cuda(fw, device)
    data = wp.array(BLOCKS, dtype=wp.float32, device=device)
    view = wp.indexedarray(data, [wp.array(ROBOTS, device=device), None, wp.array(COLS, device=device)])
    out = (
        GATHER(view)
        if fw == "warp"
        else SCATTER(np.ones(3, np.float32), interop.indexed(np.zeros(5, np.float32), None))
    )
    if fw == "warp":
        assert isinstance(out, wp.array)
        np.testing.assert_array_equal(out.numpy(), _gather_reference(device))
        return
    np.testing.assert_array_equal(out, [1, 1, 1, 0, 0])  # None: the whole dimension
    # a CPU wp.indexedarray in a NumPy call: its data is viewed as NumPy, written in place
    target = wp.zeros(6, dtype=wp.float32, device="cpu")
    got = SCATTER(
        np.array([1, 2, 3], np.float32),
        wp.indexedarray(target, [wp.array(np.array([2, 0, 5], np.int32), device="cpu")]),
    )
    assert isinstance(got, np.ndarray) and got.ctypes.data == target.ptr
    np.testing.assert_array_equal(target.numpy(), [2, 0, 1, 0, 0, 3])


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_writes_through_the_view_change_only_the_indexed_rows_in_place(fw, device):
    _skip_numpy_on_cuda(fw, device)
    base = np.arange(6, dtype=np.float32)
    data = to_fw(fw, base, device=device)
    idx = np.array([4, 1, 5], np.int32)
    got = SCATTER(
        to_fw(fw, np.array([10, 20, 30], np.float32), device=device), interop.indexed(data, _ix(fw, idx, device))
    )
    expected = base.copy()
    expected[idx] = [10, 20, 30]
    np.testing.assert_array_equal(to_np(got), expected)
    if fw == "jax":
        np.testing.assert_array_equal(to_np(data), base)  # JAX returns the updated data as a new array
    else:
        assert got is data  # the caller's own array, updated in place: zero-copy
        np.testing.assert_array_equal(to_np(data), expected)


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_environment_reset_overwrites_the_reset_rows(fw, device):
    _skip_numpy_on_cuda(fw, device)
    rng = np.random.default_rng(1)
    initial = rng.uniform(-1, 1, (5, 3)).astype(np.float32)
    current = rng.uniform(-1, 1, (5, 3)).astype(np.float32)
    envs = np.array([3, 0], np.int32)
    offs = rng.uniform(-1, 1, (2, 3)).astype(np.float32)
    root = to_fw(fw, current, device=device)
    ids = _ix(fw, envs, device)
    got = RESET(
        interop.indexed(to_fw(fw, initial, device=device), ids),
        to_fw(fw, offs, device=device),
        0.5,
        interop.indexed(root, ids),
    )
    expected = current.copy()
    expected[envs] = initial[envs] + 0.5 * offs
    np.testing.assert_allclose(to_np(got), expected, rtol=1e-6)
    # the same values as Warp's own launch with wp.indexedarray views
    w_root = wp.array(current, device=device)
    w_ids = wp.array(envs, device=device)
    wp.launch(
        reset_root_pos_kernel,
        dim=(2, 3),
        inputs=[wp.indexedarray(wp.array(initial, device=device), [w_ids]), wp.array(offs, device=device), 0.5],
        outputs=[wp.indexedarray(w_root, [w_ids])],
        device=device,
    )
    np.testing.assert_array_equal(to_np(got), w_root.numpy())


@pytest.mark.parametrize("fw", FRAMEWORKS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_generic_rank1_gather_resolves_the_data_dtype(fw, dtype, device):
    _skip_numpy_on_cuda(fw, device)
    data = np.arange(5, dtype=dtype) / 3
    x64 = __import__("jax").enable_x64(True) if fw == "jax" else contextlib.nullcontext()
    with x64:  # (JAX makes float64 float32 itself unless x64 is on)
        got = RANK1(interop.indexed(to_fw(fw, data, device=device), _ix(fw, ROBOTS, device)))
        assert to_np(got).dtype == dtype
    np.testing.assert_array_equal(to_np(got), data[ROBOTS])


# ---- gradients: scattered into the data through the indices ------------------------------------
def _grad(fw: str, f, args: list[np.ndarray], device: str) -> list[np.ndarray]:
    """Gradients of f(*args) (a scalar) with respect to every float argument, in framework ``fw``."""
    if fw == "torch":
        ts = [to_fw("torch", a, requires_grad=True, device=device) for a in args]
        f(*ts).backward()
        return [t.grad.cpu().numpy() for t in ts]
    if fw == "jax":
        import jax

        xs = [to_fw("jax", a, device=device) for a in args]
        return [np.asarray(g) for g in jax.grad(f, argnums=tuple(range(len(xs))))(*xs)]
    ps = [to_fw("paddle", a, requires_grad=True, device=device) for a in args]
    f(*ps).backward()
    return [p.grad.numpy() for p in ps]


@pytest.mark.parametrize("fw", GRAD_FRAMEWORKS)
def test_gather_gradient_is_scattered_through_the_indices(fw, device):
    w = np.random.default_rng(2).uniform(-1, 1, (3, 3, 2)).astype(np.float32)
    ww = to_fw(fw, w, device=device)
    r, c = _ix(fw, ROBOTS, device), _ix(fw, COLS, device)
    (g,) = _grad(fw, lambda d: (GATHER(interop.indexed(d, [r, None, c])) * ww).sum(), [BLOCKS], device)
    np.testing.assert_allclose(g, _gather_grad_formula(w), rtol=1e-6)


@pytest.mark.parametrize("fw", GRAD_FRAMEWORKS)
def test_vec3_view_gradient(fw, device):
    x = np.random.default_rng(5).uniform(0.5, 1.5, (4, 3)).astype(np.float32)
    w = np.array([1.0, -2.0, 0.5], np.float32)
    ix, ww = _ix(fw, ROBOTS, device), to_fw(fw, w, device=device)
    (g,) = _grad(fw, lambda d: (VEC3(interop.indexed(d, ix)) * ww).sum(), [x], device)
    expected = np.zeros_like(x)
    for k, r in enumerate(ROBOTS):
        expected[r] += w[k] * (x[r] / np.linalg.norm(x[r]) + [0, 0, 1])
    np.testing.assert_allclose(g, expected, rtol=1e-5)


@pytest.mark.parametrize("fw", GRAD_FRAMEWORKS)
def test_gradient_through_a_struct_field_view(fw, device):
    x = np.arange(5, dtype=np.float32)
    idx = np.array([4, 1, 4], np.int32)
    w = np.array([1.0, -1.0, 0.5], np.float32)
    ix, ww = _ix(fw, idx, device), to_fw(fw, w, device=device)
    (g,) = _grad(fw, lambda d: (STRUCT_VIEW({"v": interop.indexed(d, ix), "k": 2.0}) * ww).sum(), [x], device)
    expected = np.zeros_like(x)
    np.add.at(expected, idx, w * 4.0 * x[idx])
    np.testing.assert_allclose(g, expected, rtol=1e-6)


@pytest.mark.parametrize("fw", GRAD_FRAMEWORKS)
def test_environment_reset_gradients(fw, device):
    rng = np.random.default_rng(3)
    initial, offs = rng.uniform(-1, 1, (5, 3)).astype(np.float32), rng.uniform(-1, 1, (3, 3)).astype(np.float32)
    envs = np.array([4, 1, 4], np.int32)  # env 4 twice: its initial row's gradient accumulates
    w = rng.uniform(-1, 1, (5, 3)).astype(np.float32)
    ids, ww = _ix(fw, envs, device), to_fw(fw, w, device=device)

    def loss(init, o):
        root = to_fw(fw, np.zeros((5, 3), np.float32), device=device)
        return (RESET(interop.indexed(init, ids), o, 2.0, interop.indexed(root, ids)) * ww).sum()

    g_init, g_offs = _grad(fw, loss, [initial, offs], device)
    expected = np.zeros_like(initial)
    np.add.at(expected, envs, w[envs])
    np.testing.assert_allclose(g_init, expected, rtol=1e-6)
    np.testing.assert_allclose(g_offs, 2.0 * w[envs], rtol=1e-6)


@pytest.mark.parametrize("fw", GRAD_FRAMEWORKS)
def test_scatter_gradient_of_the_written_values(fw, device):
    idx = np.array([4, 1, 5], np.int32)
    w = np.arange(6, dtype=np.float32)
    ix, ww = _ix(fw, idx, device), to_fw(fw, w, device=device)

    def loss(v):
        data = to_fw(fw, np.zeros(6, np.float32), device=device)
        return (SCATTER(v, interop.indexed(data, ix)) * ww).sum()

    (g,) = _grad(fw, loss, [np.ones(3, np.float32)], device)
    np.testing.assert_array_equal(g, w[idx])


# ---- transforms ----------------------------------------------------------------------------------
def test_torch_compile_vmap_and_forward_mode(device):
    torch = pytest.importorskip("torch")
    data = to_fw("torch", BLOCKS, requires_grad=True, device=device)
    r, c = _ix("torch", ROBOTS, device), _ix("torch", COLS, device)
    ref = _gather_reference(device)

    def f(d):
        return GATHER(interop.indexed(d, [r, None, c]))

    out = torch.compile(f, fullgraph=True)(data)
    np.testing.assert_array_equal(to_np(out), ref)
    w = torch.ones_like(out)
    (g,) = torch.autograd.grad((out * w).sum(), data)
    np.testing.assert_array_equal(to_np(g), _gather_grad_formula(np.ones_like(ref)))
    batch = torch.stack([data.detach(), 2 * data.detach()])
    np.testing.assert_allclose(to_np(torch.vmap(f)(batch)), np.stack([ref, 2 * ref]), rtol=1e-6)
    # a view is a pytree node: vmap maps over its data, compile takes it as an argument
    in_dims = (interop.indexed(0, [None, None, None]),)
    batched = torch.vmap(GATHER, in_dims=in_dims)(interop.indexed(batch, [r, None, c]))
    np.testing.assert_allclose(to_np(batched), np.stack([ref, 2 * ref]), rtol=1e-6)
    compiled = torch.compile(GATHER, fullgraph=True)(interop.indexed(data, [r, None, c]))
    np.testing.assert_array_equal(to_np(compiled), ref)
    tangent = torch.arange(BLOCKS.size, dtype=torch.float32, device=device).reshape(BLOCKS.shape)
    _, t_out = torch.func.jvp(f, (data.detach(),), (tangent,))
    np.testing.assert_array_equal(to_np(t_out), to_np(tangent)[ROBOTS][:, :, COLS])


def test_jax_jit_vmap_grad_and_jvp(device):
    jax = pytest.importorskip("jax")
    data = to_fw("jax", BLOCKS, device=device)
    r, c = _ix("jax", ROBOTS, device), _ix("jax", COLS, device)
    ref = _gather_reference(device)

    def f(d):
        return GATHER(interop.indexed(d, [r, None, c]))

    np.testing.assert_array_equal(np.asarray(jax.jit(f)(data)), ref)
    np.testing.assert_allclose(np.asarray(jax.vmap(f)(jax.numpy.stack([data, 2 * data]))), np.stack([ref, 2 * ref]))
    g = jax.jit(jax.grad(lambda d: f(d).sum()))(data)
    np.testing.assert_array_equal(np.asarray(g), _gather_grad_formula(np.ones_like(ref)))
    tangent = to_fw("jax", np.arange(BLOCKS.size, dtype=np.float32).reshape(BLOCKS.shape), device=device)
    _, t_out = jax.jvp(f, (data,), (tangent,))
    np.testing.assert_array_equal(np.asarray(t_out), np.asarray(tangent)[ROBOTS][:, :, COLS])
    # a view is a pytree: an argument of jit, grad (an Indexed of gradients) and vmap
    view = interop.indexed(data, [r, None, c])
    np.testing.assert_array_equal(np.asarray(jax.jit(GATHER)(view)), ref)
    g_view = jax.grad(lambda v: GATHER(v).sum(), allow_int=True)(view)
    np.testing.assert_array_equal(np.asarray(g_view.data), _gather_grad_formula(np.ones_like(ref)))
    batched = jax.vmap(GATHER, in_axes=(interop.indexed(0, [None, None, None]),))(
        interop.indexed(jax.numpy.stack([data, 2 * data]), [r, None, c])
    )
    np.testing.assert_allclose(np.asarray(batched), np.stack([ref, 2 * ref]))
    # an in-out view under jit: the updated data comes back
    idx = _ix("jax", np.array([1, 0], np.int32), device)
    got = jax.jit(lambda v, d: SCATTER(v, interop.indexed(d, idx)))(data[0, 0, :2], data[0, 0])
    np.testing.assert_array_equal(np.asarray(got), BLOCKS[0, 0][[1, 0, 2]])


# ---- Warp's own test_indexedarray.py kernels and a warp.sparse kernel ---------------------------------
def _warp_test_kernels():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mod = pytest.importorskip("warp.tests.test_indexedarray")
    return mod


@pytest.mark.parametrize("fw", FRAMEWORKS)
@pytest.mark.parametrize("ndim", [1, 2, 3])
def test_warp_test_indexedarray_kernels(fw, ndim, device):
    # kernel_1d/2d/3d: read, a[i][j] views read whole, overwrite, wp.atomic_add through the view
    _skip_numpy_on_cuda(fw, device)
    mod = _warp_test_kernels()
    kernel = {1: mod.kernel_1d, 2: mod.kernel_2d, 3: mod.kernel_3d}[ndim]
    op = interop.op(kernel, outputs=0, in_out=["a"])
    values = np.arange(4**ndim, dtype=np.float32).reshape((4,) * ndim)
    idx = [np.array([3, 1], np.int32), None, np.array([0, 2, 3], np.int32)][:ndim]
    sel = np.ix_(*[np.arange(4) if i is None else i for i in idx])
    expected = values[sel]
    data = to_fw(fw, values, device=device)
    got = op(
        interop.indexed(data, [None if i is None else _ix(fw, i, device) for i in idx]),
        to_fw(fw, expected, device=device),
    )
    w_data = wp.array(values, device=device)
    w_view = wp.indexedarray(w_data, [None if i is None else wp.array(i, device=device) for i in idx])
    wp.launch(kernel, dim=w_view.shape, inputs=[w_view, wp.array(expected, device=device)], device=device)
    np.testing.assert_array_equal(to_np(got), w_data.numpy())
    want = values.copy()
    want[sel] = 2 * expected + 1
    np.testing.assert_array_equal(to_np(got), want)


@pytest.mark.parametrize("fw", FRAMEWORKS)
@pytest.mark.parametrize("nested", [False, True])
def test_warp_test_indexedarray_struct_kernels(fw, nested, device):
    # kernel_indexedarray_in_struct / _in_nested_struct: the view is a struct field (a dict of
    # interop.indexed here; a Warp struct instance holding a wp.indexedarray in Warp calls)
    _skip_numpy_on_cuda(fw, device)
    mod = _warp_test_kernels()
    kernel = mod.kernel_indexedarray_in_nested_struct if nested else mod.kernel_indexedarray_in_struct
    op = interop.op(kernel, outputs=0, in_out=["arg"])
    values = np.arange(10, dtype=np.float32)
    idx = np.array([1, 5, 3], np.int32)
    data = to_fw(fw, values, device=device)
    if fw == "warp":
        inner = mod.IndexedArrayStruct()
        inner.iarr = wp.indexedarray(data, [wp.array(idx, device=device)])
        arg = inner
        if nested:
            arg = mod.NestedIndexedArrayStruct()
            arg.inner = inner
    else:
        view = {"iarr": interop.indexed(data, _ix(fw, idx, device))}
        arg = {"inner": view} if nested else view
    got = op(arg, to_fw(fw, values[idx], device=device))
    want = values.copy()
    want[idx] = 2 * values[idx] + 1
    if fw == "jax":  # a new structure: its view is over the new data
        field = got["inner"]["iarr"] if nested else got["iarr"]
        np.testing.assert_array_equal(to_np(field.data), want)
    else:
        assert got is arg
        np.testing.assert_array_equal(to_np(data), want)


@wp.kernel
def row_view_kernel(a: wp.indexedarray(dtype=float, ndim=2), out: wp.array2d(dtype=float)):
    i = wp.tid()
    row = a[i]  # a view of the view (Warp's wp.view), bound once
    for j in range(row.shape[0]):
        out[i, j] = row[j] * float(j + 1)


ROW_VIEW = interop.op(row_view_kernel, launch_dims=2, output_dims=(2, 2), name="indexed_test::row_view")


@pytest.mark.parametrize("fw", GRAD_FRAMEWORKS)
def test_a_view_of_the_view_bound_to_a_name(fw, device):
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    rows, cols = np.array([3, 1], np.int32), np.array([2, 0], np.int32)
    r, c = _ix(fw, rows, device), _ix(fw, cols, device)
    got = ROW_VIEW(interop.indexed(to_fw(fw, x, device=device), [r, c]))
    np.testing.assert_array_equal(to_np(got), x[np.ix_(rows, cols)] * [1, 2])
    (g,) = _grad(fw, lambda d: ROW_VIEW(interop.indexed(d, [r, c])).sum(), [x], device)
    expected = np.zeros_like(x)
    expected[np.ix_(rows, cols)] = [1, 2]
    np.testing.assert_array_equal(g, expected)


@pytest.mark.parametrize("ndim", [2, 3, 4])
def test_warp_test_indexedarray_shape_kernels(ndim, capfd):
    # shape_kernel_2d/3d/4d: the view's shape and its views' shapes (view = arr[0], arr[0, 0]), checked
    # by wp.expect_eq inside the kernel, which prints a failure (the wrong expectation shows it does)
    mod = _warp_test_kernels()
    kernel = {2: mod.shape_kernel_2d, 3: mod.shape_kernel_3d, 4: mod.shape_kernel_4d}[ndim]
    vec = {2: wp.vec2i, 3: wp.vec3i, 4: wp.vec4i}[ndim]
    op = interop.op(kernel, outputs=0, in_out=["arr"], launch_dims=1)
    data = np.zeros((5, 4, 3, 2)[:ndim], np.float32)
    view = interop.indexed(data, [np.array([1, 2], np.int32), None, np.array([0, 2], np.int32), None][:ndim])
    shape = [2, 4, 2, 2][:ndim]
    capfd.readouterr()
    op(view, vec(*shape))
    assert "expect_eq() failed" not in capfd.readouterr().out
    op(view, vec(*shape[:-1], 7))
    assert "expect_eq() failed" in capfd.readouterr().out


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_warp_sparse_kernel_with_an_int_indexedarray(fw, device):
    # warp.sparse's _bsr_mm_compute_values as shipped: summed_triplet_src_blocks is an indexed view of
    # the x blocks a product block sums (here x = one row of 4 blocks, y = 4 rows of 1 block at column 0)
    _skip_numpy_on_cuda(fw, device)
    from warp._src.sparse import _bsr_mm_compute_values

    op = interop.op(_bsr_mm_compute_values, outputs=0, in_out=["mm_values"], launch_dims=1)
    i32 = lambda *v: to_fw(fw, np.array(v, np.int32), device=device)  # noqa: E731
    x_vals, y_vals = np.array([1, 2, 3, 4], np.float32), np.array([10, 20, 30, 40], np.float32)
    blocks = i32(3, 2, 1, 0)  # the view picks block 2 (its entry 1)
    got = op(
        1.5,
        i32(0, 4),
        i32(4),
        i32(0, 1, 2, 3),
        to_fw(fw, x_vals, device=device),  # x: offsets, counts, columns, values
        i32(0, 1, 2, 3, 4),
        i32(1, 1, 1, 1),
        i32(0, 0, 0, 0),
        to_fw(fw, y_vals, device=device),
        i32(-1),  # mm_row_min: the row sums the triplets
        i32(1),  # summed_triplet_offsets: one triplet (4 x blocks > 3 * 1: the triplets are read)
        interop.indexed(blocks, i32(1)),
        1,
        i32(0, 1),
        i32(1),
        i32(0),  # mm: offsets, row counts, columns
        to_fw(fw, np.zeros(1, np.float32), device=device),
    )
    np.testing.assert_allclose(to_np(got), [1.5 * 3 * 30])  # x block 2 (column 2) times y's row 2


# ---- errors ------------------------------------------------------------------------------------
@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_index_arrays_must_be_int32_1d_of_the_same_framework(fw, device):
    _skip_numpy_on_cuda(fw, device)
    data = to_fw(fw, BLOCKS, device=device)
    # (JAX makes int64 int32 itself unless x64 is on)
    x64 = __import__("jax").enable_x64(True) if fw == "jax" else contextlib.nullcontext()
    with (
        x64,
        pytest.raises(
            interop.ArgumentError,
            match=r"parameter 'port.indices\[0\]': expected a 1-d array of int32 .*int64.*never cast",
        ),
    ):
        GATHER(interop.indexed(data, [to_fw(fw, ROBOTS.astype(np.int64), device=device)]))
    with pytest.raises(interop.ArgumentError, match=r"parameter 'port.indices\[1\]': expected a 1-d array of int32"):
        GATHER(interop.indexed(data, [None, to_fw(fw, np.zeros((2, 2), np.int32), device=device)]))
    other = "numpy" if fw != "numpy" else "warp"
    with pytest.raises(interop.ArgumentError, match=r"framework|frameworks"):
        GATHER(interop.indexed(data, [to_fw(other, ROBOTS, device="cpu")]))
    with pytest.raises(
        interop.ArgumentError, match=r"parameter 'port': 4 index arrays given for a wp.indexedarray of 3"
    ):
        GATHER(interop.indexed(data, [None, None, None, to_fw(fw, ROBOTS, device=device)]))


def test_index_on_another_device_is_refused(device):
    if device == "cpu":
        pytest.skip("needs a second device")
    torch = pytest.importorskip("torch")
    data = to_fw("torch", BLOCKS, device=device)
    with pytest.raises(interop.ArgumentError, match=r"device"):
        GATHER(interop.indexed(data, [torch.tensor(ROBOTS, device="cpu")]))


def test_what_an_op_cannot_do_with_a_view_is_refused_when_described():
    @wp.kernel(module="unique")  # never built: kept out of this file's Warp module
    def partial_view(a: wp.indexedarray(dtype=float, ndim=2), out: wp.array(dtype=float)):
        i = wp.tid()
        row = a[i]
        row = a[0]
        out[i] = row[0]

    @wp.kernel(module="unique")  # never built: kept out of this file's Warp module
    def passes_whole(a: wp.indexedarray(dtype=float), out: wp.array(dtype=float)):
        i = wp.tid()
        out[i] = wp.tile_sum(wp.tile_load(a, shape=4))[0]

    with pytest.raises(
        interop.UnsupportedError,
        match=r"parameter 'a' is a wp.indexedarray, and the kernel binds a view of it to a name assigned more than once",
    ):
        interop.op(partial_view)
    with pytest.raises(interop.UnsupportedError, match=r"passes it whole to a function"):
        interop.op(passes_whole)
    with pytest.raises(
        interop.ArgumentError, match=r"parameter 'port' is a wp.indexedarray, which the call cannot make"
    ):
        interop.op(_scatter_port_kernel)  # the default output, the last array, is the view


def test_a_plain_array_is_a_view_of_all_of_it_and_other_values_are_refused():
    np.testing.assert_array_equal(GATHER(BLOCKS), BLOCKS)
    with pytest.raises(interop.ArgumentError, match=r"parameter 'port': expected interop.indexed\(data, indices\)"):
        GATHER([1.0, 2.0])


def test_warp_tape_differentiates_the_call_where_warp_alone_cannot(device):
    # wp.Tape over wp.launch with a wp.indexedarray fails ('indexedarray' object has no attribute 'grad');
    # over the op, the gradient reaches the data, from interop.indexed or a wp.indexedarray alike
    data = wp.array(BLOCKS, dtype=wp.float32, requires_grad=True, device=device)
    robots, cols = wp.array(ROBOTS, device=device), wp.array(COLS, device=device)
    w = np.random.default_rng(4).uniform(-1, 1, (3, 3, 2)).astype(np.float32)
    for view in (interop.indexed(data, [robots, None, cols]), wp.indexedarray(data, [robots, None, cols])):
        data.grad.zero_()
        tape = wp.Tape()
        with tape:
            out = GATHER(view)
        tape.backward(grads={out: wp.array(w, device=device)})
        np.testing.assert_allclose(data.grad.numpy(), _gather_grad_formula(w), rtol=1e-6)


def test_numpy_jvp_paddle_to_static_and_paddle_jvp():
    tangent = np.arange(BLOCKS.size, dtype=np.float32).reshape(BLOCKS.shape)
    expected = tangent[ROBOTS][:, :, COLS]
    res, tan = GATHER.jvp(interop.indexed(BLOCKS, [ROBOTS, None, COLS]), tangents=[tangent])
    np.testing.assert_array_equal(res, _gather_reference("cpu"))
    np.testing.assert_array_equal(tan, expected)
    paddle = pytest.importorskip("paddle")
    from paddle.incubate.autograd import jvp

    data = to_fw("paddle", BLOCKS, requires_grad=True)
    r, c = _ix("paddle", ROBOTS, "cpu"), _ix("paddle", COLS, "cpu")

    def f(d):
        return GATHER(interop.indexed(d, [r, None, c]))

    np.testing.assert_array_equal(paddle.jit.to_static(f)(data).numpy(), _gather_reference("cpu"))
    _, t_out = jvp(f, data, to_fw("paddle", tangent))
    np.testing.assert_array_equal(t_out.numpy(), expected)


@wp.kernel(module="unique")
def scale_any(q: typing.Any, s: float, out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = s * q[i]


def test_an_overload_of_a_generic_kernel_for_an_indexed_array():
    # generic kernels ship overloads for both plain and indexed arrays
    ovl = wp.overload(scale_any, {"q": wp.indexedarray(dtype=float), "s": float, "out": wp.array(dtype=float)})
    data = np.arange(5, dtype=np.float32)
    got = interop.op(ovl)(interop.indexed(data, np.array([4, 0], np.int32)), 2.0)
    np.testing.assert_array_equal(got, [8.0, 0.0])
