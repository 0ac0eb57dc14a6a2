"""Loss curves the simulator replays: recorded from our solvers, or analytic.

A curve is the loss after k iterations, ``losses[k]`` for k = 0..n (``losses[0]`` is the initial
model's loss), plus the converged loss ``l_star`` and the measured one-core cost of an iteration
per row*feature of the recording dataset. The packaged library ``curves.npz`` is written by
``slaq curves record --out slaq_mpi/sim/curves.npz`` (:mod:`slaq_mpi.sim.record`).
"""

from __future__ import annotations

import json
import os
import zipfile
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from slaq_mpi.errors import DataError
from slaq_mpi.storage import durable

__all__ = ["DEFAULT_LIBRARY", "Curve", "CurveLibrary", "analytic_curve", "extend"]

DEFAULT_LIBRARY = Path(__file__).with_name("curves.npz")
DEFAULT_COST = 2e-9  # seconds per row*feature on one core, when nothing was measured


@dataclass(frozen=True)
class Curve:
    """One loss curve.

    Attributes:
        name: unique name in its library.
        algorithm: the solver that produced it (``analytic`` curves name a class instead).
        convergence: ``sublinear`` or ``linear``.
        losses: loss after k iterations, k = 0..n.
        l_star: converged loss (<= every loss of the curve).
        cost_per_cell: one-core seconds per iteration per row*feature of its dataset.
        recipe: how it was made (JSON text).
    """

    name: str
    algorithm: str
    convergence: str
    losses: np.ndarray
    l_star: float
    cost_per_cell: float = DEFAULT_COST
    recipe: str = "{}"


def extend(losses: np.ndarray, n: int) -> np.ndarray:
    """``losses`` padded to length ``n`` with its last value (a converged tail)."""
    if len(losses) >= n:
        return losses[:n]
    return np.concatenate((losses, np.full(n - len(losses), losses[-1])))


def algorithm_key(algorithm: str) -> str:
    """The name curves of ``algorithm`` are filed under: a built-in name as it is, a solver file
    ``path/file.py:Class`` by its absolute path (however the path was spelled, from wherever)."""
    if ".py:" not in algorithm:
        return algorithm
    file_part, cls = algorithm.rsplit(":", 1)
    return f"{Path(file_part).expanduser().resolve()}:{cls}"


