"""Struct parameters (issue 23): Warp's own ``kernel_step`` and friends called with Warp struct
instances, dicts, dataclasses and NamedTuples from every framework, values against ``wp.launch``
and gradients against ``wp.Tape``; arrays of structs; the errors a caller meets.

(The catalogue's struct cases run through every framework's conformance tests as well.)
"""

from __future__ import annotations

import dataclasses
import typing

import numpy as np
import pytest
import warp as wp
from _devices import jax_device

import interop

N = 6


@wp.struct
class Model:
    dt: float
    gravity: wp.vec3
    m: wp.array(dtype=float)


@wp.struct
class State:
    x: wp.array(dtype=wp.vec3)
    v: wp.array(dtype=wp.vec3)


@wp.kernel
def kernel_step(state_in: State, state_out: State, model: Model):
    # verbatim from warp/tests/test_struct.py
    i = wp.tid()
    state_out.v[i] = state_in.v[i] + model.gravity / model.m[i] * model.dt
    state_out.x[i] = state_in.x[i] + state_out.v[i] * model.dt


STEP = interop.op(kernel_step, outputs=["state_out"], name="structs_test::kernel_step")
GRAVITY = (0.0, 0.0, -9.8)
DT = 0.1


def _inputs(seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, (N, 3)).astype(np.float32)
    v = rng.uniform(-1, 1, (N, 3)).astype(np.float32)
    m = rng.uniform(1, 2, N).astype(np.float32)
    return x, v, m


def _warp_reference(x, v, m, wx, wv):
    """kernel_step by wp.launch on Warp struct instances; gradients of sum(wx*x_out + wv*v_out) by wp.Tape."""
    s_in, s_out, model = State(), State(), Model()
    s_in.x = wp.array(x, dtype=wp.vec3, requires_grad=True, device="cpu")
    s_in.v = wp.array(v, dtype=wp.vec3, requires_grad=True, device="cpu")
    s_out.x = wp.zeros(N, dtype=wp.vec3, requires_grad=True, device="cpu")
    s_out.v = wp.zeros(N, dtype=wp.vec3, requires_grad=True, device="cpu")
    model.dt, model.gravity = DT, wp.vec3(*GRAVITY)
    model.m = wp.array(m, dtype=float, requires_grad=True, device="cpu")
    tape = wp.Tape()
    with tape:
        wp.launch(kernel_step, dim=N, inputs=[s_in, s_out, model], device="cpu")
    tape.backward(
        grads={s_out.x: wp.array(wx, dtype=wp.vec3, device="cpu"), s_out.v: wp.array(wv, dtype=wp.vec3, device="cpu")}
    )
    values = (s_out.x.numpy(), s_out.v.numpy())
    grads = (s_in.x.grad.numpy(), s_in.v.grad.numpy(), model.m.grad.numpy())
    return values, grads


@pytest.fixture(scope="module")
def reference():
    x, v, m = _inputs()
    rng = np.random.default_rng(9)
    wx = rng.uniform(0.5, 1.5, (N, 3)).astype(np.float32)
    wv = rng.uniform(0.5, 1.5, (N, 3)).astype(np.float32)
    values, grads = _warp_reference(x, v, m, wx, wv)
    return (x, v, m, wx, wv), values, grads


def _close(got, want):
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=1e-5, atol=1e-5)


def test_numpy_dict_and_warp_struct_instances(reference):
    (x, v, m, _, _), (xo, vo), _ = reference
    out = STEP({"x": x, "v": v}, {"dt": DT, "gravity": GRAVITY, "m": m})
    assert set(out) == {"x", "v"}  # an output struct comes back as a dict by field
    _close(out["x"], xo)
    _close(out["v"], vo)
    # Warp struct instances, as wp.launch takes them
    s_in, model = State(), Model()
    s_in.x, s_in.v = wp.array(x, dtype=wp.vec3, device="cpu"), wp.array(v, dtype=wp.vec3, device="cpu")
    model.dt, model.gravity, model.m = DT, wp.vec3(*GRAVITY), wp.array(m, device="cpu")
    out = STEP(s_in, model)
    assert isinstance(out["x"], wp.array) and out["x"].dtype == wp.vec3
    _close(out["x"].numpy(), xo)
    _close(out["v"].numpy(), vo)


