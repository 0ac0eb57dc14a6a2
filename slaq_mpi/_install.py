"""The pip command that adds an optional part (an extra: ``plot``, ``mpich``) to the slaq-mpi
this process runs, in the form that fits how it was installed: from a checkout (editable or
not) the checkout's directory, otherwise the package index."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from urllib.parse import unquote, urlparse

__all__ = ["pip_install"]

_PACKAGE_DIR = Path(__file__).resolve().parent


def pip_install(extra: str) -> str:
    """``pip install ...`` adding ``extra`` to this installation of slaq-mpi, e.g.
    ``pip install '.[plot]'`` run in the checkout it was installed from."""
    return _pip_install(extra, _PACKAGE_DIR, Path.cwd())


def _pip_install(extra: str, package_dir: Path, cwd: Path) -> str:
    """:func:`pip_install` for the package imported from ``package_dir``, said in ``cwd``."""
    root = package_dir.parent
    if _is_checkout(root):  # imported from a checkout: an editable install (or run from it)
        return f"pip install -e {_target(root, extra, cwd)}"
    source = _installed_from(root)
    if source is not None:
        return f"pip install {_target(source, extra, cwd)}"
    return f"pip install {shlex.quote(f'slaq-mpi[{extra}]')}"


def _is_checkout(path: Path) -> bool:
    return (path / "pyproject.toml").is_file() and (path / "slaq_mpi").is_dir()


def _installed_from(site: Path) -> Path | None:
    """The checkout a package installed in ``site`` was built from, as pip recorded it in
    ``direct_url.json``, if it is still there; None for an install from the index or a file."""
    for info in sorted(site.glob("slaq_mpi-*.dist-info")):
        try:
            url = json.loads((info / "direct_url.json").read_text()).get("url", "")
        except (OSError, ValueError, AttributeError):
            continue
        parsed = urlparse(url)
        if parsed.scheme == "file" and _is_checkout(Path(unquote(parsed.path))):
            return Path(unquote(parsed.path))
    return None


def _target(checkout: Path, extra: str, cwd: Path) -> str:
    where = "." if checkout.resolve() == cwd.resolve() else str(checkout)
    return shlex.quote(f"{where}[{extra}]")
