"""Checked mode (issue 50): ``interop.op(kernel, checked=True)`` / ``INTEROP_CHECKED=1``.

One kernel of the catalogue (``checked_springs_kernel``: a gather through a ``wp.func``, a scatter with
``wp.atomic_add``, a write at a computed index) and one tile kernel (``checked_tile_kernel``: a load
offset that is a parameter) run in every framework: in range, the values (and gradients) equal the
unchecked op's; out of range, the call raises ``interop.BoundsError`` naming the op, the parameter,
the index, the shape and the source line, in the forward, the backward and forward mode, and the
caller's memory around the arrays is untouched. A child process proves that an index far out of range
does not crash. Each checked variant is one kernel build: the ops are described once, at import.
"""

from __future__ import annotations

import importlib.util
import re

import numpy as np
import pytest
import warp as wp
from _subprocess import run_script
from catalogue import (
    CHECKED_TILE,
    checked_springs_kernel,
    checked_springs_reference,
    checked_tile_kernel,
    reads_output_backward_kernel,
    reads_output_hand_written,
    reads_output_kernel,
    to_fw,
    to_np,
)

import interop

FRAMEWORKS = [
    f
    for f in ("numpy", "warp", "torch", "jax", "paddle", "cupy")
    if f in ("numpy", "warp") or importlib.util.find_spec(f)
]
AUTOGRAD = [f for f in ("torch", "jax", "paddle") if importlib.util.find_spec(f)]
SPRINGS = dict(in_out=["f", "w"], outputs=["f", "w", "g"])
CHECKED = interop.op(checked_springs_kernel, checked=True, **SPRINGS)
PLAIN = interop.op(checked_springs_kernel, checked=False, **SPRINGS)
TILES = 2
TILE_OP = interop.op(
    checked_tile_kernel, block_dim=CHECKED_TILE, launch_dims=TILES, output_dims=TILES * CHECKED_TILE, checked=True
)
N = 5
# which index array goes out of range -> (the parameter named, the source line's text)
BAD = {
    "gather": ("gi", r"parameter 'x' \(as array 'a' of wp\.func 'checked_gather'", "return a[j] * 2.0"),
    "scatter": ("si", r"parameter 'f'", "wp.atomic_add(f, si[i], x[i] * 3.0)"),
    "write": ("wi", r"parameter 'w'", "w[wi[i]] = x[i] * x[i]"),
}


def _inputs() -> dict:
    return {
        "x": np.arange(1, N + 1, dtype=np.float32),
        "gi": np.array([4, 3, 2, 1, 0], np.int32),
        "si": np.array([0, 0, 1, 1, 2], np.int32),
        "wi": np.array([1, 2, 3, 4, 0], np.int32),
    }


def _call(op, fw, device, ins, f=None, w=None, **kw):
    f = np.zeros(N, np.float32) if f is None else f
    w = np.zeros(N, np.float32) if w is None else w
    args = [to_fw(fw, ins[k], device=device, **kw) for k in ("x", "gi", "si", "wi")]
    return op(*args, to_fw(fw, f, device=device), to_fw(fw, w, device=device))


def _message_check(e: BaseException, op_label: str, which: str, index: int, extra: str = "") -> None:
    _, param, text = BAD[which]
    msg = str(e)
    assert f"op {op_label!r}{extra}" in msg, msg
    assert re.search(param, msg), msg
    assert f"index {index} out of range" in msg and f"shape is ({N},)" in msg, msg
    assert re.search(r"catalogue\.py:\d+: `" + re.escape(text) + "`", msg), msg


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_in_range_values_equal_the_unchecked_op(fw, device):
    ins = _inputs()
    got = [to_np(r) for r in _call(CHECKED, fw, device, ins)]
    want = [to_np(r) for r in _call(PLAIN, fw, device, ins)]
    ref = checked_springs_reference(ins["x"], ins["gi"], ins["si"], ins["wi"], np.zeros(N), np.zeros(N))
    for g, w, r in zip(got, want, ref):
        np.testing.assert_array_equal(g, w)
        np.testing.assert_allclose(g, r, rtol=1e-6)


