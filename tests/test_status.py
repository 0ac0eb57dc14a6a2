"""``slaq status`` and ``status.json`` (unit tier, no MPI): the file's round trip, the table
and the JSON object of a synthetic run, stale runs, the fallback to metrics.h5, and bad input
as one line with exit status 2."""

from __future__ import annotations

import io
import json
import math
import re
import time
from pathlib import Path

import h5py
import numpy as np
import pytest

from slaq_mpi.cli import main
from slaq_mpi.errors import DataError
from slaq_mpi.report.status import load_status, predicted_seconds, silent_seconds
from slaq_mpi.report.status_table import format_status
from slaq_mpi.storage.metrics import JobRecord, RunRecord
from slaq_mpi.storage.status_file import (
    STATUS_FILE,
    JobHistory,
    JobStatus,
    RunStatus,
    job_status,
    read_job_histories,
    read_status,
    run_utilization,
    status_text,
    write_status,
)

EPOCH = 2.0


def _job(name: str, status: str, iterations: int, arrival: float, start: float = math.nan,
         end: float = math.nan, reason: str = "") -> JobRecord:
    """A job whose loss follows 1 / (1 + 0.1 k) + 0.05, 0.5 s per iteration on 2 cores."""
    k = np.arange(iterations)
    rec = JobRecord(name=name, algorithm="logreg", convergence="sublinear", arrival=arrival,
                    max_cores=4, start=start, end=end, status=status, reason=reason)
    rec.loss = (1.0 / (1.0 + 0.1 * k) + 0.05).tolist()
    rec.time = (start + 0.5 * (k + 1)).tolist() if iterations else []
    rec.cores = [2] * iterations
    rec.iter_seconds = [0.5] * iterations
    rec.throughput = [(2, 0.5)] if iterations else []
    rec.attained_core_seconds = 2 * 0.5 * iterations
    return rec


def _record() -> RunRecord:
    jobs = [_job("early", "done", 40, 0.0, start=0.0, end=20.0),
            _job("busy", "running", 20, 5.0, start=20.0),
            _job("broken", "failed", 3, 6.0, start=20.0, end=21.5, reason="step raised ValueError"),
            _job("later", "waiting", 0, 25.0)]
    rec = RunRecord(attrs={"name": "demo", "policy": "slaq", "capacity": 4, "epoch_seconds": EPOCH,
                           "mode": "run", "config": ""}, jobs={j.name: j for j in jobs})
    rec.add_epoch(0.0, {"early": 4}, 1.0, False)
    rec.add_epoch(20.0, {"busy": 2, "broken": 2}, 1.0, True)
    return rec


def _status(rec: RunRecord, updated: float, state: str = "running", now: float = 30.0) -> RunStatus:
    cores = {"busy": 2}
    return RunStatus(
        name="demo", policy="slaq", workers=4, epoch_seconds=EPOCH, open=True, draining=False,
        state=state, updated=updated, now=now, last_decision=29.5,
        utilization=run_utilization(rec.jobs.values(), 4, now),
        jobs=[job_status(j, cores.get(j.name, 0), weight=3.0 if j.name == "busy" else 1.0,
                         max_iterations=200) for j in rec.jobs.values()])


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    """A run directory as a live run leaves it: metrics.h5 and a fresh status.json."""
    where = tmp_path / "run"
    where.mkdir()
    rec = _record()
    rec.write(where / "metrics.h5")
    write_status(where, _status(rec, time.time()))
    return where


# --- the file -------------------------------------------------------------------------------

def test_status_file_round_trip(tmp_path: Path) -> None:
    status = _status(_record(), updated=1.7e9)
    assert read_status(tmp_path) is None  # no file yet
    write_status(tmp_path, status)
    assert [p.name for p in tmp_path.iterdir()] == [STATUS_FILE]  # no temp file left
    back = read_status(tmp_path)
    assert back is not None and status_text(back) == status_text(status)
    assert back.jobs[1] == status.jobs[1] and back.open and back.workers == 4
    waiting = back.jobs[3]
    assert waiting.iterations == 0 and math.isnan(waiting.first_loss) and math.isnan(waiting.start)
    raw = json.loads((tmp_path / STATUS_FILE).read_text())  # strict JSON: NaN is null
    assert raw["format"] == 1 and raw["jobs"][3]["start"] is None and raw["jobs"][3]["last_loss"] is None
    assert (tmp_path / STATUS_FILE).read_text().count("\n") == len(status.jobs) + 2  # a job a line


