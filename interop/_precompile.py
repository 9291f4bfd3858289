"""Building ops' Warp modules ahead of time into a folder (:func:`precompile`), for a library to ship.

What an op's calls load, and so what is built (each a Warp module; Warp's adjoint is in the same
module as its forward): the kernel's module (for a generic kernel, with the overloads declared by
then); its scalar-gradient variants (``_scalar_ref``: scalars passed as one-element arrays, by a
torch 0-d tensor, a JAX eager call or traced value); a hand-written backward's; with
``forward_mode``, the generated tangent kernel's and its variants; for a checked op (``checked=True``),
their checked variants instead. Each for the CPU (the
``block_dim`` variant a CPU launch loads) and, through Warp's NVRTC (no GPU needed), as a cubin per
CUDA architecture. :mod:`interop._precompiled` reads the folder back.
"""

from __future__ import annotations

import itertools
import json
import os
import types as pytypes
from pathlib import Path
from typing import Any, Iterable, Sequence

import warp as wp

from . import _warp_compat
from ._checked import checked_kernel
from ._description import OpDescription
from ._errors import ArgumentError, UnsupportedError
from ._op import Op
from ._precompiled import FORMAT, MANIFEST, platform_tag
from ._runtime import ensure_init, get_device
from ._scalar_ref import build_lock, scalar_ref_kernel

#: an op with more scalar call parameters than this gets the every-scalar variant only (2**n - 1 otherwise)
SUBSET_LIMIT = 3


