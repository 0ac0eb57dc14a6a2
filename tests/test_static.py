"""The code stays ruff-clean, passes mypy (pyproject.toml holds both tools' settings) and keeps the
import rules of docs/architecture.md."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT


def _tool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)


def test_ruff_finds_nothing() -> None:
    proc = _tool("ruff", "check", "slaq_mpi", "jobs", "tests", "benchmarks")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_mypy_finds_nothing() -> None:
    proc = _tool("mypy", "--cache-dir", "/dev/null")
    assert proc.returncode == 0, proc.stdout + proc.stderr


# The import rules of docs/architecture.md. Keys and entries are packages of slaq_mpi (or one
# module of a package: "config.values"); every module may also import its own package,
# slaq_mpi.errors and slaq_mpi._text. Imports inside functions count too.
ALLOWED: dict[str, set[str]] = {
    "brain": set(),
    "policies": {"brain", "config.values", "config.schema"},
    "storage": {"policies"},
    "data": {"storage", "jobs.base"},
    "config": {"data", "storage", "policies", "jobs"},
    "runtime": {"config", "storage", "data", "policies", "brain", "jobs"},
    "report": {"storage", "policies", "brain", "sim.scaling", "runtime.timing"},
    "sim": {"brain", "policies", "config", "storage", "data", "report", "runtime.timing", "jobs"},
    "slurm": {"config", "storage", "runtime.launch", "runtime.resume"},
}
NO_MPI = ("brain", "policies", "report", "sim")
POLICY_HELPERS = {"__init__", "_share", "_params", "snapshot"}


def _modules() -> dict[str, Path]:
    """Every module of slaq_mpi and jobs by dotted name."""
    found = {}
    for path in sorted((ROOT / "slaq_mpi").rglob("*.py")) + sorted((ROOT / "jobs").rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _imports(path: Path, modules: dict[str, Path]) -> set[str]:
    """Dotted names a module imports (modules where ``from X import Y`` names one)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            names |= {f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in modules}
    return names


def _with_parents(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


def test_each_layer_imports_only_what_architecture_md_allows() -> None:
    modules = _modules()
    wrong = []
    for mod, path in modules.items():
        parts = mod.split(".")
        if parts[0] != "slaq_mpi" or len(parts) < 3 or parts[1] not in ALLOWED:
            continue
        allowed = ALLOWED[parts[1]] | {parts[1], "errors", "_text"}
        for name in _imports(path, modules):
            if not name.startswith(("slaq_mpi.", "jobs")):
                continue
            rel = name.removeprefix("slaq_mpi.")
            if name.startswith("slaq_mpi.") and rel.split(".")[0] == parts[1]:
                continue
            if not any(rel == a or rel.startswith(a + ".") for a in allowed):
                wrong.append(f"{mod} imports {name}")
    assert not wrong, wrong


def test_only_the_runtime_imports_mpi4py_and_the_brain_never_reaches_it() -> None:
    modules = _modules()
    direct = sorted(m for m, p in modules.items()
                    if any(n.split(".")[0] == "mpi4py" for n in _imports(p, modules)))
    assert direct and all(m.startswith("slaq_mpi.runtime.") for m in direct), direct
    for layer in NO_MPI:
        todo = [m for m in modules if m.startswith(f"slaq_mpi.{layer}")]
        seen: set[str] = set()
        while todo:
            mod = todo.pop()
            if mod in seen:
                continue
            seen.add(mod)
            for name in _imports(modules[mod], modules):
                assert name.split(".")[0] != "mpi4py", f"slaq_mpi.{layer} reaches mpi4py through {mod}"
                todo += [m for m in _with_parents(name) if m in modules and m not in seen]


def test_no_policy_imports_another_policy() -> None:
    modules = _modules()
    policies = {m for m in modules if m.startswith("slaq_mpi.policies.")
                and m.rsplit(".", 1)[1] not in POLICY_HELPERS}
    assert {"slaq_mpi.policies.slaq", "slaq_mpi.policies.fair"} <= policies
    wrong = [f"{m} imports {n}" for m in sorted(policies) for n in _imports(modules[m], modules)
             if n in policies - {m} or any(p in policies - {m} for p in _with_parents(n))]
    assert not wrong, wrong


def test_importing_the_package_has_no_side_effects() -> None:
    code = ("import signal, sys; before = (list(sys.path), [signal.getsignal(s) for s in "
            "(signal.SIGUSR1, signal.SIGTERM, signal.SIGINT)]); import slaq_mpi; "
            "after = (list(sys.path), [signal.getsignal(s) for s in (signal.SIGUSR1, signal.SIGTERM, "
            "signal.SIGINT)]); print(before == after, sorted(m for m in sys.modules "
            "if m.split('.')[0] in ('jobs', 'mpi4py', 'h5py')))")
    env = {**os.environ, "PMI_RANK": "0"}
    proc = subprocess.run([sys.executable, "-c", code, "run"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env=env)
    assert proc.stdout.split() == ["True", "[]"], proc.stdout + proc.stderr
