"""Run the benchmarks: ``python -m benchmarks [numpy torch jax paddle] [--quick] [--chart PATH]``.

The chart (matplotlib) is written to benchmarks/results.png unless ``--chart PATH`` or
``--no-chart`` says otherwise.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys

ALL = ("numpy", "torch", "jax", "paddle")


def main(argv: list[str]) -> int:
    quick = "--quick" in argv
    chart = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results.png")
    if "--chart" in argv:
        i = argv.index("--chart")
        chart = argv[i + 1]
        argv = argv[:i] + argv[i + 2 :]
    if "--no-chart" in argv:
        chart = None
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
    if chart:
        from .chart import write_chart
        from .harness import RECORDED

        write_chart(RECORDED, chart)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
