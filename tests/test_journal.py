"""The report journal: a resume adds the reports rank 0 took after its last save of metrics.h5."""

from __future__ import annotations

import json
import pickle
import random
from pathlib import Path

import numpy as np
import pytest

from slaq_mpi.runtime.history import STATE_FILE, resume_record
from slaq_mpi.runtime.job_reports import absorb
from slaq_mpi.runtime.messages import Report
from slaq_mpi.storage import checkpoint, journal
from slaq_mpi.storage.journal import Journal
from slaq_mpi.storage.metrics import JobRecord, RunRecord

pytestmark = pytest.mark.fast

WALL0 = 1_000_000.0


def _record(names: list[str]) -> RunRecord:
    return RunRecord(attrs={"name": "x", "policy": "fair", "capacity": 8, "epoch": 0, "elapsed": 0.0},
                     jobs={n: JobRecord(name=n, algorithm="logreg", convergence="sublinear",
                                        arrival=0.0, max_cores=8, status="running") for n in names})


def _report(rng: random.Random, job: str, at: float, status: str = "running") -> Report:
    n = rng.randint(0, 6)
    secs = [rng.uniform(0.001, 0.1) for _ in range(n)]
    ends = list(np.cumsum(secs) + at)
    return Report(job=job, cores=rng.randint(1, 8), losses=[rng.uniform(0, 1) for _ in range(n)],
                  iter_seconds=secs, end_times=ends, status=status,
                  reason="solver raised" if status == "failed" else "")


def _save(record: RunRecord, run_dir: Path, jour: Journal, now: float) -> None:
    """What rank 0's save does: name the next journal file in the record, write it, drop the
    older journal files."""
    record.attrs["elapsed"] = now
    record.attrs["journal"] = jour.rotate()
    record.write(run_dir / "metrics.h5")
    (run_dir / STATE_FILE).write_text(json.dumps({"epoch": 0, "elapsed": now, "finished": False}))
    journal.drop_before(run_dir, record.attrs["journal"])


def _fields(job: JobRecord) -> tuple[object, ...]:
    return (job.loss, job.time, job.cores, job.iter_seconds, job.throughput,
            job.attained_core_seconds, job.start, job.status, job.reason, job.end)


@pytest.mark.parametrize("seed", range(6))
def test_a_record_read_back_with_its_journal_is_the_record_rank_0_held(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    names = ["a", "b", "c"]
    live = _record(names)
    jour = Journal(tmp_path, 0)
    _save(live, tmp_path, jour, 0.0)
    to_now = lambda wall: wall - WALL0  # noqa: E731
    wall = WALL0
    saves = 0
    for step in range(rng.randint(5, 40)):
        wall += rng.uniform(0.01, 0.5)
        job = rng.choice([n for n in names if live.jobs[n].status == "running"] or names)
        if live.jobs[job].status != "running":
            break
        status = rng.choice(["running"] * 12 + ["done", "failed"])
        absorb(live, _report(rng, job, wall, status), to_now, jour)
        if rng.random() < 0.2:  # a save now and then: the older journal files go
            _save(live, tmp_path, jour, wall - WALL0)
            saves += 1
        if step % 3 == 0:
            jour.flush()
    jour.close()
    files = sorted(p.name for p in tmp_path.glob("journal-*.pkl"))
    assert len(files) <= 1, files  # at most the file after the last save
    back = RunRecord.read(tmp_path / "metrics.h5")
    latest = journal.replay(back, journal.entries(tmp_path, back.attrs["journal"]))
    for n in names:
        np.testing.assert_equal(_fields(back.jobs[n]), _fields(live.jobs[n]), err_msg=n)  # NaN == NaN
    if files:
        assert latest >= max(max(j.time, default=0.0) for j in live.jobs.values()) - 1e-9


def test_a_record_cut_short_by_a_crash_ends_the_replay_there(tmp_path: Path) -> None:
    rng = random.Random(3)
    live = _record(["a"])
    jour = Journal(tmp_path, 0)
    _save(live, tmp_path, jour, 0.0)
    for k in range(3):
        absorb(live, _report(rng, "a", WALL0 + k, "running"), lambda w: w - WALL0, jour)
    jour.flush()
    path = next(tmp_path.glob("journal-*.pkl"))
    whole = path.read_bytes()
    lines = list(journal.entries(tmp_path, 0))
    assert len(lines) == 3
    path.write_bytes(whole[:-5])  # the last record cut short
    assert [x["at"] for x in journal.entries(tmp_path, 0)] == [x["at"] for x in lines[:2]]
    back = RunRecord.read(tmp_path / "metrics.h5")
    journal.replay(back, journal.entries(tmp_path, back.attrs["journal"]))
    assert back.jobs["a"].loss == live.jobs["a"].loss[:len(back.jobs["a"].loss)]
    assert len(back.jobs["a"].loss) == lines[2]["at"]  # the first two reports, no more


def test_a_journal_record_naming_a_class_is_not_loaded(tmp_path: Path) -> None:
    (tmp_path / "journal-0.pkl").write_bytes(
        pickle.dumps({"job": "a", "at": 0, "now": 1.0}) + pickle.dumps(Path("x")))
    assert [x["job"] for x in journal.entries(tmp_path, 0)] == ["a"]  # then it stops


def test_a_resume_continues_the_clock_from_the_journal_and_rolls_back_to_a_checkpoint(
        tmp_path: Path) -> None:
    live = _record(["a"])
    jour = Journal(tmp_path, 0)
    _save(live, tmp_path, jour, 0.0)
    for k in range(4):  # 4 reports of 5 iterations, each followed by its checkpoint
        rep = Report(job="a", cores=2, losses=[1.0 / (5 * k + i + 1) for i in range(5)],
                     iter_seconds=[0.1] * 5, end_times=[WALL0 + 0.5 * k + 0.1 * (i + 1) for i in range(5)])
        absorb(live, rep, lambda w: w - WALL0, jour)
        checkpoint.write(tmp_path, "a", 5 * (k + 1), rep.losses[-1], {"w": np.full(2, float(k))})
        if k == 0:
            _save(live, tmp_path, jour, 0.5)  # metrics.h5 holds 5 iterations
    jour.flush()  # rank 0 dies here: its journal holds the other 15
    record, _, elapsed = resume_record(tmp_path)
    assert record.jobs["a"].iterations == 20  # its newest checkpoint: nothing runs again
    assert record.jobs["a"].loss == live.jobs["a"].loss
    assert elapsed >= live.jobs["a"].time[-1]  # the clock does not go back before its iterations
    assert record.jobs["a"].status == "waiting"


def test_journal_files_older_than_the_saved_record_are_dropped(tmp_path: Path) -> None:
    for k in (3, 4, 5, 7):
        (tmp_path / f"journal-{k}.pkl").write_bytes(b"")
    (tmp_path / "journal-x.pkl").write_bytes(b"")
    assert journal.newest_index(tmp_path) == 7
    journal.drop_before(tmp_path, 5)
    assert sorted(p.name for p in tmp_path.glob("journal-*")) == [
        "journal-5.pkl", "journal-7.pkl", "journal-x.pkl"]
