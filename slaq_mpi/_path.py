"""Keep a user's working directory from shadowing our packages on the ranks.

Every rank runs ``python -m slaq_mpi``, which puts the working directory FIRST on
``sys.path``: a ``jobs.py`` (or ``slaq_mpi.py``, ``numpy.py``...) of the user's there would be
imported instead of ours, and every rank would crash. Imported first by the package, this
module's :func:`drop_shadowing_entry`, called first by ``__main__``, removes that entry, as the
``slaq`` script never has it. (Moving it to the end is not
enough: an editable install's finder comes after every ``sys.path`` entry.) A user solver that
imports modules of the working directory still can: :func:`jobs.load_solver` appends it once
our packages are imported.
"""

from __future__ import annotations

import os
import sys


def _run_as_module() -> bool:
    """Whether this interpreter was started as ``python [options] -m slaq_mpi``."""
    argv = list(getattr(sys, "orig_argv", ()))
    return "-m" in argv and argv[argv.index("-m") + 1 : argv.index("-m") + 2] == ["slaq_mpi"]


def _shadowing_entry() -> bool:
    """Whether ``sys.path[0]`` is the working directory put there by ``-m`` (and not the source
    tree this package runs from, which holds our own ``jobs``)."""
    if not (_run_as_module() and sys.path and sys.path[0] in ("", os.getcwd())):
        return False
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return os.path.abspath(sys.path[0] or ".") != here


def drop_shadowing_entry() -> None:
    """Remove the working directory that ``python -m slaq_mpi`` put first on ``sys.path``."""
    if _shadowing_entry():
        del sys.path[0]
