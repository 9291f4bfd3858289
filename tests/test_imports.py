"""The core imports no framework, and the `interop` / `adapters` packages imported are this project's.

Both names are also taken by unrelated PyPI distributions (Illumina's `interop`, AdapterHub's
`adapters`), so a wrong environment could import theirs: the second group of tests catches that.
"""

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

import interop

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FRAMEWORK_MODULES = ("torch", "jax", "jaxlib", "paddle", "cupy", "tensorflow")


def run_isolated(code: str) -> dict:
    """Run ``code`` in a fresh interpreter with this checkout first on the path; it prints one JSON line."""
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env["WARP_INTEROP_QUIET"] = "1"
    prelude = "import sys, json\n"
    proc = subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(code)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


LOADED = f"[m for m in {FRAMEWORK_MODULES!r} if m in sys.modules]"


def test_import_interop_imports_no_framework():
    out = run_isolated(
        f"""
        import interop
        a = {LOADED}
        import adapters
        b = {LOADED}
        import adapters.numpy, adapters.warp
        c = {LOADED}
        print(json.dumps({{"interop": a, "adapters": b, "eager": c}}))
        """
    )
    assert out == {"interop": [], "adapters": [], "eager": []}


def test_numpy_and_warp_calls_import_no_framework():
    out = run_isolated(
        f"""
        import numpy as np
        import warp as wp
        wp.config.quiet = True
        import interop
        sys.path.insert(0, "tests")
        import catalogue  # kernels must live in a file for Warp to read their source

        op = catalogue.case("function").op  # a Python-function op: a * a * 3 + b
        x = np.arange(4, dtype=np.float32)
        r1 = op(x, x)
        r2 = op(wp.array(x, device="cpu"), wp.array(x, device="cpu"))
        catalogue.case("vec3").op(np.ones((2, 3), np.float32), np.ones((2, 3), np.float32))
        w = interop.convert(x, to="warp")
        n = interop.convert(w, to="numpy")
        try:
            op(x, memoryview(x), 2.0)  # an error path must not import frameworks either
        except TypeError:
            pass
        print(json.dumps({{"loaded": {LOADED}, "r1": r1.tolist(), "r2": r2.numpy().tolist(),
                           "same": int(n.ctypes.data == x.ctypes.data)}}))
        """
    )
    assert out["loaded"] == []
    assert out["r1"] == out["r2"] == [0.0, 4.0, 14.0, 30.0]
    assert out["same"] == 1


def test_interop_is_this_project():
    assert os.path.dirname(os.path.abspath(interop.__file__)) == os.path.join(ROOT, "interop")
    assert set(interop.__all__) >= {"op", "Op", "convert", "OpDescription", "Param"}
    assert callable(interop.op) and callable(interop.convert)
    assert interop.Op.__module__ == "interop._op"


def test_adapters_is_this_project():
    import adapters
    import adapters.numpy

    assert os.path.dirname(os.path.abspath(adapters.__file__)) == os.path.join(ROOT, "adapters")
    assert callable(adapters.numpy.call) and callable(adapters.numpy.bind)
    assert "warp-interop" in (adapters.__doc__ or "")


def test_packages_resolve_to_this_checkout_in_a_fresh_interpreter():
    out = run_isolated(
        """
        import interop, adapters
        print(json.dumps({"interop": interop.__file__, "adapters": adapters.__file__,
                          "has_op": hasattr(interop, "op") and hasattr(interop, "convert")}))
        """
    )
    assert out["interop"].startswith(os.path.join(ROOT, "interop"))
    assert out["adapters"].startswith(os.path.join(ROOT, "adapters"))
    assert out["has_op"]


def test_public_surface_is_small():
    assert {"op", "Op", "convert", "OpDescription", "Param"} <= set(interop.__all__)
    assert all(hasattr(interop, n) for n in interop.__all__)
    # 10, then issue 44: precompile, use_precompiled, PrecompiledWarning; issue 54: check_gradients; issue 51: indexed;
    # issue 50: BoundsError
    assert len(interop.__all__) <= 16