@pytest.mark.parametrize("which", sorted(BAD))
@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_out_of_range_raises_and_touches_nothing(fw, which, device):
    ins = _inputs()
    bad = ins[BAD[which][0]].copy()
    bad[2] = N if which != "scatter" else -1
    ins[BAD[which][0]] = bad
    with pytest.raises(interop.BoundsError) as info:
        _call(CHECKED, fw, device, ins)
    assert isinstance(info.value, IndexError) and isinstance(info.value, interop.InteropError)
    _message_check(info.value, "checked_springs_kernel", which, bad[2])
    # the next in-range call is clean (the record was reset)
    _call(CHECKED, fw, device, _inputs())


@pytest.mark.parametrize("which", sorted(BAD))
def test_memory_around_the_arrays_is_intact(which):
    """In-out arrays that are views of larger buffers: the element past each view keeps its value."""
    ins = _inputs()
    bad = ins[BAD[which][0]].copy()
    bad[1] = N
    ins[BAD[which][0]] = bad
    f_buf = np.full(N + 1, 7.0, np.float32)
    w_buf = np.full(N + 1, 9.0, np.float32)
    f_buf[:N] = 0.0
    w_buf[:N] = 0.0
    x = ins["x"]
    with pytest.raises(interop.BoundsError):
        CHECKED(x, ins["gi"], ins["si"], ins["wi"], f_buf[:N], w_buf[:N])
    assert f_buf[N] == 7.0 and w_buf[N] == 9.0
    np.testing.assert_array_equal(x, np.arange(1, N + 1, dtype=np.float32))
    # what was in range was done, what was not was skipped
    if which == "scatter":
        np.testing.assert_allclose(f_buf[:N], [3.0, 21.0, 15.0, 0.0, 0.0])  # thread 1's add skipped
    if which == "write":
        np.testing.assert_allclose(w_buf[:N], [25.0, 1.0, 0.0, 9.0, 16.0])  # thread 1's store skipped


def _bad_gather() -> dict:
    ins = _inputs()
    ins["gi"] = np.array([4, 3, N + 2, 1, 0], np.int32)
    return ins


@pytest.mark.parametrize("fw", AUTOGRAD)
def test_gradients_equal_the_unchecked_op_and_a_bad_index_raises_in_the_gradient(fw, device):
    ins = _inputs()
    grads = []
    for op in (CHECKED, PLAIN):
        grads.append(_grad(fw, op, device, ins))
    np.testing.assert_array_equal(grads[0], grads[1])
    # d(sum g + sum f + sum w)/dx = 2 (gathered once each) + 3 + 2x
    np.testing.assert_allclose(grads[0], 2.0 + 3.0 + 2.0 * ins["x"], rtol=1e-6)
    with pytest.raises(Exception) as info:
        _grad(fw, CHECKED, device, _bad_gather())
    assert (
        "BoundsError" in type(info.value).__name__
        or "BoundsError" in str(info.value)
        or isinstance(info.value, interop.BoundsError)
    )
    assert "index 7 out of range for parameter 'x'" in str(info.value)


def _grad(fw, op, device, ins):
    if fw == "jax":
        import jax
        import jax.numpy as jnp
        from _devices import jax_device

        dev = jax_device(device)
        rest = [jax.device_put(ins[k], dev) for k in ("gi", "si", "wi")]
        zeros = [jax.device_put(np.zeros(N, np.float32), dev) for _ in range(2)]

        def loss(x):
            return sum(jnp.sum(r) for r in op(x, *rest, *zeros))

        return np.asarray(jax.grad(loss)(jax.device_put(ins["x"], dev)))
    x = to_fw(fw, ins["x"], requires_grad=True, device=device)
    rest = [to_fw(fw, ins[k], device=device) for k in ("gi", "si", "wi")]
    zeros = [to_fw(fw, np.zeros(N, np.float32), device=device) for _ in range(2)]
    out = op(x, *rest, *zeros)
    loss = out[0].sum() + out[1].sum() + out[2].sum()
    loss.backward()
    return to_np(x.grad)


