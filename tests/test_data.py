"""Datasets: generators, the HDF5 layout, chunked validation, and the ``slaq data`` commands."""

from __future__ import annotations

import os
from pathlib import Path

import h5py
import numpy as np
import pytest
import scipy.sparse as sp

from jobs import load_solver
from slaq_mpi.cli import main as slaq_main
from slaq_mpi.config import experiment as config
from slaq_mpi.data import generators
from slaq_mpi.data.datasets import DatasetSpec, check_file, inspect, read_shard
from slaq_mpi.data.generators import generate
from slaq_mpi.errors import DataError


def _gen(tmp_path: Path, kind: str, name: str = "d.h5", **params) -> Path:
    path = tmp_path / name
    generate(DatasetSpec(generator=kind, params={"rows": 500, "features": 12, **params}), path, 1)
    return path


def _dense(tmp_path: Path, X: np.ndarray, y: np.ndarray | None = None, name: str = "m.h5") -> Path:
    path = tmp_path / name
    with h5py.File(path, "w") as f:
        f["X"] = X
        if y is not None:
            f["y"] = y
    return path


def test_documents_are_sparse_counts_and_shards_partition_them(tmp_path: Path) -> None:
    path = _gen(tmp_path, "documents", topics=3, doc_length=20)
    info = inspect(path)
    assert info.sparse and not info.has_labels and (info.rows, info.features) == (500, 12)
    parts = [read_shard(path, r, 3).X for r in range(3)]
    whole = sp.vstack(parts).toarray()
    assert whole.shape == (500, 12) and np.all(whole == np.round(whole)) and whole.min() >= 0
    assert np.all(whole.sum(axis=1) >= 1)


def test_generation_is_chunked_and_deterministic(tmp_path: Path, monkeypatch) -> None:
    a = _gen(tmp_path, "classification", "a.h5", density=0.3)
    monkeypatch.setattr(generators, "CHUNK_ROWS", 64)  # many chunks; content depends on chunking
    b = _gen(tmp_path, "classification", "b.h5", density=0.3)
    c = _gen(tmp_path, "classification", "c.h5", density=0.3)
    xb, xc = read_shard(b, 0, 1), read_shard(c, 0, 1)
    assert sp.issparse(xb.X) and (xb.X != xc.X).nnz == 0 and np.array_equal(xb.y, xc.y)
    assert read_shard(a, 0, 1).X.shape == xb.X.shape
    assert set(np.unique(xb.y)) == {0.0, 1.0}


def test_good_files_pass(tmp_path: Path) -> None:
    check_file(_gen(tmp_path, "blobs", centers=3), load_solver("mlp"))
    check_file(_gen(tmp_path, "documents", "docs.h5"), load_solver("lda"))


@pytest.mark.parametrize("sparse", [False, True])
def test_nan_in_features_names_file_and_row(tmp_path: Path, sparse: bool) -> None:
    X = np.random.default_rng(0).standard_normal((300, 4))
    X[211, 2] = np.nan
    if sparse:
        path = tmp_path / "s.h5"
        m = sp.csr_matrix(X)
        with h5py.File(path, "w") as f:
            g = f.create_group("X")
            g["data"], g["indices"] = m.data, m.indices.astype(np.int64)
            g["indptr"] = m.indptr.astype(np.int64)
            g.attrs["shape"] = m.shape
            f["y"] = np.zeros(300)
    else:
        path = _dense(tmp_path, X, np.zeros(300))
    with pytest.raises(DataError, match=rf"{path}: row 211: .*nan.*finite"):
        check_file(path, load_solver("logreg"))


def test_inf_label_and_out_of_range_labels(tmp_path: Path) -> None:
    X = np.zeros((50, 2))
    y = np.zeros(50)
    y[17] = 2.0
    path = _dense(tmp_path, X, y)
    with pytest.raises(DataError, match=r"m\.h5: row 17: y is 2\.0; labels must be 0 or 1"):
        check_file(path, load_solver("svm"))
    check_file(path, load_solver("mlp"))  # class 2 is fine for a multi-class model
    y[17], y[30] = 1.0, 1.5
    path = _dense(tmp_path, X, y, "frac.h5")
    with pytest.raises(DataError, match=r"row 30: y is 1\.5; labels must be class numbers"):
        check_file(path, load_solver("mlp"))
    y[30] = np.inf
    path = _dense(tmp_path, X, y, "inf.h5")
    with pytest.raises(DataError, match=r"inf\.h5: row 30: y is inf; labels must be finite"):
        check_file(path, load_solver("linreg"))


