"""The public op object: describe once, call with any framework's arrays."""

from __future__ import annotations

import dataclasses
import threading
import weakref
from typing import Any, Mapping, Sequence

import warp as wp

from . import _cache, _structs, _tangent, _warp_compat
from ._description import IN_OUT, OUTPUT, DtypeOf, OpDescription, check_block_dim, describe
from ._errors import ArgumentError, UnsupportedError
from ._frameworks import adapter, framework_of, watch_framework_imports
from ._launch import Runner
from ._plan import CallPlan, make_plan
from ._values import NUMBER_OBJECTS, absent_array, numpy_value, plain_number

# Described ops, weakly: an op the user drops is freed (its plans, launch records, fast paths).
# Describing an equal description while the op lives returns the same op.
_ops: weakref.WeakValueDictionary[OpDescription, Op] = weakref.WeakValueDictionary()
# Ops described with name=, strongly, for the life of the process (as torch.library keeps a
# custom_op): ``torch.ops.<ns>.<name>``, an exported program or a deserialized JAX module may
# reach a chosen name after the user's last reference to the op is gone, and everything the
# registrations need (kernels, plans, launch records, bindings) hangs off the op.
_named: dict[str, Op] = {}
_MISSING = object()
_ops_lock = threading.Lock()
# returned by an adapter's eager hook (Op.eager_paths: ``hook(args)``) when a call is not its plain eager work
NOT_EAGER = object()


def _not_compiling() -> bool:
    return False


# set by the torch adapter (adapters/torch/traced.py) to torch.compiler.is_compiling and its call
# traced by Dynamo: Op.__call__ asks it first, before it reads anything Dynamo would guard
_compiling: Any = _not_compiling
_traced_call: Any = None


