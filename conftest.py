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

# The run's own temporary directory: every test, worker and child process (they inherit TMPDIR) and
# the libraries they run (Warp's wp_pch_* folders, NVRTC's __nvrtc_auto_pch_*, tempfile.mkdtemp()
# in a guide's code) write their temporary files there, not among other processes' files in the
# shared one. The controlling process makes it and removes it when the run ends, and reports what
# was left in it (pytest_sessionfinish): the suite leaves nothing behind in the temporary directory.
if "INTEROP_TESTS_TMPDIR" not in os.environ:
    _RUN_TMPDIR = tempfile.mkdtemp(prefix="interop-tests-")
    os.environ["INTEROP_TESTS_TMPDIR"] = os.environ["TMPDIR"] = _RUN_TMPDIR
    tempfile.tempdir = None  # tempfile reads TMPDIR again

    def _remove_run_tmpdir(owner: int = os.getpid(), path: str = _RUN_TMPDIR) -> None:
        if os.getpid() == owner:
            shutil.rmtree(path, ignore_errors=True)

    atexit.register(_remove_run_tmpdir)
    _RUN_TMPDIR_OWNER = True
else:
    _RUN_TMPDIR_OWNER = False

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


#: what may be in the run's temporary directory at its end, all removed with the directory: pytest's
#: own tmp_path folders (pytest keeps them for inspection), the torch.compile cache above, and
#: torch's ``torchinductor_<user>`` (torch 2.13's inductor makes its header and kernel caches there
#: whatever TORCHINDUCTOR_CACHE_DIR says: ``cache_dir_utils.default_cache_dir()``), and NVRTC 13's
#: ``nvrtc_bundled_headers_*`` (the CUDA headers it extracts for a build and may leave at exit; no
#: process id in the name, so a process cannot tell its own from a running worker's)
_RUN_TMPDIR_EXPECTED = re.compile(r"pytest-of-.*|interop-tests-inductor-.*|torchinductor_.*|nvrtc_bundled_headers_.*")


def run_tmpdir_leftovers() -> list[str]:
    """What the run left in its temporary directory, beyond what is expected there and the
    precompiled-header folders of this process's own Warp (a run without workers compiles here:
    Warp removes them when the process exits, after this check)."""
    path = os.environ.get("INTEROP_TESTS_TMPDIR", "")
    if not os.path.isdir(path):
        return []
    own: set[str] = set()
    if "warp" in sys.modules:
        from interop._warp_compat import precompiled_header_dirs

        own = {os.path.basename(d) for d in precompiled_header_dirs()}
    return sorted(e for e in os.listdir(path) if not _RUN_TMPDIR_EXPECTED.fullmatch(e) and e not in own)


def pytest_sessionfinish(session, exitstatus):
    """The controlling process of a run that made the temporary directory fails a passing run that
    left something there (each entry named); the directory is removed at exit either way."""
    if not _RUN_TMPDIR_OWNER or hasattr(session.config, "workerinput"):
        return
    import time

    left, deadline = run_tmpdir_leftovers(), time.monotonic() + 10
    while left and time.monotonic() < deadline:  # xdist's workers may still be exiting (their atexit cleanups)
        time.sleep(0.5)
        left = run_tmpdir_leftovers()
    if not left:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    message = (
        f"the run left {len(left)} entries in its temporary directory ({os.environ['INTEROP_TESTS_TMPDIR']}, "
        f"removed now): {', '.join(left[:20])}: a test must remove what it and the code it runs create"
    )
    if reporter is not None:
        reporter.write_line(message, red=True)
    if exitstatus == 0 and os.environ.get("INTEROP_TMPDIR_LEFTOVERS") != "warn":
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


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


@pytest.fixture(scope="session", autouse=True)
def _nvrtc_pch_removed():
    """NVRTC 13 (Warp's CUDA builds, on a GPU or for sm_XX without one) makes its automatic precompiled
    header in the temporary directory, ``__nvrtc_auto_pch_<pid>_<n>`` (over 100 MB), and leaves it: this
    process's are removed when its tests end."""
    yield
    import glob

    for path in glob.glob(os.path.join(tempfile.gettempdir(), f"__nvrtc_auto_pch_{os.getpid()}_*")):
        shutil.rmtree(path, ignore_errors=True)


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
