"""Reading a Warp kernel or annotated Python function into an immutable op description.

The description knows nothing of frameworks. It is frozen and hashable, and
every option that changes behaviour is one of its fields, so adapters can key
their caches (registered operators, FFI targets, traced callables) on it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import re
import typing
import weakref
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Mapping, Sequence

import warp as wp

from . import _backward, _dtypes, _structs, _warp_compat
from ._blocks import CUDA_BLOCK_DIM, MAX_BLOCK_DIM, check_block_dim, tile_grid_rank, tile_launch_given  # noqa: F401 (re-exported)
from ._errors import ArgumentError, UnsupportedError
from ._extent import (
    arrays_written,
    direct_indexing,
    permuted_outputs,
    returned_params_read,
    scattered_outputs,
    thread_domain,
    tile_form,
    uses_tiles,
    written_outputs,
)
from ._options import (  # noqa: F401 (re-exported)
    IN_OUT,
    INPUT,
    OUTPUT,
    VMAP_METHODS,
    _check_vmap_method,
    _checked_option,
    normalize_dims,
    normalize_output_dims,
    operator_index,
)
from ._output_dtypes import DtypeOf, check_output_dtypes, rule_text  # noqa: F401 (DtypeOf re-exported)

Dims = typing.Union[int, Sequence[int]]
# partition="rows": the launch is independent along its first dimension; "elementwise": along
# every launch dimension (see interop.op)
PARTITIONS = ("rows", "elementwise")


@dataclass(frozen=True)
class Param:
    """One parameter of an op, in kernel order.

    Attributes:
        name: parameter name in the kernel signature.
        index: position in the kernel signature.
        role: ``"input"``, ``"in_out"`` or ``"output"``.
        is_array: a Warp array (else a scalar, vector or matrix value).
        dtype: Warp element dtype as annotated (may be generic, e.g. ``typing.Any``).
        scalar: Warp scalar type of the elements (generic when ``dtype`` is).
        inner: trailing vec/mat dims, ``(3,)`` for ``vec3``, ``(2, 2)`` for ``mat22``.
        ndim: number of Warp (outer) dimensions; 0 for scalars.
        generic: the dtype is resolved per call from the arguments.
        differentiable: may receive a gradient (float, not excluded by ``nondifferentiable``).
            For generic parameters this holds if the resolved dtype is float. For a kernel
            compiled with ``enable_backward=False`` (and no ``backward=``) a gradient that
            reaches the op raises ``OpDescription.no_adjoint_error``, never a zero.
    """

    name: str
    index: int
    role: str
    is_array: bool
    dtype: Any
    scalar: Any
    inner: tuple[int, ...]
    ndim: int
    generic: bool
    differentiable: bool
    annotation: Any = field(compare=False, hash=False, repr=False)

    @property
    def framework_ndim(self) -> int:
        """Number of dimensions of the matching framework array (outer + inner)."""
        return self.ndim + len(self.inner)

    def expected_text(self) -> str:
        if _warp_compat.is_struct(self.dtype):
            return (
                f"a {self.ndim}-d array of struct {_warp_compat.struct_name(self.dtype)} (a Warp array of it, or a "
                f"NumPy structured array of dtype {_warp_compat.struct_numpy_dtype(self.dtype)})"
            )
        elem = _dtypes.describe_element(self.scalar, self.inner, self.dtype)
        if not self.is_array:
            return elem
        if self.inner:
            return f"a {self.ndim}-d array of {elem}, i.e. a {self.framework_ndim}-d framework array"
        return f"a {self.ndim}-d array of {elem}"


@dataclass(frozen=True)
class OpDescription:
    """Immutable description of one op: its parameters and every behaviour option."""

    fn: Any
    kind: str  # "kernel" or "function"
    key: str
    name: str
    params: tuple[Param, ...]
    launch_dims: tuple[int, ...] | None
    output_dims: tuple | None  # normalized: ("all", dims) or ("by_name", ((name, dims), ...))
    zero_outputs: bool
    enable_backward: bool
    backward: OpDescription | None
    vmap_method: str | None
    # threads per block of every launch (wp.launch's block_dim); None: Warp's default
    block_dim: int | None = None
    partition: str | None = None
    label: str = field(default="", compare=False, hash=False)
    # returned parameters the kernel may read (so Warp's adjoint may write into their
    # upstream gradient): adapters hand such a gradient over as a private copy
    reads_returned: tuple[str, ...] = field(default=(), compare=False, hash=False)
    # outputs the backward never reads, which adapters need not keep for it: those Warp's adjoint
    # never reads (the kernel only stores into them or adds atomically; see
    # _warp_compat.ADJOINT_SKIPS_WRITE_ONLY_OUTPUTS), or every output when a hand-written backward
    # is given (it is called with the call's inputs and the upstream gradients only)
    adjoint_unread: tuple[str, ...] = field(default=(), compare=False, hash=False)
    # (array parameter, its dim, launch dim) the kernel indexes directly with wp.tid() (see _extent)
    direct_index: tuple[tuple[str, int, int], ...] = field(default=(), compare=False, hash=False)
    # the launch domain the kernel is written for (see _extent.thread_domain): per launch dimension,
    # the (array parameter, its dim) pairs it indexes with that bare thread index anywhere in its body,
    # and whether it hands a bare thread index to a function of its own
    domain: tuple[tuple[tuple[str, int], ...], ...] = field(default=(), compare=False, hash=False)
    tid_escapes: bool = field(default=False, compare=False, hash=False)
    # a tile kernel (it calls wp.tile_*): launched as wp.launch_tiled launches, the tile grid then
    # the block's lanes (see _plan.tile_launch)
    tiles: bool = field(default=False, compare=False, hash=False)
    # a tile kernel's launch form (see _extent.tile_form): ("threads" | "tiled" | "none", the values
    # wp.tid() returns, whether the last is the block's lane)
    tile_form: tuple = field(default=("none", 0, False), compare=False, hash=False)
    # (output, launch dim per output dim) the kernel writes element by element (see _extent)
    written: tuple[tuple[str, tuple[int, ...]], ...] = field(default=(), compare=False, hash=False)
    # (output, line, source text) of outputs the kernel writes at an index that is not the thread's
    # (a scatter, an atomic at a computed index; see _extent.scattered_outputs): never sized from the
    # launch, a call must give their output_dims
    scattered: tuple[tuple[str, int, str], ...] = field(default=(), compare=False, hash=False)
    # (output, launch dim per output dim) of outputs written only at another order of the thread
    # indices (a transpose ``out[j, i]``; see _extent.permuted_outputs): sized from the launch permuted
    permuted: tuple[tuple[str, tuple[int, ...]], ...] = field(default=(), compare=False, hash=False)
    # per generic output given one, the rule for its dtype: ((name, DtypeOf or a Warp type), ...), sorted
    output_dtypes: tuple = ()
    # a hand-written tangent kernel (interop.op(..., jvp=)): the kernel's parameters, then one tangent
    # per differentiable parameter (see interop._tangent); None: generated from the source when needed
    jvp: Any = None
    # checked mode (interop.op(..., checked=True) or INTEROP_CHECKED=1): every array access of every
    # launch is bounds-checked (see interop._checked); part of the identity, so no cache mixes the two
    checked: bool = False
    # a tile kernel's launch as the user declared it ("launch": wp.launch(k, dim, block_dim);
    # "launch_tiled": wp.launch_tiled(k, dim=grid, block_dim)), None: read from the kernel (tile_form)
    tile_launch: str | None = None
    # a kernel with @wp.struct parameters (see _structs): its original parameters in order, each a
    # plain parameter's name or the tree (_structs.Node) of a struct whose leaves are ``params``;
    # ``fn`` is then the flat kernel that takes the leaves. Empty for every other op.
    entries: tuple = ()

    def __post_init__(self) -> None:
        # the derived views below are computed now, once: a first access inside a torch.compile
        # trace (a struct op's entry_returned, at its first call) would enter cached_property's
        # lock (an RLock on Python 3.11), which Dynamo cannot trace (fullgraph=True fails)
        for name, attr in type(self).__dict__.items():
            if isinstance(attr, cached_property):
                getattr(self, name)

    @cached_property
    def entry_called(self) -> tuple[bool, ...]:
        """Per entry: the caller passes it (some leaf is an input or in-out)."""
        roles = {p.name: p.role for p in self.params}
        return tuple(any(roles[n] != OUTPUT for n in _entry_leaves(e)) for e in self.entries)

    @cached_property
    def entry_returned(self) -> tuple[bool, ...]:
        """Per entry: the call returns it (some leaf is in-out or an output)."""
        roles = {p.name: p.role for p in self.params}
        return tuple(any(roles[n] != INPUT for n in _entry_leaves(e)) for e in self.entries)

    # -- derived views (cheap properties; dataclass stays the identity) ------------
    @cached_property
    def call_params(self) -> tuple[Param, ...]:
        """Parameters a caller passes, in order: inputs and in-out parameters."""
        return tuple(p for p in self.params if p.role != OUTPUT)

    @cached_property
    def returned_params(self) -> tuple[Param, ...]:
        """Parameters a call returns (in-out parameters and outputs), in kernel order."""
        return tuple(p for p in self.params if p.role != INPUT)

    @cached_property
    def output_params(self) -> tuple[Param, ...]:
        return tuple(p for p in self.params if p.role == OUTPUT)

    @cached_property
    def diff_array_inputs(self) -> tuple[Param, ...]:
        """Array inputs (role input) that can receive a gradient, in order."""
        return tuple(p for p in self.params if p.role == INPUT and p.is_array and p.differentiable)

    @cached_property
    def has_in_out(self) -> bool:
        """Whether a parameter is read and updated in place."""
        return any(p.role == IN_OUT for p in self.params)

    @cached_property
    def has_adjoint(self) -> bool:
        """Warp generated an adjoint for the kernel (``enable_backward`` on), or the op is a
        Python-function op (recorded by ``wp.Tape``)."""
        return self.kind != "kernel" or self.enable_backward

    @cached_property
    def blind_spot(self) -> Any:
        """Where Warp's adjoint of the kernel would be wrong (an :class:`interop._blind_spots.BlindSpot`),
        or None; read at the first backward, never at description (the forward is right)."""
        if self.kind != "kernel" or self.backward is not None:
            return None
        from . import _blind_spots

        spot = _blind_spots.find(self.fn)
        in_out = [p.name for p in self.params if p.role == IN_OUT]
        if spot is None and in_out:
            spot = _blind_spots.in_out_spot(self.fn, in_out)
        return spot

    @cached_property
    def fold_refusal(self) -> str | None:
        """Why ``vmap_method="fold"`` would be wrong for the kernel, naming the line (:mod:`interop._promises`)."""
        from . import _promises

        return _promises.fold_refusal(self) if self.kind == "kernel" else None

    @cached_property
    def row_arrays(self) -> dict[str, bool] | None:
        """For ``partition="rows"``: which array parameters are rows (sharded) and which are replicated,
        from the thread index that walks them (:mod:`interop._promises`); None: run unpartitioned."""
        from . import _promises

        return _promises.row_arrays(self) if self.kind == "kernel" else None

    def check_adjoint(self, grad_scalars: Sequence[str] = ()) -> None:
        """Raises where a gradient cannot reach the op's inputs right: no adjoint, or an adjoint that
        Warp gets wrong (for a blind spot that only touches float scalars: when ``grad_scalars``, the
        scalars differentiated, name one of them)."""
        if not self.has_adjoint:
            raise self.no_adjoint_error()
        spot = self.blind_spot
        if spot is not None and (spot.scalars is None or spot.scalars & set(grad_scalars)):
            raise UnsupportedError(spot.message(self.label))

    def check_in_out_passthrough(self) -> None:
        """Raises where an in-out array's gradient may not pass through the call unchanged (what a
        backward does when only in-out arrays need one, without running the adjoint): a kernel
        that reads an in-out as a value (``y[i] = beta * y[i] + ...``), with or without an adjoint.
        A kernel that only accumulates into its in-outs (``acc[i] += v``, ``acc[i] = acc[i] + v``)
        passes their gradients through."""
        if self.kind != "kernel" or self.backward is not None:
            return
        from . import _blind_spots

        in_out = [p.name for p in self.params if p.role == IN_OUT]
        spot = _blind_spots.in_out_spot(self.fn, in_out, accumulations=True) if in_out else None
        if spot is not None:
            raise UnsupportedError(spot.message(self.label))

    def no_adjoint_error(self) -> UnsupportedError:
        """The error for a gradient reaching an op whose kernel has no adjoint."""
        return UnsupportedError(
            f"op {self.label!r}: no gradient: the kernel was compiled with enable_backward=False, so Warp "
            "generated no adjoint for it (a gradient flowing into the op would otherwise be silently zero); "
            "compile it with enable_backward=True (Warp's default), give the op a hand-written backward "
            "(interop.op(..., backward=<kernel or op>)), or stop the gradient before the op"
        )

    def param(self, name: str) -> Param:
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(name)

    def __repr__(self) -> str:
        sig = ", ".join(f"{p.name}:{p.role}" for p in self.params)
        return f"OpDescription({self.name!r}, {self.kind}, [{sig}])"


def _entry_leaves(e: Any) -> list[str]:
    return [leaf.param for leaf in e.leaves()] if isinstance(e, _structs.Node) else [e]


def _fn_params(fn: Any) -> tuple[str, list[tuple[str, Any]], bool, str]:
    """(kind, [(name, annotation)], enable_backward, key) of a kernel or annotated function."""
    if isinstance(fn, wp.Kernel):
        args = [(a.label, a.type) for a in fn.adj.args]
        opts = dict(getattr(fn.module, "options", {}) or {})
        opts.update(fn.options or {})
        return "kernel", args, bool(opts.get("enable_backward", True)), str(fn.key)
    if callable(fn) and inspect.isfunction(fn):
        sig = inspect.signature(fn)
        try:
            hints = inspect.get_annotations(fn, eval_str=True)
        except Exception as e:  # a forward reference we cannot evaluate
            raise ArgumentError(f"interop.op: cannot read the annotations of function {fn.__qualname__!r}: {e}") from e
        args = []
        for pname, p in sig.parameters.items():
            if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
                raise ArgumentError(
                    f"interop.op({fn.__qualname__}): parameter {pname!r} must be positional "
                    f"(got {p.kind.description}); annotate it like a Warp kernel parameter"
                )
            if pname not in hints:
                raise ArgumentError(
                    f"interop.op({fn.__qualname__}): parameter {pname!r} has no annotation; "
                    "annotate every parameter like a Warp kernel (e.g. wp.array(dtype=float) or float)"
                )
            args.append((pname, hints[pname]))
        return "function", args, True, f"{fn.__module__}.{fn.__qualname__}"
    raise ArgumentError(f"interop.op: fn must be a wp.kernel or an annotated Python function, got {type(fn).__name__}")


_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*::[A-Za-z_][A-Za-z0-9_.]*$")


_name_owners: dict[str, list] = {}  # stable base name -> weak refs to the functions holding it


def _source_of(fn: Any, kind: str) -> str:
    try:
        return fn.adj.source if kind == "kernel" else inspect.getsource(fn)
    except (AttributeError, OSError, TypeError):
        return ""


def _default_name(key: str, fn: Any, kind: str, options_hash: str) -> str:
    """``interop::<name>_<hash>``: the hash covers the key, the source and the options, so the same
    kernel described in another process gets the same name (JAX export finds its FFI targets by it).
    A second function object with the same key and source in one process gets a ``_<n>`` suffix."""
    base = re.sub(r"[^A-Za-z0-9_]", "_", key.rsplit(".", 1)[-1])
    digest = hashlib.sha1(f"{key}\n{_source_of(fn, kind)}".encode()).hexdigest()[:6]
    name = f"interop::{base}_{digest}_{options_hash}"
    owners = _name_owners.setdefault(name, [])
    free = None
    for k, ref in enumerate(owners):
        owner = ref()
        if owner is fn:
            return name if k == 0 else f"{name}_{k}"
        if owner is None and free is None:
            free = k
    try:
        ref = weakref.ref(fn)
    except TypeError:
        ref = lambda fn=fn: fn  # noqa: E731  (not weak-referenceable: held for the process)
    if free is None:
        owners.append(ref)
        free = len(owners) - 1
    else:
        owners[free] = ref
    return name if free == 0 else f"{name}_{free}"


def describe(
    fn: Any,
    *,
    outputs: int | Sequence[str] = 1,
    in_out: Sequence[str] = (),
    launch_dims: Dims | None = None,
    output_dims: Any = None,
    name: str | None = None,
    backward: Any = None,
    zero_outputs: bool = True,
    nondifferentiable: Sequence[str] = (),
    vmap_method: str | None = None,
    block_dim: int | None = None,
    partition: str | None = None,
    output_dtypes: Any = None,
    jvp: Any = None,
    checked: bool | None = None,
    tile_launch: str | None = None,
) -> OpDescription:
    """Build (and validate) the description of ``fn``. See :func:`interop.op`.

    The steps: the parameters' roles (:func:`_returned_names`), each parameter (:func:`_param`),
    the launch options (:func:`_launch_options`), the backward and the name
    (:func:`_derived_name`), the refusal of a kernel that writes an input, what the kernel's source
    says about its arrays (:func:`_source_facts`), then the tile launch and ``jvp=`` checks."""
    if _structs.has_struct_params(fn):
        if jvp is not None:
            raise ArgumentError(
                f"op {name or getattr(fn, 'key', fn)!r}: jvp= is not supported for kernels with struct or "
                "indexed-array parameters"
            )
        return _describe_structs(
            fn,
            output_dtypes=output_dtypes,
            checked=checked,
            outputs=outputs,
            in_out=in_out,
            launch_dims=launch_dims,
            output_dims=output_dims,
            name=name,
            backward=backward,
            zero_outputs=zero_outputs,
            nondifferentiable=nondifferentiable,
            vmap_method=vmap_method,
            block_dim=block_dim,
            partition=partition,
            tile_launch=tile_launch,
        )
    kind, args, enable_backward, key = _fn_params(fn)
    opname = name or key
    checked = _checked_option(checked, opname)
    _check_name(name, key)
    names = [a[0] for a in args]
    in_out, returned = _returned_names(opname, kind, args, outputs, in_out)
    nondiff = tuple(nondifferentiable)
    for n in nondiff:
        if n not in names:
            raise ArgumentError(
                f"op {opname!r}: nondifferentiable names {n!r}, which is not a parameter; parameters are {names}"
            )
    params = tuple(_param(opname, i, pname, ann, in_out, returned, nondiff) for i, (pname, ann) in enumerate(args))
    ld, od, vm, bd = _launch_options(
        opname, kind, params, launch_dims, output_dims, zero_outputs, vmap_method, block_dim, partition
    )
    odt = check_output_dtypes(output_dtypes, params, opname)
    bwd = None if backward is None else _describe_backward(backward, params, opname, checked)
    if name is None:
        # options are part of the derived name, so describing one kernel two ways gives two ops
        options = (ld, od, zero_outputs, vm, bwd, jvp, bd, partition, odt, checked, tile_launch)
        desc_name = _derived_name(fn, kind, key, params, options)
    else:
        desc_name = name
    label = name or key.rsplit(".", 1)[-1]
    _refuse_written_inputs(fn, kind, params, label)
    desc = OpDescription(
        fn=fn,
        kind=kind,
        key=key,
        name=desc_name,
        params=params,
        launch_dims=ld,
        output_dims=od,
        zero_outputs=zero_outputs,
        enable_backward=enable_backward,
        backward=bwd,
        vmap_method=vm,
        block_dim=bd,
        partition=partition,
        output_dtypes=odt,
        jvp=jvp,
        checked=checked,
        label=label,
        **_source_facts(fn, kind, params, bwd),
    )
    desc = _declared_tile_launch(desc, tile_launch)
    if desc.tiles and ld is not None and desc.tile_form[0] != "threads":
        tile_launch_given(desc, ld)  # refused when described, not at the first call
    if jvp is not None:
        from ._tangent import check_jvp_kernel, tangent_params

        if kind != "kernel":
            raise ArgumentError(f"op {desc.label!r}: jvp= applies to kernels only (a Python-function op has none)")
        check_jvp_kernel(jvp, fn, tangent_params(desc), desc.label)
    return desc


def _returned_names(opname: str, kind: str, args: list, outputs: Any, in_out: Any) -> tuple[tuple, list]:
    """``(in_out, returned)``: the in-out parameters' names and every returned parameter's name in
    kernel order, from the op's ``outputs=`` (a count of trailing arrays, or names) and ``in_out=``."""
    names = [a[0] for a in args]
    if isinstance(in_out, str):
        in_out = (in_out,)
    in_out = tuple(in_out)
    for n in in_out:
        if n not in names:
            raise ArgumentError(f"op {opname!r}: in_out names {n!r}, which is not a parameter; parameters are {names}")
    if len(set(in_out)) != len(in_out):
        raise ArgumentError(f"op {opname!r}: in_out lists a parameter twice: {list(in_out)}")

    if isinstance(outputs, bool) or not isinstance(outputs, (int, list, tuple)):
        raise ArgumentError(
            f"op {opname!r}: outputs must be an int or a list of parameter names, got {type(outputs).__name__}"
        )
    if isinstance(outputs, int):
        # an int counts the trailing array parameters (in-out ones among them stay in-out): the
        # default outputs=1 is the last array parameter, also when scalars follow it
        # (``segment_sum(x, idx, out, n)``); outputs elsewhere in the signature are named instead
        if outputs < (0 if in_out else 1):
            raise ArgumentError(
                f"op {opname!r}: outputs must be at least 1, got {outputs} (0 only when in_out names the returned arrays)"
            )
        arrays = [n for n, ann in args if _warp_compat.is_array_annotation(ann)]
        if outputs > len(arrays):
            raise ArgumentError(
                f"op {opname!r}: outputs={outputs} but the {kind} has only {len(arrays)} array parameter(s) "
                f"({arrays}; all parameters: {names})"
            )
        listed = arrays[len(arrays) - outputs :] if outputs else []
    else:
        listed = list(outputs)
        for n in listed:
            if not isinstance(n, str) or n not in names:
                raise ArgumentError(
                    f"op {opname!r}: outputs names {n!r}, which is not a parameter; parameters are {names}"
                )
        if len(set(listed)) != len(listed):
            raise ArgumentError(f"op {opname!r}: outputs lists a parameter twice: {listed}")
        if not listed and not in_out:
            raise ArgumentError(f"op {opname!r}: outputs must name at least one parameter")
    # outputs and in-out parameters may sit anywhere in the signature; the call returns them in kernel order
    return in_out, [n for n in names if n in listed or n in in_out]