def test_torch_eager_compile_and_gradients(reference):
    torch = pytest.importorskip("torch")
    (x, v, m, wx, wv), (xo, vo), (gx, gv, gm) = reference

    def run(f):
        tx, tv, tm = (torch.tensor(a, requires_grad=True, device="cpu") for a in (x, v, m))
        out = f({"x": tx, "v": tv}, {"dt": DT, "gravity": GRAVITY, "m": tm})
        _close(out["x"].detach(), xo)
        _close(out["v"].detach(), vo)
        (out["x"] * torch.tensor(wx, device="cpu")).sum().add(
            (out["v"] * torch.tensor(wv, device="cpu")).sum()
        ).backward()
        for t, g in ((tx, gx), (tv, gv), (tm, gm)):
            _close(t.grad, g)

    run(STEP)
    run(torch.compile(lambda s, mo: STEP(s, mo), fullgraph=True))


def test_torch_opcheck_on_the_leaves():
    torch = pytest.importorskip("torch")
    x, v, m = _inputs(1)
    op = torch.ops.structs_test.kernel_step
    args = (
        torch.tensor(x, requires_grad=True, device="cpu"),
        torch.tensor(v, device="cpu"),
        DT,
        list(GRAVITY),
        torch.tensor(m, device="cpu"),
    )
    torch.library.opcheck(op, args)


@dataclasses.dataclass
class StateDC:
    x: typing.Any
    v: typing.Any


class ModelNT(typing.NamedTuple):
    dt: typing.Any
    gravity: typing.Any
    m: typing.Any


def test_jax_jit_and_grad_return_the_structure(reference):
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    (x, v, m, wx, wv), (xo, vo), (gx, gv, gm) = reference
    jax.tree_util.register_dataclass(StateDC, data_fields=["x", "v"], meta_fields=[])

    def loss(state, model):
        out = STEP(state, {"dt": DT, "gravity": GRAVITY, "m": model["m"]})
        return jnp.sum(out["x"] * wx) + jnp.sum(out["v"] * wv)

    out = jax.jit(lambda s, mo: STEP(s, mo))(
        {"x": jnp.asarray(x, device=jax_device("cpu")), "v": jnp.asarray(v, device=jax_device("cpu"))},
        ModelNT(
            DT, jnp.asarray(GRAVITY, jnp.float32, device=jax_device("cpu")), jnp.asarray(m, device=jax_device("cpu"))
        ),
    )
    _close(out["x"], xo)
    _close(out["v"], vo)
    for state in (
        {"x": jnp.asarray(x, device=jax_device("cpu")), "v": jnp.asarray(v, device=jax_device("cpu"))},
        StateDC(jnp.asarray(x, device=jax_device("cpu")), jnp.asarray(v, device=jax_device("cpu"))),
    ):
        gs, gmodel = jax.jit(jax.grad(loss, argnums=(0, 1)))(state, {"m": jnp.asarray(m, device=jax_device("cpu"))})
        assert type(gs) is type(state)  # jax.grad returns the caller's structure
        gs = gs if isinstance(gs, dict) else dataclasses.asdict(gs)
        _close(gs["x"], gx)
        _close(gs["v"], gv)
        _close(gmodel["m"], gm)


def test_paddle_eager_gradients(reference):
    paddle = pytest.importorskip("paddle")
    (x, v, m, wx, wv), (xo, vo), (gx, gv, gm) = reference
    cpu = paddle.CPUPlace()
    px, pv, pm = (paddle.to_tensor(a, stop_gradient=False, place=cpu) for a in (x, v, m))
    out = STEP({"x": px, "v": pv}, ModelNT(DT, GRAVITY, pm))
    _close(out["x"].numpy(), xo)
    _close(out["v"].numpy(), vo)
    ((out["x"] * paddle.to_tensor(wx, place=cpu)).sum() + (out["v"] * paddle.to_tensor(wv, place=cpu)).sum()).backward()
    for t, g in ((px, gx), (pv, gv), (pm, gm)):
        _close(t.grad.numpy(), g)


