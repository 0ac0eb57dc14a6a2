"""``slaq check-solver``: the worked example of docs/solvers.md passes; solvers with the usual
slips fail, each check naming the first iteration where the runs part."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest

from slaq_mpi.cli import main
from slaq_mpi.runtime.solver_check import Check, Run, first_difference
from slaq_mpi.runtime.solver_check import _agree as agree
from tests.conftest import ROOT, run_slaq
from tests.test_docs import write_named_files

EXAMPLES = ROOT / "tests" / "solvers" / "rank_dependent.py"


def _check(tmp_path: Path, solver: str, *args: str) -> subprocess.CompletedProcess[str]:
    return run_slaq(["check-solver", solver, *args], cwd=tmp_path, timeout=600,
                    env={"SLAQ_DATA_CACHE": str(tmp_path / "cache")})


def _lines(proc: subprocess.CompletedProcess[str], mark: str) -> list[str]:
    return [ln.strip()[len(mark):].strip() for ln in proc.stdout.splitlines()
            if ln.strip().startswith(mark)]


def test_losses_agree_to_rounding_and_the_first_difference_is_named() -> None:
    assert first_difference([1.0, 0.5, 0.25], [1.0, 0.5 * (1 + 1e-12), 0.25]) == (None, pytest.approx(1e-12))
    at, _ = first_difference([1.0, 0.5, 0.25, 0.1], [1.0, 0.5, 0.26, 0.2])
    assert at == 2
    assert first_difference([0.0, 0.0], [0.0, 0.0]) == (None, 0.0)
    assert first_difference([1.0, float("nan")], [1.0, float("nan")])[0] == 1  # a NaN never agrees
    first = agree("1 and 3 ranks", Run(losses=[[2.0, 1.0]]), Run(losses=[[3.0, 1.5]]), ("1 rank", "3 ranks"))
    assert first == Check(False, "1 and 3 ranks: the losses differ from iteration 1 on (1 rank 2, "
                                 "3 ranks 3); the initial model depends on the rank or its rows: "
                                 "draw it from seed only")
    later = agree("x", Run(losses=[[2.0, 1.0]]), Run(losses=[[2.0, 1.5]]), ("a", "b"))
    assert not later.ok and "from iteration 2 on" in later.text and "allreduce" in later.text


def test_a_solver_that_does_not_load_is_refused_before_any_rank_starts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "broken.py").write_text("import no_such_module_here\n")
    assert main(["check-solver", "broken.py:Mine"]) == 2
    err = capsys.readouterr().err
    assert "check-solver SOLVER: 'broken.py:Mine'" in err and "ModuleNotFoundError" in err
    assert main(["check-solver", "nosuch"]) == 2
    assert "not a built-in algorithm" in capsys.readouterr().err
    assert main(["check-solver", "logreg", "--iterations", "1"]) == 2
    assert "--iterations: 1 is not allowed" in capsys.readouterr().err


@pytest.mark.mpi
def test_the_worked_example_of_docs_solvers_md_passes(tmp_path: Path) -> None:
    write_named_files(ROOT / "docs" / "solvers.md", tmp_path)
    proc = _check(tmp_path, "solvers/my_solver.py:MeanEstimator")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not _lines(proc, "FAIL"), proc.stdout
    ok = _lines(proc, "ok")
    assert [line.split(":")[0] for line in ok] == [
        "serial and 1 rank", "1 and 3 ranks", "3 ranks, rank by rank",
        "checkpoint"], proc.stdout
    assert proc.stdout.splitlines()[-1] == "passed: 4 checks"
    assert not list(tmp_path.glob(".slaq-check-solver-*"))  # its scratch files are gone


@pytest.mark.mpi
def test_a_solver_drawing_its_initial_model_from_the_rank_fails_at_iteration_1(tmp_path: Path) -> None:
    shutil.copy(EXAMPLES, tmp_path / "mine.py")
    proc = _check(tmp_path, "mine.py:RankSeeded")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    [fail] = _lines(proc, "FAIL")
    assert fail.startswith("1 and 3 ranks: the losses differ from iteration 1 on"), proc.stdout
    assert "initial model depends on the rank" in fail
    assert proc.stdout.splitlines()[-1].startswith("failed: 1 of 4 checks")


@pytest.mark.mpi
def test_a_step_that_is_not_reduced_and_a_state_not_restored_are_named(tmp_path: Path) -> None:
    shutil.copy(EXAMPLES, tmp_path / "mine.py")
    data = tmp_path / "d.h5"
    assert main(["data", "make", "blobs", str(data), "--rows", "900", "--features", "6"]) == 0
    local = _check(tmp_path, "mine.py:LocalUpdate", "--data", "d.h5", "--iterations", "6")
    assert local.returncode == 1, local.stdout + local.stderr
    ranks, restored = _lines(local, "FAIL")
    assert ranks.startswith("1 and 3 ranks: the losses differ from iteration 2 on"), local.stdout
    assert "not reduced over the ranks" in ranks
    # restored on 1 rank it goes on exactly; on 3, its first step after the restore parts
    assert restored.startswith("checkpoint: the state after iteration 3 on 1 rank, restored on 3 "
                               "ranks, goes on with other losses from iteration 5"), local.stdout
    assert "d.h5 (900 x 6)" in local.stdout.splitlines()[0]
    forgets = _check(tmp_path, "mine.py:ForgetsOnRestore", "--iterations", "6")
    assert forgets.returncode == 1, forgets.stdout + forgets.stderr
    [fail] = _lines(forgets, "FAIL")
    assert fail.startswith("checkpoint: the state after iteration 3 on 1 rank, restored on 1 "
                           "rank, goes on with other losses from iteration 4"), forgets.stdout
    assert "set_state() restore all of it" in fail


@pytest.mark.slow
def test_a_launch_past_its_time_is_ended_with_all_it_started(tmp_path: Path) -> None:
    from slaq_mpi.runtime.solver_check import _launch as launch

    pid_file = tmp_path / "child.pid"
    status, _ = launch(["bash", "-c", f"sleep 60 & echo $! > {pid_file}; wait"], 1.0)
    assert status is None
    child = int(pid_file.read_text())
    stat = Path(f"/proc/{child}/stat")

    def gone() -> bool:
        try:
            return stat.read_text().split(")")[1].split()[0] == "Z"
        except (FileNotFoundError, ProcessLookupError):
            return True

    # killed: the kernel may still be finishing its exit for a moment after the launch returns
    deadline = time.monotonic() + 5.0
    while not gone() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert gone(), stat.read_text()
