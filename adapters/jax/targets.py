"""JAX adapter: the op's stable FFI targets, registered with XLA.

Each op has two FFI targets, ``interop.<op name>.fwd`` and ``.bwd``
(``adapters.jax.launch._target``: named from the description only, so the same in every
process), registered for ``cpu`` and ``CUDA`` when the op is bound (``_register_targets``) and
shared by the live Op objects of one description. A ``_Target`` finds the handler of each call
by the call's ``config_id`` attribute (``_config_id``; one dictionary lookup per call), and
builds it from the call's ``config`` attribute the first time an id is seen (a module deserialized
with ``jax.export``, XLA's instantiate stage).

The target holds the op's binding (``adapters.jax.JaxOp``, above) weakly and uses it by its
attributes.
"""

from __future__ import annotations

import hashlib
import json
import threading
import weakref

from interop._errors import ArgumentError

from . import compat as _jax_compat
from . import ffi as _jax_ffi
from .entry import _entry_from_config, _op_for
from .launch import _dropped, _gpu_ordinals, _Handler, _Launch, _target

# ---------------------------------------------------------------------------------------
# Stable FFI targets: one per op and direction; the call's configuration is an attribute
# ---------------------------------------------------------------------------------------


def _config_id(config: str) -> int:
    """The configuration's id: 63 bits of its BLAKE2b hash (an int64 attribute of each call, the
    same in every process). Handlers are found by it; a module deserialized in a process that has
    not seen the configuration finds none and builds the handler from the ``config`` string."""
    return int.from_bytes(hashlib.blake2b(config.encode(), digest_size=8).digest(), "little") >> 1


# the attributes of each call, sorted by name as XLA passes them: "config" (JSON), "config_id"
_CONFIG_ID_ATTR = 1