def test_lda_refuses_negative_counts_dense_and_sparse(tmp_path: Path) -> None:
    X = np.ones((40, 5))
    X[23, 4] = -1.0
    dense = _dense(tmp_path, X, name="neg.h5")
    with pytest.raises(DataError, match=r"neg\.h5: row 23: X\[23, 4\] is -1\.0; values must be counts >= 0"):
        check_file(dense, load_solver("lda"))
    check_file(dense, load_solver("kmeans"))  # negative values are fine for other algorithms
    path = _gen(tmp_path, "documents")
    with h5py.File(path, "r+") as f:
        data, ptr = f["X/data"][:], f["X/indptr"][:]
        data[ptr[77]] = -2.0
        f["X/data"][:] = data
    with pytest.raises(DataError, match=r"row 77: X has value -2\.0; values must be counts >= 0"):
        check_file(path, load_solver("lda"))


def test_wrong_shapes(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"y has shape \(49,\); X has 50 rows"):
        check_file(_dense(tmp_path, np.zeros((50, 3)), np.zeros(49)), load_solver("linreg"))
    with pytest.raises(DataError, match=r"X has shape \(50,\); it must be 2-D"):
        check_file(_dense(tmp_path, np.zeros(50), name="one.h5"), load_solver("kmeans"))
    nolab = _dense(tmp_path, np.zeros((5, 3)), name="nolab.h5")
    with pytest.raises(DataError, match=r"needs labels, and the file has no 'y'$"):
        check_file(nolab, load_solver("logreg"))

    class Mine(load_solver("kmeans")):  # a user's own solver that left needs_labels at its default
        needs_labels = True

    with pytest.raises(DataError, match=r"has no 'y' \(a solver that trains without labels declares "
                                        r"`needs_labels = False`"):
        check_file(nolab, Mine)


def test_corrupt_csr_structure_names_row(tmp_path: Path) -> None:
    path = _gen(tmp_path, "documents")
    with h5py.File(path, "r+") as f:
        idx = f["X/indices"][:]
        ptr = f["X/indptr"][:]
        idx[ptr[123]] = 99  # column out of range in row 123
        f["X/indices"][:] = idx
    with pytest.raises(DataError, match=r"row 123: X has column index 99; allowed 0\.\.11"):
        check_file(path, load_solver("lda"))
    with h5py.File(path, "r+") as f:
        ptr[300] = ptr[299] - 1
        f["X/indptr"][:] = ptr
    with pytest.raises(DataError, match=r"row 299: X/indptr decreases"):
        check_file(path, load_solver("lda"))


def test_csr_index_arrays_must_be_integers_and_shape_two_sizes(tmp_path: Path) -> None:
    path = _gen(tmp_path, "documents")
    with h5py.File(path, "r+") as f:
        ptr = f["X/indptr"][:]
        del f["X/indptr"]
        f["X/indptr"] = ptr + 0.5  # truncated to the right integers: it used to pass
    with pytest.raises(DataError, match=r"X/indptr has dtype float64; it must hold integers"):
        check_file(path, load_solver("lda"))
    with h5py.File(path, "r+") as f:
        del f["X/indptr"]
        f["X/indptr"] = ptr
        rows, features = (int(v) for v in f["X"].attrs["shape"])
    check_file(path, load_solver("lda"))
    for shape in ([rows], [rows, features, 1], [-rows, features], ["a", "b"]):
        with h5py.File(path, "r+") as f:
            f["X"].attrs["shape"] = shape
        with pytest.raises(DataError, match=r"shape attribute .* two integers >= 0: \(rows, features\)"):
            check_file(path, load_solver("lda"))


def test_truncated_hdf5_is_refused(tmp_path: Path) -> None:
    path = _dense(tmp_path, np.random.default_rng(1).standard_normal((20000, 8)), np.zeros(20000))
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(DataError, match=rf"{path}: (not a readable HDF5 file|truncated or corrupt)"):
        check_file(path, load_solver("linreg"))
    garbage = tmp_path / "garbage.h5"
    garbage.write_bytes(b"not hdf5 at all" * 100)
    with pytest.raises(DataError, match="garbage.h5: not a readable HDF5 file"):
        check_file(garbage, load_solver("linreg"))


def test_damage_anywhere_in_the_metadata_is_a_data_error(tmp_path: Path) -> None:
    # h5py raises OSError, RuntimeError, KeyError or ValueError depending on what is hit
    path = _dense(tmp_path, np.random.default_rng(1).standard_normal((2000, 8)), np.zeros(2000))
    base = path.read_bytes()
    rng = np.random.default_rng(0)
    damaged = tmp_path / "damaged.h5"
    refused = 0
    for at in range(0, 4096, 8):
        data = bytearray(base)
        data[at : at + 8] = rng.integers(0, 256, 8, dtype=np.uint8).tobytes()
        damaged.write_bytes(bytes(data))
        try:
            check_file(damaged, load_solver("linreg"))
        except DataError as exc:
            assert str(exc).startswith(f"{damaged}: "), exc
            refused += 1
    assert refused >= 30  # the header and object metadata live in the first 4 KiB


