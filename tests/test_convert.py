"""`interop.convert` is zero-copy between every pair of installed frameworks (checked by data pointers).

Also: vec/mat views, copy=False refusing a real copy (and copy=True then working), tensors that
require grad, and the op call path not copying NumPy/Warp inputs.
"""

import importlib.util

import ml_dtypes
import numpy as np
import pytest
import warp as wp
from _devices import jax_device

import interop
from interop._frameworks import data_ptr, framework_of

FRAMEWORKS = [f for f in ("numpy", "warp", "torch", "jax", "paddle") if importlib.util.find_spec(f) is not None]
BF16 = np.dtype(ml_dtypes.bfloat16)  # NumPy's bfloat16 (as in JAX)


def aligned_numpy(values: np.ndarray, align: int = 64) -> np.ndarray:
    """A copy of ``values`` in a buffer aligned to ``align`` bytes (XLA aliases only 64-byte aligned memory)."""
    raw = np.empty(values.nbytes + align, np.uint8)
    off = (-raw.ctypes.data) % align
    out = raw[off : off + values.nbytes].view(values.dtype).reshape(values.shape)
    out[...] = values
    return out


def make(fw: str, values: np.ndarray):
    """An array of framework ``fw`` holding ``values``, allocated by that framework (so aligned as it aligns)."""
    if fw == "numpy":
        return aligned_numpy(values)
    if fw == "warp":
        return wp.array(values, device="cpu")
    if fw == "torch":
        import torch

        if values.dtype == BF16:  # torch knows no ml_dtypes.bfloat16: float32 holds its values exactly
            return torch.tensor(values.astype(np.float32), device="cpu").to(torch.bfloat16)
        return torch.tensor(values, device="cpu")
    if fw == "jax":
        import jax.numpy as jnp

        return jnp.asarray(values, device=jax_device("cpu"))
    if fw == "paddle":
        import paddle

        if values.dtype == BF16:
            return paddle.to_tensor(values.astype(np.float32), place=paddle.CPUPlace()).astype("bfloat16")
        return paddle.to_tensor(values, place=paddle.CPUPlace())
    raise AssertionError(fw)


def to_numpy(y) -> np.ndarray:
    fw = framework_of(y)
    if fw == "numpy":
        return y
    if fw == "torch" and str(y.dtype) == "torch.bfloat16":
        return y.float().numpy().astype(BF16)
    if fw == "paddle" and str(y.dtype) == "paddle.bfloat16":
        return y.astype("float32").numpy().astype(BF16)  # its .numpy() gives the raw uint16 bits
    if fw in ("warp", "torch", "paddle"):
        return y.numpy()
    return np.asarray(y)


def np_dtype_of(y) -> np.dtype:
    return to_numpy(y).dtype


def shape_of(y) -> tuple:
    return tuple(int(s) for s in y.shape)


def x64_if_needed(src, dst, values):
    """JAX drops 64-bit dtypes unless x64 is on: turn it on (scoped) for float64 pairs with JAX."""
    import contextlib

    if "jax" in (src, dst) and values.dtype.itemsize == 8:
        import jax

        return jax.enable_x64(True)
    return contextlib.nullcontext()


VALUES = {
    "float32": (np.arange(12, dtype=np.float32).reshape(4, 3) - 5.5),
    "float64": (np.arange(10, dtype=np.float64) * 0.1).reshape(2, 5),
    "int32": np.arange(-3, 5, dtype=np.int32),
    "bfloat16": (np.arange(12, dtype=np.float32).reshape(3, 4) * 0.25 - 1.5).astype(BF16),
}


# ---- the matrix ------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", list(VALUES))
@pytest.mark.parametrize("dst", FRAMEWORKS)
@pytest.mark.parametrize("src", FRAMEWORKS)
def test_zero_copy_matrix(src, dst, dtype):
    values = VALUES[dtype]
    with x64_if_needed(src, dst, values):
        x = make(src, values)
        y = interop.convert(x, to=dst)
    assert framework_of(y) == dst
    assert data_ptr(y) == data_ptr(x), f"{src} -> {dst} copied"
    assert shape_of(y) == values.shape
    assert np_dtype_of(y) == values.dtype
    np.testing.assert_array_equal(to_numpy(y), values)


