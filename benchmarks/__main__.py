"""Run the benchmarks: ``python -m benchmarks [numpy torch jax paddle] [--quick]``."""

from __future__ import annotations

import importlib
import importlib.util
import sys

ALL = ("numpy", "torch", "jax", "paddle")


def main(argv: list[str]) -> int:
    quick = "--quick" in argv
    names = [a for a in argv if not a.startswith("--")] or list(ALL)
    import warp as wp

    wp.config.quiet = True
    wp.config.log_level = wp.LOG_WARNING  # no per-module load messages
    wp.init()
    for name in names:
        if name != "numpy" and importlib.util.find_spec(name) is None:
            print(f"\n[{name}] not installed: skipped")
            continue
        mod = importlib.import_module(f"benchmarks.bench_{name}")
        mod.run(quick=quick)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
