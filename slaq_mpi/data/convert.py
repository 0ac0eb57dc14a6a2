"""``slaq data``: make synthetic HDF5 datasets and convert LibSVM, CSV and .npy files to HDF5.

Both commands write in row chunks, so a file of any size fits in memory. Bad input raises
:class:`~slaq_mpi.errors.DataError` naming the file and the line (or row) at fault.
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import scipy.sparse as sp

from slaq_mpi.data.datasets import CHUNK_ROWS, DatasetSpec, RowWriter, inspect
from slaq_mpi.data.generators import (
    GENERATORS,
    check_space,
    generate,
    generated_bytes,
    generator_param_problem,
)
from slaq_mpi.errors import NO_VALUE, ConfigError, DataError
from slaq_mpi.storage.outpaths import check_writable

__all__ = ["add_cli", "convert_csv", "convert_libsvm", "convert_npy", "make"]


def add_cli(subparsers: Any) -> None:
    """Add ``slaq data make`` and ``slaq data convert`` to the main parser."""
    data = subparsers.add_parser("data", help="make synthetic datasets or convert files to HDF5")
    sub = data.add_subparsers(dest="data_command", required=True, metavar="SUBCOMMAND")
    p = sub.add_parser("make", help="write a synthetic dataset (in chunks, any size)")
    p.add_argument("kind", help=f"one of: {', '.join(sorted(GENERATORS))}")
    p.add_argument("out", help="output HDF5 file")
    p.add_argument("--rows", type=int, required=True, help="examples (documents for documents)")
    p.add_argument("--features", type=int, required=True, help="columns (vocabulary for documents)")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the generator: same seed, same file (default: %(default)s)")
    for name, typ in sorted({k: t for _, opts in GENERATORS.values() for k, t in opts.items()}.items()):
        p.add_argument(f"--{name.replace('_', '-')}", dest=name, type=typ, default=None,
                       help=f"generator option ({typ.__name__})")
    p.set_defaults(func=_cmd_make)
    p = sub.add_parser("convert", help="convert LibSVM/SVMlight text, CSV or .npy to HDF5")
    p.add_argument("input", help="the file to convert (LibSVM/SVMlight text, .csv or .npy)")
    p.add_argument("out", help="output HDF5 file")
    p.add_argument("--format", choices=("libsvm", "csv", "npy"), default=None,
                   help="input format (default: from the extension; .csv, .npy, else libsvm)")
    p.add_argument("--label-column", type=int, default=None,
                   help="CSV/.npy: the column holding labels (negative counts from the end)")
    p.add_argument("--labels", default=None, help=".npy: a separate 1-D .npy file of labels")
    p.add_argument("--zero-based", action="store_true",
                   help="LibSVM feature indices start at 0 (default: 1, or 0 if an index 0 occurs)")
    p.add_argument("--features", type=int, default=None, help="LibSVM: number of columns")
    p.set_defaults(func=_cmd_convert)


def _check_output(out: Path) -> None:
    """Refuse an output path that exists or can only fail, before anything is written."""
    if out.is_dir():
        raise ConfigError("out", str(out), "is a directory; give the HDF5 file to write, e.g. "
                          f"{out / 'data.h5'}")
    if out.exists() or out.is_symlink():
        raise ConfigError("out", str(out), "already exists; data make and convert never replace "
                          "a file: remove it first or give a new path")
    check_writable(out.parent, "out", out, probe=True)


def _same_file(a: Path, b: Path) -> bool:
    """Whether ``a`` and ``b`` are one file (also through links); False if either is missing."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _cmd_make(args: argparse.Namespace) -> int:
    _check_output(Path(args.out))
    make(args.kind, Path(args.out), args.rows, args.features, args.seed,
         **{k: getattr(args, k) for _, opts in GENERATORS.values() for k in opts
            if getattr(args, k, None) is not None})
    _summary(args.out)
    return 0