class Op:
    """A Warp kernel (or annotated Python function) callable from every framework.

    Create it with ``interop.op``. Calling it dispatches on the arrays passed:
    the result comes back in the caller's framework, on the same device.

    Attributes:
        description: the immutable ``OpDescription`` (hashable; keys all caches).
    """

    __slots__ = (
        "description",
        "_plans",
        "_bound",
        "_fast",
        "eager_paths",
        "_block_dim_variants",
        "_structs",
        "_tangent",
        "__weakref__",
    )

    def __init__(self, description: OpDescription):
        self.description = description
        self._plans: dict[tuple, CallPlan] = {}
        self._bound: dict[str, Any] = {}
        self._fast: dict[tuple, Any] = {}  # adapters' per-signature fast paths
        # adapters' eager hooks by the exact type of the first argument: ``hook(args)`` runs a
        # plain eager call whose signature it validated before, or returns NOT_EAGER. Set when the
        # adapter binds the op (never on a call), so a tracer reading it sees one fixed dict.
        self.eager_paths: dict[type, Any] = {}
        self._block_dim_variants: dict[int, Op] = {}
        # a kernel with struct parameters: its calls are taken apart into leaves (see _call_structs)
        self._structs = description.entries or None
        self._tangent: Any = None  # the tangent op (forward mode), made on first use (see tangent())

    @property
    def name(self) -> str:
        """The op's qualified name, ``namespace::name`` (the PyTorch operator name)."""
        return self.description.name

    def plan(
        self, specs: Sequence[Any], launch_dims: Any = None, output_dims: Any = None, extents: bool = True
    ) -> CallPlan:
        """Resolve a call from argument specs (cached). Used by adapters.

        ``extents=False`` skips the array-extent checks: for plans made from placeholder
        shapes (a torch fake implementation reading only dtypes and vec/mat dims).
        """
        key = (tuple(specs), _freeze(launch_dims), _freeze(output_dims), extents)
        p = self._plans.get(key)
        if p is None:
            p = make_plan(self.description, specs, launch_dims, output_dims, extents=extents)
            p.runner = Runner(p)
            _cache.put(self._plans, key, p, _cache.PLANS_PER_OP)
        return p

    def bound(self, framework: str) -> Any:
        """This op bound to one framework by its adapter (e.g. the registered torch operator)."""
        b = self._bound.get(framework)
        if b is None:
            b = adapter(framework).bind(self)
            self._bound[framework] = b
        return b

    def tangent(self) -> Op:
        """The op's tangent op (forward mode), generated from the kernel's source on first use.

        It takes the op's call parameters, then one tangent per differentiable call parameter
        (``<name>__dot``, in order), and returns the op's in-out arrays and outputs, then their
        tangents (Jacobian-vector products), in kernel order. Its reverse mode (Warp's adjoint of
        the tangent kernel) gives second derivatives. Adapters build ``jax.jvp``, ``torch.func.jvp``,
        ``jax.hessian``... on it; ``jvp`` calls it directly.

        Raises:
            UnsupportedError: naming the builtin and the source line the generator cannot
                transform (and what to use instead); a tile kernel. A Python-function op's tangent
                op runs its function on a tangent tape (each launch replaced by its tangent
                kernel's), whose refusals come when a launch is met.
        """
        t = self._tangent
        if t is None:
            try:
                t = tangent_op(self)
            except Exception as e:
                self._tangent = e
                raise
            self._tangent = t
        elif isinstance(t, BaseException):
            raise t
        return t

    def jvp(self, *args: Any, tangents: Sequence[Any], launch_dims: Any = None, output_dims: Any = None) -> tuple:
        """The op's results and their tangents: ``(results, tangents)``, in any framework.

        Args:
            *args: the op's call parameters, as for a call.
            tangents: one tangent per differentiable call parameter (float arrays and scalars,
                inputs and in-outs, in order; ``None`` for a zero tangent): arrays of the same
                shape, dtype and framework as their primal, numbers for scalars. For an
                ``interop.indexed(data, indices)`` argument, the tangent of ``data`` (its shape).
            launch_dims: as for a call.
            output_dims: as for a call (the tangents take their outputs' shapes).

        Returns:
            ``(results, tangents)``: each what a call returns (one array bare, several a tuple).

        Example:
            >>> import numpy as np, warp as wp, interop
            >>> @wp.kernel(module="unique")
            ... def cube(x: wp.array(dtype=wp.float64), out: wp.array(dtype=wp.float64)):
            ...     i = wp.tid()
            ...     out[i] = x[i] * x[i] * x[i]
            >>> y, dy = interop.op(cube).jvp(np.array([1.0, 2.0]), tangents=[np.array([1.0, 1.0])])
            >>> dy
            array([ 3., 12.])
        """
        d = self.description
        if not d.entries:
            return jvp_call(self, args, tangents, launch_dims, output_dims)
        # struct and indexed-array parameters: the flat op's jvp (an indexed view's tangent is its data's)
        called, names = d.entry_called, tuple(p.name for p in d.returned_params)
        try:
            flat = _structs.flatten_call(d.label, d.entries, called, frozenset(p.name for p in d.output_params), args)
            res, tans = jvp_call(self, flat, tangents, launch_dims, output_dims)
        except (ArgumentError, UnsupportedError) as e:
            raise _structs.readable(e, d.entries) from e.__cause__
        rebuilt = (_structs.rebuild_results(d.entries, called, d.entry_returned, args, names, r) for r in (res, tans))
        return tuple(rebuilt)

    def with_block_dim(self, block_dim: int) -> Op:
        """This op launched with ``block_dim`` threads per block (a cached op of its own).

        ``block_dim`` is part of an op's identity (it keys registered framework operators and
        JAX FFI targets), so a per-call ``block_dim`` selects such a variant.

        Raises:
            ValueError: ``block_dim`` is not an int from 1 to 1024, or the op is a Python function.
        """
        d = self.description
        bd = check_block_dim(block_dim, d.label, d.kind)
        if bd is None or bd == d.block_dim:
            return self
        o = self._block_dim_variants.get(bd)
        if o is None:
            suffix = f"_block_dim_{d.block_dim}"
            base = d.name[: -len(suffix)] if d.name.endswith(suffix) else d.name
            desc = dataclasses.replace(d, block_dim=bd, name=f"{base}_block_dim_{bd}")
            with _ops_lock:
                o = _ops.get(desc)
                if o is None:
                    o = Op(desc)
                    _ops[desc] = o
            self._block_dim_variants[bd] = o
            _notify_adapters(o)
        return o

    def __call__(
        self, *args: Any, launch_dims: Any = None, output_dims: Any = None, block_dim: Any = None, **kwargs: Any
    ) -> Any:
        """Call the op.

        Args:
            *args: the non-output parameters in kernel order: arrays of one framework
                (NumPy, Warp, PyTorch, JAX, Paddle, CuPy) and scalars. They may also be
                given by parameter name (``op(x, y, a=2.0)``).
            launch_dims: overrides the launch dimensions for this call.
            output_dims: overrides output shapes: an int, a tuple, or a dict by output name.
            block_dim: overrides the threads per block for this call (see :meth:`with_block_dim`).
            **kwargs: adapter options (``framework=`` picks the framework when no array
                is passed; JAX accepts ``vmap_method=``).

        Returns:
            The in-out arrays and outputs in kernel order: one bare, several as a tuple.
        """
        if _compiling():
            # inside torch.compile: the torch adapter reads a plain call with few guards (Dynamo
            # folds _compiling() to True there, and to False in every eager call)
            res = _traced_call(self, args, launch_dims, output_dims, block_dim, kwargs)
            if res is not NOT_EAGER:
                return res
        if self._structs is not None:
            return self._call_structs(args, launch_dims, output_dims, block_dim, kwargs)
        if args and launch_dims is None and output_dims is None and block_dim is None and not kwargs:
            hook = self.eager_paths.get(type(args[0]))
            if hook is not None:
                res = hook(args)
                if res is not NOT_EAGER:
                    return res
        return self._call(args, launch_dims, output_dims, block_dim, kwargs)

    def _call(self, args: tuple, launch_dims: Any, output_dims: Any, block_dim: Any, kwargs: dict) -> Any:
        if block_dim is not None and block_dim != self.description.block_dim:
            # the variant's block_dim (None: this op), then the variant from this op's cache: under
            # torch.compile the first step runs at trace time and the lookup is traced
            key = _block_dim_variant[0](self, block_dim)
            variant = self if key is None else self._block_dim_variants[key]
            return variant(*args, launch_dims=launch_dims, output_dims=output_dims, **kwargs)
        fw = kwargs.pop("framework", None)
        params = self.description.call_params
        if kwargs and any(p.name in kwargs for p in params):
            args = self._bind_keywords(args, kwargs)
        found = None
        found_name = None
        values = []  # NumPy arrays given for vec/mat values: numbers in any framework's call
        absent = converted = False
        for i, a in enumerate(args):
            f = framework_of(a)
            if f is None:
                absent = absent or a is None
                converted = converted or type(a) in NUMBER_OBJECTS  # (np.bool_, wp.float32(2.0)...)
                continue
            if f == "numpy" and i < len(params) and not params[i].is_array and (params[i].inner or a.ndim == 0):
                values.append(i)  # (a value: its numbers, whatever the call's framework)
                continue
            pname = params[i].name if i < len(params) else f"#{i}"
            if f == "unsupported":
                raise ArgumentError(
                    f"op {self.description.label!r}, parameter {pname!r}: unsupported array type {type(a).__module__}."
                    f"{type(a).__qualname__}; expected a NumPy, Warp, PyTorch, JAX, Paddle or CuPy array"
                )
            if found is None:
                found, found_name = f, pname
            elif f != found:
                raise ArgumentError(
                    f"op {self.description.label!r}: arrays from two frameworks in one call: parameter {found_name!r} is a "
                    f"{found} array, parameter {pname!r} is a {f} array; convert one with interop.convert"
                )
        if found is None:
            found = fw or "numpy"
        elif fw is not None and fw != found:
            raise ArgumentError(
                f"op {self.description.label!r}: framework={fw!r} but the arrays passed are {found} arrays"
            )
        if converted:
            args = tuple(a if i >= len(params) or params[i].is_array else plain_number(a) for i, a in enumerate(args))
        if values and found != "numpy":
            args = tuple(
                (numpy_value(self.description, params[i], a) if params[i].inner else a[()]) if i in values else a
                for i, a in enumerate(args)
            )
        if absent:
            args = self._absent_arrays(args, found)
        return adapter(found).call(self, args, launch_dims, output_dims, kwargs)

    def _absent_arrays(self, args: tuple, found: str) -> tuple:
        """``None`` for an input array parameter (Warp's optional array) as an empty array of the
        call's framework, on the device of the call's first array (see :func:`_values.absent_array`)."""
        params = self.description.call_params
        like = next((a for a, p in zip(args, params) if p.is_array and a is not None), None)
        return tuple(
            absent_array(self.description, params[i], found, like)
            if i < len(params) and a is None and params[i].is_array
            else a
            for i, a in enumerate(args)
        )

    def _call_structs(self, args: tuple, launch_dims: Any, output_dims: Any, block_dim: Any, kwargs: dict) -> Any:
        """A call of a kernel with struct parameters: each struct argument (a Warp struct instance,
        a mapping, a dataclass, a NamedTuple, any object with the fields) is taken apart into its
        fields, the flat kernel runs on them, and returned structs are put back together."""
        d = self.description
        entries, called = d.entries, d.entry_called
        try:
            names = [e.field if isinstance(e, _structs.Node) else e for e, c in zip(entries, called) if c]
            if kwargs and any(n in kwargs for n in names):
                args = _bind_names(d.label, names, args, kwargs)
            if len(args) != len(names):
                raise ArgumentError(f"op {d.label!r} takes {len(names)} argument(s) {names}, got {len(args)}")
            skip = frozenset(p.name for p in d.output_params)
            flat = _structs.flatten_call(d.label, entries, called, skip, args)
            if output_dims is not None:
                output_dims = _structs.struct_output_dims(output_dims, entries, d.label)
            res = NOT_EAGER
            if flat and launch_dims is None and output_dims is None and block_dim is None and not kwargs:
                hook = self.eager_paths.get(type(flat[0]))
                if hook is not None:
                    res = hook(flat)
            if res is NOT_EAGER:
                res = self._call(flat, launch_dims, output_dims, block_dim, kwargs)
        except (ArgumentError, UnsupportedError) as e:
            raise _structs.readable(e, entries) from e.__cause__
        return _structs.rebuild_results(
            entries, called, d.entry_returned, args, tuple(p.name for p in d.returned_params), res
        )

    def _bind_keywords(self, args: tuple, kwargs: dict) -> tuple:
        """Place arguments given by parameter name at their position (kernel order)."""
        params = self.description.call_params
        label = self.description.label
        bound: list[Any] = list(args) + [_MISSING] * (len(params) - len(args))
        for i, p in enumerate(params):
            if p.name in kwargs:
                if i < len(args):
                    raise ArgumentError(f"op {label!r}: parameter {p.name!r} given both by position and by name")
                bound[i] = kwargs.pop(p.name)
        missing = [p.name for p, v in zip(params, bound) if v is _MISSING]
        if missing:
            raise ArgumentError(
                f"op {label!r} takes {len(params)} argument(s) {[p.name for p in params]}: missing {missing}"
            )
        return tuple(bound)

    def __repr__(self) -> str:
        d = self.description
        ins = ", ".join(p.name for p in d.call_params)
        outs = ", ".join(p.name for p in d.returned_params)
        if d.entries:  # a struct kernel: its own parameters, not the fields
            names = [e.field if isinstance(e, _structs.Node) else e for e in d.entries]
            ins = ", ".join(n for n, c in zip(names, d.entry_called) if c)
            outs = ", ".join(n for n, r in zip(names, d.entry_returned) if r)
        return f"<interop.Op {d.name} ({ins}) -> ({outs})>"

    def __reduce__(self):
        raise ArgumentError(
            f"op {self.description.label!r} cannot be pickled; describe it again with interop.op in each process"
        )