def test_torch_backward_replays_the_check():
    """An index array changed between the forward and the backward: the backward's own check raises
    (the adjoint replays the forward's accesses, each checked)."""
    torch = pytest.importorskip("torch")
    ins = _inputs()
    x = torch.tensor(ins["x"], requires_grad=True, device="cpu")
    gi = torch.tensor(ins["gi"], device="cpu")
    rest = [torch.tensor(ins[k], device="cpu") for k in ("si", "wi")]
    zeros = [torch.zeros(N, device="cpu") for _ in range(2)]
    g = CHECKED(x, gi, *rest, *zeros)[2]
    with torch.no_grad():
        gi.data[1] = 99  # (behind autograd's version counter: the kernel op reads it again)
    with pytest.raises(interop.BoundsError, match=r"\(backward\): index 99 out of range for parameter 'x'"):
        g.sum().backward()
    assert x.grad is None or bool(torch.all(torch.isfinite(x.grad)))


@pytest.mark.parametrize("fw", ["numpy", "torch", "jax", "paddle"])
def test_forward_mode_is_checked(fw, device):
    if fw != "numpy" and importlib.util.find_spec(fw) is None:
        pytest.skip(f"{fw} is not installed")
    ins = _inputs()
    tangents = [to_fw(fw, np.ones(N, np.float32), device=device)] + [
        to_fw(fw, np.zeros(N, np.float32), device=device) for _ in range(2)
    ]
    args = [to_fw(fw, ins[k], device=device) for k in ("x", "gi", "si", "wi")]
    zeros = [to_fw(fw, np.zeros(N, np.float32), device=device) for _ in range(2)]
    y, dy = CHECKED.jvp(*args, *zeros, tangents=tangents)
    py, pdy = PLAIN.jvp(*args, *zeros, tangents=tangents)
    for a, b in zip([*y, *dy], [*py, *pdy]):
        np.testing.assert_array_equal(to_np(a), to_np(b))
    bad = _bad_gather()
    args[1] = to_fw(fw, bad["gi"], device=device)
    with pytest.raises(interop.BoundsError) as info:
        CHECKED.jvp(*args, *zeros, tangents=tangents)
    _message_check(info.value, "checked_springs_kernel", "gather", N + 2, " (forward mode)")


def test_jax_transforms_raise_the_bounds_error():
    """jit, vmap, grad and jvp: the FFI handler's error carries the BoundsError text."""
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp
    from _devices import jax_device

    dev = jax_device("cpu")
    bad = {k: jax.device_put(v, dev) for k, v in _bad_gather().items()}
    zeros = jax.device_put(np.zeros(N, np.float32), dev)

    def g(x):
        return CHECKED(x, bad["gi"], bad["si"], bad["wi"], zeros, zeros)[2]

    want = r"BoundsError|index 7 out of range for parameter 'x'"
    for run in (
        lambda: jax.jit(g)(bad["x"]),
        lambda: jax.vmap(g)(jnp.stack([bad["x"], bad["x"]])),
        lambda: jax.grad(lambda x: jnp.sum(g(x)))(bad["x"]),
        lambda: jax.jvp(g, (bad["x"],), (jnp.ones_like(bad["x"]),)),
    ):
        with pytest.raises(Exception, match=want) as info:
            jax.block_until_ready(run())
        assert "index 7 out of range for parameter 'x'" in str(info.value)
    # in range under jit: the values of the unchecked op
    ok = {k: jax.device_put(v, dev) for k, v in _inputs().items()}
    got = jax.jit(lambda x: CHECKED(x, ok["gi"], ok["si"], ok["wi"], zeros, zeros))(ok["x"])
    want_v = PLAIN(ok["x"], ok["gi"], ok["si"], ok["wi"], zeros, zeros)
    for a, b in zip(got, want_v):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_torch_compile_raises_the_bounds_error():
    torch = pytest.importorskip("torch")
    ins = _inputs()
    zeros = [torch.zeros(N, device="cpu") for _ in range(2)]

    @torch.compile(fullgraph=True, backend="eager")
    def g(x, gi, si, wi):
        return CHECKED(x, gi, si, wi, zeros[0].clone(), zeros[1].clone())[2] * 1.0

    t = {k: torch.tensor(v, device="cpu") for k, v in ins.items()}
    np.testing.assert_array_equal(g(t["x"], t["gi"], t["si"], t["wi"]).numpy(), ins["x"][ins["gi"]] * 2.0)
    t["gi"] = torch.tensor(_bad_gather()["gi"], device="cpu")
    with pytest.raises(interop.BoundsError, match=r"index 7 out of range for parameter 'x'"):
        g(t["x"], t["gi"], t["si"], t["wi"])


