"""Measured figures and the chart in the README and the docs, written from committed measurements.

A maintainer's explicit step (``nox -s measure`` runs the measurements, then this with ``--write``);
the test command never runs it, so a clone is left as it was found.

A figure is a marker around its text, ``<!-- figure SOURCE:PATH~FORMAT -->text<!-- /figure -->``
(``~``, not ``|``: a marker may sit in a Markdown table cell);
this script replaces each marker's text with the value at ``PATH`` in ``SOURCE``'s JSON file, so a
figure is never typed by hand and changes only with its measurement. Sources (:data:`SOURCES`):

- ``tests``: ``docs/measurements/tests.json``, written by a whole run of the suite in ``nox -s
  measure`` (it sets ``INTEROP_TEST_SUMMARY``; ``conftest.py`` writes counts per outcome, wall time,
  workers and the slowest files).
- ``bench-run``: ``docs/measurements/bench.json``, one run of the benchmarks (``python -m benchmarks
  --json``, in ``nox -s measure``): every n=1024 block and the gate's ratios. The README's chart
  ``benchmarks/results.png`` is drawn from it too (:data:`CHARTS`), its date and machine on it.
- ``bench``: ``benchmarks/baseline.json`` (the CPU benchmark gate's bars, ``--write-baseline``).
- ``gpu``: the ``cuda`` section of ``benchmarks/baseline.json``.
- ``gpu-run``: ``benchmarks/results/gpu-run.json``, the counts of the last GPU session's run
  (``tests/gpu_session.sh``; its log is named there).
- ``first-call``: ``docs/measurements/first-call.json``, ``python -m benchmarks --first-call --json``.
- ``warp-1.16`` ... ``warp-1.18``: ``docs/measurements/warp-1.XX.json``, a whole run of the suite on
  that Warp (``nox -s warp_1_XX``; the same summary as ``tests``, which is the run on CI's Warp, 1.19).
- ``warp-versions``: ``docs/measurements/warp-versions.json``, the gate's per-call ratios on each Warp
  against the newest's (``python -m benchmarks.warp_versions``).
- ``jax-transitions``: ``docs/measurements/jax-transitions.json``, a JAX op inside a larger XLA
  program on the CPU and the cloth rollout, before and after the fix of issue 49
  (``python -m benchmarks.jax_transitions --json PATH --label before|after``).

``PATH`` is dot-separated keys; a key holding dots or spaces goes in braces
(``ratios{torch: a / b}``; not brackets: MkDocs would read ``[a][b]`` as a link reference). ``FORMAT``: ``int`` (``2,960``), ``x`` (``1.45x``), ``inv`` (the
inverse of a ratio: a gated time ratio as a bandwidth ratio), ``us`` (``12.3 us``), ``usplus``
(``+1.5 us``), ``ms`` (``17.0 ms``), ``sci`` (``5e-07``), ``min`` (seconds
as ``12 min 30 s``), ``s`` (``41 s``), ``s3`` (``0.061 s``), ``plus`` (``+0.028 s``), ``pct`` (``+4 %``: a quotient as a difference), ``files`` (the slowest files as a Markdown list), or none
(the value as it is). Each source carries its ``date``; the docs name it beside the figures.

``python docs/figures.py --write`` rewrites the files and draws the charts; ``python docs/figures.py``
(or ``--check``) changes nothing and exits 1 naming each stale figure or chart (the docs session and
``tests/test_docs.py`` run the check).
"""

from __future__ import annotations

import json
import os
import re
import sys
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: source name -> (file, key of its section or None)
SOURCES = {
    "tests": ("docs/measurements/tests.json", None),
    "bench": ("benchmarks/baseline.json", None),
    "bench-run": ("docs/measurements/bench.json", None),
    "gpu": ("benchmarks/baseline.json", ("devices", "cuda")),
    "gpu-run": ("benchmarks/results/gpu-run.json", None),
    "first-call": ("docs/measurements/first-call.json", None),
    **{f"warp-{m}": (f"docs/measurements/warp-{m}.json", None) for m in ("1.16", "1.17", "1.18")},
    "warp-versions": ("docs/measurements/warp-versions.json", None),
    "jax-transitions": ("docs/measurements/jax-transitions.json", None),
}
#: the files whose figures are written here
FILES = (
    "README.md",
    "docs/index.md",
    "docs/development.md",
    "docs/performance.md",
    "docs/install.md",
    "docs/guide/jax.md",
)
#: charts drawn from a measurement: (source, the PNG)
CHARTS = (("bench-run", "benchmarks/results.png"),)
MARKER = re.compile(r"<!-- figure ([\w.-]+):([^~>]+?)(?:~(\w+))? -->(.*?)<!-- /figure -->", re.S)


