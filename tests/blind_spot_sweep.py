"""Warp's reverse-mode blind spots over kernels written elsewhere: every module-level kernel of the
given packages (default: Warp's own tests and examples) read by :mod:`interop._blind_spots`, counted
by the kind of blind spot; ``--list`` prints each kernel refused with the message's place.

    python tests/blind_spot_sweep.py                 # ~1 min, no kernel is built
    python tests/blind_spot_sweep.py newton --list

Not part of the test suite (it depends on which kernels a release ships); the last run is in
docs/limitations.md, "Warp's reverse-mode blind spots".
"""

from __future__ import annotations

import argparse
import collections
import sys

import warp as wp

from interop import _blind_spots
from tests.tangent_sweep import _differentiable, _kernels


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("packages", nargs="*", default=["warp.tests", "warp.examples"])
    ap.add_argument("--list", action="store_true", help="print each refused kernel")
    args = ap.parse_args()
    wp.config.quiet = True
    wp.init()
    outcome: collections.Counter = collections.Counter()
    for mname, kernel in _kernels(args.packages):
        outcome["kernels"] += 1
        if not any(_differentiable(kernel).values()):
            outcome["nothing to differentiate"] += 1
            continue
        if not getattr(kernel.module, "options", {}).get("enable_backward", True):
            outcome["enable_backward=False"] += 1
            continue
        try:
            spot = _blind_spots.find(kernel)
        except Exception as e:  # noqa: BLE001 (what the sweep is for)
            outcome["ANALYSIS BUG"] += 1
            print(f"---- {mname}.{kernel.key}: {type(e).__name__}: {e}")
            continue
        if spot is None:
            outcome["adjoint right"] += 1
            continue
        kind = "tuple bound to one name" if "tuple" in spot.what else "local in a dynamic loop"
        outcome[f"refused: {kind}"] += 1
        if args.list:
            print(f"{mname}.{kernel.key}: {spot.what} {spot.where}")
    print(dict(outcome))
    return 1 if outcome["ANALYSIS BUG"] else 0


if __name__ == "__main__":
    sys.exit(main())