# ---- in-out structs ------------------------------------------------------------------------
@wp.struct
class Particles:
    x: wp.array(dtype=wp.vec3)
    f: wp.array(dtype=wp.vec3)
    k: float


@wp.kernel
def add_spring_force(p: Particles, anchor: wp.vec3):
    i = wp.tid()
    wp.atomic_add(p.f, i, (anchor - p.x[i]) * p.k)


ADD_FORCE = interop.op(add_spring_force, in_out=["p"], outputs=0)


def test_in_out_struct_in_place_and_jax_new_structure():
    rng = np.random.default_rng(3)
    x = rng.uniform(-1, 1, (N, 3)).astype(np.float32)
    f = rng.uniform(-1, 1, (N, 3)).astype(np.float32)
    want = f + (np.array([1.0, 2.0, 3.0], np.float32) - x) * 0.5
    d = {"x": x, "f": f.copy(), "k": 0.5}
    got = ADD_FORCE(d, (1.0, 2.0, 3.0))
    assert got is d  # updated in place: the caller's structure itself
    _close(d["f"], want)
    torch = pytest.importorskip("torch")
    tf = torch.tensor(f, device="cpu")
    dc = {"x": torch.tensor(x, device="cpu"), "f": tf, "k": 0.5}
    assert ADD_FORCE(dc, (1.0, 2.0, 3.0)) is dc and dc["f"] is tf
    _close(tf, want)
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    state = {"x": jnp.asarray(x, device=jax_device("cpu")), "f": jnp.asarray(f, device=jax_device("cpu")), "k": 0.5}
    new = jax.jit(lambda s: ADD_FORCE(s, (1.0, 2.0, 3.0)))(state)
    assert new is not state and set(new) == {"x", "f", "k"}
    _close(new["f"], want)
    _close(state["f"], f)  # JAX is functional: the caller's arrays are unchanged


# ---- nested structs, struct values passed whole ----------------------------------------------
@wp.struct
class Spring:
    rest: float
    k: wp.array(dtype=float)


@wp.struct
class System:
    spring: Spring
    x: wp.array(dtype=float)


@wp.func
def energy(s: System, i: int):
    d = s.x[i] - s.spring.rest
    return 0.5 * s.spring.k[i] * d * d


@wp.kernel
def system_energy(sys: System, e: wp.array(dtype=float)):
    i = wp.tid()
    e[i] = energy(sys, i)


def test_nested_struct_passed_whole_values_and_tape_gradients():
    rng = np.random.default_rng(4)
    x = rng.uniform(-1, 1, N).astype(np.float32)
    k = rng.uniform(1, 2, N).astype(np.float32)
    w = rng.uniform(0.5, 1.5, N).astype(np.float32)
    spring, system = Spring(), System()
    spring.rest, spring.k = 0.25, wp.array(k, requires_grad=True, device="cpu")
    system.spring, system.x = spring, wp.array(x, requires_grad=True, device="cpu")
    e = wp.zeros(N, dtype=float, requires_grad=True, device="cpu")
    tape = wp.Tape()
    with tape:
        wp.launch(system_energy, dim=N, inputs=[system], outputs=[e], device=e.device)
    tape.backward(grads={e: wp.array(w, device="cpu")})
    op = interop.op(system_energy)
    _close(op({"spring": {"rest": 0.25, "k": k}, "x": x}), e.numpy())
    _close(op(system).numpy(), e.numpy())  # a Warp struct instance holding a nested one
    torch = pytest.importorskip("torch")
    tk, tx = torch.tensor(k, requires_grad=True, device="cpu"), torch.tensor(x, requires_grad=True, device="cpu")
    (op({"spring": {"rest": 0.25, "k": tk}, "x": tx}) * torch.tensor(w, device="cpu")).sum().backward()
    _close(tk.grad, spring.k.grad.numpy())
    _close(tx.grad, system.x.grad.numpy())


@wp.struct
class Pair:
    a: wp.array(dtype=float)
    b: wp.array2d(dtype=float)


@wp.kernel
def fill(x: wp.array(dtype=float), out: Pair):
    i = wp.tid()
    out.a[i] = 2.0 * x[i]
    for j in range(3):
        out.b[i, j] = x[i] + float(j)