@pytest.mark.parametrize("fw", ["numpy", "torch", "jax"])
def test_tile_load_offset_out_of_range(fw):
    if fw != "numpy" and importlib.util.find_spec(fw) is None:
        pytest.skip(f"{fw} is not installed")
    x = np.arange(TILES * CHECKED_TILE, dtype=np.float32)
    np.testing.assert_array_equal(to_np(TILE_OP(to_fw(fw, x), 0)), x * x)
    with pytest.raises(interop.BoundsError) as info:
        TILE_OP(to_fw(fw, x), CHECKED_TILE + 1)
    msg = str(info.value)
    assert f"index {2 * CHECKED_TILE + 1} out of range for parameter 'x' along axis 0" in msg, msg
    assert "wp.tile_load(x, shape=CHECKED_TILE, offset=off + i * CHECKED_TILE)`" in msg, msg
    # forward mode: the checked tangent kernel (its tiles' tangents) raises the same, in range the tangent
    y, dy = TILE_OP.jvp(to_fw(fw, x), 0, tangents=[to_fw(fw, np.ones_like(x))])
    np.testing.assert_array_equal(to_np(dy), 2.0 * x)
    with pytest.raises(interop.BoundsError, match=r"\(forward mode\): index 9 out of range for parameter 'x'"):
        TILE_OP.jvp(to_fw(fw, x), CHECKED_TILE + 1, tangents=[to_fw(fw, np.ones_like(x))])
    if fw == "torch":  # the gradient through the checked tile kernel's adjoint
        import torch

        xt = torch.tensor(x, requires_grad=True, device="cpu")
        TILE_OP(xt, 0).sum().backward()
        np.testing.assert_array_equal(xt.grad.numpy(), 2.0 * x)
    if fw == "jax":  # jax.grad of a call out of range
        import jax

        with pytest.raises(Exception, match=r"index 9 out of range for parameter 'x'"):
            jax.block_until_ready(jax.grad(lambda a: TILE_OP(a, CHECKED_TILE + 1).sum())(to_fw(fw, x)))


def test_checked_is_part_of_the_identity():
    assert CHECKED is not PLAIN
    assert CHECKED.description.checked and not PLAIN.description.checked
    assert CHECKED.description.name != PLAIN.description.name
    assert interop.op(checked_springs_kernel, checked=True, **SPRINGS) is CHECKED
    with pytest.raises(interop.ArgumentError, match=r"op 'checked_springs_kernel': checked must be a bool"):
        interop.op(checked_springs_kernel, checked="yes", **SPRINGS)
    assert "BoundsError" in interop.__all__ and issubclass(interop.BoundsError, IndexError)
    # a hand-written backward kernel is checked as its op is
    hand = interop.op(reads_output_kernel, outputs=2, backward=reads_output_backward_kernel, checked=True)
    assert hand.description.backward.checked and not reads_output_hand_written.description.backward.checked


CHILD = """
import os, sys
import numpy as np
import warp as wp
wp.config.quiet = True
import interop
from catalogue import checked_springs_kernel

op = interop.op(checked_springs_kernel, in_out=["f", "w"], outputs=["f", "w", "g"])
assert op.description.checked == (os.environ.get("INTEROP_CHECKED") == "1")
x = np.ones(4, np.float32)
ok = np.zeros(4, np.int32)
far = np.array([0, 1, 2**30, -2**30], np.int32)
for which in range(3):
    idx = [ok, ok, ok]
    idx[which] = far
    try:
        op(x, *idx, np.zeros(4, np.float32), np.zeros(4, np.float32))
    except interop.BoundsError as e:
        print("RAISED", which, str(e).split(":")[1].strip())
if "torch" in sys.argv:
    import torch
    t = torch.ones(4, requires_grad=True, device="cpu")
    ti = [torch.tensor(a, device="cpu") for a in (far, ok, ok)]
    try:
        op(t, *ti, torch.zeros(4, device="cpu"), torch.zeros(4, device="cpu"))
    except interop.BoundsError:
        print("RAISED torch")
print("ALIVE")
"""