def _bind_names(label: str, names: list[str], args: tuple, kwargs: dict) -> tuple:
    """Place arguments given by parameter name at their position."""
    bound: list[Any] = list(args) + [_MISSING] * (len(names) - len(args))
    for i, n in enumerate(names):
        if n in kwargs:
            if i < len(args):
                raise ArgumentError(f"op {label!r}: parameter {n!r} given both by position and by name")
            bound[i] = kwargs.pop(n)
    missing = [n for n, v in zip(names, bound) if v is _MISSING]
    if missing:
        raise ArgumentError(f"op {label!r} takes {len(names)} argument(s) {names}: missing {missing}")
    return tuple(bound)


def _freeze(v: Any) -> Any:
    """A hashable plan-cache key of a launch_dims/output_dims value; values of other types stay
    apart (``4.0`` and ``True`` equal ``4`` and ``1`` but are errors: the first call must see them)."""
    if isinstance(v, dict):
        return tuple(sorted((k, _freeze(x)) for k, x in v.items()))
    if isinstance(v, (list, tuple)):
        return (type(v), tuple(_freeze(x) for x in v))
    try:
        hash(v)
    except TypeError:  # (a NumPy array...: no cached call has it; the call's checks name it)
        return (type(v), id(v))
    return (type(v), v)