def test_config_refuses_bad_file_naming_row(tmp_path: Path) -> None:
    from slaq_mpi.config import experiment as config
    from slaq_mpi.errors import ConfigError

    y = np.zeros(10)
    y[4] = 3.0
    path = _dense(tmp_path, np.zeros((10, 2)), y)
    job = {"name": "a", "algorithm": "logreg", "dataset": {"path": str(path)}}
    raw = {"name": "x", "policy": "fair", "jobs": [job]}
    with pytest.raises(ConfigError, match=r"jobs\[0\]\.dataset\.path.*row 4: y is 3\.0"):
        config.parse(raw)


# --- slaq data make / convert ------------------------------------------------------------

def test_cli_make_writes_every_kind(tmp_path: Path, capsys) -> None:
    for kind in ("classification", "regression", "blobs", "documents"):
        out = tmp_path / f"{kind}.h5"
        assert slaq_main(["data", "make", kind, str(out), "--rows", "300", "--features", "7",
                          "--seed", "4"]) == 0
        assert inspect(out).rows == 300
    assert "300 rows x 7 features" in capsys.readouterr().out
    assert slaq_main(["data", "make", "blobs", str(tmp_path / "x.h5"), "--rows", "3",
                      "--features", "2", "--topics", "4"]) == 2
    assert "not an option of blobs" in capsys.readouterr().err


def test_convert_libsvm(tmp_path: Path) -> None:
    src = tmp_path / "a.svm"
    src.write_text("# header comment\n+1 1:0.5 3:1.5\n-1 qid:2 2:2 4:1 # tail\n\n-1 1:1\n")
    out = tmp_path / "a.h5"
    assert slaq_main(["data", "convert", str(src), str(out)]) == 0
    shard = read_shard(out, 0, 1)
    np.testing.assert_array_equal(shard.X.toarray(), [[0.5, 0, 1.5, 0], [0, 2, 0, 1], [1, 0, 0, 0]])
    np.testing.assert_array_equal(shard.y, [1, 0, 0])  # -1/+1 become 0/1
    check_file(out, load_solver("svm"))


@pytest.mark.parametrize("line", ["+1 1:0.5 2:abc", "+1 1:0.5 oops", "x 1:2", "+1 3:1 2:1", "+1 1:nan"])
def test_convert_libsvm_bad_line_names_file_and_line(tmp_path: Path, capsys, line: str) -> None:
    src = tmp_path / "bad.svm"
    src.write_text(f"+1 1:1\n-1 2:1\n{line}\n")
    assert slaq_main(["data", "convert", str(src), str(tmp_path / "bad.h5")]) == 2
    assert f"{src}:3:" in capsys.readouterr().err
    assert not (tmp_path / "bad.h5").exists()


def test_convert_csv_and_npy(tmp_path: Path, capsys) -> None:
    src = tmp_path / "t.csv"
    src.write_text("a,b,label\n1,2,0\n3,4,1\n5,6,1\n")
    out = tmp_path / "t.h5"
    assert slaq_main(["data", "convert", str(src), str(out), "--label-column", "-1"]) == 0
    shard = read_shard(out, 0, 1)
    np.testing.assert_array_equal(shard.X, [[1, 2], [3, 4], [5, 6]])
    np.testing.assert_array_equal(shard.y, [0, 1, 1])
    src.write_text("1,2\n3,zz\n")
    assert slaq_main(["data", "convert", str(src), str(tmp_path / "bad.h5")]) == 2
    assert f"{src}:2: column 1 is 'zz'" in capsys.readouterr().err
    arr = np.arange(12.0).reshape(4, 3)
    np.save(tmp_path / "a.npy", arr)
    assert slaq_main(["data", "convert", str(tmp_path / "a.npy"), str(tmp_path / "a.h5")]) == 0
    np.testing.assert_array_equal(read_shard(tmp_path / "a.h5", 1, 2).X, arr[2:])
    arr[3, 1] = np.inf
    np.save(tmp_path / "a.npy", arr)
    assert slaq_main(["data", "convert", str(tmp_path / "a.npy"), str(tmp_path / "inf.h5")]) == 2
    assert "a.npy: row 3: non-finite value" in capsys.readouterr().err


