"""Shared pytest setup: quiet Warp, initialise it once, and report what is installed."""

import atexit
import importlib.util
import os
import re
import shutil
import sys
import tempfile

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# torch.compile's on-disk caches are keyed by operator names: a run must not load code compiled by
# another checkout (or an older version of a test) whose ops had the same names but other backwards.
# The folder is this run's own, removed when the run ends (the suite leaves nothing outside the
# clone); child processes inherit it through the environment, and a forked child never removes it.
if "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
    _INDUCTOR_CACHE = tempfile.mkdtemp(prefix="interop-tests-inductor-")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = _INDUCTOR_CACHE

    def _remove_inductor_cache(owner: int = os.getpid(), path: str = _INDUCTOR_CACHE) -> None:
        if os.getpid() == owner:
            shutil.rmtree(path, ignore_errors=True)

    atexit.register(_remove_inductor_cache)

import warp as wp  # noqa: E402

wp.config.quiet = True
wp.config.log_level = wp.LOG_WARNING  # no per-module load messages
wp.init()


def has_module(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def has_cuda() -> bool:
    return wp.get_cuda_device_count() > 0


#: INTEROP_REQUIRE_CUDA=1 (the GPU run, see README): a CUDA test that would be skipped for want of a
#: GPU, or of a CUDA build of the framework it tests, fails instead
REQUIRE_CUDA = os.environ.get("INTEROP_REQUIRE_CUDA", "") not in ("", "0")
#: the devices the device-parametrized tests (conformance catalogue, cross-framework matrix, the property
#: generators through tests/_devices.py, which reads the same variable) run on; the tests marked ``cuda``
#: are skipped where it does not name cuda
DEVICES = [d for d in os.environ.get("INTEROP_TEST_DEVICES", "cpu,cuda").split(",") if d]


@pytest.fixture(params=[pytest.param(d, marks=[pytest.mark.cuda] if d != "cpu" else []) for d in DEVICES])
def device(request):
    """A device name, "cpu" or "cuda" (CUDA ones marked ``cuda``: skipped without a GPU)."""
    return request.param


def pytest_report_header(config):
    found = [m for m in ("torch", "jax", "paddle", "cupy") if has_module(m)]
    return [
        f"warp {wp.__version__}; frameworks installed: {', '.join(found) or 'none'}; CUDA: {has_cuda()}; "
        f"devices: {','.join(DEVICES)}{'; CUDA required' if REQUIRE_CUDA else ''}"
    ]


#: the frameworks a parametrization value may name ("paddle", "paddle.grad", "jax.jit", "torch-compile"...)
_FRAMEWORK_PARAMS = ("torch", "jax", "paddle", "cupy")


def _missing_framework(item) -> str | None:
    """The framework a parametrized test's values name that is not installed, or None."""
    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return None
    for v in callspec.params.values():
        if isinstance(v, str):
            head = re.split(r"[.\-_:]", v, maxsplit=1)[0]
            if head in _FRAMEWORK_PARAMS and not has_module(head):
                return head
    return None


def pytest_collection_modifyitems(config, items):
    # a case parametrized by a framework that is not installed (a GPU image without Paddle, say)
    # skips, saying which; a CUDA-required run still fails on a framework missing its CUDA build
    for item in items:
        fw = _missing_framework(item)
        if fw is not None:
            item.add_marker(pytest.mark.skip(reason=f"{fw} is not installed"))
    if not any(d.startswith("cuda") for d in DEVICES):
        if REQUIRE_CUDA:
            raise pytest.UsageError("INTEROP_REQUIRE_CUDA is set but INTEROP_TEST_DEVICES names no cuda device")
        skip = pytest.mark.skip(reason=f"INTEROP_TEST_DEVICES={','.join(DEVICES)} names no cuda device")
    elif has_cuda():
        return
    elif REQUIRE_CUDA:
        raise pytest.UsageError("INTEROP_REQUIRE_CUDA is set but Warp finds no CUDA device")
    else:
        skip = pytest.mark.skip(reason="needs a CUDA GPU (none found: wp.get_cuda_device_count() == 0)")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


_SESSION_START = [0.0]


def pytest_sessionstart(session):
    import time

    _SESSION_START[0] = time.monotonic()


def _write_summary(terminalreporter, path: str) -> None:
    """The run's measurement for the docs (docs/figures.py, source ``tests``): counts per outcome,
    wall time, workers, the slowest files; by the controlling process only (not xdist's workers)."""
    import datetime
    import json
    import platform
    import subprocess
    import time

    config = terminalreporter.config
    if hasattr(config, "workerinput"):
        return
    stats = terminalreporter.stats
    outcomes = {k: len([r for r in stats.get(k, ()) if getattr(r, "when", "call") in ("call", "setup")])
                for k in ("passed", "failed", "skipped", "xfailed", "xpassed", "error")}  # fmt: skip
    per_file: dict[str, float] = {}
    for reports in stats.values():
        for r in reports:
            nodeid, duration = getattr(r, "nodeid", ""), getattr(r, "duration", 0.0)
            if nodeid:
                f = nodeid.split("::", 1)[0]
                per_file[f] = per_file.get(f, 0.0) + float(duration or 0.0)
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT_DIR, timeout=10
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""
    workers = getattr(config.option, "numprocesses", None)
    summary = {
        "date": datetime.date.today().isoformat(),
        "commit": commit,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
        "warp": wp.__version__,
        "workers": workers if workers else 1,
        "wall_s": round(time.monotonic() - _SESSION_START[0], 1),
        "tests": sum(outcomes.values()),
        "outcomes": outcomes,
        "slowest_files": [[f, round(t, 1)] for f, t in sorted(per_file.items(), key=lambda kv: -kv[1])[:8]],
    }
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(summary, f, indent=1)
        f.write("\n")


ROOT_DIR = os.path.dirname(os.path.abspath(__file__))


def pytest_terminal_summary(terminalreporter):
    """The run's summary for the docs (INTEROP_TEST_SUMMARY names the file), then the property
    suite's counts per framework and dimension (tests/property_calls.py)."""
    summary = os.environ.get("INTEROP_TEST_SUMMARY")
    if summary:
        _write_summary(terminalreporter, summary)
    pc = sys.modules.get("property_calls")
    if pc is None or not pc.COUNTS:
        return
    import json

    table = pc.counts_table()
    terminalreporter.section("property cases per framework and dimension")
    for fw, dims in table.items():
        terminalreporter.write_line(f"{fw}:")
        for dim, vals in dims.items():
            terminalreporter.write_line(f"  {dim}: " + ", ".join(f"{v} {n}" for v, n in vals.items()))
    # one generated case: one drawn call (single, struct, tile, index-array calls, each call of a sequence)
    totals = {fw: sum(dims.get("cases", {}).values()) for fw, dims in table.items()}
    terminalreporter.write_line("generated cases per framework: " + ", ".join(f"{fw} {n}" for fw, n in totals.items()))
    path = os.environ.get("INTEROP_PROPERTY_COUNTS")
    if path:
        with open(path, "w") as f:
            json.dump(table, f, indent=1, sort_keys=True)


@pytest.fixture(autouse=True)
def _jax_x64_left_as_found():
    """A test that turns JAX's 64-bit mode on (or off) for good changes every later test in its worker
    (float64 where they expect float32): it fails here, naming the fix, and the setting is put back."""
    jax = sys.modules.get("jax")
    before = bool(jax.config.jax_enable_x64) if jax is not None else None
    yield
    if before is None:
        return
    after = bool(jax.config.jax_enable_x64)
    if after != before:
        jax.config.update("jax_enable_x64", before)
        pytest.fail(f"the test left jax_enable_x64 {after} (was {before}): use `with jax.enable_x64(...)`")
