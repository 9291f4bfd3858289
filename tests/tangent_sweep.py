"""Forward mode over kernels written elsewhere: the tangent kernel of every module-level kernel of
the given packages (default: Warp's own tests and examples, ~1,800 kernels), optionally compiled for
a GPU architecture with Warp's NVRTC (no GPU needed).

Every float parameter is differentiated. Each kernel ends as one of: a tangent kernel ("ok"), a
refusal (``interop.UnsupportedError``: counted by reason), nothing to differentiate, or a **generator
bug** (any other exception while generating, or, with ``--compile-arch``, a tangent kernel that fails
to build while the kernel itself builds). Exit status 1 when there is a bug.

    python tests/tangent_sweep.py                       # generation only (~1 min)
    python tests/tangent_sweep.py --compile-arch 90     # and NVRTC for sm_90 (~25 min on 2 cores)

Not part of the test suite (it depends on which kernels a Warp release ships); run it after changing
the generator or its rules. Last run: docs/development.md, "Forward-mode sweep".
"""

from __future__ import annotations

import argparse
import collections
import importlib
import pkgutil
import re
import sys
import tempfile
import traceback

import warp as wp

import interop
from interop import _structs, _tangent, _warp_compat
from interop._extent import uses_tiles


def _kernels(packages: list[str]) -> list[tuple[str, wp.Kernel]]:
    found: dict[int, tuple[str, wp.Kernel]] = {}
    for name in packages:
        pkg = importlib.import_module(name)
        for m in pkgutil.walk_packages(pkg.__path__, name + "."):
            try:
                mod = importlib.import_module(m.name)
            except BaseException:  # noqa: BLE001 (a module that needs what this machine lacks)
                continue
            for v in list(vars(mod).values()):
                if isinstance(v, wp.Kernel):
                    found[id(v)] = (m.name, v)
    return sorted(found.values(), key=lambda mk: (mk[0], mk[1].key))


def _differentiable(kernel: wp.Kernel) -> dict[str, bool]:
    return {n: _tangent.float_like(t.dtype if wp.types.is_array(t) else t) for n, t in kernel.adj.arg_types.items()}


def _views(kernel: wp.Kernel) -> list:
    return [
        t
        for t in kernel.adj.arg_types.values()
        if wp.types.is_array(t) and not _warp_compat.is_plain_array_annotation(t)
    ]


def _as_described(k: wp.Kernel, outcome: collections.Counter, reasons: collections.Counter) -> wp.Kernel | None:
    """The kernel an op transforms: a kernel with ``wp.indexedarray`` parameters as its flat kernel
    (the view's accesses through explicit index arrays, see interop/_indexed.py); None, counted,
    where an op refuses it when described (fabric arrays, a view it cannot follow)."""
    views = _views(k)
    if not views:
        return k
    if not all(_warp_compat.is_indexed_array_annotation(t) for t in views):
        outcome["fabric arrays (refused when described)"] += 1
        return None
    outcome["with indexed arrays"] += 1
    try:
        flat = _structs.flatten_kernel(k, k.key).kernel
    except interop.UnsupportedError as e:
        outcome["indexed arrays refused when described"] += 1
        reasons[str(e).split(", and the kernel ", 1)[-1].split(" (`", 1)[0][:100]] += 1
        return None
    if _views(flat):  # an indexed array inside a struct
        outcome["indexed arrays refused when described"] += 1
        reasons["an indexed array inside a struct"] += 1
        return None
    return flat


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("packages", nargs="*", default=["warp.tests", "warp.examples"])
    ap.add_argument("--compile-arch", type=int, default=None, help="also build each tangent kernel with NVRTC")
    args = ap.parse_args()
    wp.config.quiet = True
    wp.init()
    outcome: collections.Counter = collections.Counter()
    reasons: collections.Counter = collections.Counter()
    bugs: list[str] = []
    where = tempfile.mkdtemp()
    for mname, kernel in _kernels(args.packages):
        variants = list(kernel.overloads.values()) if kernel.is_generic else [kernel]
        if not variants:
            outcome["generic without overloads"] += 1
        for k in variants:
            k = _as_described(k, outcome, reasons)
            if k is None:
                continue
            diff = _differentiable(k)
            if not any(diff.values()):
                outcome["nothing to differentiate"] += 1
                continue
            try:
                tk = _tangent.tangent_kernel(k, diff, k.key)
            except interop.UnsupportedError as e:
                outcome["refused"] += 1
                if uses_tiles(k):
                    outcome["refused (tile kernels)"] += 1
                m = re.search(r"not available: (.*?)(?: at |\. Forward)", str(e))
                reasons[(m.group(1) if m else str(e))[:100]] += 1
                continue
            except Exception:  # noqa: BLE001 (what the sweep is for)
                outcome["GENERATOR BUG"] += 1
                bugs.append(f"{mname}.{k.key}: generation\n{traceback.format_exc(limit=4)}")
                continue
            outcome["ok"] += 1
            if uses_tiles(k):
                outcome["ok (tile kernels)"] += 1
            if args.compile_arch is None:
                continue
            try:
                wp.compile_aot_module(tk.kernel.module, arch=args.compile_arch, module_dir=where)
            except Exception as e:  # noqa: BLE001
                try:
                    wp.compile_aot_module(k.module, arch=args.compile_arch, module_dir=where)
                except Exception:  # noqa: BLE001 (the kernel itself does not build: not ours)
                    outcome["kernel itself does not build"] += 1
                    continue
                outcome["GENERATOR BUG"] += 1
                bugs.append(f"{mname}.{k.key}: sm_{args.compile_arch} build\n{str(e)[-800:]}")
    print(dict(outcome))
    for reason, n in reasons.most_common():
        print(f"{n:5d}  refused: {reason}")
    for b in bugs:
        print("----", b)
    return 1 if bugs else 0


if __name__ == "__main__":
    sys.exit(main())