@pytest.mark.parametrize("first", ["1,,0", "1,2,inf", "1,nan,0", "1,2,1e400"])
def test_a_bad_first_csv_line_is_refused_not_taken_for_a_header(tmp_path: Path, capsys, first: str) -> None:
    src = tmp_path / "t.csv"
    src.write_text(f"{first}\n3,4,1\n")
    out = tmp_path / "t.h5"
    assert slaq_main(["data", "convert", str(src), str(out), "--label-column", "-1"]) == 2
    assert f"{src}:1: column " in capsys.readouterr().err
    assert not out.exists()


def test_csv_header_and_byte_order_mark(tmp_path: Path) -> None:
    src = tmp_path / "t.csv"
    src.write_bytes("\ufeff1,2,0\n3,4,1\n".encode())  # no header: the BOM is not a cell
    out = tmp_path / "t.h5"
    assert slaq_main(["data", "convert", str(src), str(out), "--label-column", "2"]) == 0
    np.testing.assert_array_equal(read_shard(out, 0, 1).X, [[1, 2], [3, 4]])


def test_npy_label_column_out_of_range_and_both_label_sources(tmp_path: Path, capsys) -> None:
    np.save(tmp_path / "a.npy", np.arange(12.0).reshape(4, 3))
    np.save(tmp_path / "y.npy", np.zeros(4))
    out = tmp_path / "o.h5"
    for col in ("3", "-4"):
        assert slaq_main(["data", "convert", str(tmp_path / "a.npy"), str(out), "--label-column", col]) == 2
        assert "--label-column" in capsys.readouterr().err
    assert slaq_main(["data", "convert", str(tmp_path / "a.npy"), str(out), "--label-column", "-3"]) == 0
    out = tmp_path / "o2.h5"
    assert slaq_main(["data", "convert", str(tmp_path / "a.npy"), str(out), "--label-column", "0",
                      "--labels", str(tmp_path / "y.npy")]) == 2
    assert "not both" in capsys.readouterr().err
    assert slaq_main(["data", "convert", str(tmp_path / "a.npy"), str(out),
                      "--labels", str(tmp_path / "missing.npy")]) == 2
    assert "missing.npy: not a readable .npy array" in capsys.readouterr().err


def test_npz_and_binary_inputs_are_refused_in_one_line(tmp_path: Path, capsys) -> None:
    np.savez(tmp_path / "a.npz", X=np.zeros((3, 2)))
    assert slaq_main(["data", "convert", str(tmp_path / "a.npz"), str(tmp_path / "o.h5")]) == 2
    assert "a .npz archive holds several arrays" in capsys.readouterr().err
    (tmp_path / "b.bin").write_bytes(b"\x00\x01\xff\xfe binary")
    assert slaq_main(["data", "convert", str(tmp_path / "b.bin"), str(tmp_path / "o.h5")]) == 2
    err = capsys.readouterr().err
    assert "b.bin:1: not text" in err and "\\x00" not in err
    assert not (tmp_path / "o.h5").exists()


# every numeric option of `slaq data make`: (kind, option, bad value, what the error says)
BAD_MAKE_OPTIONS = [
    ("blobs", "--centers", "0", "must be an integer >= 1"),
    ("blobs", "--centers", "-2", "must be an integer >= 1"),
    ("classification", "--seed", "-1", "must be an integer >= 0"),
    ("classification", "--rows", "0", "must be an integer >= 1"),
    ("regression", "--features", "-3", "must be an integer >= 1"),
    ("documents", "--topics", "0", "must be an integer >= 1"),
    ("documents", "--doc-length", "0", "must be an integer >= 1"),
    ("documents", "--alpha", "0", "must be a finite number > 0"),
    ("documents", "--alpha", "inf", "must be a finite number > 0"),
    ("classification", "--noise", "-0.5", "must be a finite number >= 0"),
    ("regression", "--noise", "nan", "must be a finite number >= 0"),
    ("blobs", "--spread", "-1", "must be a finite number >= 0"),
    ("classification", "--density", "0", "must be a fraction in (0, 1]"),
    ("regression", "--density", "1.5", "must be a fraction in (0, 1]"),
]


