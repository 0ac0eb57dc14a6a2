"""A worker's copies of small datasets give each rank the rows the file gives it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from slaq_mpi.data import shard_cache
from slaq_mpi.data.datasets import DatasetSpec, read_shard
from slaq_mpi.data.generators import generate
from slaq_mpi.data.shard_cache import ShardCache

pytestmark = pytest.mark.fast


def _gen(tmp_path: Path, kind: str, rows: int, name: str) -> Path:
    path = tmp_path / name
    generate(DatasetSpec(generator=kind, params={"rows": rows, "features": 7}), path, 1)
    return path


def _same(a: object, b: object) -> None:
    ax, bx = a.X, b.X  # type: ignore[attr-defined]
    if sp.issparse(ax):
        assert sp.issparse(bx) and (ax != bx).nnz == 0
    else:
        np.testing.assert_array_equal(ax, bx)
        assert ax.dtype == bx.dtype
    np.testing.assert_array_equal(a.y, b.y)  # type: ignore[attr-defined]
    assert (a.row_start, a.n_rows) == (b.row_start, b.n_rows)  # type: ignore[attr-defined]


@pytest.mark.parametrize("kind", ["classification", "blobs", "documents"])
def test_every_rank_gets_the_rows_the_file_gives_it(tmp_path: Path, kind: str) -> None:
    path = _gen(tmp_path, kind, 101, "d.h5")
    cache = ShardCache()
    for size in (1, 2, 3, 7, 16):
        for rank in range(size):
            _same(cache.read(path, rank, size), read_shard(path, rank, size))


def test_a_solver_changing_its_rows_changes_no_other_rank_s(tmp_path: Path) -> None:
    path = _gen(tmp_path, "classification", 50, "d.h5")
    cache = ShardCache()
    mine = cache.read(path, 0, 2)
    mine.X[:] = 0.0
    mine.y[:] = -1.0
    _same(cache.read(path, 0, 2), read_shard(path, 0, 2))


def test_large_datasets_are_read_from_the_file_and_the_budget_drops_the_oldest(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    small = [_gen(tmp_path, "classification", 40, f"s{i}.h5") for i in range(3)]
    large = _gen(tmp_path, "classification", 4000, "large.h5")
    one = shard_cache._nbytes(read_shard(small[0], 0, 1))
    cache = ShardCache(largest=large.stat().st_size - 1, budget=2 * one)
    reads: list[str] = []
    real = shard_cache.read_shard

    def counted(path: str | Path, rank: int, size: int) -> object:
        reads.append(Path(path).name)
        return real(path, rank, size)

    monkeypatch.setattr(shard_cache, "read_shard", counted)
    for _ in range(3):
        _same(cache.read(large, 1, 3), real(large, 1, 3))
    assert reads == ["large.h5"] * 3  # never kept: each rank's rows from the file
    reads.clear()
    for path in small + small[2:]:  # s0, s1, s2 (s0 dropped: over the budget), s2 again
        cache.read(path, 0, 2)
    assert reads == ["s0.h5", "s1.h5", "s2.h5"]
    cache.read(small[0], 1, 2)
    assert reads[-1] == "s0.h5"  # dropped, so read again