def test_struct_output_sized_per_field():
    op = interop.op(fill, output_dims={"out": {"b": (N, 3)}})
    x = np.arange(N, dtype=np.float32)
    got = op(x)
    _close(got["a"], 2 * x)
    _close(got["b"], x[:, None] + np.arange(3))
    got = op(x[:2], output_dims={"out": {"b": (2, 3)}})
    assert got["b"].shape == (2, 3)


# ---- errors --------------------------------------------------------------------------------
def test_errors_name_the_struct_field():
    x, v, m = _inputs()
    model = {"dt": DT, "gravity": GRAVITY, "m": m}
    with pytest.raises(interop.ArgumentError, match=r"parameter 'state_in'.*without field 'v'"):
        STEP({"x": x}, model)
    with pytest.raises(interop.ArgumentError, match=r"struct State has no field\(s\) \['w'\]"):
        STEP({"x": x, "v": v, "w": v}, model)
    with pytest.raises(interop.ArgumentError, match=r"parameter 'state_in.v': expected a 1-d array of vec3"):
        STEP({"x": x, "v": v[:, :2]}, model)
    with pytest.raises(interop.ArgumentError, match=r"parameter 'model.m'.*float64"):
        STEP({"x": x, "v": v}, {**model, "m": m.astype(np.float64)})
    wrong = Model()
    with pytest.raises(interop.ArgumentError, match=r"expected struct State, got a Warp struct instance of Model"):
        STEP(wrong, model)
    unset = State()
    with pytest.raises(interop.ArgumentError, match=r"parameter 'state_in.x': the field is not set"):
        STEP(unset, model)
    with pytest.raises(interop.ArgumentError, match=r"takes 2 argument\(s\) \['state_in', 'model'\]"):
        STEP({"x": x, "v": v})


def test_output_struct_with_scalar_fields_must_be_in_out():
    with pytest.raises(interop.ArgumentError, match=r"output 'p' is struct Particles.*\['p.k'\].*in_out=\['p'\]"):
        interop.op(add_spring_force, outputs=["p"])


def test_only_structs_count_as_array_parameters():
    """The issue's 'outputs=1 but the kernel has only 0 array parameter(s)': a struct of arrays counts."""
    op = interop.op(add_spring_force, in_out=["p"])
    assert [p.name for p in op.description.returned_params] == ["p__x", "p__f"]
    d = {"x": np.zeros((2, 3), np.float32), "f": np.zeros((2, 3), np.float32), "k": 1.0}
    assert op(d, (1.0, 1.0, 1.0)) is d


# ---- arrays of structs ---------------------------------------------------------------------
@wp.struct
class Particle:
    pos: wp.vec3
    mass: float


@wp.kernel
def kinetic(ps: wp.array(dtype=Particle), v: wp.array(dtype=wp.vec3), e: wp.array(dtype=float)):
    i = wp.tid()
    e[i] = 0.5 * ps[i].mass * wp.dot(v[i], v[i]) + ps[i].pos[2]


KINETIC = interop.op(kinetic)


def _particles():
    rng = np.random.default_rng(5)
    ps = np.zeros(N, dtype=Particle.numpy_dtype())
    ps["pos"] = rng.random((N, 3))
    ps["mass"] = rng.random(N)
    v = rng.random((N, 3)).astype(np.float32)
    return ps, v, 0.5 * ps["mass"] * np.sum(v * v, 1) + ps["pos"][:, 2]


def test_array_of_structs_numpy_and_warp():
    ps, v, want = _particles()
    _close(KINETIC(ps, v), want)
    _close(KINETIC(wp.array(ps, dtype=Particle, device="cpu"), wp.array(v, dtype=wp.vec3, device="cpu")).numpy(), want)
    with pytest.raises(interop.ArgumentError, match=r"parameter 'ps': expected a 1-d array of struct Particle"):
        KINETIC(np.zeros(N, dtype=[("a", "<f4")]), v)


@pytest.mark.parametrize("fw", ["torch", "jax", "paddle"])
def test_array_of_structs_elsewhere_says_what_to_pass(fw):
    pytest.importorskip(fw)
    from catalogue import to_fw

    _, v, _ = _particles()
    with pytest.raises(interop.ArgumentError, match=r"a Warp array of it, or a NumPy structured array of dtype"):
        KINETIC(to_fw(fw, v), to_fw(fw, v))