def test_indices_far_out_of_range_do_not_crash_the_process():
    """INTEROP_CHECKED=1 in the environment checks an op described without ``checked=``; indices
    2**30 out of range (a write there would crash) raise, and the process goes on."""
    argv = ["torch"] if importlib.util.find_spec("torch") else []
    p = run_script(CHILD, *argv, env={"INTEROP_CHECKED": "1"})
    assert p.stdout.count("RAISED") == 3 + len(argv), p.stdout
    assert "index 1073741824 out of range" in p.stdout, p.stdout
    assert p.stdout.rstrip().endswith("ALIVE"), p.stdout


def test_warp_arrays_and_their_tape():
    """Warp arrays: the forward raises; in range, the op recorded on a wp.Tape gives the unchecked
    op's gradient."""
    ins = _inputs()
    grads = []
    for op in (CHECKED, PLAIN):
        x = wp.array(ins["x"], requires_grad=True, device="cpu")
        rest = [wp.array(ins[k], device="cpu") for k in ("gi", "si", "wi")]
        zeros = [wp.zeros(N, dtype=float, device="cpu", requires_grad=True) for _ in range(2)]
        tape = wp.Tape()
        with tape:
            g = op(x, *rest, *zeros)[2]
        tape.backward(grads={g: wp.ones(N, dtype=float, device="cpu")})
        grads.append(x.grad.numpy())
    np.testing.assert_array_equal(grads[0], grads[1])
    np.testing.assert_allclose(grads[0], np.full(N, 2.0))
    args = [wp.array(v, device="cpu") for v in _bad_gather().values()]
    zeros = [wp.zeros(N, dtype=float, device="cpu") for _ in range(2)]
    with pytest.raises(interop.BoundsError, match=r"index 7 out of range for parameter 'x'"):
        CHECKED(*args, *zeros)


def springs_fn(x: wp.array(dtype=float), gi: wp.array(dtype=wp.int32), g: wp.array(dtype=float)):
    """A Python-function op launching the catalogue's kernel (its other index arrays in range)."""
    z = wp.zeros(x.shape[0], dtype=float, requires_grad=x.requires_grad, device=x.device)
    ok = wp.zeros(x.shape[0], dtype=wp.int32, device=x.device)
    inputs = [x, gi, ok, ok, z, wp.zeros_like(z), g]
    wp.launch(checked_springs_kernel, dim=x.shape[0], inputs=inputs, device=x.device)


FUNCTION_OP = interop.op(springs_fn, checked=True)


@pytest.mark.parametrize("fw", ["numpy", "torch", "jax"])
def test_python_function_ops_launch_checked_kernels(fw):
    """The launches a checked Python-function op makes are checked: forward, gradient (its wp.Tape) and
    forward mode (its tangent tape); in range, the values and gradients of the unchecked kernel."""
    if fw != "numpy" and importlib.util.find_spec(fw) is None:
        pytest.skip(f"{fw} is not installed")
    ins = _inputs()
    x, gi = ins["x"], ins["gi"]
    np.testing.assert_array_equal(to_np(FUNCTION_OP(to_fw(fw, x), to_fw(fw, gi))), x[gi] * 2.0)
    bad = _bad_gather()["gi"]
    with pytest.raises(interop.BoundsError) as info:
        FUNCTION_OP(to_fw(fw, x), to_fw(fw, bad))
    _message_check(info.value, "springs_fn", "gather", N + 2)
    with pytest.raises(interop.BoundsError) as info:
        FUNCTION_OP.jvp(to_fw(fw, x), to_fw(fw, bad), tangents=[to_fw(fw, np.ones(N, np.float32))])
    _message_check(info.value, "springs_fn", "gather", N + 2, " (forward mode)")
    if fw == "torch":
        import torch

        xt = torch.tensor(x, requires_grad=True, device="cpu")
        FUNCTION_OP(xt, torch.tensor(gi, device="cpu")).sum().backward()
        np.testing.assert_array_equal(xt.grad.numpy(), np.full(N, 2.0, np.float32))
    if fw == "jax":
        import jax

        with pytest.raises(Exception, match=r"index 7 out of range for parameter 'x'"):
            jax.block_until_ready(jax.jit(FUNCTION_OP)(to_fw(fw, x), to_fw(fw, bad)))