def _package_imports(pkg: str) -> dict[str, set[str]]:
    """Each module of ``pkg`` -> the sibling modules it imports (module level or inside functions)."""
    import ast

    d = os.path.join(ROOT, pkg)
    files = {f[:-3]: [os.path.join(d, f)] for f in os.listdir(d) if f.endswith(".py")}
    for f in os.listdir(d):  # a subpackage is one node: its files' imports of the package (level 2)
        sub = os.path.join(d, f)
        if os.path.isfile(os.path.join(sub, "__init__.py")):
            files[f] = [os.path.join(sub, g) for g in sorted(os.listdir(sub)) if g.endswith(".py")]
    mods = set(files)
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for m, paths in files.items():
        level = 2 if os.path.isdir(os.path.join(d, m)) else 1
        for path in paths:
            with open(path) as f:
                tree = ast.parse(f.read())
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.level == level:
                    names = [node.module.split(".")[0]] if node.module else [a.name for a in node.names]
                    graph[m].update(n for n in names if n in mods and n != m)
    return graph


def _imports_itself_back(graph: dict[str, set[str]], start: str) -> set[str] | None:
    """The modules ``start`` reaches through its imports when it reaches itself among them, else None."""
    seen, todo = set(), [start]
    while todo:
        for nxt in graph[todo.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen if start in seen else None


def test_core_and_adapters_import_one_way():
    """STYLE.md 15: description, then plan, then launch, then op; no module reaches itself again
    through its imports (a circle means a concern sits in the wrong room)."""
    for pkg in ("interop", "adapters"):
        graph = _package_imports(pkg)
        for start in graph:
            back = _imports_itself_back(graph, start)
            assert back is None, f"{pkg}/{start}.py imports itself back through {sorted(back)}"
    core = _package_imports("interop")
    below = {"_description": {"_plan", "_launch", "_op"}, "_plan": {"_launch", "_op"}, "_launch": {"_op"}}
    for mod, higher in below.items():
        assert not core[mod] & higher, f"interop/{mod}.py imports a layer above it: {sorted(core[mod] & higher)}"


def test_forward_mode_is_a_subpackage_with_one_front():
    """Issue 39: forward mode lives in interop/_tangent/; inside, imports run one way (helpers, rules,
    exprs, tiles, lower, tape, then the front) and no inner module imports the front back; outside it, code imports the
    front only (``interop._tangent``), never ``interop._tangent.<inner>``."""
    import ast

    d = os.path.join(ROOT, "interop", "_tangent")
    inner = {f[:-3] for f in os.listdir(d) if f.endswith(".py") and f != "__init__.py"}
    assert inner == {"helpers", "rules", "exprs", "tiles", "lower", "tape"}, inner
    order = ["helpers", "rules", "exprs", "tiles", "lower", "tape"]
    for m in inner:
        with open(os.path.join(d, m + ".py")) as f:
            tree = ast.parse(f.read())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                names = [node.module.split(".")[0]] if node.module else [a.name for a in node.names]
                for n in names:
                    assert n in inner, f"interop/_tangent/{m}.py imports {n!r} from the front"
                    assert order.index(n) < order.index(m), f"interop/_tangent/{m}.py imports {n} (above it)"
    pattern = re.compile(
        r"_tangent\.(helpers|rules|exprs|tiles|lower|tape)\b|from \.(helpers|rules|exprs|tiles|lower|tape) import"
    )
    for folder in ("interop", "adapters", "tests", "benchmarks", "examples"):
        for root, _, names in os.walk(os.path.join(ROOT, folder)):
            if os.path.abspath(root) == os.path.abspath(d):
                continue
            for name in names:
                if name.endswith(".py") and name != "test_imports.py":
                    with open(os.path.join(root, name)) as f:
                        hit = pattern.search(f.read())
                    assert hit is None, f"{os.path.join(root, name)} reaches inside interop/_tangent/: {hit.group(0)}"


FRAMEWORK_PACKAGES = ("torch", "jax", "paddle")


def _subpackage_imports(fw: str) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """For ``adapters/<fw>/``: each module -> the sibling modules it imports, and each module ->
    what it imports from above its package (``from .. import x``, ``from ..x import``,
    ``import adapters.x``, ``from adapters.x import``): the first name under ``adapters``."""
    import ast

    d = os.path.join(ROOT, "adapters", fw)
    mods = {f[:-3] for f in os.listdir(d) if f.endswith(".py")}
    siblings: dict[str, set[str]] = {m: set() for m in mods}
    above: dict[str, set[str]] = {m: set() for m in mods}
    for m in mods:
        with open(os.path.join(d, m + ".py")) as f:
            tree = ast.parse(f.read())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                names = [node.module.split(".")[0]] if node.module else [a.name for a in node.names]
                siblings[m].update(n for n in names if n in mods and n != m)
                if node.module is None:
                    # from . import x: a name the package front defines is an import of the front
                    siblings[m].update("__init__" for a in node.names if a.name not in mods)
            elif isinstance(node, ast.ImportFrom) and node.level == 2:
                above[m].update([node.module.split(".")[0]] if node.module else [a.name for a in node.names])
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("adapters."):
                above[m].add(node.module.split(".")[1])
            elif isinstance(node, ast.Import):
                above[m].update(a.name.split(".")[1] for a in node.names if a.name.startswith("adapters."))
    return siblings, above


@pytest.mark.parametrize("fw", FRAMEWORK_PACKAGES)
def test_framework_packages_import_one_way(fw):
    """Issue 30: each framework is a package; it imports ``_common`` and ``interop``, never another
    framework's package; inside it imports run one way, ``compat`` at the bottom (no sibling) and
    the front (``__init__``) at the top (no module imports it back)."""
    siblings, above = _subpackage_imports(fw)
    assert "compat" in siblings and "__init__" in siblings
    assert not siblings["compat"], f"adapters/{fw}/compat.py imports {sorted(siblings['compat'])}"
    for m, names in siblings.items():
        assert "__init__" not in names, f"adapters/{fw}/{m}.py imports the package front back"
    for start in siblings:
        back = _imports_itself_back(siblings, start)
        assert back is None, f"adapters/{fw}/{start}.py imports itself back through {sorted(back)}"
    others = {"torch", "jax", "paddle", "cupy", "numpy", "warp"} - {fw}
    for m, names in above.items():
        assert not names & others, f"adapters/{fw}/{m}.py imports another framework's adapter: {sorted(names & others)}"
        assert names <= {"_common"}, f"adapters/{fw}/{m}.py imports {sorted(names)} from adapters/"


def test_no_framework_module_left_at_the_top_of_adapters():
    top = os.listdir(os.path.join(ROOT, "adapters"))
    left = [f for f in top if f.startswith(tuple(f"_{fw}_" for fw in FRAMEWORK_PACKAGES))]
    assert not left, f"framework modules outside their package: {left}"
    assert not any(f in top for f in ("torch.py", "jax.py", "paddle.py"))


def test_a_lookup_of_torch_before_its_import_leaves_the_adapter_hook_armed():
    """An op described before torch is imported gets torch's operator when torch is imported (the
    import hook), also where something only looked torch up first (``importlib.util.find_spec``, as
    libraries check what is installed): the first call inside torch.compile(fullgraph=True) then
    traces (a lookup used to spend the one-shot hook, and the adapter's first import inside the
    trace failed: "Dynamo does not know how to enter a RLock context manager")."""
    pytest.importorskip("torch")
    out = run_isolated(
        """
        import importlib.util
        sys.path.insert(0, "tests")
        import interop
        from catalogue import scale_kernel  # (Warp builds no kernel from code given to python -c)

        op = interop.op(scale_kernel, name="test_imports::scale_after_lookup")
        importlib.util.find_spec("torch")
        import torch

        loaded = "adapters.torch" in sys.modules
        y = torch.compile(lambda a: op(a, 2.0), backend="aot_eager", fullgraph=True)(torch.ones(3, device="cpu"))
        print(json.dumps({"loaded": loaded, "y": y.tolist()}))
        """
    )
    assert out == {"loaded": True, "y": [2.0, 2.0, 2.0]}


def test_functions_a_reader_can_hold():
    """Issue 39 / STYLE.md 14: no function body in interop/ or adapters/ longer than 80 lines after
    its docstring (a longer one is several named steps), and no class over 500 lines (split by
    concern)."""
    import ast

    long = []
    for folder in ("interop", "adapters"):
        for root, _, names in os.walk(os.path.join(ROOT, folder)):
            for name in names:
                if not name.endswith(".py"):
                    continue
                path = os.path.join(root, name)
                with open(path) as f:
                    tree = ast.parse(f.read())
                rel = os.path.relpath(path, ROOT)
                for node in ast.walk(tree):
                    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        body = node.body
                        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                            body = body[1:]
                        if body and body[-1].end_lineno - body[0].lineno + 1 > 80:
                            long.append(f"{rel}: {node.name} ({body[-1].end_lineno - body[0].lineno + 1} lines)")
                    elif isinstance(node, ast.ClassDef) and node.end_lineno - node.lineno + 1 > 500:
                        long.append(f"{rel}: class {node.name} ({node.end_lineno - node.lineno + 1} lines)")
    assert long == []