@pytest.mark.parametrize("fw", ["torch", "paddle"])
def test_gradient_of_a_strided_field_of_a_struct_value_is_refused_naming_the_field(fw):
    """A struct passed whole to a ``wp.func``: Warp's adjoint accumulates into its array fields'
    own gradient pointers with the arrays' strides, so the gradient w.r.t. a strided field is
    refused at the backward (as for tiles), naming the field by its path, not the flat kernel's
    parameter (found by the property generators: the message said 'sys__spring__k')."""
    pytest.importorskip(fw)
    from catalogue import to_fw

    rng = np.random.default_rng(6)
    k, x = rng.uniform(1, 2, 2 * N).astype(np.float32), rng.uniform(-1, 1, N).astype(np.float32)
    fk = to_fw(fw, k, requires_grad=True)
    e = interop.op(system_energy)({"spring": {"rest": 0.25, "k": fk[::2]}, "x": to_fw(fw, x)})
    _close(e.detach() if fw == "torch" else e.numpy(), 0.5 * k[::2] * (x - 0.25) ** 2)  # the forward reads it
    # Paddle hands an error raised in a backward on as its OSError, with the text (docs/limitations.md)
    with pytest.raises(interop.ArgumentError if fw == "torch" else OSError, match=r"parameter 'sys\.spring\.k': "):
        e.sum().backward()


@pytest.mark.parametrize("fw", ["torch", "paddle"])
def test_gradient_of_a_one_element_strided_field_of_a_struct_value(fw):
    """A field that is a 1-element view with a step (``k[::2]`` of 2 elements) is laid out like its
    packed gradient whatever its stride: not refused, and its gradient is right (Paddle reports such
    a view as not contiguous and passed its stride; found by the property generators at n=1)."""
    pytest.importorskip(fw)
    from catalogue import to_fw

    k, x = np.array([1.5, 9.0], np.float32), np.array([0.75], np.float32)
    fk = to_fw(fw, k, requires_grad=True)
    e = interop.op(system_energy)({"spring": {"rest": 0.25, "k": fk[::2]}, "x": to_fw(fw, x)})
    _close(e.detach() if fw == "torch" else e.numpy(), 0.5 * k[::2] * (x - 0.25) ** 2)
    e.sum().backward()
    grad = fk.grad.numpy()
    _close(grad, np.array([0.5 * (0.75 - 0.25) ** 2, 0.0], np.float32))


def test_torch_compile_is_a_struct_ops_first_call():
    """A struct op's first call inside ``torch.compile(fullgraph=True)``: the description's derived
    views are computed when it is made, so no ``functools.cached_property`` lock (an RLock on
    Python 3.11, which Dynamo cannot trace) is entered in the trace (found by the property
    generators: 'Unsupported context manager' at ``entry_returned``)."""
    torch = pytest.importorskip("torch")
    op = interop.op(system_energy)  # a new description: nothing computed by an earlier call
    x, k = np.linspace(-1, 1, N, dtype=np.float32), np.linspace(1, 2, N, dtype=np.float32)
    f = torch.compile(
        lambda tk, tx: op({"spring": {"rest": 0.25, "k": tk}, "x": tx}), backend="aot_eager", fullgraph=True
    )
    _close(f(torch.tensor(k, device="cpu"), torch.tensor(x, device="cpu")), 0.5 * k * (x - 0.25) ** 2)


def test_a_kernel_writing_an_input_field_through_a_struct_copy_is_refused():
    """``t = s; t.a[i] = 5.0``: the caller's array (a JAX one too) was overwritten on each call, where
    ``s.a[i] = 5.0`` is refused; now refused alike, naming the field."""
    import catalogue as cat

    with pytest.raises(interop.ArgumentError, match=r"the kernel writes its input parameter\(s\) 's\.a'"):
        interop.op(cat.writes_input_through_struct_copy_kernel)
    op = interop.op(cat.writes_input_through_struct_copy_kernel, in_out=["s.a"])
    a = np.zeros(3, np.float32)
    op({"a": a})
    np.testing.assert_array_equal(a, [5, 5, 5])