def load(source: str) -> dict[str, Any]:
    """The JSON of ``source`` (its section, for a source that is part of a file)."""
    path, section = SOURCES[source]
    with open(os.path.join(ROOT, path)) as f:
        data = json.load(f)
    for key in section or ():
        data = data[key]
    return data


def _keys(path: str) -> list[str]:
    keys = []
    for m in re.finditer(r"([^.{}]+)|\{([^}]+)\}", path):
        keys.append(m.group(1) if m.group(1) is not None else m.group(2))
    return keys


def value(source: str, path: str) -> Any:
    """The value at ``path`` in ``source``."""
    v: Any = load(source)
    for k in _keys(path.strip()):
        v = v[int(k)] if isinstance(v, list) else v[k]
    return v


def render(v: Any, fmt: str | None) -> str:
    """``v`` as the docs print it."""
    if fmt == "int":
        return f"{int(v):,}"
    if fmt == "x":
        return f"{float(v):.2f}x"
    if fmt == "inv":  # a time ratio (ours over theirs) as a bandwidth ratio
        return f"{1 / float(v):.2f}x"
    if fmt == "s":
        return f"{round(float(v))} s"
    if fmt == "us":  # microseconds to the tenth
        return f"{float(v):.1f} us"
    if fmt == "usplus":  # a difference in microseconds
        return f"{float(v):+.1f} us"
    if fmt == "sci":  # a small quantity, one significant digit
        return f"{float(v):.0e}"
    if fmt == "ms":  # milliseconds to the tenth
        return f"{float(v):.1f} ms"
    if fmt == "s3":  # seconds to the millisecond
        return f"{float(v):.3f} s"
    if fmt == "plus":  # a difference in seconds
        return f"+{float(v):.3f} s"
    if fmt == "min":
        m, s = divmod(round(float(v)), 60)
        return f"{m} min {s} s" if m else f"{s} s"
    if fmt == "pct":  # a quotient as a difference in percent (1.04 -> +4 %)
        return f"{(float(v) - 1) * 100:+.0f} %"
    if fmt == "files":
        return "\n" + "".join(f"- `{name}`: {round(sec)} s\n" for name, sec in v)
    return str(v)


def rewrite(text: str) -> str:
    """``text`` with every figure written from its source."""

    def one(m: re.Match) -> str:
        source, path, fmt, _ = m.groups()
        return f"<!-- figure {source}:{path}{'~' + fmt if fmt else ''} -->{render(value(source, path), fmt)}<!-- /figure -->"

    return MARKER.sub(one, text)


def stale(root: str = ROOT) -> list[str]:
    """``file: figure`` for each figure whose text is not its source's value."""
    out = []
    for rel in FILES:
        with open(os.path.join(root, rel)) as f:
            text = f.read()
        for m in MARKER.finditer(text):
            source, path, fmt, shown = m.groups()
            want = render(value(source, path), fmt)
            if shown != want:
                out.append(f"{rel}: {source}:{path} shows {shown!r}, its source says {want!r}")
    return out


def _png_text(path: str) -> dict[str, str]:
    """The ``tEXt`` entries of a PNG (no imaging library needed)."""
    import struct

    out = {}
    with open(path, "rb") as f:
        data = f.read()
    pos = 8
    while pos + 8 <= len(data):
        (length,), kind = struct.unpack(">I", data[pos : pos + 4]), data[pos + 4 : pos + 8]
        if kind == b"tEXt":
            key, _, text = data[pos + 8 : pos + 8 + length].partition(b"\0")
            out[key.decode("latin-1")] = text.decode("latin-1")
        pos += 12 + length
    return out


def stale_charts(root: str = ROOT) -> list[str]:
    """``chart: why`` for each chart not drawn from its source's current measurement."""
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    from benchmarks.chart import measurement_tag

    out = []
    for source, rel in CHARTS:
        want = measurement_tag(load(source))
        path = os.path.join(root, rel)
        got = _png_text(path).get("Source") if os.path.exists(path) else "missing"
        if got != want:
            out.append(f"{rel}: drawn from {got!r}, its source {source} is {want!r}")
    return out


def write_charts() -> None:
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    from benchmarks.chart import chart_from_measurement

    for source, rel in CHARTS:
        chart_from_measurement(load(source), os.path.join(ROOT, rel))


def main(argv: list[str]) -> int:
    if "--write" not in argv:
        bad = stale() + stale_charts()
        for line in bad:
            print("stale figure:", line)
        if bad:
            print("(a maintainer's `python docs/figures.py --write` writes them from the measurements)")
        return 1 if bad else 0
    write_charts()
    for rel in FILES:
        path = os.path.join(ROOT, rel)
        with open(path) as f:
            text = f.read()
        new = rewrite(text)
        if new != text:
            with open(path, "w") as f:
                f.write(new)
            print("wrote", rel)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