@pytest.mark.parametrize(("kind", "option", "value", "allowed"), BAD_MAKE_OPTIONS)
def test_make_refuses_every_numeric_option_out_of_range(tmp_path: Path, capsys, kind: str, option: str,
                                                        value: str, allowed: str) -> None:
    out = tmp_path / "m.h5"
    args = {"--rows": "10", "--features": "2", option: value}
    argv = ["data", "make", kind, str(out)] + [x for kv in args.items() for x in kv]
    assert slaq_main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"slaq: error: data make {option}: "), err
    assert allowed in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("key", "values"), [
    ("rows", [0, 1]), ("features", [-1, 0, 1]), ("seed", [-1, 0, 7]), ("centers", [-1, 0, 1, 3]),
    ("topics", [0, 1]), ("doc_length", [0, 1]), ("alpha", [-1.0, 0.0, 1e-9, 2.0]),
    ("noise", [-0.1, 0.0, 0.3]), ("spread", [-1.0, 0.0, 1.0]), ("density", [0.0, 0.5, 1.0, 1.01]),
])
def test_make_and_the_yaml_accept_the_same_generator_params(tmp_path: Path, key: str,
                                                            values: list[float]) -> None:
    from slaq_mpi.config import experiment as config
    from slaq_mpi.data.convert import make
    from slaq_mpi.errors import ConfigError

    kind = next(g for g, (_, opts) in generators.GENERATORS.items() if key in opts or key in
                ("rows", "features", "seed"))
    for i, value in enumerate(values):
        params = {"rows": 4, "features": 3, key: value}
        raw = {"name": "x", "policy": "fair", "jobs": [
            {"name": "a", "algorithm": "kmeans", "hyperparameters": {"k": 1},
             "dataset": {"generator": kind, **params}}]}
        try:
            config.parse(raw, check_files=False)
            yaml_ok = True
        except ConfigError:
            yaml_ok = False
        try:
            make(kind, tmp_path / f"m{i}.h5", **params)  # type: ignore[arg-type]
            make_ok = True
        except ConfigError:
            make_ok = False
        assert yaml_ok == make_ok, (key, value, yaml_ok, make_ok)


@pytest.mark.parametrize("y", [np.array(["a", "b", "c", "d"]), np.array([1 + 2j, 0, 1, 0]),
                               np.zeros(4, dtype=[("a", "f8")])], ids=["text", "complex", "record"])