def _param(opname: str, i: int, pname: str, ann: Any, in_out: tuple, returned: list, nondiff: tuple) -> Param:
    """The description of parameter ``i`` (``pname: ann``): its role, array or scalar, dtype, inner
    vector/matrix shape, number of dimensions, genericity and differentiability."""
    role = IN_OUT if pname in in_out else OUTPUT if pname in returned else INPUT
    if _warp_compat.is_array_annotation(ann):
        if _warp_compat.is_indexed_array_annotation(ann):
            raise UnsupportedError(
                f"op {opname!r}: parameter {pname!r} is a wp.indexedarray of a Python-function op; indexed arrays "
                "are supported as parameters (and struct fields) of a wp.kernel (called with interop.indexed(data, "
                "indices)). Annotate it as a plain array (wp.array(dtype=...)) and index it explicitly"
            )
        if not _warp_compat.is_plain_array_annotation(ann):
            raise ArgumentError(
                f"op {opname!r}: parameter {pname!r} is a wp.{_warp_compat.array_class_name(ann)}; fabric arrays "
                "are not supported: they address Omniverse Fabric memory, which no framework array holds. Annotate "
                "it as a plain array (wp.array(dtype=...) or wp.array[...]) or a wp.indexedarray (called with "
                "interop.indexed(data, indices))"
            )
        if not isinstance(ann.ndim, int) or isinstance(ann.ndim, bool):
            raise ArgumentError(
                f"op {opname!r}: parameter {pname!r} has no fixed number of dimensions ({ann!r}); "
                "give it one (e.g. wp.array2d[float] or wp.array(dtype=float, ndim=2))"
            )
        dtype = _dtypes.normalize(ann.dtype)
        ndim = int(ann.ndim)
        is_array = True
        # wp.array[float], wp.array2d[float] and overload instances' annotations describe the same
        # parameter as wp.array(dtype=..., ndim=...): keep one canonical annotation
        ann = wp.array(dtype=ann.dtype, ndim=ndim)
    else:
        if role != INPUT:
            raise ArgumentError(
                f"op {opname!r}: parameter {pname!r} is returned ({'in-out' if role == IN_OUT else 'output'}) "
                f"but is not an array (annotation {_dtypes.type_name(ann)}); outputs and in-out "
                "parameters must be wp.array"
            )
        dtype = _dtypes.normalize(ann)
        ndim = 0
        is_array = False
    common = {"name": pname, "index": i, "role": role, "is_array": is_array, "ndim": ndim, "annotation": ann}
    if not is_array and _warp_compat.is_struct(dtype):
        # (a kernel's struct parameters were flattened into their fields before: see _structs)
        raise UnsupportedError(
            f"op {opname!r}: parameter {pname!r} is a @wp.struct of a Python-function op; struct parameters "
            "are supported for wp.kernel ops (docs/structs.md). Pass the struct's fields as parameters and build "
            "the struct inside the function"
        )
    if _warp_compat.is_struct(dtype):
        # an array of structs: Warp arrays of the struct and NumPy structured arrays of its layout
        # (struct parameters themselves are flattened into their fields, see _structs)
        return Param(dtype=dtype, scalar=dtype, inner=(), generic=False, differentiable=False, **common)
    generic = _dtypes.is_generic(dtype)
    scalar, inner = _dtypes.split(dtype)
    if not generic and not isinstance(dtype, type):
        raise ArgumentError(
            f"op {opname!r}: parameter {pname!r} has unsupported type {dtype!r}; "
            "use Warp scalar, vector, matrix or array types"
        )
    if not generic and inner == () and scalar not in _dtypes._WP_TO_NP:
        raise ArgumentError(
            f"op {opname!r}: parameter {pname!r} has unsupported type {_dtypes.type_name(dtype)}; "
            "supported: Warp scalar, vector and matrix types and arrays of them"
        )
    float_ok = generic or _dtypes.is_float(scalar)
    # enable_backward=False keeps parameters differentiable: a gradient reaching the op
    # raises (no_adjoint_error) instead of being dropped as a silent zero
    differentiable = bool(float_ok and pname not in nondiff)
    return Param(dtype=dtype, scalar=scalar, inner=inner, generic=generic, differentiable=differentiable, **common)


