"""The test suite leaves nothing behind outside the clone (issue 33 item 6): conftest.py's
torch.compile cache folder, made in the temporary directory, is removed when the run ends."""

from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_a_pytest_run_removes_its_inductor_cache_folder(tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_CACHE_DIR"}
    env["TMPDIR"] = str(tmp)
    # a test that compiles with inductor would write there; the folder exists from the start either way
    code = (
        "import os, sys, pytest; "
        "rc = pytest.main(['-q', '-p', 'no:cacheprovider', '--rootdir', sys.argv[1], sys.argv[2]]); "
        "print('CACHE', os.environ['TORCHINDUCTOR_CACHE_DIR']); sys.exit(rc)"
    )
    test = os.path.join(ROOT, "tests", "test_noxfile_torch.py") + "::test_the_pinned_torch_is_a_cpu_build"
    r = subprocess.run(
        [sys.executable, "-c", code, ROOT, test], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300
    )
    assert r.returncode == 0, r.stdout + r.stderr
    cache = next(line.split(" ", 1)[1] for line in r.stdout.splitlines() if line.startswith("CACHE "))
    assert cache.startswith(str(tmp))  # made in the temporary directory...
    assert not os.path.exists(cache)  # ...and gone
    assert os.listdir(tmp) == [], os.listdir(tmp)