@wp.kernel(module="unique")
def access_kinds_kernel(
    m: wp.array(dtype=wp.mat22),
    v: wp.array2d(dtype=wp.vec2),
    c: wp.array3d(dtype=wp.int32),
    k: wp.array(dtype=wp.int32),
    acc: wp.array(dtype=wp.vec2),
    out: wp.array(dtype=float),
):
    i = wp.tid()
    j = k[i]
    mm = m[j]
    vv = v[j, 1]
    acc[j].x = vv[0] + mm[0, 0]
    acc[j][1] += float(c[0, j, 0])
    old = wp.atomic_max(out, j, 1.0)
    out[i] = old + 1.0


def test_every_kind_of_access():
    """Matrix and vector elements, ranks 1 to 3, component stores (``a[j].x = v``, ``a[j][1] += v``)
    and an atomic whose old value is used: in range the unchecked op's values, out of range an error
    naming the first access."""
    kw = dict(in_out=["acc", "out"], outputs=["acc", "out"])
    checked, plain = (interop.op(access_kinds_kernel, checked=c, **kw) for c in (True, False))
    n = 3
    m = np.arange(n * 4, dtype=np.float32).reshape(n, 2, 2)
    v = np.arange(n * 4, dtype=np.float32).reshape(n, 2, 2)
    c = np.arange(n, dtype=np.int32).reshape(1, n, 1)

    def run(op, k):
        return op(m, v, c, np.array(k, np.int32), np.zeros((n, 2), np.float32), np.zeros(n, np.float32))

    for got, want in zip(run(checked, [2, 1, 0]), run(plain, [2, 1, 0])):
        np.testing.assert_array_equal(got, want)
    with pytest.raises(interop.BoundsError, match=r"index 3 out of range for parameter 'm' along axis 0, whose "
                       r"shape is \(3,\), at .*test_checked\.py:\d+: `mm = m\[j\]`"):  # fmt: skip
        run(checked, [2, 3, 0])


@wp.struct
class CheckedSprings:
    x: wp.array(dtype=float)
    idx: wp.array(dtype=wp.int32)