def op(
    fn: Any,
    *,
    outputs: int | Sequence[str] = 1,
    in_out: Sequence[str] = (),
    launch_dims: Any = None,
    output_dims: Any = None,
    name: str | None = None,
    backward: Any = None,
    zero_outputs: bool = True,
    nondifferentiable: Sequence[str] = (),
    vmap_method: str | None = None,
    block_dim: int | None = None,
    partition: str | None = None,
    output_dtypes: Mapping[str, Any] | None = None,
    jvp: Any = None,
    checked: bool | None = None,
    tile_launch: str | None = None,
) -> Op:
    """Describe a Warp kernel (or annotated Python function) once, as an op every framework can call.

    Args:
        fn: a ``@wp.kernel``, or a Python function annotated like a kernel that launches
            kernels itself (Warp's ``jax_callable`` case).
        outputs: the names of the output parameters (anywhere in the signature), or an int N:
            the last N array parameters, scalars after them staying inputs (in-out ones among
            them stay in-out). Default 1: the last array parameter.
        in_out: names of array parameters read and updated in place (e.g. accumulators),
            anywhere in the signature. The call returns in-out arrays and outputs in kernel order.
        launch_dims: default launch dimensions (int or tuple); default: the domain the kernel
            is written for, from the arrays it indexes with its thread index (docs/contract.md,
            "Launch dimensions"). Not for Python-function ops.
        output_dims: default output shapes: int, tuple, or dict by output name; Warp or
            framework convention (trailing vec/mat dims optional). Default: launch dims.
        name: ``"namespace::name"`` (the PyTorch operator is ``torch.ops.namespace.name``). A
            named op stays registered (PyTorch operators, JAX FFI targets, Paddle) with what it
            needs for the life of the process, as ``torch.library`` keeps a ``custom_op``; an op
            without a name is freed, with its registrations, when the last reference goes.
        backward: a hand-written backward, a ``wp.kernel`` or another op. Its parameters:
            the forward's call parameters (inputs, in-out) in order, then one adjoint array per
            returned array (in-out, outputs) in order, then one gradient output per
            differentiable array input in order. A kernel with its own parameter order is given
            as ``interop.backward`` ``(kernel, <parameter>=<slot>, ...)``. Its own adjoint
            gives second derivatives.
        zero_outputs: zero-fill outputs before the launch (default True).
        nondifferentiable: parameter names that never receive a gradient.
        vmap_method: JAX batching rule: ``"loop"`` (default: one XLA call, one launch per
            batch element, correct for every kernel), ``"sequential"`` (``lax.map``) or
            ``"fold"`` (one launch, batch folded into the first launch dim; valid only for
            row-independent kernels, see docs/guide/jax.md).
        block_dim: threads per block of every launch, as ``wp.launch(..., block_dim=...)``
            (tile kernels); an int from 1 to 1024, overridable per call. A tile kernel
            launches as ``wp.launch_tiled(k, dim=grid, block_dim=b)`` does on every device:
            ``launch_dims`` is the tile grid (or the grid followed by ``b``; read from the
            kernel when not given), ``b`` this value or Warp's CUDA default 256; on the CPU
            each block runs Warp's CPU lanes (docs/contract.md, "Devices").
        partition: ``"rows"`` declares the launch independent along its first dimension:
            thread ``i`` of that dimension reads and writes only row ``i`` of every array
            argument and output (whatever ``i`` is), and every array's first dimension is the
            launch's first dimension. ``"elementwise"`` declares the same along every launch
            dimension. Under ``jax.jit`` with inputs sharded along such a dimension, XLA then
            runs each shard where it lives (no all-gather), and so does PyTorch's DTensor with
            ``Shard(d)`` inputs. Default ``None``: no such promise (sharded inputs are gathered).
        output_dtypes: for generic outputs (``dtype=typing.Any``, ``wp.Float``...) whose dtype is
            not the first generic input's: a dict from output name to ``scalar_of`` (the scalar
            type of a parameter: float64 energies of float64 ``vec3`` positions),
            or a concrete Warp type. Part of the
            op's identity. Default: every generic output takes the first generic input's dtype.
        jvp: a hand-written tangent kernel for forward mode (``jax.jvp``, ``torch.func.jvp``,
            ``hessian``...), for kernels the generator refuses: it takes the kernel's parameters,
            then one tangent per differentiable parameter (float arrays and scalars: inputs, in-outs
            and outputs, in kernel order, of the primal's type), and writes the outputs and their
            tangents. Default: generated from the kernel's source on first use (docs/gradients.md,
            "Forward mode and second order"). Its own adjoint gives second derivatives.
        checked: bounds-check every array access of every launch (forward, adjoint, tangent;
            reads, writes, atomics, tile offsets, and inside the ``wp.func`` calls): an index out of
            range raises ``interop.BoundsError`` naming the op, the parameter, the index, the
            array's shape and the source line, and the access is not made (docs/checked.md).
            Default None: ``INTEROP_CHECKED=1`` in the environment (read when the op is described)
            turns it on. Part of the op's identity. Costs a kernel build and a slower launch.
        tile_launch: how a tile kernel is launched, as its Warp caller launches it: ``"launch"``
            (``wp.launch(kernel, dim, block_dim=b)``: the thread index is a thread's, ``launch_dims``
            the threads) or ``"launch_tiled"`` (``wp.launch_tiled(kernel, dim=grid, block_dim=b)``:
            thread indices are tile coordinates, ``launch_dims`` the tile grid). Default None: read
            from how the kernel uses ``wp.tid()`` (docs/contract.md, "Devices"); give it for a
            kernel written for either (a thread index used both as an element index and as a
            tile offset). Part of the op's identity.

    Returns:
        An ``Op``. Describing the same kernel with the same options again returns
        the same op (and the same registered framework operators).

    Raises:
        TypeError, ValueError: naming the op and parameter, for anything wrong in the
            description (unknown ``in_out`` names, an output or in-out that is not an array,
            ``outputs`` larger than the parameter list, indexed/fabric array parameters, a
            ``block_dim`` outside 1..1024...), or a ``name`` already taken by another
            description (another kernel object, other options) in this process.

    Example:
        >>> import numpy as np, warp as wp, interop
        >>> @wp.kernel
        ... def saxpy(x: wp.array(dtype=float), y: wp.array(dtype=float), a: float,
        ...           out: wp.array(dtype=float)):
        ...     i = wp.tid()
        ...     out[i] = a * x[i] + y[i]
        >>> f = interop.op(saxpy)
        >>> f(np.ones(3, np.float32), np.ones(3, np.float32), 2.0)
        array([3., 3., 3.], dtype=float32)
    """
    _warp_compat.require_supported()
    desc = describe(
        fn,
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
        output_dtypes=output_dtypes,
        jvp=jvp,
        checked=checked,
        tile_launch=tile_launch,
    )
    with _ops_lock:
        existing = _ops.get(desc)
        if existing is not None:
            return existing
        for other in [_named.get(desc.name), *_ops.values()]:
            if other is not None and other.description.name == desc.name:
                od = other.description
                what = "with other options" if od.fn is desc.fn else "(another kernel or function object)"
                raise ArgumentError(
                    f"op name {desc.name!r} is already used by {od.key!r} {what}; a named op stays "
                    "registered for the life of the process: describe it once (at import) and reuse it, "
                    "or pick another name="
                )
        o = Op(desc)
        _ops[desc] = o
        if name is not None:
            _named[desc.name] = o
    _notify_adapters(o)
    watch_framework_imports()
    return o


