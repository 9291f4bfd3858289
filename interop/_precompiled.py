"""Warp modules shipped precompiled: the folders a library registers, and their use at first load.

A folder written by :func:`interop.precompile` holds Warp's own cache layout (one ``wp_<name>_<hash>``
directory per module variant: the binaries, their ``.meta`` and the generated source) and a manifest,
``interop-precompiled.json``: the Warp version, the platform, and per module variant its name,
``block_dim``, full content hash, CPU object and CUDA cubins, and the ops that load it.

Before an op's launch record loads a module (``_launch.Runner._new_slot``, under the build lock),
:func:`preload` looks the module up in the registered folders by name, ``block_dim`` and full hash
(Warp's hash of every kernel's source and adjoint, the functions and structs they call, and the
module options), and loads the binary for this device when the Warp version, the platform and the
CPU target or GPU architecture match. Anything else (a kernel edited since the build, another Warp,
another GPU, a variant not built) is compiled as usual, after one :class:`PrecompiledWarning` per op,
module and device that says why: a binary is never loaded for source it was not built from.
"""

from __future__ import annotations

import json
import os
import platform
import threading
import warnings
from pathlib import Path
from typing import Any

import warp as wp

from . import _warp_compat
from ._errors import ArgumentError

MANIFEST = "interop-precompiled.json"
FORMAT = 1


class PrecompiledWarning(UserWarning):
    """A precompiled Warp module could not be used (the message names the op, the module and why);
    the module is compiled instead, as without a precompiled folder."""


def platform_tag() -> str:
    """The OS and machine a CPU object is built for (``Linux-x86_64``)."""
    return f"{platform.system()}-{platform.machine()}"