def _launch_options(
    opname: str,
    kind: str,
    params: tuple,
    launch_dims: Any,
    output_dims: Any,
    zero_outputs: Any,
    vmap_method: Any,
    block_dim: Any,
    partition: Any,
) -> tuple:
    """``(launch_dims, output_dims, vmap_method, block_dim)`` checked and normalized, with
    ``zero_outputs`` and ``partition`` checked."""
    outs = [p for p in params if p.role == OUTPUT]
    ld = None if launch_dims is None else normalize_dims(launch_dims, "launch_dims", opname)
    if kind == "function" and ld is not None:
        raise ArgumentError(
            f"op {opname!r}: launch_dims does not apply to a Python-function op (it launches its own kernels); "
            "use output_dims to size its outputs"
        )
    od = normalize_output_dims(output_dims, outs, opname)
    if not isinstance(zero_outputs, bool):
        raise ArgumentError(f"op {opname!r}: zero_outputs must be a bool, got {zero_outputs!r}")
    vm = _check_vmap_method(vmap_method, opname)
    bd = check_block_dim(block_dim, opname, kind)
    if partition is not None and partition not in PARTITIONS:
        raise ArgumentError(f"op {opname!r}: partition must be None or one of {PARTITIONS}, got {partition!r}")
    if partition is not None and kind != "kernel":
        raise ArgumentError(
            f"op {opname!r}: partition={partition!r} applies to kernels only (a Python-function op launches "
            "kernels of its own choosing)"
        )
    return ld, od, vm, bd