def _cmd_convert(args: argparse.Namespace) -> int:
    src, out = Path(args.input), Path(args.out)
    fmt = args.format or {".csv": "csv", ".npy": "npy"}.get(src.suffix.lower(), "libsvm")
    if not src.is_file():
        raise ConfigError("input", str(src), "it must be an existing file")
    if src.suffix.lower() == ".npz" and args.format is None:
        raise ConfigError("input", str(src), "a .npz archive holds several arrays; save the "
                          "features as one 2-D array with numpy.save (.npy)")
    if args.labels and fmt != "npy":
        raise ConfigError("--labels", args.labels, f"applies to .npy input only; {fmt} input "
                          "carries its labels in a column (--label-column)" if fmt == "csv" else
                          f"applies to .npy input only; {fmt} input carries its labels in each line")
    if fmt == "libsvm" and args.label_column is not None:
        raise ConfigError("--label-column", args.label_column, "applies to CSV and .npy input only; "
                          "LibSVM input carries its label first on each line")
    if fmt != "libsvm":
        for option, given in (("--features", args.features), ("--zero-based", args.zero_based or None)):
            if given is not None:  # a flag has no value to show
                raise ConfigError(option, NO_VALUE if given is True else given, f"applies to LibSVM "
                                  f"input only; {fmt} input has as many features as columns, and no indices")
    if args.features is not None and args.features < 1:
        raise ConfigError("--features", args.features, "must be an integer >= 1 (the number of columns)")
    for what, given in (("input", src), ("--labels file", Path(args.labels) if args.labels else None)):
        if given is not None and _same_file(given, out):
            raise ConfigError("out", str(out), f"it is the {what} {str(given)!r}; write the HDF5 "
                              "file to another path (the output would replace it)")
    _check_output(out)
    if fmt == "libsvm":
        convert_libsvm(src, out, zero_based=args.zero_based, features=args.features)
    elif fmt == "csv":
        convert_csv(src, out, label_column=args.label_column)
    else:
        convert_npy(src, out, label_column=args.label_column,
                    labels=Path(args.labels) if args.labels else None)
    _summary(out)
    return 0


def _summary(path: str | Path) -> None:
    info = inspect(path)
    kind = "sparse CSR" if info.sparse else "dense"
    labels = "with labels" if info.has_labels else "no labels"
    print(f"{path}: {info.rows} rows x {info.features} features, {kind}, {labels}")


def make(kind: str, out: Path, rows: int, features: int, seed: int = 0, **options: Any) -> None:
    """Write ``rows`` x ``features`` of the synthetic dataset ``kind`` to ``out``."""
    if kind not in GENERATORS:
        raise ConfigError("data make KIND", kind, f"allowed: {', '.join(sorted(GENERATORS))}")
    allowed = GENERATORS[kind][1]
    for key in options:
        if key not in allowed:
            raise ConfigError(f"data make --{key.replace('_', '-')}", options[key],
                              f"not an option of {kind}; allowed: {', '.join(sorted(allowed)) or 'none'}")
    for key, val in {"rows": rows, "features": features, "seed": seed, **options}.items():
        problem = generator_param_problem(key, val)
        if problem is not None:
            raise ConfigError(f"data make --{key.replace('_', '-')}", val, problem)
    spec = DatasetSpec(generator=kind, params={"rows": rows, "features": features, "seed": seed,
                                               **options})
    check_space(generated_bytes(spec), out.parent, "data make OUT")
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    try:
        generate(spec, tmp, seed)
        _readable(tmp, out)
        _publish(tmp, out)
    finally:
        if tmp.exists():
            tmp.unlink()


def _publish(tmp: Path, out: Path) -> None:
    """Give the finished ``tmp`` the name ``out``, never replacing a file that appeared there
    while it was written (a hard link fails if ``out`` exists; a rename would not)."""
    taken = ConfigError("out", str(out), "appeared while the data was written; data make and "
                        "convert never replace a file: remove it first or give a new path")
    try:
        os.link(tmp, out)
    except FileExistsError:
        raise taken from None
    except OSError:  # a file system without hard links
        if out.exists() or out.is_symlink():
            raise taken from None
        os.replace(tmp, out)
        return
    tmp.unlink()


def _readable(tmp: Path, out: Path) -> None:
    """Check the written ``tmp`` as ``slaq`` will read ``out``: a file it cannot use is an
    error, never an output left behind."""
    try:
        inspect(tmp)
    except DataError as exc:
        raise DataError(str(exc).replace(str(tmp), str(out))) from None


