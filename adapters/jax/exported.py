"""A deserialized ``jax.export`` function in a process that has not described its ops.

Each op's FFI targets (``interop.<op name>.fwd`` / ``.bwd``, :mod:`adapters.jax.targets`) are
registered when the op is described; a module deserialized before that fails inside XLA with
``NOT_FOUND: No FFI handler registered for interop....``, which does not say what to do. A handler
cannot be registered lazily: it runs the op's kernel, which only its description names. So
``check_exported`` (and ``deserialize``, which calls it) reads the module's custom calls and
raises an error naming each op to describe, by kernel name, before XLA is reached.
"""

from __future__ import annotations

import re

from interop._errors import UnsupportedError

from .targets import _targets

_CALL = re.compile(r"custom_call\s*@([A-Za-z0-9_.]+)")
# an anonymous op's name: interop::<kernel>_<6 hex: key and source>_<8 hex: options>[_<n>]
_ANONYMOUS = re.compile(r"^interop\.(?P<kernel>.+?)_[0-9a-f]{6}_[0-9a-f]{8}(?:_\d+)?$")


def missing_targets(exported) -> list[str]:
    """The FFI targets of this package that ``exported`` (a ``jax.export.Exported``) calls and
    that no op described in this process provides."""
    names = sorted({m.group(1) for m in _CALL.finditer(exported.mlir_module()) if m.group(1).startswith("interop.")})
    missing = []
    for name in names:
        target = _targets.get(name)
        if target is None or not any(r() is not None for r in target._jops):
            missing.append(name)
    return missing


def check_exported(exported) -> None:
    """Raises ``interop.UnsupportedError`` naming, by kernel name, each op that the deserialized
    ``exported`` calls and that this process has not described (XLA would fail with ``NOT_FOUND: No FFI
    handler registered``). Describe each one (``interop.op(kernel, <the same options>)``), then call."""
    missing = missing_targets(exported)
    if not missing:
        return
    ops = []
    for name in missing:
        op_name = name.rsplit(".", 1)[0][len("interop.") :]
        m = _ANONYMOUS.match(op_name)
        kernel = f"kernel {m.group('kernel')!r}" if m else "named op"
        ops.append(f"{op_name.replace('.', '::', 1)} ({kernel}, FFI target {name!r})")
    raise UnsupportedError(
        "the deserialized jax.export function calls ops this process has not described: "
        + "; ".join(ops)
        + ". Describe each with interop.op(<kernel>, <the options it was exported with>) (importing the module "
        "that describes it is enough) before calling it; an op's name, and so its FFI target, follows from its "
        "kernel's key and source and its options"
    )


def deserialize(serialized):
    """``jax.export.deserialize``, then ``check_exported``: an exported function whose ops are
    not described in this process is refused, naming them, when it is loaded."""
    import jax

    exported = jax.export.deserialize(serialized)
    check_exported(exported)
    return exported