def _derived_name(fn: Any, kind: str, key: str, params: tuple, options: tuple) -> str:
    """The name of an op described without ``name=``: the kernel's key and a hash of every option
    that changes behaviour, so one kernel described two ways gives two ops."""
    ld, od, zero_outputs, vm, bwd, jvp, bd, partition, odt, checked, tile_launch = options
    ident = repr(
        (
            tuple((p.name, p.role, p.differentiable) for p in params),
            ld,
            od,
            zero_outputs,
            vm,
            None if bwd is None else bwd.name,
        )
        + (() if jvp is None else (("jvp", str(getattr(jvp, "key", jvp))),))
        + (() if bd is None else (("block_dim", bd),))
        + (() if partition is None else (partition,))
        + (() if not odt else (("output_dtypes", tuple((n, rule_text(r)) for n, r in odt)),))
        + (("checked",) if checked else ())
        + (() if tile_launch is None else (("tile_launch", tile_launch),))
    )
    return _default_name(key, fn, kind, hashlib.sha1(ident.encode()).hexdigest()[:8])


def _refuse_written_inputs(fn: Any, kind: str, params: tuple, label: str) -> None:
    """Refuse a kernel that writes one of its input arrays, naming the parameters and lines."""
    written = arrays_written(fn, kind, [p.name for p in params if p.role == INPUT and p.is_array])
    if written:
        # JAX arrays are immutable and torch.compile assumes inputs are not mutated: a write to an
        # input would change the caller's data behind every framework's back
        where = getattr(getattr(fn, "adj", None), "filename", None)
        raise ArgumentError(
            f"op {label!r}: the kernel writes its input parameter(s) "
            + ", ".join(f"{n!r} (line {line}{f' of {where}' if where else ''})" for n, line in written.items())
            + f"; an input must not be modified. Describe it as in-out (in_out={list(written)!r}: updated in "
            "place, returned) or as an output"
        )


