"""A paced solver that writes a line to the file ``log`` each time it is built or restored,
so a test can tell which jobs a move touched (a job's ranks build a new solver exactly when
they form a new group)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from jobs.base import GroupComm, Shard
from tests.solvers.paced import Paced


class Logged(Paced):
    """:class:`Paced` that logs ``build RANK/SIZE`` and ``restore RANK/SIZE`` lines to ``log``."""

    defaults: ClassVar[dict[str, Any]] = {**Paced.defaults, "log": ""}

    def __init__(self, comm: GroupComm, shard: Shard, params: Mapping[str, Any], seed: int) -> None:
        super().__init__(comm, shard, params, seed)
        self._note("build")

    def set_state(self, state: dict[str, np.ndarray]) -> None:
        super().set_state(state)
        self._note("restore")

    def _note(self, what: str) -> None:
        with Path(str(self.params["log"])).open("a") as f:
            f.write(f"{what} {self.comm.rank}/{self.comm.size}\n")
