"""The messages of a live run: rank 0's plan for each epoch and a job leader's report."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Plan:
    """One epoch's assignment of worker ranks to jobs.

    Attributes:
        epoch: epoch number (0-based, continues across resumes).
        epoch_seconds: how long each job iterates before reporting
            (:func:`slaq_mpi.runtime.timing.epoch_length`).
        ranks: the world ranks of every job that runs this epoch.
        moved: jobs whose rank set changed: their ranks re-split the world and restore the
            job from its checkpoint; every other job carries on in memory.
        iterations: iterations each moved job has done (names the checkpoint to restore).
        data: HDF5 dataset path of every moved job.
        stop: the run is over (or stopping for a later resume): workers exit.
    """

    epoch: int
    epoch_seconds: float
    ranks: dict[str, tuple[int, ...]] = field(default_factory=dict)
    moved: frozenset[str] = frozenset()
    iterations: dict[str, int] = field(default_factory=dict)
    data: dict[str, str] = field(default_factory=dict)
    stop: bool = False

    def job_of(self, rank: int) -> str | None:
        """The job ``rank`` works on this epoch, or None if it idles."""
        for job, ranks in self.ranks.items():
            if rank in ranks:
                return job
        return None


@dataclass
class Report:
    """What a job's leader tells rank 0 at the end of an epoch.

    ``end_times`` are wall-clock (``time.time()``) ends of each iteration; ``status`` is
    ``running``, ``done`` or ``failed`` (then ``reason`` says why).
    """

    job: str
    epoch: int
    cores: int
    losses: list[float]
    iter_seconds: list[float]
    end_times: list[float]
    first_start: float
    deadline: float
    status: str = "running"
    reason: str = ""
