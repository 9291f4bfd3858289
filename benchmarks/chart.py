"""The README's benchmark chart: per-call time at n=1024 of each framework's usual way and of the
interop op, drawn with matplotlib from the blocks :func:`benchmarks.harness.report` recorded, or
from a measurement ``python -m benchmarks --json`` wrote (:func:`chart_from_measurement`, which
``python docs/figures.py --write`` calls: the chart carries the measurement's date and machine)."""

from __future__ import annotations

import os

# (block title prefix, [(row label in the block, bar label)]): the usual way first, then ours
PANELS = [
    (
        "NumPy, saxpy, n=1024",
        [
            ("wp.launch, NumPy arrays passed directly", "wp.launch(NumPy arrays)"),
            ("interop op(x, y, 2.0), NumPy in/out (allocates output)", "interop op"),
        ],
    ),
    (
        "PyTorch (CPU), saxpy, n=1024",
        [
            ("guide custom op, forward+backward", "Warp guide's custom op, fwd+bwd"),
            ("nvidia warp_custom_op, forward+backward", "NVIDIA warp_custom_op, fwd+bwd"),
            ("interop op, eager forward+backward", "interop op, fwd+bwd"),
        ],
    ),
    (
        "JAX (CPU), saxpy, n=1024",
        [
            ("wp.jax_kernel inside jit", "wp.jax_kernel in jit"),
            ("interop op inside jit", "interop op in jit"),
            ("wp.jax_kernel jit(grad) (enable_backward=True)", "wp.jax_kernel jit(grad)"),
            ("interop op jit(grad)", "interop op jit(grad)"),
        ],
    ),
    (
        "Paddle (CPU), saxpy, n=1024",
        [
            ("wp.from_paddle x3 + wp.launch (output by paddle.zeros)", "wp.from_paddle + wp.launch"),
            ("interop op(x, y, 2.0), forward (no grad)", "interop op"),
        ],
    ),
]


def chart_from_measurement(data: dict, path: str) -> str | None:
    """Draw the chart of a ``--json`` measurement to ``path``, its date, machine and versions under it."""
    recorded = [(b["title"], [tuple(r) for r in b["rows"]], b["baseline"]) for b in data["blocks"]]
    caption = f"measured {data['date']} on {data['machine']}; {data['versions']}"
    return write_chart(recorded, path, caption=caption, source=measurement_tag(data))


def measurement_tag(data: dict) -> str:
    """What a chart stores of its measurement (PNG text ``Source``): ``docs/figures.py --check`` compares it."""
    return f"{data['date']}; {data['machine']}"


def write_chart(recorded, path: str, caption: str | None = None, source: str | None = None) -> str | None:
    """Draw the chart to ``path`` (``caption``: a line under it, e.g. the date and machine); returns the
    path, or None when nothing to draw or no matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("\n[chart] matplotlib is not installed: no chart written")
        return None
    blocks = {title: dict((label, us) for label, us, _ in rows) for title, rows, _ in recorded}
    panels = []
    missing = []
    for prefix, bars in PANELS:
        rows = next((b for t, b in blocks.items() if t.startswith(prefix)), None)
        if rows is None:
            continue
        missing += [f"{prefix}: {label}" for label, _ in bars if label not in rows]
        bars = [(name, rows[label]) for label, name in bars if label in rows]
        if bars:
            panels.append((prefix.split(",")[0], bars))
    for m in missing:  # a row renamed in a bench_*.py and not here: said, not silently dropped
        print(f"[chart] no row {m!r} in the measurement: not drawn")
    if not panels:
        return None
    fig, axes = plt.subplots(len(panels), 1, figsize=(8, 1.0 + 0.55 * sum(len(b) for _, b in panels)))
    axes = [axes] if len(panels) == 1 else list(axes)
    for ax, (name, bars) in zip(axes, panels):
        labels = [b[0] for b in bars]
        values = [b[1] for b in bars]
        colors = ["#76b900" if lab.startswith("interop") else "#9e9e9e" for lab in labels]
        ax.barh(labels, values, color=colors)
        ax.invert_yaxis()
        ax.set_title(name, loc="left", fontsize=10)
        for i, v in enumerate(values):
            ax.text(v, i, f" {v:.0f} us", va="center", fontsize=8)
        ax.set_xlim(0, max(values) * 1.25)
        ax.tick_params(labelsize=8)
    axes[-1].set_xlabel("microseconds per call, saxpy on 1024 floats, CPU (shorter is faster)")
    fig.suptitle("Per-call time: the usual way (grey) vs warp-interop (green)", fontsize=11)
    if caption:
        import textwrap

        lines = textwrap.wrap(caption, 110)
        fig.text(0.01, 0.005, "\n".join(lines), fontsize=7, color="#555555", va="bottom")
        fig.tight_layout(rect=(0, 0.018 * (len(lines) + 1), 1, 1))
    else:
        fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    # no timestamp or software version in the file: the same measurement draws the same bytes
    fig.savefig(path, dpi=110, metadata={"Software": None, "Source": source})
    plt.close(fig)
    print(f"\n[chart] written to {path}")
    return path
