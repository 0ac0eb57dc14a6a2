"""The data cache: a generated dataset is written once per spec and seed, whole or not at all,
and shared by the runs that use it (slaq_mpi.data.cache, generators.materialize)."""

from __future__ import annotations

import errno
import os
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

from slaq_mpi.data import cache, generators
from slaq_mpi.data.datasets import DatasetSpec, read_shard
from slaq_mpi.data.generators import materialize, will_generate

SPEC = DatasetSpec(generator="classification", params={"rows": 300, "features": 4})
SEED = 3


@pytest.fixture
def cache_at(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The cache directory of this test (``SLAQ_DATA_CACHE``)."""
    where = tmp_path / "cache"
    monkeypatch.setenv(cache.CACHE_ENV, str(where))
    return where


def _kept(where: Path) -> list[Path]:
    """Every file in the cache directory, temporary ones included."""
    return sorted(p for p in where.rglob("*") if p.is_file())


def _no_generation(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("generated again")

    monkeypatch.setattr(generators, "generate", refuse)


def _same_data(a: Path, b: Path) -> None:
    sa, sb = read_shard(a, 0, 1), read_shard(b, 0, 1)
    np.testing.assert_array_equal(sa.X, sb.X)
    np.testing.assert_array_equal(sa.y, sb.y)


def test_the_cache_is_where_the_environment_says(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path / "mine"))
    assert cache.cache_dir() == tmp_path / "mine"
    monkeypatch.delenv(cache.CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.cache_dir() == tmp_path / "xdg" / "slaq-mpi" / "data"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache.cache_dir() == tmp_path / "home" / ".cache" / "slaq-mpi" / "data"


def test_a_dataset_is_generated_once_and_shared_by_every_run_that_uses_it(
        cache_at: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert will_generate(SPEC, tmp_path / "run1" / "data", SEED)
    first = materialize(SPEC, tmp_path / "run1" / "data", SEED)
    [kept] = _kept(cache_at)
    assert not will_generate(SPEC, tmp_path / "run2" / "data", SEED)
    _no_generation(monkeypatch)  # the second run finds it in the cache
    second = materialize(SPEC, tmp_path / "run2" / "data", SEED)
    assert first == tmp_path / "run1" / "data" / f"{SPEC.key(SEED)}.h5"
    assert second.parent == tmp_path / "run2" / "data"
    assert os.path.samefile(first, kept) and os.path.samefile(second, kept)  # one copy on disk
    assert kept.stat().st_nlink == 3
    assert _kept(cache_at) == [kept]
    # another seed is another dataset
    monkeypatch.undo()
    monkeypatch.setenv(cache.CACHE_ENV, str(cache_at))
    other = materialize(SPEC, tmp_path / "run2" / "data", SEED + 1)
    assert not os.path.samefile(other, kept) and len(_kept(cache_at)) == 2


def test_removing_the_cache_or_a_run_leaves_the_other_whole(
        cache_at: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = materialize(SPEC, tmp_path / "run" / "data", SEED)
    reference = read_shard(run, 0, 1).X.copy()
    shutil.rmtree(cache_at)
    _no_generation(monkeypatch)  # a resumed run reads its own link
    assert materialize(SPEC, tmp_path / "run" / "data", SEED) == run
    np.testing.assert_array_equal(read_shard(run, 0, 1).X, reference)
    monkeypatch.undo()
    monkeypatch.setenv(cache.CACHE_ENV, str(cache_at))
    again = materialize(SPEC, tmp_path / "other" / "data", SEED)
    shutil.rmtree(tmp_path / "other")
    [kept] = _kept(cache_at)
    _same_data(kept, run)
    assert not again.exists()


def test_two_runs_generating_one_dataset_at_once_both_end_with_a_whole_file(
        cache_at: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    both_writing = threading.Barrier(2, timeout=60)
    final = cache_at / f"v{cache.FORMAT}" / f"{SPEC.key(SEED)}.h5"
    seen: list[bool] = []
    real = generators.generate

    def overlapping(spec: DatasetSpec, path: Path, seed: int) -> None:
        both_writing.wait()  # neither has finished: both generate
        seen.append(final.exists())
        real(spec, path, seed)

    monkeypatch.setattr(generators, "generate", overlapping)
    got: dict[str, Path] = {}
    errors: list[BaseException] = []

    def run(name: str) -> None:
        try:
            got[name] = materialize(SPEC, tmp_path / name / "data", SEED)
        except BaseException as exc:  # shown by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert seen == [False, False]  # no half-written file under the final name
    assert _kept(cache_at) == [final]  # and no temporary file left
    _same_data(got["a"], final)
    _same_data(got["b"], final)
    with h5py.File(got["a"]) as f, h5py.File(got["b"]) as g:
        assert f.attrs["generator"] == g.attrs["generator"]


def test_a_damaged_cached_file_is_generated_again(cache_at: Path, tmp_path: Path) -> None:
    materialize(SPEC, tmp_path / "run1" / "data", SEED)
    [kept] = _kept(cache_at)
    whole = read_shard(kept, 0, 1).X.copy()
    kept.unlink()
    kept.write_bytes(b"\x89HDF\r\n\x1a\n" + b"\0" * 100)  # what a damaged disk might leave
    run2 = materialize(SPEC, tmp_path / "run2" / "data", SEED)
    np.testing.assert_array_equal(read_shard(run2, 0, 1).X, whole)
    assert _kept(cache_at) == [kept]


def test_across_file_systems_a_run_links_to_the_cache_symbolically(
        cache_at: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_hard_link(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(os, "link", no_hard_link)
    run = materialize(SPEC, tmp_path / "run" / "data", SEED)
    [kept] = _kept(cache_at)
    assert run.is_symlink() and run.resolve() == kept.resolve()
    shutil.rmtree(cache_at)  # the link dangles: a resume makes the data again
    assert materialize(SPEC, tmp_path / "run" / "data", SEED) == run
    assert run.exists() and run.resolve() == kept.resolve()


def test_a_cache_that_cannot_be_written_is_passed_over_saying_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    monkeypatch.setenv(cache.CACHE_ENV, str(blocker / "cache"))
    run = materialize(SPEC, tmp_path / "run" / "data", SEED)
    assert run.is_file() and not run.is_symlink() and run.stat().st_nlink == 1
    out = capsys.readouterr().out
    assert "the data cache cannot be used" in out and str(blocker) in out
    assert cache.CACHE_ENV in out and str(tmp_path / "run" / "data") in out


def test_temporary_files_of_dead_writers_go_once_a_day_old(cache_at: Path, tmp_path: Path) -> None:
    where = cache_at / f"v{cache.FORMAT}"
    where.mkdir(parents=True)
    name = f"{SPEC.key(SEED)}.h5"
    dead, busy = where / f".{name}.tmp-n1-17-ab12cd34", where / f".{name}.tmp-n2-18-ef56ab78"
    for tmp in (dead, busy):
        tmp.write_bytes(b"half a file")
    day_ago = time.time() - cache.STALE_SECONDS - 60
    os.utime(dead, (day_ago, day_ago))
    materialize(SPEC, tmp_path / "run" / "data", SEED)
    assert _kept(cache_at) == sorted([where / name, busy])


def test_a_failed_generation_leaves_nothing_in_the_cache(
        cache_at: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real: Callable[..., None] = generators.generate

    def full_disk(spec: DatasetSpec, path: Path, seed: int) -> None:
        real(spec, path, seed)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(generators, "generate", full_disk)
    with pytest.raises(OSError, match="No space"):  # the run directory is on the full disk too
        materialize(SPEC, tmp_path / "run" / "data", SEED)
    assert _kept(cache_at) == []


def test_only_datasets_to_generate_count_against_the_cache_disk(
        cache_at: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil as shutil_module
    from collections import namedtuple

    from slaq_mpi.data.generators import check_generated_space, generated_bytes
    from slaq_mpi.errors import ConfigError

    data_dir = tmp_path / "run" / "data"
    materialize(SPEC, tmp_path / "earlier" / "data", SEED)  # in the cache now
    other = DatasetSpec(generator="classification", params={"rows": 1000, "features": 9})
    need = generated_bytes(other)
    usage = namedtuple("usage", "total used free")
    seen: list[Path] = []

    def disk_usage(path: Any) -> Any:
        seen.append(Path(path))
        return usage(10**9, 0, need * 1.5)

    monkeypatch.setattr(shutil_module, "disk_usage", disk_usage)
    # the cached one and a dataset shared by two jobs count nothing and once
    check_generated_space([(SPEC, SEED), (other, 1), (other, 1)], data_dir, "the jobs' data")
    assert seen and all(cache_at.is_relative_to(p) or p == cache_at for p in seen)
    with pytest.raises(ConfigError, match="the jobs' data"):
        check_generated_space([(other, 1), (other, 2)], data_dir, "the jobs' data")
    seen.clear()
    check_generated_space([(SPEC, SEED)], data_dir, "the jobs' data")  # nothing to generate
    assert not seen