class Folder:
    """One registered folder: its manifest, indexed for :func:`preload`."""

    def __init__(self, path: Path, manifest: dict):
        self.path = path
        self.warp = str(manifest.get("warp"))
        self.platform = str(manifest.get("platform"))
        self.ops = set(manifest.get("ops", {}))
        self.by_hash: dict[tuple, dict] = {}
        self.by_name: dict[tuple, list[dict]] = {}
        for m in manifest.get("modules", ()):
            self.by_hash[(m["name"], m["block_dim"], m["hash"])] = m
            self.by_name.setdefault((m["name"], m["block_dim"]), []).append(m)

    def knows(self, opname: str, module: Any, block_dim: int) -> bool:
        return opname in self.ops or (module.name, block_dim) in self.by_name

    def binary(self, entry: dict, module: Any, device: Any, block_dim: int) -> tuple[str | None, int | None, str]:
        """``(binary path, arch, "")`` of ``entry`` for ``device``, or ``(None, None, why not)``."""
        folder = self.path / entry["dir"]
        if device.is_cpu:
            if self.platform != platform_tag():
                return None, None, f"its CPU objects were built on {self.platform}, this machine is {platform_tag()}"
            want = _warp_compat.cpu_binary_name(module, device, block_dim)
            have = entry.get("cpu")
            if have is None:
                return None, None, "it holds no CPU object (built with cpu=False)"
            if have != want:
                return (
                    None,
                    None,
                    (
                        f"its CPU object {have} is for another CPU target than this machine's ({want}: another LLVM, "
                        "OS or architecture, or, for modules built with -march=native, another instruction set)"
                    ),
                )
            return str(folder / have), None, ""
        arch = int(device.arch)
        built = {int(a): f for a, f in entry.get("cuda", {}).items()}
        # a cubin runs on its own architecture and on later minor versions of the same major one
        fits = [a for a in built if a == arch or (a // 10 == arch // 10 and a < arch)]
        if not fits:
            archs = ", ".join(f"sm_{a}" for a in sorted(built)) or "none"
            return None, None, f"it holds no cubin that runs on {device.alias}'s sm_{arch} (built for: {archs})"
        a = max(fits)
        return str(folder / built[a]), a, ""


_folders: list[Folder] = []
_lock = threading.Lock()
_warned: set[tuple] = set()


def read_manifest(folder: Path) -> dict:
    """The manifest of a precompiled folder; an :class:`ArgumentError` naming what is missing."""
    path = folder / MANIFEST
    if not path.is_file():
        raise ArgumentError(
            f"interop.use_precompiled: {str(folder)!r} has no {MANIFEST} (expected a folder written by "
            "interop.precompile and shipped inside the package, e.g. with [tool.setuptools.package-data])"
        )
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ArgumentError(f"interop.use_precompiled: cannot read {str(path)!r}: {e}") from e
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ArgumentError(
            f"interop.use_precompiled: {str(path)!r} is not a format-{FORMAT} manifest of interop.precompile "
            f"(format {manifest.get('format') if isinstance(manifest, dict) else None!r}); rebuild the folder"
        )
    return manifest


def use_precompiled(folder: str | os.PathLike) -> None:
    """Load the Warp modules of ops from ``folder`` (written by ``interop.precompile``) at first use.

    Call it once, at the library's import (its ``__init__``), with the folder shipped inside the
    package. From then on, when any op first loads a Warp module on a device (its kernel, Warp's
    adjoint in the same module, a scalar-gradient variant, a tangent kernel, a hand-written
    backward), the module is taken from the folder if it was built there from the same source: same
    full module hash (every kernel's source, the functions and structs it calls, the module options),
    same Warp version, and a binary for this device (the CPU target; a cubin of the GPU's
    architecture, or of an earlier minor version of the same major one). Otherwise the module is
    compiled as without the folder, after a one-time ``interop.PrecompiledWarning`` naming the
    op, the module and the mismatch. Registering the same folder again does nothing.

    Args:
        folder: the folder ``interop.precompile`` wrote (with its ``interop-precompiled.json``).

    Raises:
        ArgumentError: the folder has no readable manifest of this format.

    Example:
        >>> import os, tempfile, numpy as np, warp as wp, interop
        >>> @wp.kernel(module="unique")
        ... def twice(x: wp.array(dtype=float), out: wp.array(dtype=float)):
        ...     i = wp.tid()
        ...     out[i] = 2.0 * x[i]
        >>> where = tempfile.TemporaryDirectory()  # removed when it is dropped
        >>> folder = os.path.join(where.name, "precompiled")
        >>> _ = interop.precompile(interop.op(twice), folder, cuda_archs=())
        >>> interop.use_precompiled(folder)
        >>> interop.op(twice)(np.ones(2, np.float32))
        array([2., 2.], dtype=float32)
    """
    path = Path(os.fspath(folder)).resolve()
    manifest = read_manifest(path)
    with _lock:
        if any(f.path == path for f in _folders):
            return
        _folders.append(Folder(path, manifest))


def registered() -> bool:
    """Whether any folder is registered (:func:`preload` does nothing otherwise)."""
    return bool(_folders)


def preload(kernel: Any, device: Any, block_dim: int, opname: str, label: str) -> None:
    """Load ``kernel``'s module (its ``block_dim`` variant) on ``device`` from a registered folder
    built from the same source for this Warp and device; else leave it to Warp to compile, warning
    once where a folder knows the op or the module. Called under the build lock."""
    module = kernel.module
    if _warp_compat.module_current(module, device, block_dim):
        return
    full = _warp_compat.module_hash(module, block_dim)
    for folder in list(_folders):
        if not folder.knows(opname, module, block_dim):
            continue
        if folder.warp != wp.config.version:
            why = f"it was built with warp-lang {folder.warp}, this is warp-lang {wp.config.version}"
        else:
            entry = folder.by_hash.get((module.name, block_dim, full))
            if entry is not None:
                binary, arch, why = folder.binary(entry, module, device, block_dim)
                if binary is not None:
                    if os.path.isfile(binary):
                        meta = str(folder.path / entry["dir"] / _warp_compat.meta_name(module, block_dim))
                        _warp_compat.load_module_binary(module, device, block_dim, binary, meta, arch)
                        return
                    why = f"its file {binary} is missing"
            elif (module.name, block_dim) in folder.by_name:
                built = ", ".join(m["hash"][:7] for m in folder.by_name[(module.name, block_dim)])
                why = (
                    "the kernel source (or a function, struct or module option it uses, or a generic kernel's "
                    f"overloads) changed since it was built: "
                    f"module hash {full[:7]} now, {built} there"
                )
            else:
                why = f"the folder does not hold module {module.name!r} (block_dim {block_dim})"
        _warn_once(label, module.name, device, folder.path, why)
        return


def _warn_once(label: str, module: str, device: Any, folder: Path, why: str) -> None:
    key = (label, module, str(device), str(folder))
    with _lock:
        if key in _warned:
            return
        _warned.add(key)
    warnings.warn(
        f"op {label!r}: not using the precompiled Warp module {module!r} from {str(folder)!r} on {device}: {why}; "
        f"compiling it instead (once per machine: Warp caches the build in {wp.config.kernel_cache_dir})",
        PrecompiledWarning,
        stacklevel=4,
    )