def scalar_of(param: str, inner: Sequence[int] = ()) -> DtypeOf:
    """A generic output's dtype: the scalar type of parameter ``param`` in each call.

    Args:
        param: an input or in-out parameter (an array or a scalar) of the op.
        inner: the vec/mat shape of the output's elements, ``(3,)`` for a ``vec3`` of that scalar;
            default ``()``, or the output's own annotation where it is a generic vec/mat.

    Returns:
        A hashable rule for ``interop.op(..., output_dtypes={name: rule})``.

    Example:
        >>> import typing, numpy as np, warp as wp, interop
        >>> @wp.kernel(module="unique")
        ... def norms2(positions: wp.array(dtype=typing.Any), energies: wp.array(dtype=typing.Any)):
        ...     i = wp.tid()
        ...     energies[i] = wp.dot(positions[i], positions[i])
        >>> op = interop.op(norms2, output_dtypes={"energies": interop.scalar_of("positions")})
        >>> op(np.ones((2, 3), np.float64))
        array([3., 3.])
    """
    return DtypeOf(str(param), tuple(int(n) for n in inner))


def _with_block_dim(op: Op, block_dim: int) -> int | None:
    """The block_dim of ``op``'s variant for ``block_dim`` (made by :meth:`Op.with_block_dim` and kept
    in ``op._block_dim_variants``), or None where it is ``op`` itself."""
    variant = op.with_block_dim(block_dim)
    return None if variant is op else variant.description.block_dim


