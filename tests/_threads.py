"""Run one function in several threads at once (tests of concurrent calls)."""

from __future__ import annotations

import threading
from typing import Callable


def in_threads(worker: Callable[[int], bool], n: int = 4) -> list:
    """Start ``worker(k)`` for k in range(n) together and wait; return what went wrong: each ``k``
    whose worker returned False, and each exception (repr) a worker raised."""
    problems: list = []

    def run(k: int) -> None:
        try:
            if not worker(k):
                problems.append(k)
        except Exception as e:  # noqa: BLE001 (returned to the test)
            problems.append(repr(e))

    ts = [threading.Thread(target=run, args=(k,)) for k in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return problems