def _source_facts(fn: Any, kind: str, params: tuple, bwd: Any) -> dict[str, Any]:
    """What the kernel's source says about its arrays, as :class:`OpDescription` fields: the
    returned arrays it reads, the outputs its adjoint never reads, the arrays indexed by the bare
    thread index, the thread domain, its tile use and launch form, the outputs it writes."""
    arrays = [(p.name, p.ndim) for p in params if p.is_array]
    outs = [(p.name, p.ndim) for p in params if p.role == OUTPUT]
    reads = returned_params_read(fn, kind, [p.name for p in params if p.role != INPUT])
    domain, tid_escapes = thread_domain(fn, kind, arrays)
    tiles = kind == "kernel" and uses_tiles(fn)
    return {
        "reads_returned": reads,
        "adjoint_unread": (
            tuple(p.name for p in params if p.role == OUTPUT)
            if bwd is not None
            else _adjoint_unread(fn, kind, params, reads)
        ),
        "direct_index": direct_indexing(fn, kind, arrays),
        "domain": domain,
        "tid_escapes": tid_escapes,
        "tiles": tiles,
        "tile_form": tile_form(fn, arrays) if tiles else ("none", 0, False),
        "written": written_outputs(fn, kind, outs),
        "scattered": scattered_outputs(fn, kind, outs),
        "permuted": permuted_outputs(fn, kind, outs),
    }