@wp.kernel(module="unique")
def checked_struct_kernel(s: CheckedSprings, out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = s.x[s.idx[i]] * 2.0


def test_struct_fields_are_named_by_their_path():
    op = interop.op(checked_struct_kernel, checked=True)
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(op({"x": x, "idx": np.array([3, 2, 1, 0], np.int32)}), x[::-1] * 2.0)
    with pytest.raises(
        interop.BoundsError,
        match=r"index 9 out of range for parameter 's\.x' along axis 0, whose shape is \(4,\), "
        r"at .*test_checked\.py:\d+: `out\[i\] = s\.x\[s\.idx\[i\]\] \* 2\.0`",
    ):  # (the kernel's own line and text, not the flat kernel's)
        op({"x": x, "idx": np.array([3, 2, 9, 0], np.int32)})


def test_indexed_message_names_the_kernels_line():
    """An indexed op's message names the kernel's own line and text (not its flat kernel's)."""
    data = np.arange(6, dtype=np.float32)
    with pytest.raises(interop.BoundsError) as info:
        INDEXED(interop.indexed(data, [np.array([0, 9], np.int32)]))
    from pathlib import Path

    line = 1 + Path(__file__).read_text().splitlines().index("    out[i] = 2.0 * a[i]")
    assert f"test_checked.py:{line}: `out[i] = 2.0 * a[i]`" in str(info.value), str(info.value)


@wp.kernel(module="unique")
def checked_indexed_gather(a: wp.indexedarray(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = 2.0 * a[i]


INDEXED = interop.op(checked_indexed_gather, checked=True)


@pytest.mark.parametrize("fw", [f for f in FRAMEWORKS if f not in ("warp", "cupy")])
def test_indexed_array_index_values_are_checked_against_the_data(fw, device):
    """An interop.indexed view's index values are checked against its data's shape (issue 51 with
    checked mode): in range the values of the gather, out of range BoundsError naming the data's
    parameter, the index and the shape, forward and (torch, Paddle) gradient; the data untouched."""
    data = np.arange(1, N + 1, dtype=np.float32)
    good, bad = np.array([0, 4, 2], np.int32), np.array([0, N, 2], np.int32)
    view = interop.indexed(to_fw(fw, data, device=device), [to_fw(fw, good, device=device)])
    np.testing.assert_array_equal(to_np(INDEXED(view)), 2.0 * data[good])
    d = to_fw(fw, data, device=device, **({"requires_grad": True} if fw in ("torch", "paddle") else {}))
    with pytest.raises(Exception) as info:
        out = INDEXED(interop.indexed(d, [to_fw(fw, bad, device=device)]))
        if fw == "jax":
            out.block_until_ready()
    msg = str(info.value)
    assert isinstance(info.value, interop.BoundsError) or "BoundsError" in msg, msg
    assert f"index {N} out of range for parameter 'a' along axis 0, whose shape is ({N},)" in msg, msg
    np.testing.assert_array_equal(to_np(d.detach() if fw == "torch" else d), data)
    if fw in ("torch", "paddle"):  # the gradient's adjoint launch is checked too
        g_ok = INDEXED(interop.indexed(d, [to_fw(fw, good, device=device)]))
        g_ok.sum().backward()
        expect = np.zeros(N, np.float32)
        np.add.at(expect, good, 2.0)
        np.testing.assert_array_equal(to_np(d.grad), expect)


def test_checked_kernel_whose_module_has_a_global_named_like_its_index():
    """A global ``i`` (an array) in the kernel's module made the checked variant fail to build
    (Warp resolved the checks' generic index arguments against it); the unchecked op worked. Both
    give the gather, and the checked one still refuses an index out of range."""
    import checked_shadows as cs

    x = np.arange(4, dtype=np.float32)
    for checked in (False, True):
        np.testing.assert_array_equal(interop.op(cs.gather, checked=checked)(x, cs.i), [3.0, 2.0, 1.0])
    with pytest.raises(interop.BoundsError, match=r"'idx'|'x'"):
        interop.op(cs.gather, checked=True)(x, np.array([0, 7, 1], np.int32))


@wp.kernel(module="unique")
def _set_component(x: wp.array(dtype=wp.vec3), c: int, out: wp.array(dtype=float)):
    i = wp.tid()
    x[i][c] = 1.0
    out[i] = x[i][c] * 2.0


@wp.kernel(module="unique")
def _matrix_entry(m: wp.array(dtype=wp.mat22), r: int, c: int, out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = m[i][r, c] + m[i][r][c]


@pytest.mark.parametrize("fw", ["numpy", "torch"])
def test_checked_component_indices_of_vector_and_matrix_elements(fw):
    """``x[i][c]`` of a vec3 array was checked for ``i`` only: ``c = 3`` wrote the next element
    (memory past the argument: "double free or corruption"), and a large ``c`` read segfaulted.
    Each component index is checked against the element's length (a matrix's rows, then columns):
    a ``BoundsError`` naming the parameter, and no access; in range, the unchecked values."""
    if fw == "torch":
        pytest.importorskip("torch")
    set_op = interop.op(_set_component, outputs=["out"], in_out=["x"], checked=True)
    entry_op = interop.op(_matrix_entry, checked=True)
    conv = (lambda a: a) if fw == "numpy" else (lambda a: interop.convert(a, to="torch"))
    base = np.zeros((2, 3), np.float32)
    x = conv(base)
    got = set_op(x[0:1], 2)
    np.testing.assert_array_equal(np.asarray(interop.convert(got[1], to="numpy")), [2.0])
    for c in (3, -1, 100000000):
        with pytest.raises(interop.BoundsError, match=rf"index {c} out of range for parameter 'x' along axis 1"):
            set_op(x[0:1], c)
    np.testing.assert_array_equal(np.asarray(interop.convert(x, to="numpy")), [[0, 0, 1], [0, 0, 0]])
    m = conv(np.arange(8, dtype=np.float32).reshape(2, 2, 2))
    np.testing.assert_array_equal(np.asarray(interop.convert(entry_op(m, 1, 0), to="numpy")), [4.0, 12.0])
    for r, c, axis in ((2, 0, 1), (0, 2, 2)):
        with pytest.raises(interop.BoundsError, match=rf"index 2 out of range for parameter 'm' along axis {axis}"):
            entry_op(m, r, c)
