"""JAX adapter: launches as XLA FFI calls, and the handler XLA calls for them.

- :class:`_Launch`: the forward (:func:`_forward_launch`) or an adjoint (:func:`_adjoint_launch`)
  launch of one plan, as a ``jax.ffi.ffi_call`` to the op's FFI target of that direction
  (:func:`_target`), which each buffer feeds (:class:`_Binding`). The call carries its
  configuration as attributes (JSON ``config`` and its ``config_id``). Batching is a
  ``custom_vmap`` rule per launch (``"loop"``: one call looping over the batch on offset
  pointers, ``"sequential"``: ``lax.map``, ``"fold"``: the batch folded into the first launch
  dimension); partitioning is :func:`adapters.jax.sharding._partitioned`.
- :class:`_Handler`: the Python side of one launch configuration. What depends only on the
  configuration is resolved once; per call it reads the buffers' pointers from XLA's call frame,
  zero-fills the outputs and replays a recorded Warp launch on XLA's stream (on the CPU, through
  generated straight-line code).

A launch holds its entry (:class:`adapters.jax.entry._Entry`, one module above) weakly and uses it
by its attributes; the op's targets (:mod:`adapters.jax.targets`) are reached through the entry's
binding. The error of a launch, entry or binding outliving its op (:func:`_dropped`) lives here, the
lowest module that raises it.
"""

from __future__ import annotations

import ctypes
import itertools
import json
import math
import threading
import weakref
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.custom_batching import custom_vmap

from interop._codegen import compile_functions
from interop._description import IN_OUT, INPUT, OUTPUT
from interop._errors import UnsupportedError
from interop._launch import direct_lines, external_stream, get_device
from interop._plan import ArraySpec

from . import compat as _jax_compat
from . import ffi as _jax_ffi
from .sharding import _partitioned


def _dropped(label: str) -> RuntimeError:
    """The error of a binding, jaxpr or compiled call used after its op was dropped (its entries and
    launches are freed with it)."""
    return RuntimeError(
        f"op {label!r} was dropped (no reference to it was left, so its JAX launches were freed with it) "
        "while something still called it (its JAX binding, a traced or compiled function); keep the op "
        "alive as long as anything calls it"
    )


# ---------------------------------------------------------------------------------------
# Launches: one FFI target family each (forward, or adjoint for a set of wanted gradients)
# ---------------------------------------------------------------------------------------
def _target(desc, direction: str) -> str:
    """The FFI target of an op's forward (``fwd``) or adjoint (``bwd``) launches: derived from the
    description only, so the same op described in another process has the same targets."""
    return f"interop.{desc.name.replace('::', '.')}.{direction}"


class _Binding:
    """Where one FFI buffer goes in the launch: parameter ``index``, into ``values`` or ``adj``."""

    __slots__ = ("index", "slot", "spec", "zero")

    def __init__(self, index: int, slot: str, spec: ArraySpec, zero: bool = False):
        self.index = index
        self.slot = slot
        self.spec = spec
        self.zero = zero


def _nbytes(spec: ArraySpec) -> int:
    return int(math.prod(spec.shape)) * np.dtype(spec.dtype).itemsize


#: a kept forward tape's token (``interop._function_calls.KEPT``): the last result of a Python-function
#: op's forward that keeps its tape for the backward (``keep``), the last operand of its adjoint
TOKEN = ArraySpec((), np.dtype(np.uint32))


def _forward_launch(entry, plan, keep: bool = False) -> _Launch:
    desc = entry.desc
    ops = []
    for p in entry.dyn:
        spec = entry.specs[desc.call_params.index(p)]
        shape = tuple(spec.shape)
        ops.append(_Binding(p.index, "values" if p.role == INPUT else None, ArraySpec(shape, np.dtype(spec.dtype))))
    res = []
    aliases = {}
    # an output the kernel provably writes whole (plan.zero False: _extent.fully_written) is not
    # zero-filled first: on CUDA that fill is a memset on XLA's stream per output per call
    for p, spec, zero in zip(desc.returned_params, plan.out_specs, plan.zero):
        res.append(_Binding(p.index, "values", spec, zero=(p.role == OUTPUT and zero)))
        if p.role == IN_OUT:
            aliases[[b.index for b in ops].index(p.index)] = len(res) - 1
    if keep:  # zero-filled: 0 is no kept tape (the adjoint replays the function)
        res.append(_Binding(-1, "token", TOKEN, zero=True))
    launch = _Launch(entry, plan, "fwd", ops, res, aliases, side_effect=False)
    launch.keep = keep
    return launch