TILE_LAUNCHES = {"launch": "threads", "launch_tiled": "tiled"}


def _check_name(name: Any, key: str) -> None:
    if name is not None and (not isinstance(name, str) or not _NAME_RE.match(name)):
        raise ArgumentError(
            f"interop.op({key}): name must look like 'namespace::name' (letters, digits, '_'), got {name!r}"
        )


def _declared_tile_launch(desc: OpDescription, tile_launch: Any) -> OpDescription:
    """``desc`` launched as ``tile_launch`` says (``interop.op(..., tile_launch=...)``), not as read
    from the kernel: a tile kernel whose thread index is both an element index and a tile
    coordinate (``out[i] = 0`` and ``offset=i``) is written for either launch, which Warp's caller
    chooses. (None: ``desc`` as it is.)"""
    if tile_launch is None:
        return desc
    if tile_launch not in TILE_LAUNCHES:
        raise ArgumentError(
            f"op {desc.label!r}: tile_launch must be 'launch' (as wp.launch(kernel, dim, block_dim=...)) or "
            f"'launch_tiled' (as wp.launch_tiled(kernel, dim=grid, block_dim=...)), got {tile_launch!r}"
        )
    if not desc.tiles or desc.kind != "kernel":
        raise ArgumentError(
            f"op {desc.label!r}: tile_launch={tile_launch!r} applies to a tile kernel (one that calls wp.tile_*); "
            "this one is launched as any kernel, as wp.launch launches it"
        )
    form, nt, lane = desc.tile_form
    if form != "none":
        want = TILE_LAUNCHES[tile_launch]
        form, lane = want, (lane if form == want == "tiled" else False)
    return dataclasses.replace(desc, tile_launch=tile_launch, tile_form=(form, nt, lane))


