"""User-written solvers that fail on purpose (for the fault-tolerance tests)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from jobs.logreg import LogisticRegression


class RaisesAt(LogisticRegression):
    """Logistic regression that raises ValueError at iteration ``at`` on every rank."""

    defaults: ClassVar[dict[str, Any]] = {**LogisticRegression.defaults, "at": 5}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.k = 0

    def step(self) -> float:
        self.k += 1
        if self.k == int(self.params["at"]):
            raise ValueError(f"injected failure at iteration {self.k}")
        return super().step()

    def get_state(self) -> dict[str, np.ndarray]:
        return {**super().get_state(), "k": np.array([self.k])}

    def set_state(self, state: Mapping[str, np.ndarray]) -> None:
        super().set_state(state)
        self.k = int(state["k"][0])


class NanAt(RaisesAt):
    """Logistic regression whose loss turns NaN at iteration ``at``."""

    def step(self) -> float:
        self.k += 1
        loss = LogisticRegression.step(self)
        return float("nan") if self.k >= int(self.params["at"]) else loss


class RaisesOnOneRank(RaisesAt):
    """Logistic regression that raises at iteration ``at`` on the group's rank 0 only: the
    other ranks wait for it inside the gradient's allreduce."""

    def step(self) -> float:
        self.k += 1
        if self.k == int(self.params["at"]) and self.comm.rank == 0:
            raise ValueError(f"injected failure at iteration {self.k} on one rank")
        return LogisticRegression.step(self)


class ReturnsArrayAt(RaisesAt):
    """Logistic regression whose step returns the loss as a 1-element array from iteration
    ``at`` on (a user's slip: ``global_sum`` returns arrays)."""

    def step(self) -> float:
        self.k += 1
        loss = LogisticRegression.step(self)
        return np.array([loss]) if self.k >= int(self.params["at"]) else loss  # type: ignore[return-value]


class ListInState(LogisticRegression):
    """Logistic regression whose ``get_state()`` holds a list of arrays of different lengths,
    which no checkpoint can store."""

    def get_state(self) -> dict[str, Any]:  # type: ignore[override]
        return {**super().get_state(), "history": [np.zeros(2), np.zeros(3)]}


class RaisesInInit(LogisticRegression):
    """Logistic regression whose ``__init__`` raises ValueError on every rank."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        raise ValueError("injected failure in __init__")


class RaisesInSetState(LogisticRegression):
    """Logistic regression that sleeps ``pace`` s before each iteration (still running when the
    test stops the run) and whose ``set_state`` raises ValueError on every rank (on a resume)."""

    defaults: ClassVar[dict[str, Any]] = {**LogisticRegression.defaults, "pace": 0.01}

    def step(self) -> float:
        import time

        time.sleep(float(self.params["pace"]))
        return super().step()

    def set_state(self, state: Mapping[str, np.ndarray]) -> None:
        raise ValueError("injected failure in set_state")