def _adjoint_launch(entry, plan, want: tuple, keep: bool = False) -> _Launch:
    """Operands: the forward operands, the forward outputs, the cotangents (and, when ``keep``, the
    token of the forward's kept tape); results: the gradients."""
    desc = entry.desc
    ops = []
    for p in entry.dyn:
        spec = entry.specs[desc.call_params.index(p)]
        ops.append(_Binding(p.index, "values", ArraySpec(tuple(spec.shape), np.dtype(spec.dtype))))
    for p, spec in zip(desc.returned_params, plan.out_specs):
        if p.role == OUTPUT:
            ops.append(_Binding(p.index, "values", spec))
    res = []
    grad_for = []
    for i in want:
        p = entry.dyn[i]
        if p.role == IN_OUT or not plan.differentiable[p.index]:
            continue
        res.append(_Binding(p.index, "adj", ops[i].spec, zero=True))
        grad_for.append(i)
    aliases = {}
    inout_results = {}
    inout_cts = {}
    for k, (p, spec) in enumerate(zip(desc.returned_params, plan.out_specs)):
        if not plan.differentiable[p.index]:
            continue
        if desc.kind == "function" or p.name in desc.reads_returned:
            # the kernel reads this array, so its adjoint may accumulate into the upstream
            # gradient: hand it over as an aliased result (XLA's operands are never written)
            ops.append(_Binding(p.index, None, spec))
            res.append(_Binding(p.index, "adj", spec))
            aliases[len(ops) - 1] = len(res) - 1
            if p.role == IN_OUT:
                inout_results[p.index] = len(res) - 1
        else:
            # write-only in the kernel: the adjoint only reads the upstream gradient
            ops.append(_Binding(p.index, "adj", spec))
            if p.role == IN_OUT:
                inout_cts[p.index] = k
    if keep:
        ops.append(_Binding(-1, "token", TOKEN))
    launch = _Launch(entry, plan, "bwd", ops, res, aliases, side_effect=False)
    launch.keep = keep
    # in-out gradients pass through (the kernel only accumulates into them)
    launch.ct_passthrough = []
    for i in want:
        p = entry.dyn[i]
        if p.role == IN_OUT and p.index in inout_results:
            grad_for.append(i)
            launch.result_for.append(inout_results[p.index])
        elif p.role == IN_OUT and p.index in inout_cts:
            launch.ct_passthrough.append((i, inout_cts[p.index]))
    launch.grad_for = grad_for
    launch.want = want
    return launch