def _describe_structs(
    fn: Any, *, outputs: Any, in_out: Any, output_dims: Any, nondifferentiable: Any, name: Any, **options: Any
):
    """The description of a kernel with struct parameters: that of its flat kernel (see
    ``_structs``), with the options given for structs given for their leaves."""
    label = name or str(fn.key).rsplit(".", 1)[-1]
    flat = _structs.flatten_kernel(fn, label)
    entries = flat.entries
    names = [e.field if isinstance(e, _structs.Node) else e for e in entries]
    anns = dict((a.label, a.type) for a in fn.adj.args)

    def is_arrayish(e: Any) -> bool:
        if isinstance(e, _structs.Node):
            return any(leaf.is_array for leaf in e.leaves())
        return _warp_compat.is_array_annotation(anns[e])

    if isinstance(in_out, str):
        in_out = (in_out,)
    in_out = tuple(in_out)
    if isinstance(outputs, int) and not isinstance(outputs, bool):
        # an int counts the trailing array parameters; a struct with an array field is one
        arrays = [n for n, e in zip(names, entries) if is_arrayish(e)]
        if outputs > len(arrays):
            raise ArgumentError(
                f"op {label!r}: outputs={outputs} but the kernel has only {len(arrays)} array or struct "
                f"parameter(s) ({arrays}; all parameters: {names})"
            )
        if outputs < (0 if in_out else 1):
            raise ArgumentError(
                f"op {label!r}: outputs must be at least 1, got {outputs} (0 only when in_out names the returned arrays)"
            )
        outputs = arrays[len(arrays) - outputs :] if outputs else []
    elif isinstance(outputs, (list, tuple)):
        outputs = list(outputs)
    else:
        raise ArgumentError(
            f"op {label!r}: outputs must be an int or a list of parameter names, got {type(outputs).__name__}"
        )
    inout_set = set(in_out)
    nodes = {e.field: e for e in entries if isinstance(e, _structs.Node)}
    _structs.refuse_tree_outputs(label, outputs, inout_set, nodes)
    flat_outputs = _structs.expand_names([n for n in outputs if n not in inout_set], entries, "outputs", label, True)
    flat_in_out = _structs.expand_names(in_out, entries, "in_out", label, True)
    flat_outputs = [n for n in flat_outputs if n not in flat_in_out]
    flat_nondiff = _structs.expand_names(tuple(nondifferentiable), entries, "nondifferentiable", label, False)
    odt = options.pop("output_dtypes", None)
    if isinstance(odt, Mapping):  # fields by their dotted path ("state.e"), as the flat kernel names them
        odt = {
            k.replace(".", _structs.SEP): (
                dataclasses.replace(r, param=r.param.replace(".", _structs.SEP)) if isinstance(r, DtypeOf) else r
            )
            for k, r in odt.items()
        }
    options["output_dtypes"] = odt
    try:
        desc = describe(
            flat.kernel,
            outputs=list(flat_outputs),
            in_out=flat_in_out,
            output_dims=_structs.struct_output_dims(output_dims, entries, label),
            nondifferentiable=flat_nondiff,
            name=name,
            **options,
        )
    except ArgumentError as e:
        raise _structs.readable(e, entries, flat.kernel, fn) from None
    return dataclasses.replace(
        desc,
        key=str(fn.key),
        label=label,
        name=desc.name if name is not None else desc.name.replace(_structs.FLAT_SUFFIX, "", 1),
        entries=entries,
    )