class _Output:
    """An HDF5 file written to a temporary name and renamed into place on success."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.tmp = out.with_name(out.name + f".tmp{os.getpid()}")

    def __enter__(self) -> h5py.File:
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self.f = h5py.File(self.tmp, "w")
        return self.f

    def __exit__(self, exc_type: Any, *_: Any) -> None:
        try:
            self.f.close()
            if exc_type is None:
                _readable(self.tmp, self.out)
                _publish(self.tmp, self.out)
        finally:
            if self.tmp.exists():
                self.tmp.unlink()


# --- LibSVM / SVMlight ------------------------------------------------------------------------

def _libsvm_lines(path: Path) -> Iterator[tuple[int, float, list[int], list[float]]]:
    """(line number, label, indices, values) of every data line; raises on a bad line."""
    with open(path, encoding="utf-8-sig", errors="replace") as fh:  # -sig: drop a BOM
        for lineno, line in enumerate(fh, 1):
            text = line.split("#", 1)[0].strip()  # a comment may hold any bytes
            if "\x00" in text or "\ufffd" in text:
                raise DataError(f"{path}:{lineno}: not text (a binary file?); LibSVM input is "
                                "lines of 'label index:value ...'")
            if not text:
                continue
            tokens = text.split()
            try:
                label = float(tokens[0])
            except ValueError:
                raise DataError(f"{path}:{lineno}: the label {tokens[0]!r} is not a number") from None
            idx: list[int] = []
            vals: list[float] = []
            for tok in tokens[1:]:
                key, sep, val = tok.partition(":")
                if key == "qid":
                    continue
                try:
                    if not sep:
                        raise ValueError
                    i, v = int(key), float(val)
                except ValueError:
                    raise DataError(f"{path}:{lineno}: cannot parse {tok!r}; "
                                    "want INDEX:VALUE") from None
                if i < 0 or not math.isfinite(v) or not math.isfinite(label):
                    bad = tok if i < 0 or not math.isfinite(v) else tokens[0]
                    raise DataError(f"{path}:{lineno}: {bad!r}: indices must be >= 0 and "
                                    "values finite")
                if idx and i <= idx[-1]:
                    raise DataError(f"{path}:{lineno}: index {i} after {idx[-1]}; indices must "
                                    "increase along a line")
                idx.append(i)
                vals.append(v)
            yield lineno, label, idx, vals


def convert_libsvm(src: Path, out: Path, zero_based: bool = False, features: int | None = None) -> None:
    """Convert a LibSVM/SVMlight file to a CSR HDF5 file (two passes, chunked).

    Labels that are exactly -1 and +1 become 0 and 1 (the binary convention of the solvers).
    """
    if features is not None and features < 1:
        raise ConfigError("--features", features, "must be an integer >= 1 (the number of columns)")
    rows, lo_idx, hi_idx = 0, math.inf, -1
    labels: set[float] = set()
    for _, label, idx, _ in _libsvm_lines(src):
        rows += 1
        if idx:
            lo_idx, hi_idx = min(lo_idx, idx[0]), max(hi_idx, idx[-1])
        if len(labels) <= 2:
            labels.add(label)
    if rows == 0:
        raise DataError(f"{src}: no data lines")
    base = 0 if zero_based or lo_idx == 0 else 1
    n_feat = features if features is not None else max(hi_idx - base + 1, 1)
    if hi_idx - base + 1 > n_feat:
        raise DataError(f"{src}: feature index {hi_idx} exceeds --features {n_feat}")
    pm_one = labels <= {-1.0, 1.0} and -1.0 in labels
    with _Output(out) as f:
        writer = RowWriter(f, rows, n_feat)
        buf: list[tuple[float, list[int], list[float]]] = []
        for _, label, idx, vals in _libsvm_lines(src):
            buf.append(((label + 1.0) / 2.0 if pm_one else label, idx, vals))
            if len(buf) == CHUNK_ROWS:
                writer.append(*_csr_chunk(buf, n_feat, base))
                buf = []
        if buf:
            writer.append(*_csr_chunk(buf, n_feat, base))
        writer.close()


def _csr_chunk(buf: list[tuple[float, list[int], list[float]]], n_feat: int,
               base: int) -> tuple[sp.csr_matrix, np.ndarray]:
    indptr = np.cumsum([0] + [len(idx) for _, idx, _ in buf])
    indices = np.fromiter((i - base for _, idx, _ in buf for i in idx), dtype=np.int64, count=indptr[-1])
    data = np.fromiter((v for _, _, vals in buf for v in vals), dtype=np.float64, count=indptr[-1])
    X = sp.csr_matrix((data, indices, indptr), shape=(len(buf), n_feat))
    return X, np.array([b[0] for b in buf])


# --- CSV ---------------------------------------------------------------------------------------

def _csv_rows(path: Path) -> Iterator[tuple[int, list[str]]]:
    with open(path, encoding="utf-8-sig", errors="replace") as fh:  # -sig: drop a BOM
        for lineno, line in enumerate(fh, 1):
            if line.strip():
                yield lineno, [c.strip() for c in line.rstrip("\r\n").split(",")]


def _floats(path: Path, lineno: int, cells: list[str]) -> list[float]:
    out = []
    for col, cell in enumerate(cells):
        try:
            v = float(cell)
        except ValueError:
            raise DataError(f"{path}:{lineno}: column {col} is {cell!r}, not a number") from None
        if not math.isfinite(v):
            raise DataError(f"{path}:{lineno}: column {col} is {cell!r}; values must be finite")
        out.append(v)
    return out


def _is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


def convert_csv(src: Path, out: Path, label_column: int | None = None) -> None:
    """Convert a numeric CSV file to a dense HDF5 file. A first line none of whose cells is a
    number is a header and skipped; any other line must be all finite numbers."""
    rows, width, header = 0, -1, False
    for lineno, cells in _csv_rows(src):
        if rows == 0 and width < 0:
            width = len(cells)
            if not any(_is_number(c) for c in cells):
                header = True
                continue
        elif len(cells) != width:
            raise DataError(f"{src}:{lineno}: {len(cells)} columns; the first line has {width}")
        _floats(src, lineno, cells)
        rows += 1
    if rows == 0:
        raise DataError(f"{src}: no data lines")
    lab = _label_index(label_column, width)
    feats = width - (lab is not None)
    if feats < 1:
        raise DataError(f"{src}: no feature columns besides the label")
    with _Output(out) as f:
        writer = RowWriter(f, rows, feats)
        buf: list[list[float]] = []
        lines = _csv_rows(src)
        if header:
            next(lines)
        for lineno, cells in lines:
            buf.append(_floats(src, lineno, cells))
            if len(buf) == CHUNK_ROWS:
                writer.append(*_split_label(np.array(buf), lab))
                buf = []
        if buf:
            writer.append(*_split_label(np.array(buf), lab))
        writer.close()


def _label_index(label_column: int | None, width: int) -> int | None:
    """The label column as an index in [0, width), or None; out of range is refused."""
    if label_column is None:
        return None
    if not -width <= label_column < width:
        raise ConfigError("--label-column", label_column, f"the file has {width} columns "
                          f"(0..{width - 1}, or -1..-{width} from the end)")
    return label_column % width


def _split_label(block: np.ndarray, lab: int | None) -> tuple[np.ndarray, np.ndarray | None]:
    if lab is None:
        return block, None
    return np.delete(block, lab, axis=1), block[:, lab].copy()


# --- .npy --------------------------------------------------------------------------------------

def _load_npy(path: Path) -> np.ndarray:
    try:
        return np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError) as exc:
        raise DataError(f"{path}: not a readable .npy array ({exc})") from None


def convert_npy(src: Path, out: Path, label_column: int | None = None, labels: Path | None = None) -> None:
    """Convert a 2-D .npy array (memory-mapped, copied in chunks) to a dense HDF5 file."""
    if labels is not None and label_column is not None:
        raise ConfigError("--labels", str(labels), "give the labels either as a file (--labels) or "
                          "as a column (--label-column), not both")
    arr, y_all = _load_npy(src), (_load_npy(labels) if labels is not None else None)
    if arr.ndim != 2 or arr.dtype.kind not in "fiub":
        raise DataError(f"{src}: array of shape {arr.shape} and dtype {arr.dtype}; want 2-D numeric")
    rows, width = arr.shape
    if y_all is not None and y_all.dtype.kind not in "fiub":  # as X: no text, complex, objects
        raise DataError(f"{labels}: labels of dtype {y_all.dtype}; want real numbers "
                        "(integer, float or bool)")
    if y_all is not None and y_all.shape != (rows,):
        raise DataError(f"{labels}: labels of shape {y_all.shape}; want ({rows},)")
    lab = _label_index(label_column, width)
    feats = width - (lab is not None)
    if rows < 1 or feats < 1:
        raise DataError(f"{src}: array of shape {arr.shape} leaves no rows or feature columns")
    with _Output(out) as f:
        writer = RowWriter(f, rows, feats)
        for lo in range(0, rows, CHUNK_ROWS):
            block = np.asarray(arr[lo : lo + CHUNK_ROWS], dtype=np.float64)
            bad = ~np.isfinite(block).all(axis=1)
            if bad.any():
                raise DataError(f"{src}: row {lo + int(np.argmax(bad))}: non-finite value")
            X, y = _split_label(block, lab)
            if y_all is not None:
                y = np.asarray(y_all[lo : lo + CHUNK_ROWS], dtype=np.float64)
                if not np.isfinite(y).all():
                    raise DataError(f"{labels}: row {lo + int(np.argmax(~np.isfinite(y)))}: "
                                    "non-finite label")
            writer.append(X, y)
        writer.close()