#: how a per-call ``block_dim`` finds its variant op: :func:`_with_block_dim`, or what an adapter
#: put in its place when it loaded (the torch adapter's runs at torch.compile's trace time, so a
#: variant first used inside ``torch.compile(fullgraph=True)`` is described and registered there
#: instead of breaking the graph)
_block_dim_variant: list = [_with_block_dim]


def _notify_adapters(o: Op) -> None:
    """Let loaded adapters register eagerly (e.g. torch registers before any tracing)."""
    import sys

    for name in ("torch", "jax", "paddle", "cupy"):
        fw_loaded = name in sys.modules
        if fw_loaded:
            try:
                mod = adapter(name)
            except (ImportError, UnsupportedError):
                continue  # an adapter that cannot load (a torch below the floor): that framework's calls raise
            hook = getattr(mod, "on_describe", None)
            if hook is not None:
                hook(o)


# ---- forward mode: the tangent op (interop._tangent generates its kernel) ----------------------------
def tangent_names(o: Op) -> dict[str, str]:
    """Each differentiable parameter of ``o`` -> the name of its tangent in ``o``'s tangent op."""
    desc = o.description
    names = [p.name for p in o.tangent().description.params]
    return dict(zip([p.name for p in desc.params if p.differentiable], names[len(desc.params) :]))


def _refused(label: str, why: str) -> UnsupportedError:
    return UnsupportedError(
        f"op {label!r}: forward-mode differentiation (jvp, jacfwd, hessian, grad of grad) is not available: {why}; "
        "use reverse mode (grad, vjp, jacrev)"
    )