def test_rows_and_utilization_come_from_the_record() -> None:
    rec = _record()
    busy = job_status(rec.jobs["busy"], cores=2, weight=3.0)
    assert (busy.iterations, busy.cores, busy.weight, busy.first_loss) == (20, 2, 3.0, 1.05)
    assert busy.last_loss == pytest.approx(1 / 2.9 + 0.05)
    # 40 + 20 + 3 iterations of 1 core-second over 4 workers x 30 s since the first arrival
    assert run_utilization(rec.jobs.values(), 4, 30.0) == pytest.approx(63 / 120)
    assert math.isnan(run_utilization(rec.jobs.values(), 4, 0.0))
    assert math.isnan(run_utilization([], 4, 10.0))


@pytest.mark.parametrize(("text", "why"), [
    ("{not json", "not a status file"),
    ('{"format": 1}', "damaged status file (no 'jobs'"),
    ('{"format": 9, "jobs": []}', "format 9, newer"),
    ('{"format": 1, "name": "x", "workers": "four", "jobs": []}', "'workers' is 'four'"),
])
def test_a_damaged_status_file_is_a_data_error_naming_it(tmp_path: Path, text: str, why: str) -> None:
    (tmp_path / STATUS_FILE).write_text(text)
    with pytest.raises(DataError, match=re.escape(str(tmp_path / STATUS_FILE))) as err:
        read_status(tmp_path)
    assert why in str(err.value)


def test_only_the_named_jobs_histories_are_read(run_dir: Path) -> None:
    got = read_job_histories(run_dir, ["busy", "nobody"])
    assert list(got) == ["busy"]
    assert got["busy"].loss.shape == (20,) and got["busy"].convergence == "sublinear"
    assert got["busy"].throughput.tolist() == [[2.0, 0.5]]
    assert read_job_histories(run_dir.parent, ["busy"]) == {}  # no metrics.h5 there


# --- the prediction and staleness -----------------------------------------------------------

def test_the_predicted_time_to_90_percent() -> None:
    k = np.arange(20)
    loss = 1.0 / (1.0 + 0.1 * k) + 0.05
    hist = {"a": JobHistory("a", loss, np.array([[2.0, 0.5]]), "sublinear")}

    def job(**kw: object) -> JobStatus:
        given = {"cores": 2, "iterations": 20, "first_loss": loss[0], "last_loss": loss[-1], **kw}
        return JobStatus("a", "logreg", "running", **given)  # type: ignore[arg-type]

    ahead = predicted_seconds([job()], hist, 4, EPOCH)["a"]
    assert 0 < ahead < 1e4 and (ahead / 0.5) == pytest.approx(round(ahead / 0.5))  # whole iterations
    assert predicted_seconds([job(cores=0)], hist, 4, EPOCH) == {}  # holds no cores
    assert predicted_seconds([job(max_iterations=21)], hist, 4, EPOCH) == {}  # budget ends first
    assert predicted_seconds([job(last_loss=0.0)], hist, 4, EPOCH) == {"a": 0.0}  # there already
    short = {"a": JobHistory("a", loss[:2], np.zeros((0, 2)))}
    assert predicted_seconds([job(iterations=2)], short, 4, EPOCH) == {}  # too short to fit
    flat = {"a": JobHistory("a", np.ones(20), np.array([[2.0, 0.5]]))}
    assert predicted_seconds([job(first_loss=1.0, last_loss=1.0)], flat, 4, EPOCH) == {}


def test_rank_0_is_silent_after_three_epochs_and_ten_seconds() -> None:
    status = _status(_record(), updated=1000.0)
    assert math.isnan(silent_seconds(status, 1009.0))  # 10 s at least
    assert silent_seconds(status, 1011.0) == pytest.approx(11.0)
    status.epoch_seconds = 5.0
    assert math.isnan(silent_seconds(status, 1014.0))  # 3 epochs: 15 s
    assert silent_seconds(status, 1016.0) == pytest.approx(16.0)
    status.state = "finished"  # an ended run writes no more
    assert math.isnan(silent_seconds(status, 5000.0))


# --- the command ----------------------------------------------------------------------------

def test_the_table(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", str(run_dir)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("demo: running, open (policy slaq, 4 workers, epoch 2 s); 4 jobs: "
                             "1 running, 1 waiting, 1 done, 1 failed")
    assert out[1].startswith("utilization 52.5%; last decision at 29.5 s of the run")
    assert out[2].split() == ["job", "status", "cores", "iters", "loss/first", "running", "s",
                              "t90", "in", "s", "weight", "reason"]
    rows = {line.split()[0]: line.split() for line in out[3:]}
    assert list(rows) == ["busy", "later", "broken", "early"]  # running, waiting, then ended
    assert rows["busy"][1:5] == ["running", "2", "20", f"{(1 / 2.9 + 0.05) / 1.05:.3g}"]
    assert rows["busy"][5] == "10.0" and float(rows["busy"][6]) > 0 and rows["busy"][7] == "3"
    assert rows["later"][1:8] == ["waiting", "0", "0", "-", "-", "-", "1"]
    assert rows["early"][5:7] == ["20.0", "-"]
    assert " ".join(rows["broken"][8:]) == "step raised ValueError"
    assert not any("silent" in line for line in out)