@pytest.mark.parametrize("dst", FRAMEWORKS)
def test_round_trip_through_numpy_sees_writes(dst):
    """Memory is shared: a write through the NumPy view shows in the converted array."""
    if dst == "jax":
        pytest.skip("JAX arrays are immutable; sharing is checked by pointers in the matrix")
    base = aligned_numpy(np.zeros(6, np.float32))
    y = interop.convert(base, to=dst)
    base[2] = 7.0
    assert to_numpy(y)[2] == 7.0


# ---- vec / mat views --------------------------------------------------------------------------------
@pytest.mark.parametrize("src", FRAMEWORKS)
def test_vec3_view_into_warp(src):
    values = np.arange(15, dtype=np.float32).reshape(5, 3)
    b = make(src, values)
    w = interop.convert(b, to="warp", dtype=wp.vec3)
    assert isinstance(w, wp.array)
    assert w.dtype == wp.vec3 and w.shape == (5,)
    assert data_ptr(w) == data_ptr(b)
    np.testing.assert_array_equal(w.numpy(), values)


@pytest.mark.parametrize("src", FRAMEWORKS)
def test_mat22_view_into_warp(src):
    values = np.arange(12, dtype=np.float32).reshape(3, 2, 2)
    c = make(src, values)
    w = interop.convert(c, to="warp", dtype=wp.mat22)
    assert w.dtype == wp.mat22 and w.shape == (3,)
    assert data_ptr(w) == data_ptr(c)


@pytest.mark.parametrize("dst", FRAMEWORKS)
@pytest.mark.parametrize("elem, inner", [(wp.vec3, (3,)), (wp.mat22, (2, 2)), (wp.mat33, (3, 3))])
def test_warp_vec_mat_to_others_gives_trailing_dims(dst, elem, inner):
    n = 4
    values = np.arange(n * int(np.prod(inner)), dtype=np.float32).reshape((n,) + inner)
    w = wp.array(values, dtype=elem, device="cpu")
    y = interop.convert(w, to=dst)
    assert data_ptr(y) == data_ptr(w)
    if dst == "warp":
        assert y is w
    else:
        assert shape_of(y) == (n,) + inner
        np.testing.assert_array_equal(to_numpy(y), values)


def test_vec_view_of_warp_arrays_both_ways():
    w = wp.array(np.arange(12, dtype=np.float32).reshape(4, 3), device="cpu")
    v = interop.convert(w, to="warp", dtype=wp.vec3)
    assert v.shape == (4,) and v.dtype == wp.vec3 and data_ptr(v) == data_ptr(w)
    f = interop.convert(v, to="warp", dtype=wp.float32)
    assert f.shape == (4, 3) and f.dtype == wp.float32 and data_ptr(f) == data_ptr(w)


@pytest.mark.parametrize(
    "values, dtype, msg",
    [
        (
            np.zeros((4, 2), np.float32),
            wp.vec3,
            r"dtype=vec3f views an array of float32 whose trailing dims are \(3,\).*got a numpy array of shape \(4, 2\)",
        ),
        (np.zeros((4, 3), np.float64), wp.vec3, r"dtype=vec3f .*got a numpy array of shape \(4, 3\) and dtype float64"),
        (np.zeros((4, 3, 3), np.float32), wp.mat22, r"dtype=mat22f .*trailing dims are \(2, 2\)"),
        (
            np.zeros(4, np.float32),
            wp.float64,
            r"dtype=float64 views an array of float64, got a numpy array of dtype float32; arrays are never cast",
        ),
    ],
)
def test_vec_view_mismatch(values, dtype, msg):
    for copy in (False, True):
        with pytest.raises(TypeError, match="convert: " + msg):
            interop.convert(values, to="warp", dtype=dtype, copy=copy)


# ---- copies only on request -------------------------------------------------------------------------
def test_copy_false_raises_for_strided_to_jax_then_copy_true_works():
    pytest.importorskip("jax")
    a = np.arange(24, dtype=np.float32).reshape(4, 6)[:, ::2]  # XLA needs compact strides
    with pytest.raises(
        ValueError,
        match=r"convert: a numpy array of shape \(4, 3\) cannot be handed to jax without a copy .*pass copy=True",
    ):
        interop.convert(a, to="jax")
    y = interop.convert(a, to="jax", copy=True)
    assert framework_of(y) == "jax" and shape_of(y) == (4, 3)
    np.testing.assert_array_equal(np.asarray(y), a)