class _Target:
    """One registered FFI target (an op's forward or adjoint): finds the handler of each call by
    its configuration id (one dictionary lookup), building it from the description the first
    time an id is seen (a module deserialized with ``jax.export``)."""

    def __init__(self, jop, direction: str):
        # weakly: the ops holding this target (JaxOp.targets; several Op objects of one description
        # share it), the first one alive builds handlers
        self.label = jop.desc.label
        self._jops = [weakref.ref(jop)]
        self.direction = direction
        self.handlers: dict[int, _Handler] = {}  # by configuration id
        self._lock = threading.Lock()
        mem, k = _jax_ffi.MEM, _CONFIG_ID_ATTR
        mem32, handlers = _jax_ffi.MEM32, self.handlers
        size, types, values = _jax_ffi.ATTRS_SIZE, _jax_ffi.ATTRS_TYPES, _jax_ffi.ATTRS_VALUES
        scalar_kind, s64, value_at = _jax_ffi._ATTR_SCALAR, _jax_ffi._DTYPE_S64, _jax_ffi._SCALAR_VALUE
        me = weakref.ref(self)  # (run is held by this target: a strong self would make a cycle)

        # (the registered callbacks hold run and at_instantiate weakly: the target keeps them)
        def run(p: int, platform: str) -> None:
            # _jax_ffi.int64_attr(p, k), written out: this runs on every call
            handler = None
            if mem[(p + size) >> 3] > k and mem32[(mem[(p + types) >> 3] >> 2) + k] == scalar_kind:
                scalar = mem[(mem[(p + values) >> 3] >> 3) + k]
                if mem32[scalar >> 2] == s64:
                    handler = handlers.get(mem[mem[(scalar + value_at) >> 3] >> 3])
            if handler is None:
                handler = me()._rebuild(p)
            if platform == "cpu":
                handler.cpu(p)
            else:
                handler.cuda(p)

        self.run = run
        self.at_instantiate = lambda p, platform: me().instantiate(p, platform)

    @property
    def jop(self):
        for ref in self._jops:
            jop = ref()
            if jop is not None:
                return jop
        raise _dropped(self.label)

    def share(self, jop) -> None:
        """``jop`` (another Op object of this target's description) uses this target too."""
        self._jops = [r for r in self._jops if r() is not None] + [weakref.ref(jop)]

    def instantiate(self, p: int, platform: str) -> None:
        """XLA's instantiate stage (an executable compiled or deserialized, before any run): build
        the handler of the call's configuration and, on CUDA, load the Warp module on every GPU.
        The first run may be recorded into a CUDA graph (command buffers), and loading a module
        during a capture needs a CUDA 12.3 driver; a process that only deserialized an exported
        function never traced the op, so nothing else has loaded it."""
        cid = _jax_ffi.int64_attr(p, _CONFIG_ID_ATTR)
        handler = self.handlers.get(cid) if cid is not None else None
        if handler is None:
            handler = self._rebuild(p)
        if platform != "cpu":
            handler.prepare(_gpu_ordinals())

    def _rebuild(self, p: int) -> _Handler:
        config_bytes = _jax_ffi.string_attr(_jax_ffi.frame(p), b"config")
        if config_bytes is None:
            raise RuntimeError(f"FFI target of op {self.label!r} called without its 'config' attribute")
        config = config_bytes.decode()
        cid = _config_id(config)
        given = _jax_ffi.int64_attr(p, _CONFIG_ID_ATTR)
        if given is not None and given != cid:
            raise RuntimeError(
                f"FFI target of op {self.label!r}: the call's config_id {given} is not its configuration's "
                f"({cid}); the module was not made by this package's version"
            )
        with self._lock:
            handler = self.handlers.get(cid)
            if handler is None:
                cfg = json.loads(config)
                entry = _entry_from_config(self.jop, json.dumps(cfg["e"], sort_keys=True, separators=(",", ":")))
                keep = bool(cfg.get("k"))
                if self.direction == "fwd":
                    launch = entry.forward_keep() if keep else entry.fwd
                else:
                    launch = entry.adjoint(tuple(cfg["w"]), keep)
                if cfg["f"]:
                    launch = launch.folded(cfg["f"])
                levels = tuple((size, tuple(flags)) for size, flags in cfg["l"])
                handler = self.handlers[cid] = _Handler(launch, levels, config)
        return handler

    def handler(self, launch: _Launch, levels: tuple, config: str) -> tuple[_Handler, int]:
        """The handler of ``launch`` at ``levels`` and its configuration id (made at lowering)."""
        cid = _config_id(config)
        handler = self.handlers.get(cid)
        if handler is None:
            with self._lock:
                handler = self.handlers.get(cid)
                if handler is None:
                    handler = self.handlers[cid] = _Handler(launch, levels, config)
        if handler.config != config:  # two configurations with one 63-bit id: never seen, but never served
            raise RuntimeError(f"op {self.label!r}: configuration id {cid} collides; please report this")
        return handler, cid


#: target name -> the live op's target (JaxOp.targets holds it): a dropped op's is freed
_targets: weakref.WeakValueDictionary[str, _Target] = weakref.WeakValueDictionary()
_targets_lock = threading.Lock()


def _register_targets(jop) -> None:
    """Give ``jop`` its FFI targets: those of a live op of the same description (two Op objects of
    one description: a hand-written backward's op and the same kernel described by the user), else
    new ones, which the registered callbacks then call (XLA keeps a name's callbacks for good)."""
    desc = jop.desc
    for direction in ("fwd", "bwd"):
        name = _target(desc, direction)
        with _targets_lock:
            target = _targets.get(name)
            alive = target is not None and any(r() is not None for r in target._jops)
            if alive and target.jop.desc == desc:
                target.share(jop)
            elif alive:  # (interop.op refuses this; an Op made otherwise must not take over the name)
                raise ArgumentError(
                    f"op name {desc.name!r} is already used by a live op with other options "
                    f"({target.jop.desc.key!r}); pick another name="
                )
            else:
                target = _targets[name] = _Target(jop, direction)
                # CUDA graphs: a kernel's handler only zero-fills and launches on XLA's stream (capturable);
                # a Python-function op may allocate or synchronize, and so does Warp's deterministic mode
                # (scratch buffers per launch): neither is declared compatible
                _jax_ffi.register(
                    name,
                    target.run,
                    command_buffer=desc.kind == "kernel" and not _jax_compat.deterministic(desc.fn),
                    instantiate=target.at_instantiate,
                    label=desc.label,
                )
        jop.targets[direction] = target
    if desc.backward is not None:
        jop.backward_op = _op_for(desc.backward)
        jop.backward_op.bound("jax")