class CurveLibrary:
    """A set of curves, indexed by algorithm (:func:`algorithm_key`)."""

    def __init__(self, curves: list[Curve]):
        self.curves = tuple(curves)
        self._by_alg: dict[str, list[Curve]] = {}
        for c in self.curves:
            self._by_alg.setdefault(algorithm_key(c.algorithm), []).append(c)

    def __len__(self) -> int:
        return len(self.curves)

    def algorithms(self) -> list[str]:
        """Algorithms with at least one curve."""
        return sorted(self._by_alg)

    def for_algorithm(self, algorithm: str) -> list[Curve]:
        """The curves recorded for ``algorithm`` (empty if none)."""
        return list(self._by_alg.get(algorithm_key(algorithm), ()))

    def cost(self, algorithm: str) -> float:
        """Median measured cost per row*feature of ``algorithm`` (a default if unmeasured)."""
        costs = [c.cost_per_cell for c in self.for_algorithm(algorithm) if c.cost_per_cell > 0]
        return float(np.median(costs)) if costs else DEFAULT_COST

    def merged(self, new: Iterable[Curve]) -> CurveLibrary:
        """This library with every curve of the algorithms in ``new`` replaced by ``new``'s.

        Algorithms ``new`` has no curve of keep theirs. Curves stay grouped by algorithm in
        sorted order, each algorithm's in the order recorded (so a simulation that draws from
        an algorithm left alone draws the same curves as before).
        """
        fresh = list(new)
        replaced = {algorithm_key(c.algorithm) for c in fresh}
        kept = [c for c in self.curves if algorithm_key(c.algorithm) not in replaced]
        return CurveLibrary(sorted(kept + fresh, key=lambda c: c.algorithm))

    def save(self, path: str | Path) -> None:
        """Write the library as a compressed ``.npz`` to exactly ``path``, atomically (a temp
        file beside it, fsynced, then a rename): an interrupted save leaves the old file as it was."""
        p = Path(path)
        offsets = np.cumsum([0] + [len(c.losses) for c in self.curves]).astype(np.int64)
        flat = np.concatenate([c.losses for c in self.curves]) if self.curves else np.zeros(0)
        tmp = p.with_name(f".{p.name}.tmp{os.getpid()}")
        with durable.replacing(p, tmp), open(tmp, "wb") as fh:  # a file: numpy adds no ".npz"
            np.savez_compressed(
                fh,
                names=np.array([c.name for c in self.curves]),
                algorithms=np.array([c.algorithm for c in self.curves]),
                convergence=np.array([c.convergence for c in self.curves]),
                offsets=offsets,
                losses=flat.astype(np.float64),
                l_star=np.array([c.l_star for c in self.curves], dtype=np.float64),
                cost_per_cell=np.array([c.cost_per_cell for c in self.curves], dtype=np.float64),
                recipes=np.array([c.recipe for c in self.curves]),
            )

    @classmethod
    def load(cls, path: str | Path | None = None) -> CurveLibrary:
        """Read a library (default: the packaged one; empty if it does not exist).

        Raises:
            DataError: a given ``path`` that does not exist or is not a curve library.
        """
        p = Path(path) if path is not None else DEFAULT_LIBRARY
        if not p.exists():
            if path is not None:
                raise DataError(f"{p}: no such curve library (write one with `slaq curves record`)")
            return cls([])
        try:
            with np.load(p, allow_pickle=False) as z:
                # each member is read once (every z[...] reads it from the archive again)
                off, names, algorithms = z["offsets"], z["names"], z["algorithms"]
                convergence, losses, l_star = z["convergence"], z["losses"], z["l_star"]
                cost_per_cell, recipes = z["cost_per_cell"], z["recipes"]
                curves = [
                    Curve(
                        name=str(names[i]),
                        algorithm=str(algorithms[i]),
                        convergence=str(convergence[i]),
                        losses=np.array(losses[off[i] : off[i + 1]]),
                        l_star=float(l_star[i]),
                        cost_per_cell=float(cost_per_cell[i]),
                        recipe=str(recipes[i]),
                    )
                    for i in range(len(off) - 1)
                ]
        except (OSError, KeyError, ValueError, IndexError, TypeError, AttributeError, EOFError,
                zipfile.BadZipFile, zlib.error):
            # TypeError: a .npy file (np.load gives an array, not an archive); ValueError: text;
            # BadZipFile, EOFError, zlib.error: a truncated or damaged archive
            raise DataError(f"{p}: not a curve library (the .npz file `slaq curves record` "
                            "writes)") from None
        return cls(curves)


def analytic_curve(convergence: str, rng: np.random.Generator, name: str = "analytic",
                   max_len: int = 20000, tolerance: float = 1e-9) -> Curve:
    """A random curve of the given class, ending once it has converged to ``tolerance``.

    sublinear: ``L(k) = L* + (L0 - L*) / (1 + k/k0)**p`` with k0 in [2, 20], p in [1, 2];
    linear: ``L(k) = L* + (L0 - L*) * mu**k`` with mu in [0.6, 0.95]. L0 = 1, L* in [0.05, 0.5].
    """
    l0, l_star = 1.0, float(rng.uniform(0.05, 0.5))
    k = np.arange(max_len + 1, dtype=np.float64)
    if convergence == "linear":
        mu = float(rng.uniform(0.6, 0.95))
        params = {"mu": mu}
        gap = mu**k
    else:
        k0, p = float(rng.uniform(2.0, 20.0)), float(rng.uniform(1.0, 2.0))
        params = {"k0": k0, "p": p}
        gap = (1.0 + k / k0) ** -p
    losses = l_star + (l0 - l_star) * gap
    rel = np.abs(np.diff(losses)) / np.abs(losses[:-1])
    done = np.flatnonzero(rel <= tolerance)
    n = int(done[0]) + 2 if len(done) else len(losses)
    recipe = json.dumps({"analytic": convergence, "l_star": l_star, **params})
    return Curve(name, f"analytic-{convergence}", "linear" if convergence == "linear" else "sublinear",
                 losses[:n].copy(), l_star, DEFAULT_COST, recipe)
