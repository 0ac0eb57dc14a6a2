"""The documentation's examples, checked: every YAML block of README.md and docs/*.md passes
``slaq validate``, and the pages' main commands run at small sizes.

How a YAML block is read (a marker is a comment on the block's first line, so the block stays
valid YAML to paste):

* no marker: the block is a whole experiment file and is validated as it is;
* ``# fragment: jobs``: the block is entries of an experiment's ``jobs:`` (a list, or a
  mapping whose one key is ``jobs``); they replace the jobs of :data:`BASE`, a small
  experiment, and that is validated;
* ``# fragment: slurm``, ``# fragment: simulation``: the block is that section (a mapping whose
  one key is the section's name, or the section's own mapping); it is added to :data:`BASE`,
  whose one job is named ``logreg-a``.

A ``python`` block whose first line is a docstring naming a file (``\"\"\"solvers/my_solver.py:
...\"\"\"``) is written to that path before the YAML blocks of its page are validated, so a
job may name it. Each block is validated in a fresh directory (the working directory of
``slaq validate``, where relative paths point).
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from slaq_mpi.cli import main
from tests.conftest import ROOT, run_slaq

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

#: The experiment a fragment is put into.
BASE: dict[str, Any] = {
    "name": "docs-example",
    "ranks": 4,
    "jobs": [{"name": "logreg-a", "algorithm": "logreg",
              "dataset": {"generator": "classification", "rows": 2000, "features": 10}}],
}
SECTIONS = ("jobs", "slurm", "simulation")

_BLOCK = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
_MARKER = re.compile(r"#\s*fragment:\s*(\w+)")
_NAMED_FILE = re.compile(r'"""([\w./-]+\.py):')

#: Blocks of pages this suite's maintainers do not edit here, known to fail, each with the fix
#: it waits for; strict: once fixed, the entry must go.
PENDING: dict[str, str] = {}


@dataclass(frozen=True)
class Block:
    """One fenced block of a page."""

    page: Path
    index: int  # 1-based, among the page's blocks of this language
    line: int  # where the block's text starts
    text: str

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(ROOT)}#{self.index}"


def blocks(page: Path, lang: str) -> list[Block]:
    """The fenced blocks of ``page`` in language ``lang`` (``yaml`` also matches ``yml``)."""
    text = page.read_text()
    found: list[Block] = []
    for m in _BLOCK.finditer(text):
        if m.group(1) == lang or (lang == "yaml" and m.group(1) == "yml"):
            line = text.count("\n", 0, m.start(2)) + 1
            found.append(Block(page, len(found) + 1, line, m.group(2)))
    return found


def yaml_blocks() -> list[Block]:
    return [b for page in PAGES for b in blocks(page, "yaml")]


def experiment_text(block: Block) -> str:
    """The experiment file that checks ``block``: itself, or BASE with the fragment in it."""
    first = block.text.lstrip().splitlines()[0] if block.text.strip() else ""
    marker = _MARKER.match(first)
    if marker is None:
        return block.text
    section = marker.group(1)
    assert section in SECTIONS, f"{block.name}: fragment of {section!r}; known: {SECTIONS}"
    raw = yaml.safe_load(block.text)
    if isinstance(raw, dict) and list(raw) == [section]:
        raw = raw[section]
    spec = copy.deepcopy(BASE)
    spec[section] = raw
    return yaml.safe_dump(spec, sort_keys=False)


def write_named_files(page: Path, where: Path) -> None:
    """Write the page's python blocks that name their file under ``where``."""
    for block in blocks(page, "python"):
        named = _NAMED_FILE.match(block.text)
        if named:
            path = where / named.group(1)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(block.text)


def _case(block: Block) -> Any:
    marks = [pytest.mark.xfail(strict=True, reason=PENDING[block.name])] if block.name in PENDING else []
    return pytest.param(block, id=block.name, marks=marks)


def test_the_pages_have_yaml_blocks() -> None:
    names = {b.name for b in yaml_blocks()}
    assert {"README.md#1", "docs/solvers.md#1", "docs/simulation.md#1"} <= names, names
    assert set(PENDING) <= names, sorted(set(PENDING) - names)