def test_the_json_object(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", str(run_dir), "--json"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1
    got = json.loads(out)
    assert (got["source"], got["state"], got["workers"], got["reduction_percent"]) == (
        "status.json", "running", 4, 90.0)
    assert got["silent_seconds"] is None and got["utilization"] == pytest.approx(0.525)
    jobs = {j["name"]: j for j in got["jobs"]}
    assert jobs["busy"]["predicted_seconds"] > 0 and jobs["busy"]["weight"] == 3.0
    assert jobs["later"]["start"] is None and jobs["later"]["predicted_seconds"] is None
    assert jobs["early"]["running_seconds"] == 20.0 and jobs["early"]["loss_ratio"] < 1


def test_a_silent_run_is_said_plainly(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_status(run_dir, _status(_record(), time.time() - 120.0))
    assert main(["status", str(run_dir)]) == 0
    silent = [line for line in capsys.readouterr().out.splitlines() if "silent" in line]
    assert len(silent) == 1 and silent[0].startswith("rank 0 has been silent for 12")
    assert "the run may have died; check its Slurm log or squeue" in silent[0]
    assert main(["status", str(run_dir), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["silent_seconds"] >= 120


def test_a_run_without_status_json_is_read_from_metrics_h5(
        run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (run_dir / STATUS_FILE).unlink()
    assert main(["status", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("demo: stopped (policy slaq, 4 workers")  # no run holds it
    assert "has no status.json" in out and "shown from metrics.h5" in out
    assert main(["status", str(run_dir), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["source"] == "metrics.h5" and got["last_decision"] == 20.0
    assert {j["name"]: j["status"] for j in got["jobs"]} == {
        "busy": "running", "later": "waiting", "broken": "failed", "early": "done"}


def test_watch_redraws_until_ctrl_c(run_dir: Path, monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    naps: list[float] = []

    def nap(seconds: float) -> None:
        naps.append(seconds)
        if len(naps) == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(time, "sleep", nap)
    assert main(["status", str(run_dir), "--watch"]) == 0
    out = capsys.readouterr().out
    assert naps == [2.0, 2.0] and out.count("demo: running") == 2 and "\033[" not in out

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    screen = Terminal()
    monkeypatch.setattr("sys.stdout", screen)
    naps.clear()
    assert main(["status", str(run_dir), "--watch", "0.5"]) == 0
    assert naps == [0.5, 0.5] and screen.getvalue().count("\033[H\033[2J") == 2


def test_the_table_of_a_watch_fits_the_screen(run_dir: Path) -> None:
    text = format_status(load_status(run_dir), max_rows=2)
    assert text.splitlines()[-1].startswith("... and 2 more jobs (1 failed, 1 done)")
    assert len(text.splitlines()) == 2 + 1 + 2 + 1


def _one_line_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    status: object
    try:
        status = main(argv)
    except SystemExit as stop:  # the argument parser's refusals
        status = stop.code
    assert status == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1, captured.err
    return captured.err


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, run_dir: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    err = _one_line_exit_2(["status", str(tmp_path / "nowhere")], capsys)
    assert err.startswith("slaq: error: RUN_DIR: ") and "must be a run directory" in err
    (tmp_path / "notes.txt").write_text("x")
    assert "must be a run directory" in _one_line_exit_2(["status", str(tmp_path / "notes.txt")], capsys)
    assert "must be a run directory" in _one_line_exit_2(["status", str(tmp_path)], capsys)
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    (fresh / "config.yaml").write_text("name: x\n")
    assert "the run has not started" in _one_line_exit_2(["status", str(fresh)], capsys)
    (run_dir / STATUS_FILE).write_text('{"format": 1, "jobs": [')
    assert "not a status file" in _one_line_exit_2(["status", str(run_dir), "--json"], capsys)
    (run_dir / STATUS_FILE).unlink()
    with h5py.File(run_dir / "metrics.h5", "w") as f:
        f.attrs["name"] = "x"
    assert "not a slaq metrics file" in _one_line_exit_2(["status", str(run_dir)], capsys)
    for period in ("0", "-1", "nan", "soon"):
        err = _one_line_exit_2(["status", str(run_dir), "--watch", period], capsys)
        assert "--watch" in err