def test_copy_false_raises_for_misaligned_to_jax_then_copy_true_works():
    pytest.importorskip("jax")
    a = aligned_numpy(np.arange(9, dtype=np.float32))[1:]  # 4 bytes past a 64-byte boundary
    with pytest.raises(
        ValueError, match=r"cannot be handed to jax without a copy .*64-byte aligned.*4 bytes past.*copy=True"
    ):
        interop.convert(a, to="jax")
    y = interop.convert(a, to="jax", copy=True)
    assert data_ptr(y) != data_ptr(a)
    np.testing.assert_array_equal(np.asarray(y), a)


def test_strided_torch_to_jax_needs_copy():
    torch = pytest.importorskip("torch")
    pytest.importorskip("jax")
    t = torch.arange(24, dtype=torch.float32, device="cpu").reshape(4, 6)[:, ::2]
    with pytest.raises(ValueError, match=r"a torch array of shape \(4, 3\) cannot be handed to jax without a copy"):
        interop.convert(t, to="jax")
    np.testing.assert_array_equal(np.asarray(interop.convert(t, to="jax", copy=True)), t.numpy())


@pytest.mark.parametrize("dst", [f for f in FRAMEWORKS if f != "jax"])
def test_strided_numpy_converts_without_copy_where_strides_are_supported(dst):
    a = np.arange(24, dtype=np.float32).reshape(4, 6)[:, ::2]
    y = interop.convert(a, to=dst)
    assert data_ptr(y) == data_ptr(a)
    np.testing.assert_array_equal(to_numpy(y), a)


def test_float64_to_jax_without_x64_is_refused_even_with_copy():
    jax = pytest.importorskip("jax")
    if jax.config.jax_enable_x64:
        pytest.skip("x64 is enabled globally")
    a = aligned_numpy(np.arange(4, dtype=np.float64))
    for copy in (False, True):
        with pytest.raises(
            TypeError,
            match=r"convert: jax would change the dtype of a numpy array from float64 to float32 \(JAX has 64-bit types disabled.*arrays are never cast",
        ):
            interop.convert(a, to="jax", copy=copy)


# ---- autograd state is never touched -----------------------------------------------------------------
@pytest.mark.parametrize("dst", FRAMEWORKS)
def test_torch_requires_grad_converts_detached_and_grad_not_set(dst):
    torch = pytest.importorskip("torch")
    t = torch.arange(6, dtype=torch.float32, device="cpu").requires_grad_(True)
    y = interop.convert(t, to=dst)
    assert data_ptr(y) == t.data_ptr()
    assert t.grad is None
    assert t.requires_grad  # the caller's tensor is unchanged
    if dst == "torch":
        assert not y.requires_grad  # a detached view
    np.testing.assert_array_equal(to_numpy(y), np.arange(6, dtype=np.float32))


@pytest.mark.parametrize("dst", FRAMEWORKS)
def test_paddle_trainable_converts_detached_and_grad_not_set(dst):
    """A Paddle tensor with stop_gradient=False is handed over detached, sharing memory (as torch's)."""
    paddle = pytest.importorskip("paddle")
    t = paddle.arange(6, dtype="float32")
    t.stop_gradient = False
    y = interop.convert(t, to=dst)
    assert data_ptr(y) == t.data_ptr()
    assert t.grad is None
    assert not t.stop_gradient  # the caller's tensor is unchanged
    if dst == "paddle":
        assert y.stop_gradient  # a detached view
    np.testing.assert_array_equal(to_numpy(y), np.arange(6, dtype=np.float32))


def test_convert_to_torch_never_sets_grad():
    torch = pytest.importorskip("torch")
    w = wp.array(np.ones(3, np.float32), device="cpu", requires_grad=True)
    t = interop.convert(w, to="torch")
    assert t.grad is None and not t.requires_grad
    assert data_ptr(t) == data_ptr(w)
    t2 = torch.ones(3, requires_grad=True, device="cpu")
    interop.convert(t2, to="warp", dtype=wp.float32)
    assert t2.grad is None