class _Launch:
    """A forward or adjoint launch of one plan as an FFI call; batched by a ``custom_vmap`` rule."""

    def __init__(self, entry, plan, direction: str, operands, results, aliases, side_effect: bool):
        # weakly: the launch's custom_vmap rule and partitioning callbacks sit in jaxprs that JAX's
        # caches keep as long as their keys live, and the keys include the entry's own functions
        # (a strong path would keep the entry, its op, and so those jaxprs, for good)
        self._entry = weakref.ref(entry)
        self.label = entry.desc.label
        self.plan = plan
        self.direction = direction
        self.operands = operands
        self.results = results
        self.aliases = aliases
        self.side_effect = side_effect
        self.grad_for: list[int] = []
        self.result_for: list[int] = [k for k, b in enumerate(results) if b.zero and b.slot == "adj"]
        self.name = _target(entry.desc, direction)
        self.want: tuple | None = None  # the adjoint's wanted gradients (set by _adjoint_launch)
        self.keep = False  # a Python-function op's forward keeping its tape, or the adjoint running it
        self.fold = 0  # batch folded into the first dimension (vmap_method="fold"), else 0
        self._fns: dict[tuple, Any] = {}
        self._lock = threading.Lock()
        self._folded: dict[int, _Launch] = {}
        # vmap_method="fold": the unbatched launch this one folds, and how many batch elements
        # each of its rows holds (nested vmaps fold again, multiplying the factor)
        self._base: Any = None  # a weak reference to the unfolded launch, for a folded one
        self.factor = 1

    @property
    def base(self) -> _Launch:
        """The unbatched launch this one folds (itself when not folded)."""
        base = self._base() if self._base is not None else self
        if base is None:
            raise _dropped(self.label)
        return base

    @property
    def entry(self):
        entry = self._entry()
        if entry is None:
            raise _dropped(self.label)
        return entry

    def __call__(self, *xs):
        if any(map(_jax_compat.is_tracer, xs)):
            outs = self._fn(())(*xs)
        else:  # concrete operands (an eager jax.grad's forward and backward): see _Entry.eager_jit
            fn = self._fn(())
            # run here: a failure (a Ctrl-C in the handler) is the caller's KeyboardInterrupt, not JAX's error
            outs = _jax_ffi.run_eager(self.entry.eager_jit((self, ()), lambda: lambda *ys: fn(*ys)), *xs)
        vary = frozenset().union(*map(_jax_compat.varying_axes, xs)) if xs else frozenset()
        if vary:  # inside shard_map: results vary over the mesh axes their operands vary over
            outs = tuple(_jax_compat.cast_varying(o, vary) for o in outs)
        if self.direction == "bwd":
            return [outs[k] for k in self.result_for]
        return outs

    # -- one custom_vmap function per batch configuration ------------------------------
    def _fn(self, levels: tuple):
        f = self._fns.get(levels)
        if f is not None:
            return f
        with self._lock:
            f = self._fns.get(levels)
            if f is None:
                f = self._build(levels)
                self._fns[levels] = f
        return f

    def config(self, levels: tuple) -> str:
        """Everything the handler needs to rebuild this launch from the description (JSON): the
        entry's configuration, the wanted gradients, the folded batch and the vmap levels."""
        cfg = {
            "e": json.loads(self.entry.config),
            "w": None if self.want is None else list(self.want),
            "f": self.fold,
            "l": [[size, list(flags)] for size, flags in levels],
        }
        if self.keep:
            cfg["k"] = 1
        return json.dumps(
            cfg,
            sort_keys=True,
            separators=(",", ":"),
        )

    def _ffi(self, levels: tuple):
        """The bare FFI call of this launch at batch ``levels``; the configuration travels as attribute."""
        batch = tuple(size for size, _ in reversed(levels))
        config = self.config(levels)
        handler, cid = self.entry.jop.targets[self.direction].handler(self, levels, config)
        backend = jax.default_backend()
        if backend == "gpu":
            # load the Warp module now: XLA may run the handler first while recording a CUDA graph
            handler.prepare(_gpu_ordinals())
        elif backend == "cpu":
            handler.prepare_cpu()  # the module loads here, not inside XLA's call
        out_types = [jax.ShapeDtypeStruct(batch + tuple(b.spec.shape), b.spec.dtype) for b in self.results]
        ffi = jax.ffi.ffi_call(
            self.name,
            out_types,
            has_side_effect=self.side_effect,
            input_output_aliases=self.aliases or None,
            vmap_method="sequential",  # never used: custom_vmap batches the call
        )
        config_id = np.int64(cid)
        return lambda *xs: tuple(ffi(*xs, config=config, config_id=config_id))

    def _build(self, levels: tuple):
        ffi = _partitioned(self, levels) or self._ffi(levels)
        me, label = weakref.ref(self), self.label  # (the rule is held by this launch: no cycle)

        @custom_vmap
        def launch(*xs):
            return tuple(ffi(*xs))

        @launch.def_vmap
        def rule(axis_size, in_batched, *xs):
            launch = me()
            if launch is None:
                raise _dropped(label)
            if any(map(_jax_compat.is_tracer, xs)):
                return launch._batch(levels, axis_size, in_batched, xs)
            # concrete operands (an eager jax.vmap): the batched launch through a jit (_Entry.eager_jit)
            flags = tuple(in_batched)
            fn = launch.entry.eager_jit(
                (launch, levels, axis_size, flags),
                lambda: lambda *ys: launch._batch(levels, axis_size, flags, ys)[0],
            )
            return fn(*xs), (any(flags),) * len(launch.results)

        return launch

    def _batch(self, levels, axis_size, in_batched, xs):
        n_out = len(self.results)
        if not any(in_batched):
            return self._fn(levels)(*xs), (False,) * n_out
        if not isinstance(axis_size, (int, np.integer)):
            raise UnsupportedError(
                f"op {self.entry.desc.label!r}: a symbolic vmap batch size ({axis_size}) is not supported (jax.export "
                "shape polymorphism): the op batches its launch over a concrete size; export with concrete shapes"
            )
        method = self.entry.vmap_method
        if method == "sequential":
            flags = list(in_batched)
            fn = self._fn(levels)

            def body(batched):
                it = iter(batched)
                return fn(*[next(it) if b else x for x, b in zip(xs, flags)])

            outs = jax.lax.map(body, [x for x, b in zip(xs, flags) if b])
            return tuple(outs), (True,) * n_out
        if method == "fold" and self.entry.desc.fold_refusal is not None:
            raise UnsupportedError(self.entry.desc.fold_refusal)
        if (
            method == "fold"
            and axis_size
            and not levels
            and all(b.spec.shape for b in self.operands)
            and self._foldable()
        ):
            # (an empty batch takes the loop below: no launch to fold into)
            return self._fold(axis_size, in_batched, xs), (True,) * n_out
        # loop: aliased operands must be batched like their results
        xs = list(xs)
        flags = list(in_batched)
        for k in self.aliases:
            if not flags[k]:
                xs[k] = jnp.broadcast_to(xs[k], (axis_size,) + tuple(xs[k].shape))
                flags[k] = True
        return self._fn(levels + ((axis_size, tuple(flags)),))(*xs), (True,) * n_out

    # -- vmap_method="fold" ------------------------------------------------------------
    def _foldable(self) -> bool:
        desc = self.entry.desc
        return all(desc.params[b.index].is_array for b in self.operands + self.results)

    def folded(self, batch: int) -> _Launch:
        """This launch with a batch of ``batch`` folded into the first dimension.

        Sized from the unbatched launch: under nested vmaps ``self`` is already folded.
        """
        total = self.factor * batch
        base = self.base
        folded = base._folded.get(total)
        if folded is None:
            folded = base._folded.setdefault(total, base._refold(self.entry.folded_plan(total), total))
        return folded

    def _fold(self, axis_size, in_batched, xs):
        folded = self.folded(axis_size)
        args = []
        for x, b in zip(xs, in_batched):
            if not b:
                x = jnp.broadcast_to(x, (axis_size,) + tuple(x.shape))
            args.append(x.reshape((axis_size * x.shape[1],) + tuple(x.shape[2:])))
        outs = folded._fn(())(*args)
        return tuple(o.reshape((axis_size, o.shape[0] // axis_size) + tuple(o.shape[1:])) for o in outs)

    def _refold(self, plan, batch: int) -> _Launch:
        def fold(b):
            shape = (batch * b.spec.shape[0],) + tuple(b.spec.shape[1:])
            return _Binding(b.index, b.slot, ArraySpec(shape, b.spec.dtype), b.zero)

        launch = _Launch(
            self.entry,
            plan,
            self.direction,
            [fold(b) for b in self.operands],
            [fold(b) for b in self.results],
            self.aliases,
            self.side_effect,
        )
        launch.want, launch.fold, launch.keep = self.want, batch, self.keep
        launch.grad_for, launch.result_for = self.grad_for, self.result_for
        launch.ct_passthrough = getattr(self, "ct_passthrough", [])
        launch._base, launch.factor = weakref.ref(self), batch
        return launch


def _offsets(levels: tuple, bindings, flags_of) -> list[tuple[int, ...]]:
    """Byte offset of each buffer for every batch index (outermost batch dimension first)."""
    outer = list(reversed(levels))  # buffers hold batch dims outermost first
    per_buffer = []
    for k, b in enumerate(bindings):
        core = _nbytes(b.spec)
        strides = [0] * len(outer)
        acc = core
        for j in range(len(outer) - 1, -1, -1):
            if flags_of(outer[j], k):
                strides[j] = acc
                acc *= outer[j][0]
        per_buffer.append(strides)
    combos = itertools.product(*[range(size) for size, _ in outer])
    return [tuple(sum(i * s for i, s in zip(idx, strides)) for strides in per_buffer) for idx in combos]


def _as_fwd(go):
    return lambda values, adj, stream: go(values, stream)


def _gpu_ordinals() -> list[int]:
    """The CUDA ordinals of this process's JAX GPU devices."""
    return [getattr(d, "local_hardware_id", d.id) for d in jax.local_devices(backend="gpu")]


# Warp's module loading is not thread-safe, and XLA runs handlers from several threads at
# once (shard_map, pmap): the first launch of each handler on each device is serialized.
_first_run_lock = threading.Lock()


def _cuda_device_count() -> int:
    import warp as wp

    return wp.get_cuda_device_count()


class _Handler:
    """The Python side of one launch configuration: XLA buffers -> launch values -> Warp launch.

    Everything that depends only on the configuration is resolved here, once; per call the handler
    reads the buffers' pointers from the call frame and replays a recorded launch. On the CPU a
    kernel without batch levels runs through generated straight-line code (:meth:`_make_cpu`):
    pointers read with ``_jax_ffi.MEM``, outputs zeroed with one ``memset`` each, the recorded
    launch's argument struct updated field by field and the kernel's entry point called.
    """

    def __init__(self, launch: _Launch, levels: tuple, config: str):
        import warp as wp  # noqa: F401  (Warp is initialised by the core on first use)

        self.launch = launch
        self.config = config
        plan = launch.plan
        self.runner = plan.runner
        self.adjoint = launch.direction == "bwd"
        n = len(plan.desc.params)
        self.template_values = [None] * n
        for i, v in launch.entry.static.items():
            self.template_values[i] = v
        self.ops = [(b.index, b.slot) for b in launch.operands]
        self.res = [(b.index, b.slot) for b in launch.results]
        self.zero = [(k, _nbytes(b.spec)) for k, b in enumerate(launch.results) if b.zero]
        self.levels = levels
        self.batch = int(math.prod(size for size, _ in levels)) if levels else 1
        if levels:
            self.op_offsets = _offsets(levels, launch.operands, lambda lvl, k: lvl[1][k])
            self.res_offsets = _offsets(levels, launch.results, lambda lvl, k: True)
        else:
            self.op_offsets = [(0,) * len(self.ops)]
            self.res_offsets = [(0,) * len(self.res)]
        self._warm: set = set()
        self._go: dict[str, Any] = {}
        self._cuda_fast = None  # the generated per-call function on CUDA, once built (_make_cuda)
        self.cpu = self._first_cpu  # replaced by the per-call function once built

    def prepare(self, ordinals) -> None:
        """Build the launch records of CUDA devices ``ordinals`` (loads the module) ahead of any call."""
        with _first_run_lock:
            for k in ordinals:
                device = get_device(f"cuda:{k}")
                if device.alias not in self._go:
                    fast = self.runner.fast_adjoint if self.adjoint else self.runner.fast_forward
                    self._go[device.alias] = fast(device) if self.adjoint else _as_fwd(fast(device))

    def prepare_cpu(self) -> None:
        """Build the CPU call path (loads the module) ahead of any call."""
        if self.cpu == self._first_cpu:
            with _first_run_lock:
                if self.cpu == self._first_cpu:
                    self.cpu = self._make_cpu()

    def _first_cpu(self, p: int) -> None:
        self.prepare_cpu()
        self.cpu(p)

    def _make_cpu(self):
        """The per-call function of the CPU: generated straight-line code where the launch allows
        it (a kernel, no batch levels, a direct CPU record), else the general path."""
        device = get_device("cpu")
        runner = self.runner
        if not self.levels and self.launch.plan.desc.kind == "function":
            return self._make_function_cpu(device)
        if self.levels or not runner.can_direct(device):
            self._generic(device)  # builds the launch record now, outside any call

            def run(p: int) -> None:
                self._run(p, "cpu")

            return run
        # one record per thread (XLA may run a handler on several threads at once); static
        # scalars are set once in each
        static = self.launch.entry.static
        env: dict[str, Any] = {
            "M": _jax_ffi.MEM,
            "B": _jax_ffi.BYTES,
            "memset": ctypes.memset,
            "slow": lambda p: self._run(p, "cpu"),
        }
        d_name = "DA" if self.adjoint else "DF"
        local = threading.local()

        def make():
            d = local.d = runner.direct(device, self.adjoint, {})
            for i, v in static.items():
                d.set(i, v)
            return d

        env[d_name], env[f"make_{d_name}"] = local, make
        d = make()  # this thread's record now (loads the module): its fields decide the code below
        lines = ["def run(p):"]
        if self.ops:
            lines.append(f"    a = M[(p + {_jax_ffi.ARGS_ITEMS}) >> 3] >> 3")
        if self.res:
            lines.append(f"    r = M[(p + {_jax_ffi.RETS_ITEMS}) >> 3] >> 3")
        values: dict[int, str] = {}
        adj: dict[int, str] = {}
        for k, (i, slot) in enumerate(self.ops):
            lines.append(f"    o{k} = M[(M[a + {k}] + {_jax_ffi.DATA}) >> 3]")
            if slot == "values":
                values[i] = f"o{k}"
            elif slot == "adj":
                adj[i] = f"o{k}"
        for k, (i, slot) in enumerate(self.res):
            lines.append(f"    r{k} = M[(M[r + {k}] + {_jax_ffi.DATA}) >> 3]")
            if slot == "values":
                values[i] = f"r{k}"
            else:
                adj[i] = f"r{k}"
        for k, nbytes in self.zero:
            if not nbytes:
                continue
            z = _jax_ffi.zeros(nbytes)
            if z is None:
                lines.append(f"    memset(r{k}, 0, {nbytes})")
            else:
                env[f"Z{k}"] = z
                lines.append(f"    B[r{k} : r{k} + {nbytes}] = Z{k}")
        # every descriptor is set on every call: one a configuration leaves out points nowhere
        for i in range(len(self.template_values)):
            if hasattr(d, f"v{i}"):
                values.setdefault(i, "0")
            if self.adjoint and hasattr(d, f"w{i}"):
                adj.setdefault(i, "0")
        lines += direct_lines(runner, device, d_name, values, adj if self.adjoint else None, "slow(p)")
        (run,) = compile_functions("\n".join(lines) + "\n", env, ("run",), "<interop jax handler>")
        return run

    def _make_function_cpu(self, device):
        """The per-call function of a Python-function op on the CPU without batch levels: generated
        code that reads the buffers' pointers, zero-fills the results that need it and calls the
        runner (:meth:`_run`'s work, written out for this configuration)."""
        runner = self.runner
        env: dict[str, Any] = {"M": _jax_ffi.MEM, "dev": device, "memset": ctypes.memset}
        lines = ["def run(p):"]
        if self.ops:
            lines.append(f"    a = M[(p + {_jax_ffi.ARGS_ITEMS}) >> 3] >> 3")
        if self.res:
            lines.append(f"    r = M[(p + {_jax_ffi.RETS_ITEMS}) >> 3] >> 3")
        values = [f"T{i}" for i in range(len(self.template_values))]
        for i, v in enumerate(self.template_values):
            env[f"T{i}"] = v
        adj = ["None"] * len(values)
        token = "0"
        for prefix, base, bindings in (("o", "a", self.ops), ("r", "r", self.res)):
            for k, (i, slot) in enumerate(bindings):
                if slot is None:
                    continue
                lines.append(f"    {prefix}{k} = M[(M[{base} + {k}] + {_jax_ffi.DATA}) >> 3]")
                if slot == "values":
                    values[i] = f"({prefix}{k}, None)"
                elif slot == "adj":
                    adj[i] = f"({prefix}{k}, None)"
                else:
                    token = f"{prefix}{k}"
        for k, nbytes in self.zero:
            if nbytes:
                lines.append(f"    memset(r{k}, 0, {nbytes})")
        vals = "[" + ", ".join(values) + "]"
        if not self.launch.keep:
            go = self._generic(device)
            env["go"] = go
            lines.append(f"    go({vals}, {'[' + ', '.join(adj) + ']' if self.adjoint else 'None'}, None)")
        elif self.adjoint:
            env["kept"] = runner.kept_adjoint
            lines.append(f"    kept(dev, {vals}, [{', '.join(adj)}], None, {token})")
        else:
            env["keep"] = runner.keep_forward
            lines.append(f"    keep(dev, {vals}, None, {token})")
        (run,) = compile_functions("\n".join(lines) + "\n", env, ("run",), "<interop jax function handler>")
        return run

    def _generic(self, device):
        go = self._go.get(device.alias)
        if go is None:
            # a cached launch record per device, replayed with this call's pointers
            go = self.runner.fast_adjoint(device) if self.adjoint else _as_fwd(self.runner.fast_forward(device))
            self._go[device.alias] = go
        return go

    def cuda(self, p: int) -> None:
        fast = self._cuda_fast
        if fast is not None:
            fast(p)
            return
        frame = _jax_ffi.frame(p)
        key = _jax_ffi.device_ordinal(frame)
        if key in self._warm:
            self._run(p, "CUDA")
            return
        with _first_run_lock:
            self._run(p, "CUDA")
            self._warm.add(key)
            if not self.levels and get_device(f"cuda:{key}") is not None and _cuda_device_count() == 1:
                # one GPU in the process: every later call runs there, through generated code
                self._cuda_fast = self._make_cuda(get_device(f"cuda:{key}"))

    def _make_cuda(self, device):
        """The per-call function on CUDA (one device, no batch levels): generated straight-line
        code that reads the buffers' pointers and XLA's stream from the call frame, zero-fills the
        outputs that need it with one memset each on that stream, points a launch record of its
        own at the buffers and replays it with one foreign call; else None (the general path)."""
        rec = self.runner.cuda_record(device, self.adjoint, self.template_values)
        if rec is None:
            return None
        launch, fwd, adj = rec
        env: dict[str, Any] = {
            "M": _jax_ffi.MEM,
            "stream_of": _jax_ffi.stream_getter(),
            "memset": _jax_compat.cuda_memset_async,
            "dev": device,
            "launch": launch,
            "lock": threading.Lock(),
            "slow": lambda p: self._run(p, "CUDA"),
        }
        lines = ["def run(p):"]
        if self.ops:
            lines.append(f"    a = M[(p + {_jax_ffi.ARGS_ITEMS}) >> 3] >> 3")
        if self.res:
            lines.append(f"    r = M[(p + {_jax_ffi.RETS_ITEMS}) >> 3] >> 3")
        sets = []
        for k, (i, slot) in enumerate(self.ops):
            if slot not in ("values", "adj"):
                continue
            lines.append(f"    o{k} = M[(M[a + {k}] + {_jax_ffi.DATA}) >> 3]")
            env[f"O{k}"] = fwd[i] if slot == "values" else adj[i]
            sets.append(f"O{k}.data = {0 if i in self.runner.nulls else f'o{k}'}")  # (an empty array: null)
        for k, (i, slot) in enumerate(self.res):
            lines.append(f"    r{k} = M[(M[r + {k}] + {_jax_ffi.DATA}) >> 3]")
            env[f"R{k}"] = fwd[i] if slot == "values" else adj[i]
            sets.append(f"R{k}.data = {0 if i in self.runner.nulls else f'r{k}'}")
        lines.append("    h = stream_of(p)")
        for k, nbytes in self.zero:
            if nbytes:
                lines.append(f"    memset(dev, r{k}, {nbytes}, h)")
        lines += ["    if not lock.acquire(False):", "        return slow(p)", "    try:"]
        lines += [f"        {x}" for x in sets]
        lines += ["        launch(h)", "    finally:", "        lock.release()"]
        (run,) = compile_functions("\n".join(lines) + "\n", env, ("run",), "<interop jax cuda handler>")
        return run

    def _run(self, p: int, platform: str) -> None:
        ins = _jax_ffi.pointers(p, _jax_ffi.ARGS_ITEMS, _jax_ffi.ARGS_SIZE)
        outs = _jax_ffi.pointers(p, _jax_ffi.RETS_ITEMS, _jax_ffi.RETS_SIZE)
        if platform == "cpu":
            device = get_device("cpu")
            stream = None
            for k, nbytes in self.zero:
                if nbytes:
                    _jax_ffi.zero_fill(outs[k], nbytes * self.batch)
        else:
            frame = _jax_ffi.frame(p)
            device = get_device(f"cuda:{_jax_ffi.device_ordinal(frame)}")
            ptr = _jax_ffi.cuda_stream(frame)
            stream = external_stream(device, ptr)
            for k, nbytes in self.zero:
                if nbytes:
                    _jax_compat.cuda_memset_async(device, outs[k], nbytes * self.batch, ptr)
        go = self._generic(device) if not self.launch.keep else None
        for op_off, res_off in zip(self.op_offsets, self.res_offsets):
            values = list(self.template_values)
            adj = [None] * len(values) if self.adjoint else None
            token = None
            for (i, slot), ptr, off in zip(self.ops, ins, op_off):
                if slot == "values":
                    values[i] = (ptr + off, None)
                elif slot == "adj":
                    adj[i] = (ptr + off, None)
                elif slot == "token":
                    token = ptr + off
            for (i, slot), ptr, off in zip(self.res, outs, res_off):
                if slot == "values":
                    values[i] = (ptr + off, None)
                elif slot == "token":
                    token = ptr + off
                else:
                    adj[i] = (ptr + off, None)
            if go is not None:
                go(values, adj, stream)
            elif self.adjoint:  # a Python-function op's backward from the tape its forward kept
                self.runner.kept_adjoint(device, values, adj, stream, token)
            else:  # a Python-function op's forward, its tape kept for the backward
                self.runner.keep_forward(device, values, stream, token)
