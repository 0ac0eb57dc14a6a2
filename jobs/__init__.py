"""Training jobs: one module per algorithm, all following :mod:`jobs.base`.

``ALGORITHMS`` maps the YAML ``algorithm`` name to ``module:Class``. A job may also name a
user-written solver as ``path/to/file.py:ClassName``.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
from pathlib import Path

from jobs.base import Allowed, GroupComm, SerialComm, Shard, Solver

__all__ = ["ALGORITHMS", "Allowed", "GroupComm", "SerialComm", "Shard", "Solver", "load_solver"]

ALGORITHMS: dict[str, str] = {
    "logreg": "jobs.logreg:LogisticRegression",
    "logreg_lbfgs": "jobs.lbfgs:LogisticRegressionLBFGS",
    "svm": "jobs.svm:LinearSVM",
    "linreg": "jobs.linreg:LinearRegression",
    "mlp": "jobs.mlp:MLPClassifier",
    "kmeans": "jobs.kmeans:KMeans",
    "gmm": "jobs.gmm:GaussianMixture",
    "lda": "jobs.lda:LDA",
    "gbt": "jobs.gbt:GradientBoostedTrees",
    "gbt_classifier": "jobs.gbt:GBTClassifier",
}


def load_solver(algorithm: str) -> type[Solver]:
    """The solver class for a built-in algorithm name or a ``file.py:ClassName`` reference.

    Raises:
        KeyError: unknown built-in name.
        FileNotFoundError, AttributeError: a user reference that does not resolve.
        TypeError: a user reference that is not a usable :class:`Solver` subclass.
    """
    if algorithm in ALGORITHMS:
        module_name, cls_name = ALGORITHMS[algorithm].split(":")
        return getattr(importlib.import_module(module_name), cls_name)
    if ".py:" not in algorithm:
        raise KeyError(algorithm)
    file_part, cls_name = algorithm.rsplit(":", 1)
    path = Path(file_part).expanduser().resolve()
    if not path.is_file():
        raise FileNotFoundError(str(path))
    mod_name = f"slaq_user_solver_{abs(hash(str(path)))}"
    module = sys.modules.get(mod_name)
    if module is None:
        # the file may import modules beside it, or from the directory slaq runs in (every
        # rank, started as `python -m slaq_mpi`, has that one; the `slaq` script does not)
        for where in (str(path.parent), str(Path.cwd())):
            if where not in sys.path:
                sys.path.append(where)
        spec = importlib.util.spec_from_file_location(mod_name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[mod_name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[mod_name]  # a fixed file is read again
            raise
    if not hasattr(module, cls_name):
        raise AttributeError(f"{path} defines no {cls_name!r}")
    cls = getattr(module, cls_name)
    _check_solver_class(cls, f"{cls_name} in {path}")
    return cls


def _check_solver_class(cls: object, what: str) -> None:
    if not (isinstance(cls, type) and issubclass(cls, Solver)):
        raise TypeError(f"{what} is not a subclass of jobs.Solver (see docs/solvers.md)")
    if cls.convergence not in ("sublinear", "linear"):
        raise TypeError(f"{what}: convergence is {cls.convergence!r}; allowed: sublinear, linear")
    named = {"allowed": set(cls.allowed), "row_limited": set(cls.row_limited),
             "class_count": {cls.class_count} - {""}}
    for attr, names in named.items():
        unknown = names - set(cls.defaults)
        if unknown:
            raise TypeError(f"{what}: {attr} names {', '.join(sorted(unknown))}, which "
                            "defaults does not have")
    if cls.feature_kind not in ("", "counts"):
        raise TypeError(f"{what}: feature_kind is {cls.feature_kind!r}; allowed: '' or 'counts'")
    if inspect.isabstract(cls):
        missing = ", ".join(sorted(getattr(cls, "__abstractmethods__", ())))
        raise TypeError(f"{what} is abstract: it does not define {missing} (name your own "
                        "subclass of jobs.Solver; see docs/solvers.md)")