def tangent_op(o: Op) -> Op:
    """The op whose kernel is ``o``'s tangent kernel (generated, or the hand-written ``jvp=``)."""
    desc = o.description
    label = desc.label
    if desc.kind != "kernel":  # (jvp= is refused for them when described)
        return _function_tangent_op(o)
    # a kernel with struct parameters: its flat kernel (the struct fields as parameters) is
    # transformed; struct values the flat kernel rebuilds for a wp.func are refused by the generator
    diff = [p.name for p in desc.params if p.differentiable]
    if not diff:
        raise _refused(label, "it has no differentiable parameter")
    if desc.jvp is not None:
        kernel = desc.jvp
        names = [a.label for a in kernel.adj.args]
        tangent_of = dict(zip(diff, names[len(desc.params) :]))
    else:
        tk = _tangent.tangent_kernel(desc.fn, {name: True for name in diff}, label)
        kernel, tangent_of = tk.kernel, tk.tangent_of
        _mirror_overloads(desc.fn, kernel, diff)
    outputs = [p.name for p in desc.params if p.role == OUTPUT]
    outputs += [tangent_of[p.name] for p in desc.params if p.role == OUTPUT and p.name in tangent_of]
    in_out = [p.name for p in desc.params if p.role == IN_OUT]
    in_out += [tangent_of[p.name] for p in desc.params if p.role == IN_OUT and p.name in tangent_of]
    nondiff = [p.name for p in desc.params if not p.differentiable and _tangent.float_like(p.dtype)]
    odt = {}
    for n, rule in desc.output_dtypes:
        odt[n] = rule
        if n in tangent_of:
            odt[tangent_of[n]] = rule
    od: Any = None
    if desc.output_dims is not None:
        how, dims = desc.output_dims
        if how == "all":
            od = dims
        else:
            od = {}
            for n, d in dims:
                od[n] = d
                if n in tangent_of:
                    od[tangent_of[n]] = d
    name = None if desc.name.startswith("interop::") else f"{desc.name}__jvp"
    t = op(
        kernel,
        outputs=outputs,
        in_out=in_out,
        launch_dims=desc.launch_dims,
        output_dims=od,
        name=name,
        zero_outputs=desc.zero_outputs,
        nondifferentiable=nondiff,
        vmap_method=desc.vmap_method,
        block_dim=desc.block_dim,
        partition=desc.partition,
        output_dtypes=odt or None,
        checked=desc.checked,
    )
    if desc.tiles and t.description.tile_form != desc.tile_form:
        # a tile kernel's tangent launches as the kernel does (the tile grid read from the primal's
        # source: tangent code may read thread-derived tiles in calls of its own)
        t.description = dataclasses.replace(t.description, tile_form=desc.tile_form)
    return t


def _mirror_overloads(fn: Any, tangent: Any, diff: list[str]) -> None:
    """Give a generic kernel's tangent kernel the overloads declared for the kernel (``wp.overload``)
    whose differentiable parameters are floats: its parameters' types, then each differentiable one's
    again (its tangent). So the tangent module holds the same overloads in every process, whatever
    dtype is called first, and its hash is the one ``interop.precompile`` built."""
    if not getattr(fn, "is_generic", False):
        return
    for ovl in list(fn.overloads.values()):
        types = ovl.adj.arg_types
        if all(_tangent.float_like(getattr(types[n], "dtype", types[n])) for n in diff):
            tangent.add_overload(list(types.values()) + [types[n] for n in diff])


def _function_tangent_op(o: Op) -> Op:
    """A Python-function op's tangent op: its function run on a tangent tape (``interop/_tangent/tape.py``:
    each launch replaced by its tangent kernel's), described like the original."""
    desc = o.description
    diff = [p for p in desc.params if p.differentiable]
    if not diff:
        raise _refused(desc.label, "it has no differentiable parameter")
    taken = {p.name for p in desc.params}
    names = {}
    for p in diff:
        n = p.name + "__dot"
        while n in taken:
            n += "_"
        names[p.name] = n
        taken.add(n)
    outputs = [p.name for p in desc.params if p.role == OUTPUT]
    outputs += [names[p.name] for p in desc.params if p.role == OUTPUT and p.name in names]
    in_out = [p.name for p in desc.params if p.role == IN_OUT]
    in_out += [names[p.name] for p in desc.params if p.role == IN_OUT and p.name in names]
    nondiff = [p.name for p in desc.params if not p.differentiable and _tangent.float_like(p.dtype)]
    od: Any = None
    if desc.output_dims is not None:
        how, dims = desc.output_dims
        od = dims if how == "all" else {**dict(dims), **{names[n]: d for n, d in dims if n in names}}
    odt = {**dict(desc.output_dtypes), **{names[n]: r for n, r in desc.output_dtypes if n in names}}
    return op(
        _tangent.function_tangent(desc, names),
        outputs=outputs,
        in_out=in_out,
        output_dims=od,
        name=None if desc.name.startswith("interop::") else f"{desc.name}__jvp",
        zero_outputs=desc.zero_outputs,
        nondifferentiable=nondiff,
        vmap_method=desc.vmap_method,
        output_dtypes=odt or None,
        checked=desc.checked,
    )