def _adjoint_unread(fn: Any, kind: str, params: Sequence[Param], reads: tuple[str, ...]) -> tuple[str, ...]:
    """Outputs whose memory Warp's adjoint never touches: a kernel (no tiles: their adjoint reads
    the primal arrays' own gradient fields) that only stores into them or adds atomically, on a
    Warp version where that was checked. Empty for Python-function ops (a tape replays them)."""
    if kind != "kernel" or not _warp_compat.ADJOINT_SKIPS_WRITE_ONLY_OUTPUTS or uses_tiles(fn):
        return ()
    return tuple(p.name for p in params if p.role == OUTPUT and p.name not in reads)


def _describe_backward(backward: Any, params: tuple[Param, ...], opname: str, checked: bool) -> OpDescription:
    """Describe a hand-written backward and check it follows the parameter convention.

    Convention: the backward takes the forward's call parameters (inputs and in-out, in
    order), then one adjoint array per returned array (in-out then outputs, in order),
    and writes one gradient array per differentiable array input (role ``input``).
    """
    call = [p for p in params if p.role != OUTPUT]
    returned = [p for p in params if p.role != INPUT]
    diff = [p for p in params if p.role == INPUT and p.is_array and p.differentiable]
    if not diff:
        raise ArgumentError(f"op {opname!r}: backward= given, but the op has no differentiable array input")
    if isinstance(backward, _backward.Backward):  # the author's parameter order, mapped to the slots
        slots = (
            [(p.name, p.annotation) for p in call]
            + [(_backward.ADJ + p.name, p.annotation) for p in returned]
            + [(_backward.GRAD + p.name, p.annotation) for p in diff]
        )
        bdesc = describe(_backward.conventional_kernel(backward, slots, opname), outputs=len(diff), checked=checked)
    elif isinstance(getattr(backward, "description", None), OpDescription):  # an interop op (the layer above)
        bdesc = backward.description
    elif isinstance(backward, OpDescription):
        bdesc = backward
    elif isinstance(backward, wp.Kernel):
        bdesc = describe(backward, outputs=len(diff), checked=checked)  # checked as its op
    else:
        raise ArgumentError(
            f"op {opname!r}: backward must be a wp.kernel, an interop op or interop.backward(kernel, ...), "
            f"got {type(backward).__name__}"
        )
    expected = len(call) + len(returned) + len(diff)
    if len(bdesc.params) != expected:
        raise ArgumentError(
            f"op {opname!r}: backward {bdesc.key!r} has {len(bdesc.params)} parameters, expected {expected}: "
            f"the forward's inputs {[p.name for p in call]}, one adjoint per returned array "
            f"{['adj_' + p.name for p in returned]}, then one gradient output per differentiable input "
            f"{['grad_' + p.name for p in diff]}; a kernel with its own parameter order is given as "
            "interop.backward(kernel, <its parameter>=<slot>, ...)"
        )
    if len(bdesc.output_params) != len(diff) or any(p.role == IN_OUT for p in bdesc.params):
        raise ArgumentError(
            f"op {opname!r}: backward {bdesc.key!r} must return exactly {len(diff)} gradient array(s) "
            f"(for {[p.name for p in diff]}) and have no in-out parameters"
        )
    fwd_like = list(call) + list(returned) + list(diff)
    for bp, fp in zip(bdesc.params, fwd_like):
        if bp.is_array != fp.is_array or (
            not fp.generic and not bp.generic and (bp.dtype != fp.dtype or bp.ndim != fp.ndim)
        ):
            raise ArgumentError(
                f"op {opname!r}: backward parameter {bp.name!r} should match forward parameter {fp.name!r} "
                f"({fp.expected_text()}), got {bp.expected_text()}"
            )
    return bdesc
