"""Every Python block of README.md and docs/**/*.md runs as written (each in a fresh process, from a
file: Warp needs kernel source), and what a block's comments say it prints is what it prints.

Markers (a block's first line): ``# needs a CUDA GPU`` runs only where one is present;
``# not run by the tests: <reason>`` is skipped with that reason. A block that imports a framework
that is not installed is skipped. Identical blocks (the README repeats the quick start) run once.
"""

import glob
import importlib.util
import os
import re

import pytest
from _subprocess import run_script

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC_FILES = ["README.md"] + sorted(
    os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True)
)
FRAMEWORK_MODULES = ("torch", "jax", "paddle", "cupy")
NOT_RUN = "# not run by the tests:"
NEEDS_GPU = "# needs a CUDA GPU"


def _text(rel: str) -> str:
    with open(os.path.join(ROOT, rel)) as f:
        return f.read()


def _blocks(rel: str) -> list[tuple[str, str]]:
    """Every ```python block of one file: (id, code); ids name the file and the heading above."""
    stem = re.sub(r"[^a-z0-9]+", "-", rel.lower().removesuffix(".md")).strip("-")
    out: list[tuple[str, str]] = []
    heading = "top"
    for m in re.finditer(r"^(#{1,3} [^\n]*)$|^```python\n(.*?)^```", _text(rel), re.S | re.M):
        if m.group(1):
            heading = re.sub(r"[^a-z0-9]+", "-", m.group(1).lstrip("# ").lower()).strip("-")
            continue
        n = sum(1 for i, _ in out if i.startswith(f"{stem}:{heading}-"))
        out.append((f"{stem}:{heading}-{n}", m.group(2)))
    return out