# ---- errors ----------------------------------------------------------------------------------------
def test_convert_errors():
    a = np.zeros(3, np.float32)
    with pytest.raises(ValueError, match=r"convert: to must be one of .*got 'tensorflow'"):
        interop.convert(a, to="tensorflow")
    with pytest.raises(
        TypeError, match=r"convert: x must be a NumPy, Warp, PyTorch, JAX, Paddle or CuPy array, got builtins.list"
    ):
        interop.convert([1.0, 2.0], to="numpy")
    with pytest.raises(TypeError, match=r"got builtins.memoryview"):
        interop.convert(memoryview(a), to="numpy")
    with pytest.raises(TypeError, match=r"convert: dtype= applies only to to='warp'"):
        interop.convert(a, to="numpy", dtype=wp.vec3)


def test_numpy_dtype_without_warp_equivalent():
    with pytest.raises(ValueError, match=r"cannot be handed to warp.*complex64"):
        interop.convert(np.zeros(3, np.complex64), to="warp")


# ---- the op call path copies nothing ------------------------------------------------------------------
@wp.kernel
def accumulate(x: wp.array(dtype=float), acc: wp.array(dtype=float)):
    i = wp.tid()
    wp.atomic_add(acc, 0, x[i])


@wp.kernel
def scale(x: wp.array(dtype=float), s: float, out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = x[i] * s


def test_in_out_numpy_updated_in_place():
    op = interop.op(accumulate, in_out=["acc"])
    acc = np.array([1.0], np.float32)
    ptr = data_ptr(acc)
    res = op(np.arange(5, dtype=np.float32), acc)
    assert res is acc and data_ptr(res) == ptr
    assert acc[0] == 11.0


def test_in_out_warp_updated_in_place():
    op = interop.op(accumulate, in_out=["acc"])
    acc = wp.array([2.0], dtype=float, device="cpu")
    res = op(wp.array(np.ones(3, np.float32), device="cpu"), acc)
    assert res is acc
    assert acc.numpy()[0] == 5.0


def test_in_out_view_of_converted_array_updates_original():
    """A torch tensor's memory, handed to the op as NumPy via convert, is updated in place."""
    torch = pytest.importorskip("torch")
    acc_t = torch.zeros(1, device="cpu")
    acc = interop.convert(acc_t, to="numpy")
    interop.op(accumulate, in_out=["acc"])(np.ones(4, np.float32), acc)
    assert acc_t.item() == 4.0


def test_strided_numpy_input_read_in_place():
    base = np.arange(20, dtype=np.float32)
    x = base[::4]
    out = interop.op(scale)(x, 2.0)
    np.testing.assert_array_equal(out, base[::4] * 2.0)
    # a write to the base after the call does not change the already computed output, but a second
    # call sees it: the op reads the caller's memory, not a cached copy
    base[4] = 100.0
    np.testing.assert_array_equal(interop.op(scale)(x, 2.0)[1], 200.0)


def test_strided_warp_view_input_read_in_place():
    base = np.arange(20, dtype=np.float32)
    w = interop.convert(base[1::2], to="warp")  # a strided Warp view of NumPy memory
    assert data_ptr(w) == data_ptr(base) + 4 and w.strides == (8,)
    out = interop.op(scale)(w, 3.0)
    assert isinstance(out, wp.array)
    np.testing.assert_array_equal(out.numpy(), base[1::2] * 3.0)


@pytest.mark.parametrize("dst", [f for f in FRAMEWORKS if f != "torch"])
def test_torch_lazy_negative_view_is_not_handed_over_as_its_memory(dst):
    # z.conj().imag is a tensor with torch's negative bit: its memory holds +2, +4, its values are
    # -2, -4. DLPack handed the memory over (the sign silently flipped) to Paddle and Warp
    torch = pytest.importorskip("torch")
    im = torch.tensor([1 + 2j, 3 + 4j], dtype=torch.complex64, device="cpu").conj().imag
    assert im.is_neg()
    with pytest.raises(
        interop.ArgumentError, match=r"cannot be handed to .* without a copy \(it has torch's negative bit"
    ):
        interop.convert(im, to=dst)
    out = interop.convert(im, to=dst, copy=True)
    got = out.numpy() if dst == "warp" else np.asarray(interop.convert(out, to="numpy", copy=True))
    np.testing.assert_array_equal(got, [-2.0, -4.0])
    assert interop.convert(im, to="torch") is im  # the same framework: the tensor itself


@pytest.mark.parametrize("dst", FRAMEWORKS)
def test_torch_nested_and_sparse_are_refused_not_an_internal_error(dst):
    torch = pytest.importorskip("torch")
    for t in (
        torch.nested.nested_tensor([torch.ones(2, device="cpu"), torch.ones(3, device="cpu")]),
        torch.ones(3, device="cpu").to_sparse(),
    ):
        if dst == "torch":
            assert interop.convert(t, to="torch") is t
            continue
        with pytest.raises(interop.ArgumentError, match=r"torch tensor has no dense strided memory"):
            interop.convert(t, to=dst)


# ---- JAX arrays sharded over several devices -----------------------------------------------------
SHARDED_SCRIPT = """
import numpy as np, jax, jax.numpy as jnp, warp as wp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
wp.config.quiet = True
import interop

assert jax.device_count() == 2, jax.devices()
mesh = Mesh(np.array(jax.devices("cpu")[:2]), ("x",))
values = np.arange(8, dtype=np.float32)
targets = TARGETS
for spec in (P("x"), P()):  # split over both devices, and replicated on both
    xs = jax.device_put(jnp.asarray(values, device=jax.devices("cpu")[0]), NamedSharding(mesh, spec))
    assert len(xs.devices()) == 2
    for to in targets:
        try:
            interop.convert(xs, to=to)
            raise AssertionError(f"{to}: a sharded array was handed over without copy=True")
        except interop.ArgumentError as e:
            assert "it is sharded over 2 devices" in str(e) and "pass copy=True" in str(e), str(e)
        y = interop.convert(xs, to=to, copy=True)
        assert interop._frameworks.framework_of(y) == to, (to, type(y))
        host = y if to == "numpy" else interop.convert(y, to="numpy", copy=True)
        assert tuple(int(s) for s in y.shape) == (8,), (to, y.shape)
        np.testing.assert_array_equal(np.asarray(host), values)
    assert len(interop.convert(xs, to="jax").devices()) == 2  # the same framework: the array itself
print("SHARDED_OK")
"""


def test_sharded_jax_array_copy_true_gathers_it_onto_one_device():
    """Finding: copy=True (which the no-copy error asks for) failed with 'too many values to unpack'."""
    pytest.importorskip("jax")
    from _subprocess import run_script

    env = {"XLA_FLAGS": "--xla_force_host_platform_device_count=2", "JAX_PLATFORMS": "cpu", "OMP_NUM_THREADS": "1"}
    targets = [f for f in FRAMEWORKS if f != "jax"]
    assert "SHARDED_OK" in run_script(SHARDED_SCRIPT.replace("TARGETS", repr(targets)), env=env).stdout


# ---- 0-d arrays --------------------------------------------------------------------------------------
@pytest.mark.parametrize("src", [f for f in FRAMEWORKS if f != "warp"])
def test_zero_d_to_warp_is_refused_saying_warp_has_no_0d_arrays(src):
    """Finding: NumPy 0-d became shape (1,) silently; the others failed with an internal IndexError
    text and advice to pass copy=True, which failed the same way."""
    x = make(src, np.array(3.0, np.float32))
    for copy in (False, True):
        for dtype in (None, wp.float32):
            with pytest.raises(
                interop.ArgumentError, match=rf"a 0-d {src} array cannot be handed to warp: Warp arrays have at least"
            ) as e:
                interop.convert(x, to="warp", dtype=dtype, copy=copy)
            assert "copy=True" not in str(e.value)
    w = interop.convert(x[None], to="warp")  # what the message offers: a (1,) view
    assert w.shape == (1,) and w.numpy()[0] == 3.0


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("dst", [f for f in FRAMEWORKS if f != "warp"])
@pytest.mark.parametrize("src", [f for f in FRAMEWORKS if f != "warp"])
def test_zero_d_stays_zero_d_between_frameworks_with_0d_arrays(src, dst, dtype):
    """Finding: a 0-d bfloat16 tensor to NumPy (routed through Warp) failed; 0-d stays 0-d, zero-copy."""
    values = np.array(1.5, np.float32).astype(BF16 if dtype == "bfloat16" else np.float32)
    x = make(src, values)
    if (src, dst, dtype) == ("numpy", "jax", "bfloat16"):
        # NumPy's DLPack knows no bfloat16: it goes through a (1,) Warp view, and JAX's reshape to () copies
        with pytest.raises(interop.ArgumentError, match=r"cannot be handed to jax without a copy.*copy=True"):
            interop.convert(x, to=dst)
        y = interop.convert(x, to=dst, copy=True)
    else:
        y = interop.convert(x, to=dst)
        assert data_ptr(y) == data_ptr(x), f"{src} -> {dst} copied"
    assert shape_of(y) == ()
    assert np_dtype_of(y) == values.dtype
    if (src, dst) == ("jax", "numpy"):
        assert not y.flags.writeable  # a view of an immutable JAX buffer, bfloat16 too
    np.testing.assert_array_equal(to_numpy(y), values)


# ---- refusals that no copy can fix do not ask for one --------------------------------------------------
@wp.struct
class Pair:
    a: float
    b: int


def _deleted_jax():
    import jax.numpy as jnp

    x = jnp.arange(64, dtype=jnp.float32, device=jax_device("cpu"))
    x.delete()
    return x


NO_COPY_HELPS = [
    ("torch", "warp", lambda: __import__("torch").zeros(3, dtype=__import__("torch").complex64, device="cpu"),
     r"a torch array of dtype complex64 cannot be handed to warp, not even as a copy: Warp has no arrays of complex64"),
    ("warp", "torch", lambda: wp.zeros(3, dtype=Pair, device="cpu"),
     r"a warp array of dtype .* cannot be handed to torch, not even as a copy: DLPack has no form for an array of "
     r"Warp structs; to='numpy'"),
    ("numpy", "warp", lambda: np.zeros(3, dtype=[("a", "f4")]),
     r"a numpy array of dtype \[\('a', '<f4'\)\] cannot be handed to warp, not even as a copy: Warp has no arrays"),
    ("numpy", "torch", lambda: np.zeros(3, dtype=[("a", "f4")]),
     r"a numpy array of dtype .* cannot be handed to torch, not even as a copy: DLPack, and torch, have no arrays"),
    ("jax", "torch", _deleted_jax, r"a jax array of shape \(64,\) has been deleted .*no memory left to hand to torch"),
]  # fmt: skip


@pytest.mark.parametrize(
    "src, dst, build, msg", NO_COPY_HELPS, ids=[f"{s}-{d}-{i}" for i, (s, d, *_) in enumerate(NO_COPY_HELPS)]
)
def test_refusal_no_copy_can_fix_names_the_reason_and_does_not_offer_copy(src, dst, build, msg):
    """Finding: every failure said 'cannot be handed to X without a copy (...); pass copy=True'."""
    for fw in (src, dst):
        pytest.importorskip(fw)
    x = build()
    for copy in (False, True):
        with pytest.raises(interop.ArgumentError, match="convert: " + msg) as e:
            interop.convert(x, to=dst, copy=copy)
        assert "pass copy=True" not in str(e.value) and "without a copy" not in str(e.value)


def test_warp_struct_array_to_numpy_is_warps_structured_view():
    """Finding: refused as a dtype change though Warp's own .numpy() is that zero-copy view."""
    w = wp.zeros(3, dtype=Pair, device="cpu")
    y = interop.convert(w, to="numpy")
    assert data_ptr(y) == data_ptr(w)
    assert y.dtype == w.numpy().dtype and y.dtype.names == ("a", "b") and y.shape == (3,)
    y["a"][1] = 2.5  # shares memory
    assert interop.convert(w, to="numpy")["a"][1] == 2.5
    c = interop.convert(w, to="numpy", copy=True)  # nothing to copy: the view again
    assert c.dtype == y.dtype and c["a"][1] == 2.5


# ---- same-size reinterpreting views (dtype=) ------------------------------------------------------------
VIEWS = [("bool", wp.int8), ("bool", wp.uint8), ("int8", wp.uint8), ("uint8", wp.int8), ("int32", wp.uint32)]


@pytest.mark.parametrize("have, view", VIEWS, ids=[f"{h}-{v.__name__}" for h, v in VIEWS])
@pytest.mark.parametrize("src", FRAMEWORKS)
def test_same_size_alias_views_into_warp(src, have, view):
    """Finding: bool -> int8/uint8 and int8 -> uint8 were refused as casts though Warp's DLPack makes
    these views (the aliases Warp's DLPack import allows), without a copy."""
    values = np.array([1, 0, 1, 1], bool) if have == "bool" else np.array([-1, 2, 3, -4]).astype(have)
    x = make(src, values)
    w = interop.convert(x, to="warp", dtype=view)
    assert w.dtype == view and w.shape == (4,)
    assert data_ptr(w) == data_ptr(x)
    np.testing.assert_array_equal(w.numpy(), values.view(wp.dtype_to_numpy(view)))


def test_alias_view_into_a_vector_type():
    b = np.array([[True, False, True], [False, False, True]])
    w = interop.convert(b, to="warp", dtype=wp.vec3ub)
    assert w.dtype == wp.vec3ub and w.shape == (2,) and data_ptr(w) == data_ptr(b)
    np.testing.assert_array_equal(w.numpy(), b.view(np.uint8))


@pytest.mark.parametrize(
    "have, view", [("float32", wp.int32), ("uint8", wp.bool), ("int8", wp.bool), ("int8", wp.int16)]
)
def test_other_dtype_views_are_refused(have, view):
    x = np.zeros(4, have)
    for copy in (False, True):
        with pytest.raises(
            interop.ArgumentError, match=rf"dtype={view.__name__} views an array of .*got a numpy array of dtype {have}"
        ):
            interop.convert(x, to="warp", dtype=view, copy=copy)


# ---- NumPy masked arrays ---------------------------------------------------------------------------------
@pytest.mark.parametrize("dst", [f for f in FRAMEWORKS if f != "numpy"])
def test_masked_array_with_masked_elements_is_refused(dst):
    """Finding: the mask was dropped silently (the target saw -999), while interop.op refuses it."""
    x = np.ma.array(aligned_numpy(np.array([1.0, -999.0, 3.0], np.float32)), mask=[0, 1, 0])
    for copy in (False, True):
        with pytest.raises(
            interop.ArgumentError,
            match=rf"a NumPy masked array with masked elements cannot be handed to {dst}: .*x.filled\(value\)",
        ):
            interop.convert(x, to=dst, copy=copy)
    assert interop.convert(x, to="numpy") is x  # the same framework: the mask is kept
    y = interop.convert(aligned_numpy(x.filled(0.0)), to=dst)  # (XLA aliases only aligned memory)
    np.testing.assert_array_equal(to_numpy(y), [1.0, 0.0, 3.0])


def test_masked_array_without_masked_elements_converts_as_interop_op_takes_it():
    x = np.ma.array(aligned_numpy(np.array([1.0, 2.0], np.float32)), mask=[0, 0])
    w = interop.convert(x, to="warp")
    assert data_ptr(w) == data_ptr(x)
    np.testing.assert_array_equal(w.numpy(), [1.0, 2.0])


@pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="jax not installed")
def test_unaligned_cpu_memory_to_jax_is_refused_before_xla_sees_it():
    """A Warp array over NumPy memory that is not 64-byte aligned: XLA would copy it, so convert
    refused, but only after handing it to JAX, whose CPU client then hung the process at exit
    (jax 0.10.2). Refused before; ``copy=True`` copies it; the process exits."""
    from _subprocess import run_script

    run_script(
        """
import numpy as np, warp as wp, interop
a = np.arange(1 << 12, dtype=np.float32)[1:]          # 4 bytes past an aligned start
src = wp.array(a, dtype=wp.float32, device="cpu", copy=False)
assert src.ptr % 64
try:
    interop.convert(src, to="jax")
    raise SystemExit("not refused")
except interop.ArgumentError as e:
    assert "64-byte aligned" in str(e), e
v = interop.convert(src, to="jax", copy=True)
assert np.array_equal(np.asarray(v), a)
""",
        timeout=120,
    )