@pytest.mark.parametrize("block", [_case(b) for b in yaml_blocks()])
def test_every_yaml_block_passes_slaq_validate(block: Block, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    write_named_files(block.page, tmp_path)
    cfg = tmp_path / "example.yaml"
    cfg.write_text(experiment_text(block))
    monkeypatch.chdir(tmp_path)
    status = main(["validate", str(cfg)])
    out = capsys.readouterr()
    assert status == 0, f"{block.page}:{block.line}: {out.out}{out.err}"


# --- the pages' commands, at small sizes ---------------------------------------------------
# Covered elsewhere (not run again here): slaq run (tests/test_runtime_mpi.py,
# test_quickstart_shape_run_on_8_ranks), --resume and the stops (test_faults_mpi.py,
# test_signals_mpi.py), report and sim-check of a real run (test_report_mpi.py), data make and
# convert (test_data.py), curves record of the built-ins (test_sim_cli.py), submit --dry-run
# (test_slurm_render.py), --version and bare slaq (test_cli.py), the policy comparison of
# configs/policies.yaml (test_sim_policies.py), check-solver (test_check_solver.py).


def _yaml_block(page: str, index: int) -> dict[str, Any]:
    raw = yaml.safe_load(blocks(ROOT / page, "yaml")[index - 1].text)
    assert isinstance(raw, dict)
    return raw


def _python_block(page: str, index: int) -> str:
    return blocks(ROOT / page, "python")[index - 1].text


def test_the_configs_the_pages_name_pass_slaq_validate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    named = sorted({m for page in PAGES for m in re.findall(r"configs/[\w.-]+\.yaml", page.read_text())})
    assert "configs/quickstart.yaml" in named and "configs/paper.yaml" in named
    monkeypatch.chdir(tmp_path)
    for cfg in named:
        assert main(["validate", str(ROOT / cfg)]) == 0, (cfg, capsys.readouterr())
    # the README's cluster section: inspect the sbatch script of the quickstart
    assert main(["submit", str(ROOT / "configs" / "quickstart.yaml"), "--dry-run"]) == 0
    assert "#SBATCH" in capsys.readouterr().out


def test_data_md_writes_a_file_slaq_reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from jobs import load_solver
    from slaq_mpi.data.datasets import check_file

    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(0)
    X_dense = rng.standard_normal((50, 4))
    exec(_python_block("docs/data.md", 1), {"X_dense": X_dense, "y": (X_dense[:, 0] > 0) * 1.0})
    info = check_file(tmp_path / "mine.h5", load_solver("logreg"))
    assert (info.rows, info.features, info.has_labels) == (50, 4, True)


@pytest.mark.slow
def test_simulation_md_commands(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    paper = str(ROOT / "configs" / "paper.yaml")
    assert main(["simulate", paper, "--policy", "slaq", "--policy", "fair", "--policy", "oracle",
                 "--out", "runs/paper", "--max-epochs", "20"]) == 0
    runs = sorted(str(p) for p in Path("runs/paper").glob("*"))
    assert [Path(r).name for r in runs] == ["fair", "oracle", "slaq"]
    assert main(["report", *runs, "--no-plots"]) == 0
    capsys.readouterr()
    assert main(["simulate", paper, "--json", "--max-epochs", "5"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert {"slaq", "fair"} <= set(json.loads(last)["policies"])  # simulation.policies


@pytest.mark.slow
def test_metrics_md_reads_a_run_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["simulate", str(ROOT / "configs" / "quickstart.yaml"), "--policy", "slaq",
                 "--out", "sim"]) == 0
    Path("runs").mkdir()
    Path("sim/slaq").rename("runs/quickstart")  # where the page's snippets read a run
    capsys.readouterr()
    exec(_python_block("docs/metrics.md", 1), {})
    assert capsys.readouterr().out.startswith("done ")
    scope: dict[str, Any] = {}
    exec(_python_block("docs/metrics.md", 2), scope)
    assert len(scope["run"].jobs["logreg-a"].loss) > 0


@pytest.mark.mpi
def test_solvers_md_worked_example_runs_and_records_its_curves(tmp_path: Path) -> None:
    write_named_files(ROOT / "docs" / "solvers.md", tmp_path)
    spec = _yaml_block("docs/solvers.md", 1)
    for job in spec["jobs"]:
        job["dataset"]["rows"] = min(job["dataset"]["rows"], 5000)  # a small size
    (tmp_path / "my-mean.yaml").write_text(yaml.safe_dump(spec))
    env = {"SLAQ_DATA_CACHE": str(tmp_path / "cache")}
    run = run_slaq(["run", "my-mean.yaml"], cwd=tmp_path, timeout=600, env=env)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    record = run_slaq(["curves", "record", "--algorithm", "solvers/my_solver.py:MeanEstimator",
                       "--out", "my-mean.npz"], cwd=tmp_path, env=env)
    assert record.returncode == 0, record.stdout + record.stderr
    spec["simulation"] = {"curve_file": "my-mean.npz"}
    (tmp_path / "my-mean-sim.yaml").write_text(yaml.safe_dump(spec))
    sim = run_slaq(["simulate", "my-mean-sim.yaml"], cwd=tmp_path, env=env)
    assert sim.returncode == 0, sim.stdout + sim.stderr
    assert "analytic" not in sim.stdout + sim.stderr  # it follows the recorded curves
