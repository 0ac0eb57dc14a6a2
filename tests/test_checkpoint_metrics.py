"""Checkpoints (atomic, verified, fallback) and the metrics.h5 round trip."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from slaq_mpi.storage import checkpoint
from slaq_mpi.storage.metrics import JobRecord, RunRecord


def _names(run_dir: Path, job: str = "j") -> list[str]:
    return sorted(f.name for f in checkpoint.job_dir(run_dir, job).glob("*.h5"))


def test_checkpoint_round_trip_and_pruning(tmp_path: Path) -> None:
    for it in (3, 7, 9, 12):
        checkpoint.write(tmp_path, "j", it, 0.5 * it, {"w": np.arange(4.0) * it})
    assert len(_names(tmp_path)) == 4  # a write prunes nothing
    ckpt, notes = checkpoint.latest(tmp_path, "j")
    assert ckpt is not None and ckpt.iteration == 12 and notes == []
    checkpoint.prune(tmp_path, "j", committed=9)  # metrics.h5 records 9 iterations
    assert _names(tmp_path) == ["00000007.h5", "00000009.h5", "00000012.h5"]  # 12: not yet committed
    ckpt, _ = checkpoint.latest(tmp_path, "j", at_most=9)
    assert ckpt is not None and ckpt.iteration == 9
    np.testing.assert_array_equal(ckpt.state["w"], np.arange(4.0) * 9)
    assert ckpt.last_loss == 4.5
    checkpoint.write(tmp_path, "j", 123_456_789, 1.0, {"w": np.zeros(4)})  # 9 digits: still newest
    ckpt, _ = checkpoint.latest(tmp_path, "j")
    assert ckpt is not None and ckpt.iteration == 123_456_789


def test_checkpoints_written_after_the_last_save_never_cost_the_committed_one(tmp_path: Path) -> None:
    from slaq_mpi.runtime.coordinator import STATE_FILE, resume_record

    def save(iterations: int) -> None:  # what rank 0 commits, then prunes to
        job = JobRecord(name="j", algorithm="logreg", convergence="sublinear", arrival=0.0,
                        max_cores=2, loss=[1.0] * iterations, time=[0.1] * iterations,
                        cores=[1] * iterations, iter_seconds=[0.01] * iterations, status="running")
        RunRecord(attrs={"name": "x", "policy": "fair", "capacity": 2}, jobs={"j": job}).write(
            tmp_path / "metrics.h5")
        (tmp_path / STATE_FILE).write_text('{"epoch": 0, "elapsed": 1.0, "finished": false}')
        checkpoint.prune(tmp_path, "j", iterations)

    for it in (90, 100):
        checkpoint.write(tmp_path, "j", it, 1.0, {"w": np.full(3, float(it))})
    save(100)
    # the job moves twice (it finishes early) while rank 0 has not saved again: a crash now
    for it in (150, 152):
        checkpoint.write(tmp_path, "j", it, 1.0, {"w": np.full(3, float(it))})
    assert _names(tmp_path) == ["00000090.h5", "00000100.h5", "00000150.h5", "00000152.h5"]
    record, _, _ = resume_record(tmp_path)
    assert record.jobs["j"].iterations == 100  # from the committed checkpoint, not from 0
    assert _names(tmp_path) == ["00000090.h5", "00000100.h5"]  # 150 and 152 run again
    # the resumed job checkpoints on fewer cores, at 130, then moves at 160: crash again
    checkpoint.write(tmp_path, "j", 130, 1.0, {"w": np.full(3, 130.0)})
    save(130)
    checkpoint.write(tmp_path, "j", 160, 1.0, {"w": np.full(3, 160.0)})
    record, _, _ = resume_record(tmp_path)
    assert record.jobs["j"].iterations == 130
    ckpt, _ = checkpoint.latest(tmp_path, "j")
    assert ckpt is not None and ckpt.iteration == 130 and float(ckpt.state["w"][0]) == 130.0


def test_corrupt_newest_checkpoint_falls_back(tmp_path: Path) -> None:
    checkpoint.write(tmp_path, "j", 1, 1.0, {"w": np.ones(1000)})
    newest = checkpoint.write(tmp_path, "j", 2, 0.5, {"w": np.full(1000, 2.0)})
    data = bytearray(newest.read_bytes())
    newest.write_bytes(bytes(data[: len(data) // 2]))  # truncated
    ckpt, notes = checkpoint.latest(tmp_path, "j")
    assert ckpt is not None and ckpt.iteration == 1
    assert len(notes) == 1 and notes[0][0] == newest and "unreadable" in notes[0][1]


def test_a_file_system_error_is_not_taken_for_a_damaged_checkpoint(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    import h5py

    checkpoint.write(tmp_path, "j", 1, 1.0, {"w": np.ones(10)})
    newest = checkpoint.write(tmp_path, "j", 2, 0.5, {"w": np.full(10, 2.0)})
    real = h5py.File

    def flaky(path: object, *args: object, **kwargs: object) -> object:
        if Path(str(path)) == newest:
            raise OSError(errno.EIO, "Input/output error")
        return real(path, *args, **kwargs)

    monkeypatch.setattr(checkpoint.h5py, "File", flaky)
    with pytest.raises(OSError, match="Input/output error"):  # not skipped as damaged
        checkpoint.latest(tmp_path, "j")
    monkeypatch.setattr(checkpoint.h5py, "File", real)
    newest.unlink()  # with the I/O error gone (and the file), the previous checkpoint is used
    ckpt, notes = checkpoint.latest(tmp_path, "j")
    assert ckpt is not None and ckpt.iteration == 1 and notes == []


def test_flipped_bytes_fail_the_checksum(tmp_path: Path) -> None:
    path = checkpoint.write(tmp_path, "j", 1, 1.0, {"w": np.arange(5000.0)})
    data = bytearray(path.read_bytes())
    idx = data.find(np.arange(5000.0)[2500:2501].tobytes())
    assert idx > 0
    data[idx] ^= 0xFF
    path.write_bytes(bytes(data))
    ckpt, notes = checkpoint.latest(tmp_path, "j")
    assert ckpt is None and "checksum" in notes[0][1]


def test_a_failed_write_leaves_no_temp_file_and_a_good_one_clears_stale_ones(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    state = {"w": np.arange(3.0)}
    d = checkpoint.job_dir(tmp_path, "b")
    d.mkdir(parents=True)
    (d / ".00000002.h5.tmp999").write_bytes(b"")  # a writer that died mid-write

    real_fsync = checkpoint.os.fsync

    def full_disk(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(checkpoint.os, "fsync", full_disk)
    with pytest.raises(OSError, match="No space"):
        checkpoint.write(tmp_path, "b", 3, 0.5, state)
    assert sorted(p.name for p in d.iterdir()) == [".00000002.h5.tmp999"]  # its own temp is gone
    monkeypatch.setattr(checkpoint.os, "fsync", real_fsync)
    checkpoint.write(tmp_path, "b", 3, 0.5, state)
    assert sorted(p.name for p in d.iterdir()) == ["00000003.h5"]


def test_metrics_round_trip(tmp_path: Path) -> None:
    job = JobRecord(name="a", algorithm="logreg", convergence="sublinear", arrival=1.5, max_cores=3,
                    loss=[1.0, 0.5], time=[2.0, 2.1], cores=[1, 2], iter_seconds=[0.1, 0.05],
                    throughput=[(1, 0.1), (2, 0.05)], status="done", start=1.9, end=2.1)
    other = JobRecord(name="b", algorithm="kmeans", convergence="linear", arrival=4.0, max_cores=2)
    rec = RunRecord(attrs={"name": "x", "policy": "fair", "capacity": 3}, jobs={"a": job, "b": other})
    rec.add_epoch(0.0, {"a": 2}, 0.1, True)
    rec.pause_ms[-1] = 3.5
    rec.write(tmp_path / "metrics.h5")
    back = RunRecord.read(tmp_path / "metrics.h5")
    assert back.jobs["a"].loss == [1.0, 0.5] and back.jobs["a"].throughput == [(1, 0.1), (2, 0.05)]
    assert back.jobs["a"].status == "done" and math.isnan(back.jobs["b"].start)
    assert back.epoch_alloc == [[2, 0]] and back.pause_ms == [3.5] and back.moved == [1]
    assert back.attrs["policy"] == "fair"


@pytest.mark.parametrize(("state", "needle"), [
    (None, "get_state() returned NoneType"),
    ([1.0, 2.0], "get_state() returned list"),
    ({"w": "abc"}, "get_state()['w'] is str"),
    ({"w": {"nested": np.zeros(2)}}, "get_state()['w'] is dict"),
    ({3: np.zeros(2)}, "get_state()[3]"),
])
def test_a_state_that_is_not_numeric_arrays_names_the_job(state: object, needle: str) -> None:
    from slaq_mpi.storage.checkpoint import state_arrays

    with pytest.raises(ValueError, match=r"^job mine: ") as exc:
        state_arrays(state, "mine")
    assert needle in str(exc.value)


def test_state_arrays_are_copies() -> None:
    from slaq_mpi.storage.checkpoint import state_arrays

    w = np.zeros(3)
    out = state_arrays({"w": w, "k": 3}, "mine")
    w[0] = 1.0
    assert out["w"][0] == 0.0 and out["k"].shape == () and int(out["k"]) == 3


def test_a_resume_takes_its_epoch_and_clock_from_the_history_they_belong_to(tmp_path: Path) -> None:
    from slaq_mpi.runtime.coordinator import STATE_FILE, resume_record

    rec = RunRecord(attrs={"name": "x", "policy": "fair", "capacity": 2, "epoch": 3, "elapsed": 7.5},
                    jobs={"a": JobRecord(name="a", algorithm="logreg", convergence="sublinear",
                                         arrival=0.0, max_cores=2)})
    for t in (0.0, 2.0, 4.0, 6.0):
        rec.add_epoch(t, {"a": 2}, 0.1, False)
    rec.write(tmp_path / "metrics.h5")
    # killed between the two replaces (state.json one save behind), or a state.json that a
    # node crash left empty: the record alone decides
    for text in ('{"epoch": 2, "elapsed": 5.0, "finished": false}', ""):
        (tmp_path / STATE_FILE).write_text(text)
        record, epoch, elapsed = resume_record(tmp_path)
        assert (epoch, elapsed) == (3, 7.5) and len(record.epoch_time) == 3


def test_a_failed_metrics_write_leaves_no_temp_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rec = RunRecord(attrs={"name": "x"}, jobs={"a": JobRecord(
        name="a", algorithm="logreg", convergence="sublinear", arrival=0.0, max_cores=2)})

    def full_disk(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("slaq_mpi.storage.metrics.os.fsync", full_disk)
    with pytest.raises(OSError, match="No space"):
        rec.write(tmp_path / "metrics.h5")
    assert list(tmp_path.iterdir()) == []


def test_a_full_disk_gets_a_line_saying_what_to_do() -> None:
    import errno

    from slaq_mpi.errors import WorkerError, disk_full_hint

    full = OSError(errno.ENOSPC, "No space left on device")
    try:
        try:
            raise full
        except OSError as exc:
            raise RuntimeError("saving metrics.h5 failed") from exc
    except RuntimeError as wrapped:
        chained = wrapped
    worker = WorkerError("rank 3 on n1 (job a): OSError: [Errno 28] No space left on device")
    quota = OSError(errno.EDQUOT, "Disk quota exceeded")
    for exc in (full, chained, worker, quota):
        hint = disk_full_hint(exc, "runs/x")
        assert hint is not None and "free space, then `slaq run --resume runs/x`" in hint, exc
    assert "`slaq run --resume 'my runs/x'`" in (disk_full_hint(full, "my runs/x") or "")
    assert disk_full_hint(OSError(errno.EIO, "Input/output error"), "runs/x") is None
    assert disk_full_hint(ValueError("bad"), "runs/x") is None


def test_a_damaged_history_is_refused_as_bad_input_whatever_h5py_raises(tmp_path: Path) -> None:
    """A resume reads metrics.h5 before any rank starts: damage anywhere in it (h5py raises
    RuntimeError for a broken attribute block, KeyError, OSError, ValueError... elsewhere)
    must end in the one-line refusal (ConfigError, exit 2), never a traceback."""
    from slaq_mpi.errors import ConfigError
    from slaq_mpi.runtime.launch import check_history

    jobs = {name: JobRecord(name=name, algorithm="logreg", convergence="sublinear", arrival=0.0,
                            max_cores=4, loss=[1.0 / (k + 1) for k in range(300)],
                            time=[0.1 * k for k in range(300)], cores=[2] * 300,
                            iter_seconds=[0.1] * 300, throughput=[(2, 0.1)], status="running")
            for name in ("a", "b", "c")}
    rec = RunRecord(attrs={"name": "x", "policy": "slaq", "capacity": 8, "epoch": 3}, jobs=jobs)
    for e in range(20):
        rec.add_epoch(2.0 * e, {"a": 2, "b": 3, "c": 3}, 0.1, e == 0)
    good = tmp_path / "good.h5"
    rec.write(good)
    data = good.read_bytes()
    rng = np.random.default_rng(1)
    kinds: set[str] = set()
    for i in range(40):
        run = tmp_path / f"run{i}"
        run.mkdir()
        bad = bytearray(data)
        at = int(rng.integers(0, len(bad) - 8))
        bad[at:at + 8] = rng.integers(0, 256, 8, dtype=np.uint8).tobytes()
        (run / "metrics.h5").write_bytes(bytes(bad))
        try:
            RunRecord.read(run / "metrics.h5")
            kinds.add("read")
        except Exception as exc:  # noqa: BLE001 - which errors damage gives is the point
            kinds.add(type(exc).__name__)
        try:
            check_history(run)
        except ConfigError as exc:
            assert "metrics.h5" in str(exc), exc
    assert "RuntimeError" in kinds, kinds  # the damage this test exists for did occur
