"""The messages of a live run: rank 0's assignment of a rank to a job, and a job leader's
report. Both travel point to point (:mod:`slaq_mpi.runtime.comm`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from slaq_mpi.config.job import JobSpec


@dataclass(frozen=True)
class Assign:
    """Rank 0's order to one worker rank: join ``job`` on ``ranks`` (``job`` None: the run is
    over, exit).

    Attributes:
        job: the job to train, or None to exit.
        ranks: the world ranks of the job's new group (every one of them gets this order).
        iterations: iterations the job has done (names the checkpoint to restore; 0: start
            from the solver's initial model).
        data: HDF5 dataset path of the job.
        spec: the job as configured (a job added to the running run is known to rank 0 only).
        tag: a number of the job's own, telling apart the communicators being built.
        releases: with ``job`` None, how many asks to release a job rank 0 has sent this rank
            in the run: the rank takes those it has not taken (asks for jobs that had already
            ended) before it exits, so none is left unmatched.
        source: the world rank among ``ranks`` that holds the job's state in memory (the
            leader that released it), or -1: the new leader reads the checkpoint.
    """

    job: str | None
    ranks: tuple[int, ...] = ()
    iterations: int = 0
    data: str = ""
    spec: JobSpec | None = None
    tag: int = 0
    releases: int = 0
    source: int = -1


@dataclass
class Report:
    """What a job's leader tells rank 0, about once per ``epoch_seconds`` on the job's own
    clock, at once when the job ends, and when it has stopped for a move.

    ``end_times`` are wall-clock (``time.time()``) ends of each iteration since the previous
    report; ``status`` is ``running``, ``done`` or ``failed`` (then ``reason`` says why).
    ``released``: the job stopped on rank 0's request (:data:`~slaq_mpi.runtime.comm.Tag.RELEASE`)
    after these iterations; its ranks are free, its leader keeps its state in memory and
    writes its checkpoint (then sends :data:`~slaq_mpi.runtime.comm.Tag.SAVED`).
    """

    job: str
    cores: int
    losses: list[float] = field(default_factory=list)
    iter_seconds: list[float] = field(default_factory=list)
    end_times: list[float] = field(default_factory=list)
    status: str = "running"
    reason: str = ""
    released: bool = False
