"""User-written solvers whose iterations take a known least time, or wait for the test, so
that a run is still going at a given epoch on any machine (for the MPI and Slurm tiers).

Both compute exactly the losses of logistic regression: the serial reference of a job that uses
them is plain ``logreg`` with the same data, seed and learning rate.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, ClassVar

from jobs.logreg import LogisticRegression

HOLD_LIMIT = 600.0  # seconds: a hold the test never lifts ends here, so no rank waits for good


class Paced(LogisticRegression):
    """Logistic regression that sleeps ``pace`` seconds before every iteration."""

    defaults: ClassVar[dict[str, Any]] = {**LogisticRegression.defaults, "pace": 0.005}

    def step(self) -> float:
        time.sleep(float(self.params["pace"]))
        return super().step()


class Held(Paced):
    """:class:`Paced`, and while the file ``hold`` exists it waits before each iteration
    (after creating ``hold`` + ``.waiting``, so the test knows an iteration is being held)."""

    defaults: ClassVar[dict[str, Any]] = {**Paced.defaults, "hold": ""}

    def step(self) -> float:
        hold = Path(str(self.params["hold"]))
        if str(self.params["hold"]) and hold.exists():
            hold.with_name(hold.name + ".waiting").touch()
            end = time.monotonic() + HOLD_LIMIT
            while hold.exists() and time.monotonic() < end:
                time.sleep(0.05)
        return super().step()


class Swollen(Paced):
    """:class:`Paced` whose model, by its ``state_bytes`` estimate, fits no machine's memory
    while the file ``swell`` exists (a run started without it and resumed with it)."""

    defaults: ClassVar[dict[str, Any]] = {**Paced.defaults, "swell": ""}

    @classmethod
    def state_bytes(cls, params: Any, rows: int, features: int, iterations: int | None) -> int:
        if str(params["swell"]) and Path(str(params["swell"])).exists():
            return 2**62
        return int(super().state_bytes(params, rows, features, iterations))