def test_npy_labels_that_are_not_real_numbers_are_refused(tmp_path: Path, capsys, y: np.ndarray) -> None:
    np.save(tmp_path / "a.npy", np.arange(8.0).reshape(4, 2))
    np.save(tmp_path / "y.npy", y)
    out = tmp_path / "o.h5"
    assert slaq_main(["data", "convert", str(tmp_path / "a.npy"), str(out),
                      "--labels", str(tmp_path / "y.npy")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{tmp_path / 'y.npy'}: labels of dtype {y.dtype}" in err, err
    assert "want real numbers" in err
    assert not out.exists()
    np.save(tmp_path / "y.npy", np.array([True, False, True, True]))  # bool labels are numbers
    assert slaq_main(["data", "convert", str(tmp_path / "a.npy"), str(out),
                      "--labels", str(tmp_path / "y.npy")]) == 0
    np.testing.assert_array_equal(read_shard(out, 0, 1).y, [1, 0, 1, 1])


def test_convert_refuses_to_write_over_its_input(tmp_path: Path, capsys) -> None:
    text = "a,b,y\n1,2,0\n3,4,1\n"
    src = tmp_path / "h.csv"
    src.write_text(text)
    (tmp_path / "link.csv").symlink_to(src)
    os.link(src, tmp_path / "hard.csv")
    for out in (src, tmp_path / "." / "h.csv", tmp_path / "link.csv", tmp_path / "hard.csv"):
        assert slaq_main(["data", "convert", str(src), str(out), "--label-column", "-1"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"out: {str(out)!r}" in err and "it is the input" in err, err
    np.save(tmp_path / "a.npy", np.arange(6.0).reshape(3, 2))
    np.save(tmp_path / "y.npy", np.zeros(3))
    assert slaq_main(["data", "convert", str(tmp_path / "a.npy"), str(tmp_path / "y.npy"),
                      "--labels", str(tmp_path / "y.npy")]) == 2
    assert "it is the --labels file" in capsys.readouterr().err
    assert src.read_text() == text and (tmp_path / "hard.csv").read_text() == text
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), np.zeros(3))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.npy", "h.csv", "hard.csv", "link.csv", "y.npy"]


def test_make_and_convert_never_replace_an_existing_file(tmp_path: Path, capsys) -> None:
    notes = tmp_path / "notes.yaml"
    notes.write_text("keep: me\n")
    src = tmp_path / "h.csv"
    src.write_text("a,y\n1,0\n2,1\n")
    made = tmp_path / "made.h5"
    assert slaq_main(["data", "make", "blobs", str(made), "--rows", "10", "--features", "2"]) == 0
    before = made.read_bytes()
    capsys.readouterr()
    for args in (["make", "blobs", str(notes), "--rows", "10", "--features", "2"],
                 ["make", "blobs", str(made), "--rows", "20", "--features", "3"],
                 ["convert", str(src), str(notes), "--label-column", "-1"],
                 ["convert", str(src), str(made), "--label-column", "-1"]):
        assert slaq_main(["data", *args]) == 2, args
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "already exists" in err and "remove it first" in err, err
    assert notes.read_text() == "keep: me\n" and made.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["h.csv", "made.h5", "notes.yaml"]


def test_a_file_that_appears_at_out_while_writing_is_kept(tmp_path: Path, capsys,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from slaq_mpi.data import convert as datatools

    out = tmp_path / "d.h5"
    real = datatools._readable

    def meanwhile(tmp: Path, dest: Path) -> None:
        real(tmp, dest)
        dest.write_text("written by someone else meanwhile")

    monkeypatch.setattr(datatools, "_readable", meanwhile)
    assert slaq_main(["data", "make", "blobs", str(out), "--rows", "10", "--features", "2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "appeared while the data was written" in err, err
    assert out.read_text() == "written by someone else meanwhile"
    assert [p.name for p in tmp_path.iterdir()] == ["d.h5"]  # no temporary file left


@pytest.mark.parametrize("features", ["0", "-3"])
def test_convert_libsvm_features_below_one_is_refused_up_front(tmp_path: Path, capsys, features: str) -> None:
    src = tmp_path / "lab.svm"
    src.write_text("1\n0\n" if features == "0" else "1 1:3\n0 2:1\n")
    out = tmp_path / "o.h5"
    assert slaq_main(["data", "convert", str(src), str(out), "--features", features]) == 2
    err = capsys.readouterr().err
    assert err == f"slaq: error: --features: {features} is not allowed; must be an integer >= 1 " \
                  "(the number of columns)\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lab.svm"]


def test_an_output_slaq_cannot_read_is_never_left_behind(tmp_path: Path) -> None:
    from slaq_mpi.data.convert import _Output

    out = tmp_path / "o.h5"
    with pytest.raises(DataError, match=rf"^{out}: no 'X'"), _Output(out):
        pass  # writes nothing: not a dataset
    assert list(tmp_path.iterdir()) == []
    out.write_bytes(b"older output")
    with pytest.raises(DataError), _Output(out) as f:
        f.create_dataset("X", shape=(2, 0), dtype="f8")
    assert out.read_bytes() == b"older output" and [p.name for p in tmp_path.iterdir()] == ["o.h5"]


def test_convert_options_of_another_format_are_refused(tmp_path: Path, capsys) -> None:
    (tmp_path / "t.csv").write_text("1,2,0\n3,4,1\n")
    np.save(tmp_path / "a.npy", np.zeros((2, 2)))
    (tmp_path / "a.svm").write_text("1 1:2\n")
    out = str(tmp_path / "o.h5")
    for src, option, needle in [("t.csv", ["--features", "3"], "--features: 3"),
                                ("a.npy", ["--zero-based"], "--zero-based: applies to LibSVM"),
                                ("a.svm", ["--label-column", "0"], "--label-column: 0")]:
        assert slaq_main(["data", "convert", str(tmp_path / src), out, *option]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and needle in err and "input only" in err, err
    assert not (tmp_path / "o.h5").exists()


def test_fingerprint_sees_a_rewrite_in_the_middle_of_a_large_file(tmp_path: Path) -> None:
    from slaq_mpi.data.datasets import fingerprint, fingerprint_matches

    data = tmp_path / "big.bin"
    rng = np.random.default_rng(0)
    data.write_bytes(rng.bytes(9 << 20))
    kept, old_style = fingerprint(data), fingerprint(data, samples=0)
    assert kept.endswith(":256") and old_style.count(":") == 1
    with open(data, "r+b") as fh:  # 64 KiB rewritten in place, far from the head and tail
        fh.seek(5 << 20)
        fh.write(rng.bytes(64 << 10))
    assert fingerprint(data, samples=0) == old_style  # head and tail alone miss it
    assert not fingerprint_matches(data, kept)
    # a run started before the samples were taken kept the head-and-tail form: still checked so
    assert fingerprint_matches(data, fingerprint(data, samples=0))
    copy = tmp_path / "copy.bin"
    copy.write_bytes(data.read_bytes())  # a copy (new modification time) matches
    assert fingerprint_matches(copy, fingerprint(data))
    with open(copy, "r+b") as fh:
        first = fh.read(1)
        fh.seek(0)
        fh.write(bytes([first[0] ^ 0xFF]))
    assert not fingerprint_matches(copy, fingerprint(data))


def test_resume_check_reads_fingerprints_kept_by_an_earlier_version(tmp_path: Path) -> None:
    import json

    from slaq_mpi.data.datasets import fingerprint
    from slaq_mpi.errors import ConfigError
    from slaq_mpi.runtime.launch import check_data_unchanged

    data = tmp_path / "train.bin"
    data.write_bytes(np.random.default_rng(1).bytes(3 << 20))
    run = tmp_path / "run"
    run.mkdir()
    with h5py.File(run / "metrics.h5", "w") as f:  # head and tail only, as runs kept before
        f.attrs["data_files"] = json.dumps({"a": [str(data), fingerprint(data, samples=0)],
                                            "b": [str(data), fingerprint(data)]})
    spec = config.parse({"name": "x", "ranks": 3, "jobs": [
        {"name": n, "algorithm": "kmeans", "dataset": {"path": str(data)}} for n in "ab"]},
        check_files=False)
    check_data_unchanged(run, spec)  # unchanged: both forms match
    with open(data, "r+b") as fh:
        fh.seek(len(data.read_bytes()) // 2)
        fh.write(b"changed in the middle")
    with pytest.raises(ConfigError, match="job b's data file .* changed since the run started"):
        check_data_unchanged(run, spec)  # job a's head-and-tail form cannot see it; b's samples do


def test_resume_checks_the_files_the_resumed_run_reads(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    from slaq_mpi.data.datasets import fingerprint
    from slaq_mpi.errors import ConfigError
    from slaq_mpi.runtime.launch import check_data_unchanged

    proj = tmp_path / "proj"
    (proj / "data").mkdir(parents=True)
    for seed in (1, 2):
        generate(DatasetSpec(generator="blobs", params={"rows": 300, "features": 4}),
                 proj / "data" / f"v{seed}.h5", seed)
    (proj / "data" / "current.h5").symlink_to("v1.h5")
    (proj / "exp.yaml").write_text("name: x\nranks: 2\njobs:\n  - name: a\n    algorithm: kmeans\n"
                                   "    dataset: {path: data/current.h5}\n")
    monkeypatch.chdir(proj)
    start = config.load("exp.yaml")
    path = start.jobs[0].dataset.path
    assert path == str(proj / "data" / "v1.h5")
    run = tmp_path / "run"
    run.mkdir()
    with h5py.File(run / "metrics.h5", "w") as f:  # what the coordinator keeps at the start
        f.attrs["data_files"] = json.dumps({"a": [path, fingerprint(path)]})
    check_data_unchanged(run, config.load("exp.yaml"))
    # the link now points at other data: the resumed run would read v2, so v2 is checked
    (proj / "data" / "current.h5").unlink()
    (proj / "data" / "current.h5").symlink_to("v2.h5")
    with pytest.raises(ConfigError, match=r"job a's data file \S*v2.h5 \(\S*v1.h5 when the run "
                                          r"started\) changed since the run started"):
        check_data_unchanged(run, config.load("exp.yaml"))
    (proj / "data" / "current.h5").unlink()
    (proj / "data" / "current.h5").symlink_to("v1.h5")
    # the project directory renamed: the same data under a new path is the same data
    monkeypatch.chdir(tmp_path)
    proj.rename(tmp_path / "proj2")
    monkeypatch.chdir(tmp_path / "proj2")
    moved = config.load("exp.yaml")
    assert moved.jobs[0].dataset.path == str(tmp_path / "proj2" / "data" / "v1.h5")
    check_data_unchanged(run, moved)


def test_a_tilde_in_config_paths_is_the_home_directory(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    (home / "solvers").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(tmp_path)
    generate(DatasetSpec(generator="classification", params={"rows": 300, "features": 4}),
             home / "d.h5", 1)
    solver = Path(__file__).parent / "solvers" / "faulty.py"
    (home / "solvers" / "mine.py").write_text(solver.read_text())
    cls = next(line.split()[1].split("(")[0] for line in solver.read_text().splitlines()
               if line.startswith("class "))
    spec = config.parse({"name": "t", "ranks": 3, "output_dir": "~/runs/t", "jobs": [
        {"name": "a", "algorithm": "kmeans", "dataset": {"path": "~/d.h5"}},
        {"name": "b", "algorithm": f"~/solvers/mine.py:{cls}", "dataset": {"path": "~/d.h5"}}]})
    assert spec.output_dir == home / "runs" / "t"
    assert spec.jobs[0].dataset.path == str(home / "d.h5")
    assert home / "solvers" / "mine.py" in config.input_files(spec)
    assert not (tmp_path / "~").exists()  # no directory named ~ here


def test_a_pandas_header_of_column_numbers_is_a_header_with_a_note(tmp_path: Path, capsys) -> None:
    src = tmp_path / "p.csv"
    src.write_text("0,1,2,3\n1.5,2,3,0\n4,5,6,1\n")  # pandas.DataFrame(X).to_csv(index=False)
    out = tmp_path / "p.h5"
    assert slaq_main(["data", "convert", str(src), str(out), "--label-column", "-1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == (f"{src}: line 1 is a header, skipped: it numbers the columns 0..3, as pandas "
                        "writes them (--no-header reads it as data)")
    assert lines[1] == f"{out}: 2 rows x 3 features, dense, with labels"
    shard = read_shard(out, 0, 1)
    np.testing.assert_array_equal(shard.X, [[1.5, 2, 3], [4, 5, 6]])
    np.testing.assert_array_equal(shard.y, [0, 1])
    assert slaq_main(["data", "convert", str(src), str(tmp_path / "d.h5"), "--no-header"]) == 0
    assert capsys.readouterr().out == f"{tmp_path / 'd.h5'}: 3 rows x 4 features, dense, no labels\n"
    np.testing.assert_array_equal(read_shard(tmp_path / "d.h5", 0, 1).X[0], [0, 1, 2, 3])
    src.write_text("0,2,1\n1,2,3\n")  # not the column numbers in order: data
    assert slaq_main(["data", "convert", str(src), str(tmp_path / "n.h5")]) == 0
    assert capsys.readouterr().out.startswith(f"{src}: line 1 is data: some of its cells are numbers")
    assert read_shard(tmp_path / "n.h5", 0, 1).n_rows == 2


def test_a_header_of_names_and_numbers_is_refused_naming_header_detection(tmp_path: Path, capsys) -> None:
    src = tmp_path / "m.csv"
    src.write_text("id,2019,2020,label\n1,2,3,0\n4,5,6,1\n")
    assert slaq_main(["data", "convert", str(src), str(tmp_path / "a.h5"), "--label-column", "-1"]) == 2
    err = capsys.readouterr().err
    assert err == (f"slaq: error: {src}:1: column 0 is 'id', not a number; header detection read it "
                   "as data, since some of its cells are numbers: give --header if line 1 is a header\n")
    assert slaq_main(["data", "convert", str(src), str(tmp_path / "a.h5"), "--label-column", "-1",
                      "--no-header"]) == 2
    assert "--no-header reads it as data: give --header" in capsys.readouterr().err
    assert slaq_main(["data", "convert", str(src), str(tmp_path / "a.h5"), "--label-column", "-1",
                      "--header"]) == 0
    assert capsys.readouterr().out == f"{tmp_path / 'a.h5'}: 2 rows x 3 features, dense, with labels\n"
    np.testing.assert_array_equal(read_shard(tmp_path / "a.h5", 0, 1).y, [0, 1])


def test_csv_header_detection_says_what_it_decided(tmp_path: Path, capsys) -> None:
    src = tmp_path / "t.csv"
    src.write_text("\nx,y\n1,2\n")
    assert slaq_main(["data", "convert", str(src), str(tmp_path / "t.h5")]) == 0
    note = capsys.readouterr().out.splitlines()[0]
    assert note == (f"{src}: line 2 is a header, skipped: none of its cells is a number "
                    "(--no-header reads it as data)")
    (tmp_path / "a.svm").write_text("1 1:2\n")
    assert slaq_main(["data", "convert", str(tmp_path / "a.svm"), str(tmp_path / "s.h5"), "--header"]) == 2
    assert capsys.readouterr().err == ("slaq: error: --header: applies to CSV input only; libsvm input "
                                       "has no header line\n")


def test_a_refusal_names_the_format_guessed_from_the_extension(tmp_path: Path, capsys) -> None:
    src = tmp_path / "t.txt"
    src.write_text("a,b,label\n1,2,0\n3,4,1\n")
    out = tmp_path / "t.h5"
    assert slaq_main(["data", "convert", str(src), str(out)]) == 2
    assert capsys.readouterr().err == (f"slaq: error: {src}:1: the label 'a,b,label' is not a number; "
                                       "guessed libsvm from the extension '.txt'; use --format csv\n")
    assert slaq_main(["data", "convert", str(src), str(out), "--label-column", "-1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.endswith("guessed libsvm from the extension '.txt'; use --format csv\n"), err
    assert slaq_main(["data", "convert", str(src), str(out), "--label-column", "-1", "--format", "csv"]) == 0
    with open(tmp_path / "a.dat", "wb") as fh:  # a .npy file by another name
        np.save(fh, np.zeros((2, 2)))
    assert slaq_main(["data", "convert", str(tmp_path / "a.dat"), str(tmp_path / "a.h5")]) == 2
    assert capsys.readouterr().err.endswith("guessed libsvm from the extension '.dat'; use --format npy\n")
    (tmp_path / "bad.svm").write_text("1 1:2\n0 x\n")  # the extension and the content agree: no guess named
    assert slaq_main(["data", "convert", str(tmp_path / "bad.svm"), str(tmp_path / "b.h5")]) == 2
    assert capsys.readouterr().err == (f"slaq: error: {tmp_path / 'bad.svm'}:2: cannot parse 'x'; "
                                       "want INDEX:VALUE\n")