def _zeros_like(x: Any) -> Any:
    """A zero tangent for ``x`` in its own framework (a number for a number)."""
    import numbers

    if isinstance(x, bool) or isinstance(x, numbers.Number):
        kind: Any = type(x)
        return kind(0)
    mod = type(x).__module__.split(".")[0]
    if mod == "numpy":
        import numpy as np

        return np.zeros_like(x)
    if mod == "torch":
        import torch

        return torch.zeros_like(x)
    if mod in ("jax", "jaxlib"):
        import jax.numpy as jnp

        return jnp.zeros_like(x)
    if mod == "cupy":
        import cupy

        return cupy.zeros_like(x)
    if mod == "paddle":
        import paddle

        return paddle.zeros_like(x)
    if mod == "warp":
        return wp.zeros_like(x)
    if hasattr(x, "_wp_scalar_type_"):
        return type(x)()
    raise ArgumentError(f"cannot make a zero tangent like a {type(x).__name__}; pass the tangent explicitly")


def jvp_call(o: Op, args: tuple, tangents: Any, launch_dims: Any, output_dims: Any) -> tuple:
    """:meth:`interop.Op.jvp`: call the tangent op, split its results into results and tangents."""
    desc = o.description
    label = desc.label
    diff = [p for p in desc.call_params if p.differentiable]
    if isinstance(tangents, (str, bytes)) or not isinstance(tangents, (list, tuple)):
        raise ArgumentError(
            f"op {label!r}, jvp: tangents must be a list with one tangent per differentiable call parameter "
            f"{[p.name for p in diff]}, got {type(tangents).__name__}"
        )
    if len(tangents) != len(diff):
        raise ArgumentError(
            f"op {label!r}, jvp: expected {len(diff)} tangent(s), one per differentiable call parameter "
            f"{[p.name for p in diff]}, got {len(tangents)}"
        )
    if len(args) != len(desc.call_params):
        raise ArgumentError(
            f"op {label!r}, jvp: expected {len(desc.call_params)} argument(s) "
            f"{[p.name for p in desc.call_params]}, got {len(args)}"
        )
    by_name = dict(zip([p.name for p in desc.call_params], args))
    for p, t in zip(diff, tangents):
        primal = by_name[p.name]
        shape, tshape = getattr(primal, "shape", None), getattr(t, "shape", None)
        indexed = type(primal).__name__ == "Indexed"  # (its tangent is its data's: the data's shape)
        if p.is_array and not indexed and shape is not None and tshape is not None and tuple(tshape) != tuple(shape):
            # (the tangent op reads a tangent as an input: a larger one would be read in part)
            raise ArgumentError(
                f"op {label!r}, jvp: the tangent of parameter {p.name!r} must have its shape {tuple(shape)}, "
                f"got shape {tuple(tshape)}"
            )
    ts = [_zeros_like(by_name[p.name]) if t is None else t for p, t in zip(diff, tangents)]
    try:
        prim, touts = tangent_results(o, args, ts, launch_dims, output_dims)
    except ArgumentError as e:
        raise ArgumentError(_in_the_callers_words(o, str(e))) from e

    def bare(r):
        return r[0] if len(r) == 1 else tuple(r)

    return bare(prim), bare(touts)


def _in_the_callers_words(o: Op, message: str) -> str:
    """An error of ``o``'s tangent op as :meth:`Op.jvp`'s caller knows it: ``o``'s name, and each
    tangent parameter named as the tangent of its primal."""
    label = o.description.label
    message = message.replace(f"op {o.tangent().description.label!r}", f"op {label!r}, jvp", 1)
    for primal, tangent in tangent_names(o).items():
        message = message.replace(f"parameter {tangent!r}", f"the tangent of parameter {primal!r}")
        message = message.replace(f"output {tangent!r}", f"the tangent of output {primal!r}")
    return message


def tangent_output_dims(o: Op, output_dims: Any) -> Any:
    """``output_dims`` of a call of ``o`` as its tangent op takes them: the tangent of an output
    sized as the output."""
    if not isinstance(output_dims, dict):
        return output_dims
    tangent_of = tangent_names(o)
    od = dict(output_dims)
    for n, d in output_dims.items():
        if n in tangent_of:
            od[tangent_of[n]] = d
    return od


def tangent_results(o: Op, args: Sequence[Any], tangents: Sequence[Any], launch_dims: Any, output_dims: Any) -> tuple:
    """Call ``o``'s tangent op with the call arguments ``args`` and one tangent per differentiable call
    parameter (``tangents``, none ``None``): ``(results, tangents)``, two lists in the order of the
    returned arrays (the tangent ``None`` for one that is not differentiable)."""
    top = o.tangent()
    res = top(*args, *tangents, launch_dims=launch_dims, output_dims=tangent_output_dims(o, output_dims))
    res = res if isinstance(res, tuple) else (res,)
    returned = o.description.returned_params
    prim, rest = list(res[: len(returned)]), iter(res[len(returned) :])
    return prim, [next(rest) if p.differentiable else None for p in returned]
