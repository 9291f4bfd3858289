"""``interop.check_gradients``: the op's reverse mode (each framework's own autograd) against its
forward mode (dot-product identity), or finite differences where forward mode is refused. None for
catalogue kernels, in every framework; a disagreement for a wrong hand-written backward; the refusal
(``inf`` and the reason) for a kernel in one of Warp's blind spots."""

import contextlib
import importlib.util

import numpy as np
import pytest
import warp as wp
from catalogue import case
from test_blind_spots import AFTER, INSIDE

import interop

FRAMEWORKS = [
    pytest.param(fw, marks=[] if fw in ("numpy", "warp") or importlib.util.find_spec(fw) else [pytest.mark.skip])
    for fw in ("numpy", "warp", "torch", "jax", "paddle")
]


def _x64(fw: str):
    """JAX's 64-bit types, for the float64 cases (in their own context)."""
    if fw != "jax":
        return contextlib.nullcontext()
    import jax

    return jax.enable_x64(True)


def _in(fw: str, args: tuple) -> tuple:
    if fw == "numpy":
        return args
    out = []
    for a in args:
        if not isinstance(a, np.ndarray):
            out.append(a)
        elif fw == "warp":
            out.append(wp.array(a, device="cpu"))
        else:
            out.append(interop.convert(a, to=fw, copy=True))
    return out


@wp.kernel
def cube64(x: wp.array(dtype=wp.float64), y: wp.array(dtype=wp.float64), out: wp.array(dtype=wp.float64)):
    i = wp.tid()
    out[i] = x[i] * x[i] * x[i] + y[i]


@wp.kernel
def cube64_wrong_backward(
    x: wp.array(dtype=wp.float64),
    y: wp.array(dtype=wp.float64),
    adj_out: wp.array(dtype=wp.float64),
    grad_x: wp.array(dtype=wp.float64),
    grad_y: wp.array(dtype=wp.float64),
):
    i = wp.tid()
    grad_x[i] = wp.float64(2.0) * x[i] * x[i] * adj_out[i]  # should be 3 x^2
    grad_y[i] = adj_out[i]


@wp.kernel
def running_min(x: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    wp.atomic_min(out, 0, x[i] * x[i])


X64 = np.array([0.7, -1.2, 0.4], np.float64)
Y64 = np.array([0.1, 0.2, -0.3], np.float64)


@pytest.mark.parametrize("fw", FRAMEWORKS)
@pytest.mark.parametrize("cid", ["scalar", "vec3", "mat33", "multi_output", "generic"])
def test_no_disagreement_for_catalogue_kernels(fw, cid):
    c = case(cid)
    dt = np.dtype(np.float64 if np.float64 in c.dtypes else np.float32)
    tol = 1e-9 if dt == np.float64 else 1e-4
    args = c.make(np.random.default_rng(3), dt.type)
    with _x64(fw):
        report = interop.check_gradients(c.op, *_in(fw, args), raise_on=tol)
    assert report and set(report.how.values()) == {"forward mode"}
    assert all(d <= tol for d in report.values())


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_a_wrong_hand_written_backward_is_reported_and_raised(fw):
    op = interop.op(cube64, backward=cube64_wrong_backward)
    if fw in ("numpy", "warp"):  # wp.Tape does not run a hand-written backward: the refusal is the report
        report = interop.check_gradients(op, *_in(fw, (X64, Y64)))
        assert report == {"x": np.inf, "y": np.inf} and "wp.Tape" in report.how["x"]
        return
    with _x64(fw):
        report = interop.check_gradients(op, *_in(fw, (X64, Y64)))
        assert report["x"] > 0.05 and report["y"] < 1e-12
        with pytest.raises(AssertionError, match=r"op 'cube64'.*past 0.001 for \['x'\]: 'x': .*forward mode"):
            interop.check_gradients(op, *_in(fw, (X64, Y64)), raise_on=1e-3)
        assert interop.check_gradients(interop.op(cube64), *_in(fw, (X64, Y64)), raise_on=1e-12)["x"] <= 1e-12


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_a_blind_spot_is_reported_as_the_refusal(fw):
    a = np.array([0.9, -0.6, 1.3, 0.7], np.float32)
    w = np.array([0.5, -1.5, 2.0, 0.25], np.float32)
    report = interop.check_gradients(AFTER, *_in(fw, (a, w)))
    assert report == {"a": np.inf, "w": np.inf}
    assert "reverse mode refused: op 'after_loop': Warp's reverse mode" in report.how["w"]
    with pytest.raises(AssertionError, match=r"\['a', 'w'\].*local `acc`"):
        interop.check_gradients(AFTER, *_in(fw, (a, w)), raise_on=1e-3)
    assert max(interop.check_gradients(INSIDE, *_in(fw, (a, w)), raise_on=1e-5).values()) <= 1e-5


def test_finite_differences_where_forward_mode_is_refused():
    x = np.array([0.9, -0.6, 1.3, 0.7], np.float32)
    report = interop.check_gradients(interop.op(running_min, output_dims=1), x, seed=1)
    assert report.how == {"x": "finite differences"}
    assert report["x"] < 1e-2
