"""``slaq data make`` and ``slaq data convert``: synthetic datasets and conversions to HDF5
(the writers are in :mod:`slaq_mpi.data.convert`)."""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from slaq_mpi.data.convert import (
    FORMATS,
    convert_csv,
    convert_libsvm,
    convert_npy,
    format_from_content,
    format_from_extension,
    make,
)
from slaq_mpi.data.csv import header_note
from slaq_mpi.data.datasets import inspect
from slaq_mpi.data.generators import GENERATORS
from slaq_mpi.errors import NO_VALUE, ConfigError, DataError
from slaq_mpi.storage.outpaths import check_writable

__all__ = ["add_cli", "cmd_convert", "cmd_make"]


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
    p.set_defaults(func=cmd_make)
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
    p.add_argument("--header", action=argparse.BooleanOptionalAction, default=None,
                   help="CSV: the first line is a header (--no-header: it is data); default: a "
                        "first line none of whose cells is a number, or exactly 0,1,...,n-1, is one")
    p.set_defaults(func=cmd_convert)


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


def cmd_make(args: argparse.Namespace) -> int:
    """``slaq data make KIND OUT``: write a synthetic dataset and print its shape."""
    _check_output(Path(args.out))
    make(args.kind, Path(args.out), args.rows, args.features, args.seed,
         **{k: getattr(args, k) for _, opts in GENERATORS.values() for k in opts
            if getattr(args, k, None) is not None})
    _summary(args.out)
    return 0


def cmd_convert(args: argparse.Namespace) -> int:
    """``slaq data convert IN OUT``: convert a LibSVM, CSV or .npy file and print its shape."""
    src, out = Path(args.input), Path(args.out)
    fmt, named = (args.format, True) if args.format else format_from_extension(src)
    if not src.is_file():
        raise ConfigError("input", str(src), "it must be an existing file")
    if src.suffix.lower() == ".npz" and args.format is None:
        raise ConfigError("input", str(src), "a .npz archive holds several arrays; save the "
                          "features as one 2-D array with numpy.save (.npy)")
    guess = None if args.format else (src, fmt, named)
    with _naming_the_guess(guess):
        _check_format_options(args, fmt)
    if args.features is not None and args.features < 1:
        raise ConfigError("--features", args.features, "must be an integer >= 1 (the number of columns)")
    for what, given in (("input", src), ("--labels file", Path(args.labels) if args.labels else None)):
        if given is not None and _same_file(given, out):
            raise ConfigError("out", str(out), f"it is the {what} {str(given)!r}; write the HDF5 "
                              "file to another path (the output would replace it)")
    _check_output(out)
    with _naming_the_guess(guess):
        if fmt == "libsvm":
            convert_libsvm(src, out, zero_based=args.zero_based, features=args.features)
        elif fmt == "csv":
            if args.header is None:
                note = header_note(src)
                if note:
                    print(note)
            convert_csv(src, out, label_column=args.label_column, header=args.header)
        else:
            convert_npy(src, out, label_column=args.label_column,
                        labels=Path(args.labels) if args.labels else None)
    _summary(out)
    return 0


def _check_format_options(args: argparse.Namespace, fmt: str) -> None:
    """Refuse an option that does not apply to input of format ``fmt``, rather than ignore it."""
    if args.labels and fmt != "npy":
        raise ConfigError("--labels", args.labels, f"applies to .npy input only; {fmt} input "
                          "carries its labels in a column (--label-column)" if fmt == "csv" else
                          f"applies to .npy input only; {fmt} input carries its labels in each line")
    if fmt == "libsvm" and args.label_column is not None:
        raise ConfigError("--label-column", args.label_column, "applies to CSV and .npy input only; "
                          "LibSVM input carries its label first on each line")
    if fmt != "csv" and args.header is not None:
        raise ConfigError("--header" if args.header else "--no-header", NO_VALUE,
                          f"applies to CSV input only; {fmt} input has no header line")
    if fmt != "libsvm":
        for option, given in (("--features", args.features), ("--zero-based", args.zero_based or None)):
            if given is not None:  # a flag has no value to show
                raise ConfigError(option, NO_VALUE if given is True else given, f"applies to LibSVM "
                                  f"input only; {fmt} input has as many features as columns, and no indices")


@contextlib.contextmanager
def _naming_the_guess(guess: tuple[Path, str, bool] | None) -> Iterator[None]:
    """Add to a refusal in the block which format was guessed from the file's name and the
    ``--format`` that fits, when the guess may be what went wrong: the content looks like
    another format, or neither it nor the extension named one. ``guess``: (file, format, whether its
    extension named the format), None when ``--format`` was given."""
    try:
        yield
    except (ConfigError, DataError) as exc:
        if guess is None:
            raise
        src, fmt, named = guess
        looks = format_from_content(src)
        if looks == fmt or (named and looks is None):
            raise
        ext = f"the extension {src.suffix!r}" if src.suffix else "a name without an extension"
        other = looks if looks not in (None, fmt) else "|".join(f for f in FORMATS if f != fmt)
        said = f"guessed {fmt} from {ext}; use --format {other}"
        if isinstance(exc, ConfigError):
            raise ConfigError(exc.where, exc.value, f"{exc.allowed}; {said}") from None
        raise DataError(f"{exc}; {said}") from None


def _summary(path: str | Path) -> None:
    info = inspect(path)
    kind = "sparse CSR" if info.sparse else "dense"
    labels = "with labels" if info.has_labels else "no labels"
    print(f"{path}: {info.rows} rows x {info.features} features, {kind}, {labels}")