def block_after(rel: str, marker: str) -> str:
    """The first Python block of ``rel`` after the text ``marker`` (for tests that add assertions to it)."""
    section = _text(rel).split(marker, 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def _unique_blocks() -> list[tuple[str, str]]:
    seen: dict[str, str] = {}
    for rel in DOC_FILES:
        for ident, code in _blocks(rel):
            seen.setdefault(code, ident)
    return [(ident, code) for code, ident in seen.items()]


BLOCKS = _unique_blocks()


def _normalized(s: str) -> str:
    s = " ".join(s.split())
    return re.sub(r"([\[(]) ", r"\1", s)  # NumPy pads "[ 0. 10.]"; a comment may write "[0. 10.]"


def promised_outputs(code: str) -> list[str]:
    """What the block's ``print(...)  # <output>[: explanation]`` comments say it prints."""
    return [c.split(": ")[0].strip() for c in re.findall(r"^\s*print\(.*\)\s+# (.+)$", code, re.M)]


def _run_block(code: str, cwd, timeout: float, expect_last: str | None = None):
    """Run a block in a fresh process from ``cwd``, the project importable (not ``tests``: blocks run as
    written); fail with its output if it fails; ``expect_last``: what its output must end with."""
    r = run_script(code, timeout=timeout, cwd=cwd, tests_importable=False)
    if expect_last is not None:
        assert r.stdout.strip().endswith(expect_last), r.stdout[-2000:]
    return r


@pytest.mark.parametrize("code", [c for _, c in BLOCKS], ids=[i for i, _ in BLOCKS])
def test_python_block_runs_as_written(code, tmp_path):
    """Each Python block runs on its own, as written, and prints what its comments promise."""
    if code.startswith(NOT_RUN):
        pytest.skip(code.splitlines()[0].lstrip("# "))
    if code.startswith(NEEDS_GPU):
        import warp as wp

        if wp.get_cuda_device_count() == 0:
            pytest.skip("block marked '# needs a CUDA GPU'; none found")
    imported = set(re.findall(r"^(?:import|from) ([\w, .]+)", code, re.M))
    names = {n.strip().split(".")[0].split(" ")[0] for line in imported for n in line.split(",")}
    missing = [m for m in FRAMEWORK_MODULES if m in names and importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"block needs {', '.join(missing)} (not installed)")
    r = _run_block(code, tmp_path, timeout=600)
    printed = _normalized(r.stdout)
    for promised in promised_outputs(code):
        assert _normalized(promised) in printed, (promised, r.stdout[-3000:])


def test_every_print_in_the_docs_says_what_it_prints():
    """A print's comment is its output: the checker above finds one for every print of every block."""
    for ident, code in BLOCKS:
        prints = re.findall(r"^\s*print\(.*$", code, re.M)
        assert len(promised_outputs(code)) == len(prints), (ident, prints)


def test_every_block_prints_what_it_shows():
    # a snippet run as a script shows its results on the screen, not only in comments
    for ident, code in BLOCKS:
        if not code.startswith(NOT_RUN):
            assert "print(" in code, ident


def test_readme_is_a_front_page():
    text = _text("README.md")
    lines = text.splitlines()
    assert len(lines) < 300, len(lines)
    first_screen = "\n".join(lines[:40])
    # the first screen says what to run (the demo and the tests), then where CUDA stands: verified on
    # which GPU, and what is not yet run
    assert first_screen.index("nox -s demo") < first_screen.index("nox -s tests") < first_screen.index("## Status")
    assert "CUDA" in first_screen and "not yet run" in first_screen
    assert text.index("## Try it") < text.index("## Status") < text.index("## Features") < text.index("## Installation")
    assert text.index("## Installation") < text.index("## Quick start") < text.index("## Try it: the demo and")
    # the CPU torch line sits inside the installation block, before any `.[torch]`
    install = re.search(r"## Installation\n.*?```bash\n(.*?)```", text, re.S).group(1)
    cpu = install.index("--index-url https://download.pytorch.org/whl/cpu")
    assert cpu < install.index(".[torch]"), install
    assert "<this repository" not in text
    assert "(benchmarks/results.png)" in text and os.path.exists(os.path.join(ROOT, "benchmarks", "results.png"))
    for target in re.findall(r"\]\(((?!https?:)[^)#]+)(?:#[^)]*)?\)", text):  # the site checks docs/ itself
        assert os.path.exists(os.path.join(ROOT, target)), target
    code = "\n".join(c for rel in DOC_FILES for _, c in _blocks(rel))
    assert "def scale_then_add(x: wp.array" in code  # a Python-function op
    assert "in_axes=(None, None, 0)" in code  # jax.vmap with a scalar argument
    assert 'interop.convert(x, to="torch")' in code


def test_readme_commands_are_what_ci_runs():
    text = _text("README.md")
    tests_cmd = next(line for line in text.splitlines() if line.endswith("nox -s tests"))
    with open(os.path.join(ROOT, ".ci", "run")) as f:
        assert tests_cmd in f.read()


def test_docs_site_lists_every_page_and_the_chart():
    """mkdocs.yml's nav names every page of docs/ (mkdocs --strict builds them; this catches a page
    left out of the nav before a docs build does), and the chart the site shows is the benchmark's."""
    with open(os.path.join(ROOT, "mkdocs.yml")) as f:
        nav = f.read()
    pages = {os.path.relpath(p, "docs") for p in DOC_FILES if p.startswith("docs")}
    listed = set(re.findall(r":\s+([\w/.-]+\.md)\s*$", nav, re.M))
    assert pages == listed, (pages - listed, listed - pages)
    import filecmp

    # a link in the repository (a copy in an sdist): the site shows the chart `nox -s bench` writes
    chart = os.path.join(ROOT, "docs", "results.png")
    assert filecmp.cmp(chart, os.path.join(ROOT, "benchmarks", "results.png"), shallow=False)
    for page in ("guide/numpy.md", "guide/warp.md", "guide/torch.md", "guide/jax.md", "guide/paddle.md"):
        assert page in pages
    assert {"contract.md", "bounds.md", "scaling.md", "guarantees.md", "limitations.md", "api.md"} <= pages


def test_contract_vecmat_example_runs(tmp_path):
    code = block_after("docs/contract.md", "## Example: vectors, matrices, several outputs")
    code += (
        "\nassert d.shape == (n,) and e.shape == (n, 3) and f.shape == (n, 2, 2)"
        "\nassert w.shape == (n,) and w.ptr == b.ctypes.data\n"
        "print('ok')\n"
    )
    _run_block(code, tmp_path, timeout=300, expect_last="ok")


def test_contract_parameter_order_and_tile_example_runs(tmp_path):
    """The contract's example: an output before a scalar, a tile kernel with block_dim (described and per call)."""
    code = block_after("docs/contract.md", "- `block_dim` (tile kernels)")
    code += (
        "\nimport numpy as np"
        "\nnp.testing.assert_array_equal(sums, [1.0, 3.0])"
        "\nnp.testing.assert_array_equal(wide, [8.0, 8.0, 8.0])"
        "\nassert norms.with_block_dim(128).description.block_dim == 128\n"
        "print('ok')\n"
    )
    _run_block(code, tmp_path, timeout=300, expect_last="ok")


def test_contract_tile_launch_forms_example_runs(tmp_path):
    """The contract's three tile launch forms (docs/contract.md, "Devices"): wp.launch with a thread
    index, wp.launch_tiled with the tile grid read or given, no wp.tid() with launch_dims=1."""
    code = block_after("docs/contract.md", "- **Tile kernels launch as Warp's own code launches them.**")
    code += (
        "\nref = wp.zeros(128, dtype=wp.vec3)"
        "\nwp.launch(step, dim=128, inputs=[pos, np.zeros_like(pos), ref, 128], block_dim=64, device='cpu')"
        "\nnp.testing.assert_allclose(new_pos, ref.numpy(), rtol=1e-5)"
        "\nnp.testing.assert_array_equal(sums, [64.0, 64.0, 64.0])"
        "\nnp.testing.assert_array_equal(same, sums)"
        "\nnp.testing.assert_array_equal(filled, np.ones(16))\n"
        "print('ok')\n"
    )
    _run_block(code, tmp_path, timeout=300, expect_last="ok")


# ---- measured figures come from measurements (issue 45) ---------------------------------------
def _figures():
    import importlib.util

    spec = importlib.util.spec_from_file_location("docs_figures", os.path.join(ROOT, "docs", "figures.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


#: (file, the heading of a section that holds measured figures, or None for the whole file)
MEASURED_SECTIONS = [
    ("README.md", "## Status"),
    ("docs/index.md", "## Status"),
    ("docs/development.md", "## Time of the test command"),
    ("docs/performance.md", None),
    ("docs/install.md", None),
]
#: a number with a unit of time, a ratio or a test count: a measurement
HAND_TYPED = re.compile(r"(?<![\w.^])\d[\d,]*(?:\.\d+)?\s?(?:x|us|ms|s|min|GB/s|passed|failed|skipped|tests)\b")


def _section(rel: str, heading: str | None) -> str:
    text = _text(rel)
    if heading is None:
        return text
    start = text.index(heading + "\n")
    depth = heading.count("#")
    nxt = re.search(rf"^#{{1,{depth}}} ", text[start + len(heading) :], re.M)
    return text[start : start + len(heading) + (nxt.start() if nxt else len(text))]


def test_every_figure_is_its_measurement():
    """docs/figures.py writes each figure from its source; none differs from it (a figure edited by
    hand, or a measurement renewed without `python docs/figures.py`)."""
    assert _figures().stale() == []


def test_every_chart_is_drawn_from_its_measurement():
    """The README's chart carries the date and machine of the measurement it was drawn from (a PNG text
    entry docs/figures.py --write stores): a chart from another run than the figures' is stale."""
    figures = _figures()
    assert figures.stale_charts() == []
    assert figures.CHARTS and all(os.path.exists(os.path.join(ROOT, png)) for _, png in figures.CHARTS)


@pytest.mark.parametrize("rel, heading", MEASURED_SECTIONS)
def test_no_hand_typed_figure_where_figures_are_measured(rel, heading):
    figures = _figures()
    text = figures.MARKER.sub("", _section(rel, heading))
    text = re.sub(r"`[^`]*`|\([^)]*\.(?:md|txt|json|png)[^)]*\)", "", text)  # code and links
    assert HAND_TYPED.findall(text) == [], f"{rel} {heading or ''}: a figure typed by hand; make it a figure marker"


def test_measurements_are_not_older_than_the_code_by_more_than_two_weeks():
    import datetime
    import subprocess

    try:
        out = subprocess.run(
            ["git", "log", "-1", "--format=%cs", "--", "interop", "adapters"],
            capture_output=True, text=True, cwd=ROOT, timeout=30,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        out = ""
    if not out:
        pytest.skip("no git history here (the code's date is unknown)")
    code = datetime.date.fromisoformat(out)
    figures = _figures()
    for source in figures.SOURCES:
        measured = datetime.date.fromisoformat(figures.load(source)["date"])
        assert (code - measured).days <= 14, f"{source}: measured {measured}, the code changed {code}; measure again"


# ---- the API reference renders as written (issue 52) -------------------------------------------
#: a Sphinx role (``:func:`x```): mkdocstrings renders Markdown, where it shows as raw text
SPHINX_ROLE = re.compile(r":(?:func|class|meth|mod|data|attr|exc|obj):`")


def _api_docstrings():
    """(name, docstring) of every object docs/api.md renders (``::: name``), and of a class's or a
    module's public members, which mkdocstrings renders with it."""
    import importlib
    import inspect

    for name in re.findall(r"^::: ([\w.]+)", _text("docs/api.md"), re.M):
        module, _, attr = name.rpartition(".")
        try:
            try:
                obj = importlib.import_module(name)
            except ImportError as e:
                if isinstance(e, ModuleNotFoundError) and e.name in FRAMEWORK_MODULES:
                    raise
                obj = getattr(importlib.import_module(module), attr)
        except ModuleNotFoundError as e:
            if e.name in FRAMEWORK_MODULES:
                continue  # an adapter whose framework this environment lacks (the JAX-only sessions)
            raise
        yield name, inspect.getdoc(obj) or ""
        if inspect.isclass(obj) or inspect.ismodule(obj):
            for member, value in vars(obj).items():
                if member.startswith("_") or not (inspect.isfunction(value) or isinstance(value, property)):
                    continue
                if inspect.ismodule(obj) and getattr(value, "__module__", None) != obj.__name__:
                    continue
                yield f"{name}.{member}", inspect.getdoc(value) or ""


FRAMEWORK_MODULES = ("torch", "jax", "jaxlib", "paddle", "cupy")


def test_api_reference_docstrings_have_no_sphinx_roles_or_dangling_references():
    """The API page shows each docstring as Markdown: no ``:func:`` roles, and a reference names a page
    that exists (docs/..., not the README's sections, which move)."""
    bad = []
    for name, doc in _api_docstrings():
        if SPHINX_ROLE.search(doc):
            bad.append(f"{name}: a Sphinx role: {SPHINX_ROLE.search(doc).group(0)}")
        if "(README," in doc:
            bad.append(f"{name}: refers to a README section")
        for page in re.findall(r"docs/[\w/]+\.md", doc):
            if not os.path.exists(os.path.join(ROOT, page)):
                bad.append(f"{name}: {page} does not exist")
    assert bad == [], bad


def test_guide_code_fits_the_page():
    """The framework guides' and the quick start's Python blocks wrap at 90 columns: the site shows
    them without sideways scrolling."""
    long = [
        f"{ident}: {line}"
        for ident, code in BLOCKS
        if ident.startswith(("docs-guide-", "docs-quickstart"))
        for line in code.splitlines()
        if len(line) > 90
    ]
    assert long == [], long


def test_no_figure_starts_a_line_inside_a_paragraph():
    """Markdown (the site's) reads a line that starts with an HTML comment as an HTML block, which ends
    the paragraph there: a figure marker stays on its sentence's line (a list of files excepted)."""
    figures = _figures()
    bad = [
        f"{rel}:{n}"
        for rel in figures.FILES
        for n, line in enumerate(_text(rel).splitlines(), 1)
        if line.startswith("<!-- figure") and not line.rstrip().endswith("~files -->")
    ]
    assert bad == [], bad


def test_the_chart_draws_every_panel_from_the_measurement(tmp_path, capsys):
    """benchmarks/chart.py finds each panel's rows in docs/measurements/bench.json (a row renamed in a
    bench_*.py and not in the chart would be dropped, said so); the PNG carries the measurement's date
    and machine. NVIDIA's warp_custom_op row is there only where nvalchemi-toolkit-ops is installed."""
    pytest.importorskip("matplotlib")
    from benchmarks.chart import PANELS, chart_from_measurement, measurement_tag

    figures = _figures()
    data = figures.load("bench-run")
    path = chart_from_measurement(data, str(tmp_path / "chart.png"))
    missing = [line for line in capsys.readouterr().out.splitlines() if "no row" in line]
    assert all("nvidia warp_custom_op" in line for line in missing), missing
    assert figures._png_text(path)["Source"] == measurement_tag(data) and data["date"] in measurement_tag(data)
    titles = [b["title"] for b in data["blocks"]]
    assert all(any(t.startswith(prefix) for t in titles) for prefix, _ in PANELS), titles