def precompile(
    ops: Op | Sequence[Op] | pytypes.ModuleType,
    folder: str | os.PathLike,
    *,
    cpu: bool = True,
    cuda_archs: Iterable[int] = (80, 90),
    forward_mode: bool = False,
) -> dict:
    """Build every Warp module ``ops`` load at their calls into ``folder``, for a library to ship.

    For each op: its kernel's module (with Warp's adjoint), the variants that take scalar parameters
    as one-element arrays (what a scalar's gradient, a torch 0-d tensor or a JAX eager call uses:
    every subset of the scalars when there are at most three, else all of them at once), a
    hand-written backward's module, and with ``forward_mode`` the generated tangent kernel's (and its
    variants), which ``jvp``, ``jax.jvp``, ``torch.func.jvp`` and second derivatives launch. Each is
    built for the CPU and, through Warp's NVRTC (which needs no GPU), as a cubin for each
    architecture in ``cuda_archs``. The folder gets Warp's own cache layout and a manifest
    (``interop-precompiled.json``: the Warp version, the platform, each module's full hash and
    binaries); ``interop.use_precompiled`` loads from it. A generic kernel is built with the
    overloads declared (``wp.overload``) when ``precompile`` runs.

    Args:
        ops: an op, a list of ops, or a Python module whose ``interop.Op`` attributes are taken.
        folder: where to write (created; existing builds of the same modules are kept).
        cpu: build the CPU objects (for this machine's OS, architecture and, with Warp's default
            ``-march=native``, instruction set; see docs/guide/precompiled.md).
        cuda_archs: CUDA architectures to build cubins for, as ``(80, 90)`` for sm_80 and sm_90.
        forward_mode: also build the tangent kernels (forward mode, second derivatives).

    Returns:
        The manifest written (a dict: ``warp``, ``platform``, ``ops``, ``modules``).

    Raises:
        ArgumentError: ``ops`` holds something other than ops, or a generic kernel has no declared
            overload.
        UnsupportedError: a Python-function op (the kernels it launches are its own), a CUDA
            architecture Warp's NVRTC cannot build here, or (``forward_mode``) an op without a
            tangent kernel.

    Example:
        >>> import os, tempfile, warp as wp, interop
        >>> @wp.kernel(module="unique")
        ... def scale(x: wp.array(dtype=float), s: float, out: wp.array(dtype=float)):
        ...     i = wp.tid()
        ...     out[i] = s * x[i]
        >>> where = tempfile.TemporaryDirectory()  # removed when it is dropped
        >>> folder = os.path.join(where.name, "precompiled")
        >>> manifest = interop.precompile(interop.op(scale), folder, cuda_archs=())
        >>> len(manifest["modules"])  # the kernel's module and its variant for a scalar's gradient
        2
    """
    found = _ops_of(ops)
    archs = tuple(int(a) for a in cuda_archs)
    ensure_init()
    missing = [a for a in archs if a not in _warp_compat.nvrtc_archs()]
    if missing:
        have = ", ".join(str(a) for a in _warp_compat.nvrtc_archs()) or "none: this Warp is built without CUDA"
        raise UnsupportedError(
            f"interop.precompile: Warp's NVRTC cannot build for sm_{', sm_'.join(map(str, missing))} here "
            f"(it builds for: {have}); pass cuda_archs= with those, or cuda_archs=() for the CPU only"
        )
    out = Path(os.fspath(folder))
    out.mkdir(parents=True, exist_ok=True)
    targets: list[tuple[OpDescription, Any]] = []
    for o in found:
        targets += _kernels_of(o, forward_mode)
    modules: dict[tuple, dict] = {}
    ops_index: dict[str, str] = {}
    cpu_device = get_device("cpu")
    with build_lock:
        for desc, kernel in targets:
            ops_index[desc.name] = desc.label
            if cpu:
                _build(
                    modules, out, desc, kernel, _warp_compat.block_threads(cpu_device, desc.block_dim), cpu_device, None
                )
            for a in archs:
                _build(modules, out, desc, kernel, desc.block_dim or 256, None, a)
    manifest = {
        "format": FORMAT,
        "warp": wp.config.version,
        "interop": _interop_version(),
        "platform": platform_tag(),
        "cuda_archs": list(archs),
        "ops": dict(sorted(ops_index.items())),
        "modules": sorted(modules.values(), key=lambda m: (m["name"], m["block_dim"])),
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def _interop_version() -> str:
    import interop

    return interop.__version__


def _ops_of(ops: Any) -> list[Op]:
    if isinstance(ops, Op):
        return [ops]
    if isinstance(ops, pytypes.ModuleType):
        found = [v for v in vars(ops).values() if isinstance(v, Op)]
        if not found:
            raise ArgumentError(f"interop.precompile: module {ops.__name__!r} has no interop.Op attribute")
        return list({id(o): o for o in found}.values())
    if isinstance(ops, (list, tuple)):
        bad = [type(o).__name__ for o in ops if not isinstance(o, Op)]
        if bad or not ops:
            raise ArgumentError(f"interop.precompile: ops must be interop ops, got {bad or 'an empty list'}")
        return list(ops)
    raise ArgumentError(
        f"interop.precompile: ops must be an interop.Op, a list of them or a module holding them, got {type(ops).__name__}"
    )


def _kernels_of(o: Op, forward_mode: bool) -> list[tuple[OpDescription, Any]]:
    """``(description, concrete kernel)`` of every module the op's calls load."""
    desc = o.description
    if desc.kind != "kernel":
        raise UnsupportedError(
            f"interop.precompile: op {desc.label!r} is a Python-function op: the kernels it launches are its own "
            "(build them with wp.compile_aot_module and load them with wp.load_aot_module)"
        )
    found = _with_scalar_variants(desc, _concrete(desc, desc.fn))
    if desc.backward is not None:
        found += _kernels_of(Op(desc.backward), False)  # its own op, as the adapters call it
    if forward_mode:
        t = o.tangent()
        tdesc = t.description
        kernels = _concrete(tdesc, tdesc.fn)  # a generic kernel's: the overloads mirrored from its declared ones
        found += _with_scalar_variants(tdesc, kernels)
    return found


def _concrete(desc: OpDescription, kernel: Any) -> list[Any]:
    """A kernel, or a generic kernel's declared overloads."""
    if not kernel.is_generic:
        return [kernel]
    if not kernel.overloads:
        raise ArgumentError(
            f"interop.precompile: op {desc.label!r}: generic kernel {kernel.key!r} has no overload to build; declare "
            "each one its callers use with wp.overload (in the module that defines the kernel, so that every "
            "process makes the same ones) before precompiling"
        )
    return list(kernel.overloads.values())


def _with_scalar_variants(desc: OpDescription, kernels: list[Any]) -> list[tuple[OpDescription, Any]]:
    scalars = [p.name for p in desc.call_params if not p.is_array]
    if len(scalars) <= SUBSET_LIMIT:
        subsets = [c for r in range(1, len(scalars) + 1) for c in itertools.combinations(scalars, r)]
    else:
        subsets = [tuple(scalars)]
    found = []
    for k in kernels:
        if desc.checked:  # checked mode launches the checked variants only (interop._checked)
            found += [(desc, checked_kernel(k, names, desc.label)) for names in [(), *subsets]]
            continue
        found.append((desc, k))
        found += [(desc, scalar_ref_kernel(k, names)) for names in subsets]
    return found


def _build(modules: dict, out: Path, desc: OpDescription, kernel: Any, block_dim: int, device: Any, arch: Any) -> None:
    """Build ``kernel``'s module variant for the CPU (``device``) or CUDA ``arch`` once, and record it."""
    module = kernel.module
    full = _warp_compat.module_hash(module, block_dim)
    entry = modules.get((module.name, block_dim, full))
    if entry is None:
        entry = modules[(module.name, block_dim, full)] = {
            "name": module.name,
            "block_dim": block_dim,
            "hash": full,
            "dir": _warp_compat.module_identifier(module, block_dim),
            "cpu": None,
            "cuda": {},
            "ops": [],
        }
    if desc.name not in entry["ops"]:
        entry["ops"].append(desc.name)
    if device is not None and entry["cpu"] is None:
        entry["cpu"] = _warp_compat.compile_module(module, str(out / entry["dir"]), block_dim, device=device)
    if arch is not None and str(arch) not in entry["cuda"]:
        entry["cuda"][str(arch)] = _warp_compat.compile_module(module, str(out / entry["dir"]), block_dim, arch=arch)
