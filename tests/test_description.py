"""Description rules: what `interop.op` accepts, refuses (with the op and parameter named), and how it identifies ops."""

import dataclasses
import typing

import numpy as np
import pytest
import warp as wp
from catalogue import square_backward_kernel as square_bwd
from catalogue import square_kernel as square
from guide_kernels import saxpy
from guide_kernels import vecmat_kernel as vecmat

import interop
from interop import OpDescription, Param


# ---- kernels (module level: Warp builds one module per Python module) ----------------------
@wp.kernel
def two_out(a: wp.array(dtype=float), b: wp.array(dtype=float), c: wp.array(dtype=float)):
    i = wp.tid()
    b[i] = a[i]
    c[i] = 2.0 * a[i]


@wp.kernel
def output_in_the_middle(a: wp.array(dtype=float), b: wp.array(dtype=float), c: wp.array(dtype=float)):
    i = wp.tid()
    b[i] = a[i] + c[i]


@wp.kernel
def writes_input_through_alias(x: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    b = x  # a local bound to the input: its writes are the input's
    b[i] = 7.0
    out[i] = 1.0


@wp.kernel
def writes_input_store(x: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = x[i] * 2.0
    x[i] = 0.0


@wp.kernel
def writes_input_atomic(x: wp.array(dtype=float), n: wp.array(dtype=wp.int32), out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = x[i]
    wp.atomic_add(n, 0, 1)


@wp.kernel
def writes_input_augmented_component(v: wp.array(dtype=wp.vec3), out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = v[i][0]
    v[i][1] += 1.0


@wp.kernel
def writes_input_tile(x: wp.array2d(dtype=float), out: wp.array(dtype=float)):
    i, _lane = wp.tid()
    t = wp.tile_load(x[i], shape=4)
    wp.tile_store(x[i], wp.tile_map(wp.mul, t, t))
    out[i] = 1.0


@wp.kernel
def reads_input_rebinds_a_local(x: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    y = x
    out[i] = y[i] * 2.0


@wp.kernel
def acc_kernel(x: wp.array(dtype=float), acc: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    wp.atomic_add(acc, 0, x[i])
    out[i] = x[i]


@wp.kernel
def int_kernel(a: wp.array(dtype=int), x: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = x[i] * float(a[i])


@wp.kernel(enable_backward=False)
def no_backward(x: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = x[i]


@wp.kernel
def generic(a: wp.array(dtype=typing.Any), s: typing.Any, out: wp.array(dtype=typing.Any)):
    i = wp.tid()
    out[i] = a[i] * s


@wp.kernel
def square_bwd_too_few(x: wp.array(dtype=float), grad_x: wp.array(dtype=float)):
    i = wp.tid()
    grad_x[i] = 2.0 * x[i]


@wp.kernel
def square_bwd_wrong_type(x: wp.array(dtype=float), adj_out: wp.array(dtype=wp.vec3), grad_x: wp.array(dtype=float)):
    i = wp.tid()
    grad_x[i] = 2.0 * x[i]


@wp.kernel
def seg_sum(x: wp.array(dtype=float), idx: wp.array(dtype=int), out: wp.array(dtype=float), n: int, ept: int):
    i = wp.tid()
    wp.atomic_add(out, idx[i], x[i])


@wp.kernel
def acc_first(acc: wp.array(dtype=float), x: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    wp.atomic_add(acc, i, x[i])
    out[i] = x[i]


@wp.kernel
def subscript_style(a: wp.array2d[float], v: wp.array[wp.vec3], out: wp.array2d[float]):
    i, j = wp.tid()
    out[i, j] = a[i, j] + v[i][0]


@wp.kernel
def call_style(a: wp.array2d(dtype=float), v: wp.array(dtype=wp.vec3), out: wp.array2d(dtype=float)):
    i, j = wp.tid()
    out[i, j] = a[i, j] + v[i][0]


@wp.kernel
def scale_any(a: wp.array(dtype=typing.Any), s: typing.Any, out: wp.array(dtype=typing.Any)):
    i = wp.tid()
    out[i] = a[i] * s


OVL32 = wp.overload(scale_any, [wp.array(dtype=wp.float32), wp.float32, wp.array(dtype=wp.float32)])
OVL64 = scale_any.add_overload([wp.array(dtype=wp.float64), wp.float64, wp.array(dtype=wp.float64)])


def fabric_function(a: wp.fabricarray(dtype=float), out: wp.array(dtype=float)):
    pass


def any_ndim_function(a: wp.array[float, typing.Any], out: wp.array(dtype=float)):
    pass


def function_op(a: wp.array(dtype=float), out: wp.array(dtype=float)):
    wp.launch(square, dim=a.shape, inputs=[a], outputs=[out], device=a.device)


def function_unannotated(a, out: wp.array(dtype=float)):
    pass


def function_kwonly(a: wp.array(dtype=float), *, out: wp.array(dtype=float)):
    pass


# ---- roles: outputs= and in_out= ---------------------------------------------------------------
def roles(o):
    return [(p.name, p.role) for p in o.description.params]


def test_default_output_is_last_param():
    o = interop.op(saxpy)
    assert roles(o) == [("x", "input"), ("y", "input"), ("a", "input"), ("out", "output")]
    d = o.description
    assert [p.name for p in d.call_params] == ["x", "y", "a"]
    assert [p.name for p in d.returned_params] == ["out"]
    assert d.kind == "kernel"


def test_outputs_as_int_and_as_names_are_equivalent():
    by_int = interop.op(two_out, outputs=2)
    by_name = interop.op(two_out, outputs=["b", "c"])
    assert roles(by_int) == roles(by_name) == [("a", "input"), ("b", "output"), ("c", "output")]
    assert by_int.description == by_name.description
    assert by_int is by_name


def test_param_fields():
    d = interop.op(vecmat, outputs=3).description
    b = d.param("b")
    assert isinstance(b, Param)
    assert (b.is_array, b.scalar, b.inner, b.ndim, b.framework_ndim) == (True, wp.float32, (3,), 1, 2)
    f = d.param("f")
    assert (f.inner, f.framework_ndim, f.role) == ((2, 2), 3, "output")
    a = interop.op(saxpy).description.param("a")
    assert (a.is_array, a.ndim, a.differentiable) == (False, 0, True)
    assert "vec3" in b.expected_text() and "2-d framework array" in b.expected_text()


def test_outputs_names_may_sit_anywhere():
    o = interop.op(output_in_the_middle, outputs=["b"])
    assert roles(o) == [("a", "input"), ("b", "output"), ("c", "input")]
    assert [p.name for p in o.description.call_params] == ["a", "c"]
    assert [p.name for p in o.description.returned_params] == ["b"]
    # a list in another order names the same parameters: returned in kernel order either way
    assert interop.op(two_out, outputs=["c", "b"]) is interop.op(two_out, outputs=["b", "c"])


def test_outputs_before_scalars_like_segmented_sum():
    o = interop.op(seg_sum, outputs=["out"])
    assert roles(o) == [("x", "input"), ("idx", "input"), ("out", "output"), ("n", "input"), ("ept", "input")]
    assert [p.name for p in o.description.call_params] == ["x", "idx", "n", "ept"]


def test_outputs_int_counts_trailing_array_parameters():
    # outputs=N is the last N array parameters: scalars after them stay inputs (DESIGN.md: "the
    # last array parameter is the output"); before, such a kernel was refused
    o = interop.op(seg_sum)
    assert [p.name for p in o.description.returned_params] == ["out"]
    assert [p.name for p in o.description.call_params] == [
        p.name for p in interop.op(seg_sum, outputs=["out"]).description.call_params
    ]
    assert interop.op(seg_sum) is interop.op(seg_sum, outputs=["out"])  # one op, described either way
    with pytest.raises(ValueError, match=r"two_out.*outputs=4 but the kernel has only 3 array parameter"):
        interop.op(two_out, outputs=4)


def test_outputs_listed_twice():
    with pytest.raises(ValueError, match=r"two_out.*outputs lists a parameter twice: \['b', 'b'\]"):
        interop.op(two_out, outputs=["b", "b"])


def test_outputs_unknown_name():
    with pytest.raises(ValueError, match=r"two_out.*outputs names 'zz', which is not a parameter"):
        interop.op(two_out, outputs=["zz"])


def test_outputs_less_than_one():
    with pytest.raises(ValueError, match=r"two_out.*outputs must be at least 1, got 0"):
        interop.op(two_out, outputs=0)
    with pytest.raises(ValueError, match=r"outputs must be at least 1, got -1"):
        interop.op(two_out, outputs=-1)
    with pytest.raises(ValueError, match=r"outputs must name at least one parameter"):
        interop.op(two_out, outputs=[])


def test_outputs_larger_than_params():
    with pytest.raises(ValueError, match=r"saxpy.*outputs=4 but the kernel has only 3 array parameter\(s\)"):
        interop.op(saxpy, outputs=4)


def test_outputs_bad_type():
    with pytest.raises(TypeError, match=r"outputs must be an int or a list of parameter names, got bool"):
        interop.op(two_out, outputs=True)
    with pytest.raises(TypeError, match=r"outputs must be an int or a list of parameter names, got float"):
        interop.op(two_out, outputs=1.0)


def test_scalar_as_output_is_refused():
    with pytest.raises(TypeError, match=r"saxpy.*parameter 'a' is returned \(output\) but is not an array"):
        interop.op(saxpy, outputs=["a", "out"])
    # an int counts array parameters only: outputs=2 is (y, out), the scalar between them stays an input
    assert [p.name for p in interop.op(saxpy, outputs=2).description.returned_params] == ["y", "out"]
    with pytest.raises(TypeError, match=r"parameter 'a' is returned \(in-out\) but is not an array"):
        interop.op(saxpy, outputs=2, in_out=["a"])


@pytest.mark.parametrize(
    "in_out, want_roles, call, returned",
    [
        ("acc", [("x", "input"), ("acc", "in_out"), ("out", "output")], ["x", "acc"], ["acc", "out"]),
        # in-out after an output
        ("out", [("x", "input"), ("acc", "output"), ("out", "in_out")], ["x", "out"], ["acc", "out"]),
    ],
    ids=["in_out_roles", "in_out_after_output"],
)
def test_in_out_roles(in_out, want_roles, call, returned):
    o = interop.op(acc_kernel, outputs=2, in_out=[in_out])
    assert roles(o) == want_roles
    assert [p.name for p in o.description.call_params] == call
    assert [p.name for p in o.description.returned_params] == returned
    # a string is accepted for a single name
    assert interop.op(acc_kernel, outputs=2, in_out=in_out) is o


def test_in_out_unknown_name():
    with pytest.raises(ValueError, match=r"acc_kernel.*in_out names 'nope', which is not a parameter"):
        interop.op(acc_kernel, outputs=2, in_out=["nope"])


def test_in_out_need_not_be_among_outputs():
    # in_out names any array parameter; outputs names the pure outputs (or counts trailing parameters)
    o = interop.op(acc_kernel, outputs=1, in_out=["acc"])
    assert (
        o is interop.op(acc_kernel, outputs=2, in_out=["acc"]) is interop.op(acc_kernel, outputs=["out"], in_out="acc")
    )


def test_in_out_before_an_input():
    o = interop.op(acc_first, in_out=["acc"])
    assert roles(o) == [("acc", "in_out"), ("x", "input"), ("out", "output")]
    assert [p.name for p in o.description.call_params] == ["acc", "x"]
    assert [p.name for p in o.description.returned_params] == ["acc", "out"]


def test_only_in_out_returned():
    o = interop.op(acc_first, outputs=[], in_out=["acc", "out"])
    assert roles(o) == [("acc", "in_out"), ("x", "input"), ("out", "in_out")]
    assert interop.op(acc_first, outputs=0, in_out=["acc", "out"]) is o


# ---- Warp 1.19 annotations and overload instances ------------------------------------------------
def test_subscript_annotations_describe_like_wp_array():
    new = interop.op(subscript_style).description
    old = interop.op(call_style).description
    fields = [(p.name, p.role, p.is_array, p.dtype, p.ndim, p.inner, p.differentiable) for p in new.params]
    assert fields == [(p.name, p.role, p.is_array, p.dtype, p.ndim, p.inner, p.differentiable) for p in old.params]
    assert [(p.dtype, p.ndim) for p in new.params] == [(wp.float32, 2), (wp.vec3, 1), (wp.float32, 2)]


def test_overload_instances_are_accepted():
    d32 = interop.op(OVL32).description
    d64 = interop.op(OVL64).description
    assert [(p.name, p.dtype, p.generic) for p in d32.params] == [
        ("a", wp.float32, False),
        ("s", wp.float32, False),
        ("out", wp.float32, False),
    ]
    assert [p.dtype for p in d64.params] == [wp.float64] * 3
    assert d32 != d64 and d32.name != d64.name  # one op per overload


def test_overload_instances_launch_their_own_overload():
    a32 = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(interop.op(OVL32)(a32, 2.0), a32 * 2.0)
    a64 = np.arange(4, dtype=np.float64) / 3.0
    np.testing.assert_array_equal(interop.op(OVL64)(a64, 0.1), a64 * 0.1)  # float64 arithmetic
    with pytest.raises(
        TypeError, match=r"parameter 'a': expected a 1-d array of float32 \(dtype float32\), got .*float64"
    ):
        interop.op(OVL32)(a64, 2.0)


def test_fabric_arrays_are_refused_with_the_reason():
    # (indexed arrays are described: tests/test_indexed.py)
    with pytest.raises(
        TypeError, match=r"parameter 'a' is a wp.fabricarray; fabric arrays are not supported: they address Omniverse"
    ):
        interop.op(fabric_function)


def test_indexed_array_of_a_python_function_op_is_refused_with_what_to_do():
    def indexed_function(a: wp.indexedarray(dtype=float), out: wp.array(dtype=float)):
        pass

    with pytest.raises(interop.UnsupportedError, match=r"parameter 'a' is a wp.indexedarray of a Python-function op"):
        interop.op(indexed_function)


def test_array_without_fixed_ndim_is_refused():
    with pytest.raises(TypeError, match=r"parameter 'a' has no fixed number of dimensions .*give it one"):
        interop.op(any_ndim_function)


# ---- block_dim -----------------------------------------------------------------------------------
def test_block_dim_is_part_of_the_identity():
    plain = interop.op(square)
    b64 = interop.op(square, block_dim=64)
    assert plain.description.block_dim is None and b64.description.block_dim == 64
    assert plain is not b64 and plain.name != b64.name
    assert interop.op(square, block_dim=64) is b64
    assert interop.op(square, block_dim=32).description != b64.description
    # per call: a cached variant op, identity by block_dim
    v = plain.with_block_dim(128)
    assert v.description.block_dim == 128 and plain.with_block_dim(128) is v
    assert b64.with_block_dim(64) is b64
    x = np.arange(5, dtype=np.float32)
    np.testing.assert_array_equal(plain(x, block_dim=128), x * x)


@pytest.mark.parametrize(
    "bad, got", [(0, "got 0"), (1025, "got 1025"), (-1, "got -1"), (True, "got bool True"), (2.0, "got float 2.0")]
)
def test_bad_block_dim(bad, got):
    with pytest.raises(
        (TypeError, ValueError), match=rf"op '.*square_kernel': block_dim must be an int from 1 to 1024, {got}"
    ):
        interop.op(square, block_dim=bad)
    with pytest.raises(
        (TypeError, ValueError), match=rf"op 'square_kernel': block_dim must be an int from 1 to 1024, {got}"
    ):
        interop.op(square)(np.ones(3, np.float32), block_dim=bad)


def test_block_dim_on_function_op():
    with pytest.raises(ValueError, match=r"block_dim does not apply to a Python-function op"):
        interop.op(function_op, block_dim=64)


def test_in_out_duplicate():
    with pytest.raises(ValueError, match=r"in_out lists a parameter twice"):
        interop.op(acc_kernel, outputs=2, in_out=["acc", "acc"])


def test_in_out_all_returned_is_fine():
    o = interop.op(acc_kernel, outputs=2, in_out=["acc", "out"])
    assert roles(o)[1:] == [("acc", "in_out"), ("out", "in_out")]


# ---- differentiability ---------------------------------------------------------------------------
def test_integer_arrays_not_differentiable():
    d = interop.op(int_kernel).description
    assert not d.param("a").differentiable
    assert d.param("x").differentiable
    assert [p.name for p in d.diff_array_inputs] == ["x"]


def test_enable_backward_false_keeps_parameters_differentiable():
    """No adjoint, but float parameters stay differentiable: a gradient reaching the op raises
    (tests/test_no_backward.py) instead of being dropped as a silent zero."""
    d = interop.op(no_backward).description
    assert d.enable_backward is False and not d.has_adjoint
    assert [p.name for p in d.params if p.differentiable] == ["x", "out"]
    assert "enable_backward=False" in str(d.no_adjoint_error())
    assert interop.op(square).description.has_adjoint


def test_nondifferentiable_option():
    d = interop.op(saxpy, nondifferentiable=["y", "a"]).description
    assert [p.name for p in d.params if p.differentiable] == ["x", "out"]
    with pytest.raises(ValueError, match=r"nondifferentiable names 'q', which is not a parameter"):
        interop.op(saxpy, nondifferentiable=["q"])


def test_generic_params():
    d = interop.op(generic).description
    assert all(p.generic for p in d.params)
    assert d.param("a").differentiable  # resolved per call: float -> yes


# ---- backward= convention ----------------------------------------------------------------------
def test_backward_kernel_convention():
    o = interop.op(square, backward=square_bwd)
    b = o.description.backward
    assert isinstance(b, OpDescription)
    assert [(p.name, p.role) for p in b.params] == [("x", "input"), ("adj_out", "input"), ("grad_x", "output")]
    # a backward given as an op is accepted too and gives the same description
    bop = interop.op(square_bwd)
    assert interop.op(square, backward=bop).description.backward == b
    # backward is part of the identity
    assert interop.op(square).name != o.name


def test_backward_wrong_parameter_count():
    with pytest.raises(ValueError, match=r"square.*backward .*square_bwd_too_few.* has 2 parameters, expected 3"):
        interop.op(square, backward=square_bwd_too_few)


def test_backward_wrong_parameter_type():
    with pytest.raises(TypeError, match=r"backward parameter 'adj_out' should match forward parameter 'out'"):
        interop.op(square, backward=square_bwd_wrong_type)


def test_backward_not_a_kernel():
    with pytest.raises(
        TypeError, match=r"backward must be a wp.kernel, an interop op or interop.backward\(kernel, ...\), got function"
    ):
        interop.op(square, backward=lambda *a: None)


def test_backward_without_differentiable_input():
    with pytest.raises(ValueError, match=r"backward= given, but the op has no differentiable array input"):
        interop.op(square, nondifferentiable=["x"], backward=square_bwd)


def test_hand_written_backward_makes_a_kernel_without_adjoint_differentiable():
    """Warp's PyTorch guide: a forward kernel compiled with enable_backward=False and a backward kernel."""
    d = interop.op(no_backward, backward=square_bwd).description
    assert [p.differentiable for p in d.params] == [True, True]


# ---- other options ------------------------------------------------------------------------------
def test_launch_dims_on_function_op():
    with pytest.raises(ValueError, match=r"launch_dims does not apply to a Python-function op"):
        interop.op(function_op, launch_dims=4)


def test_function_op_description():
    d = interop.op(function_op).description
    assert d.kind == "function"
    assert roles(interop.op(function_op)) == [("a", "input"), ("out", "output")]


def test_function_op_needs_annotations():
    with pytest.raises(TypeError, match=r"parameter 'a' has no annotation"):
        interop.op(function_unannotated)
    with pytest.raises(TypeError, match=r"parameter 'out' must be positional"):
        interop.op(function_kwonly)


def test_not_a_kernel():
    with pytest.raises(TypeError, match=r"fn must be a wp.kernel or an annotated Python function, got int"):
        interop.op(3)


@pytest.mark.parametrize("bad", ["noscope", "a::", "::b", "1ns::x", "ns::b c", "ns:x", 7])
def test_bad_name_format(bad):
    with pytest.raises(ValueError, match=r"name must look like 'namespace::name'"):
        interop.op(saxpy, name=bad)


def test_good_name():
    o = interop.op(saxpy, name="tests_desc::saxpy")
    assert o.name == "tests_desc::saxpy"
    assert o.description.label == "tests_desc::saxpy"


def test_name_clash_with_other_options():
    first = interop.op(two_out, outputs=2, name="tests_desc::clash")  # held: ops are kept weakly
    with pytest.raises(ValueError, match=r"op name 'tests_desc::clash' is already used"):
        interop.op(two_out, outputs=2, zero_outputs=False, name="tests_desc::clash")
    assert first.name == "tests_desc::clash"


def test_bad_launch_and_output_dims_at_description():
    with pytest.raises(TypeError, match=r"launch_dims must be an int or a tuple of ints, got str"):
        interop.op(saxpy, launch_dims="4")
    with pytest.raises(ValueError, match=r"launch_dims must have 1 to 4 dimensions"):
        interop.op(saxpy, launch_dims=(1, 2, 3, 4, 5))
    with pytest.raises(ValueError, match=r"launch_dims must be non-negative"):
        interop.op(saxpy, launch_dims=-1)
    with pytest.raises(ValueError, match=r"output_dims names 'x', which is not an output"):
        interop.op(saxpy, output_dims={"x": 3})
    with pytest.raises(ValueError, match=r"vmap_method must be one of"):
        interop.op(saxpy, vmap_method="magic")
    with pytest.raises(TypeError, match=r"zero_outputs must be a bool"):
        interop.op(saxpy, zero_outputs=1)


# ---- identity: hashable, equal for equal options, cached ---------------------------------------
def test_description_hashable_and_equal():
    d1 = interop._description.describe(saxpy, launch_dims=4, output_dims={"out": 4})
    d2 = interop._description.describe(saxpy, launch_dims=(4,), output_dims={"out": (4,)})
    assert d1 == d2 and hash(d1) == hash(d2)
    assert len({d1, d2}) == 1
    d3 = interop._description.describe(saxpy, launch_dims=5)
    assert d3 != d1
    with pytest.raises(dataclasses.FrozenInstanceError):
        d1.name = "x"  # type: ignore[misc]


def test_op_twice_returns_same_op():
    a = interop.op(saxpy, launch_dims=3)
    b = interop.op(saxpy, launch_dims=(3,))
    assert a is b
    assert interop.op(saxpy) is interop.op(saxpy)


def test_different_options_give_different_names():
    base = interop.op(saxpy)
    variants = [
        interop.op(saxpy, launch_dims=8),
        interop.op(saxpy, output_dims=8),
        interop.op(saxpy, zero_outputs=False),
        interop.op(saxpy, nondifferentiable=["x"]),
        interop.op(saxpy, vmap_method=interop._description.VMAP_METHODS[0]),
    ]
    names = {base.name} | {v.name for v in variants}
    assert len(names) == 1 + len(variants)
    assert all(n.startswith("interop::saxpy_") for n in names)
    assert len({v.description for v in variants} | {base.description}) == 1 + len(variants)


def test_repr():
    o = interop.op(saxpy)
    assert "saxpy" in repr(o) and "(x, y, a) -> (out)" in repr(o)
    with pytest.raises(TypeError, match=r"cannot be pickled"):
        import pickle

        pickle.dumps(o)


def test_output_values_with_numpy_smoke():
    # the description is usable: a quick call
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_allclose(interop.op(saxpy)(x, x, 2.0), 3 * x)


# ---- a kernel that writes an input ------------------------------------------------------------------
@pytest.mark.parametrize(
    "kernel, param, line",
    [
        (writes_input_store, "x", "x[i] = 0.0"),
        (writes_input_atomic, "n", "wp.atomic_add(n, 0, 1)"),
        (writes_input_augmented_component, "v", "v[i][1] += 1.0"),
        (writes_input_tile, "x", "wp.tile_store(x[i]"),
        (writes_input_through_alias, "x", "b[i] = 7.0"),
    ],
)
def test_a_kernel_that_writes_an_input_is_refused(kernel, param, line):
    # the caller's array would change behind the framework's back (a JAX array is immutable;
    # torch.compile assumes an unmutated input); in_out= or outputs= says what the kernel does
    import inspect

    source, first = inspect.getsourcelines(kernel.func)
    lineno = first + next(k for k, text in enumerate(source) if line in text)
    with pytest.raises(
        interop.ArgumentError,
        match=rf"op '{kernel.key.rsplit('.', 1)[-1]}': the kernel writes its input parameter\(s\) '{param}' "
        rf"\(line {lineno} of .*test_description.py\); .*in_out=\['{param}'\]",
    ):
        interop.op(kernel, launch_dims=2 if kernel is not writes_input_tile else (2, 4))
    op = interop.op(kernel, in_out=[param])  # declared: accepted
    assert op.description.param(param).role == "in_out"


def test_a_kernel_that_only_reads_its_inputs_is_accepted():
    for kernel in (reads_input_rebinds_a_local, saxpy):
        interop.op(kernel)
    interop.op(output_in_the_middle, outputs=["b"])
    out = interop.op(reads_input_rebinds_a_local)(np.arange(3, dtype=np.float32))
    np.testing.assert_array_equal(out, [0, 2, 4])
