"""What a slaq-mpi batch job does once its run has ended: which line it writes, whether it
requeues itself, and its exit status. Plain functions of the run's exit status and what Slurm
says of the job; the step supervisor (:mod:`slaq_mpi.slurm.supervise`) carries them out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from slaq_mpi.errors import EXIT_ABORTED, EXIT_BAD_INPUT, EXIT_DONE, EXIT_FAILED, EXIT_STOPPED

__all__ = ["Ending", "cancelled_by_user", "ending"]


@dataclass(frozen=True)
class Ending:
    """How the batch job ends: ``say`` this line, requeue the job if ``requeue``, else exit
    with ``status`` (``fallback``: the line and status if the requeue fails)."""

    say: str
    status: int
    requeue: bool = False
    fallback: str = ""


def cancelled_by_user(job_line: str) -> bool:
    """Whether ``scontrol show job -o``'s ``job_line`` is a job ending with no reason of
    Slurm's own (``COMPLETING`` or ``CANCELLED`` with ``Reason=None``): its owner or an admin
    cancelled it (scancel), which is not a reason to requeue it. At the time limit or on
    preemption the reason names Slurm's (``TimeLimit``)."""
    state = re.search(r"\bJobState=([A-Z_]+)", job_line)
    reason = re.search(r"\sReason=(\S+)", job_line)
    return (state is not None and state.group(1) in ("COMPLETING", "CANCELLED")
            and reason is not None and reason.group(1) == "None")


def ending(status: int, stop_asked: bool, started: bool, *, run_dir: str, advice: str,
           requeue: bool, restarts: int, max_restarts: int, job_line: str = "") -> Ending:
    """The end of a batch job whose run exited with ``status``.

    Args:
        status: the exit status of the (last) launch.
        stop_asked: Slurm signalled the batch job (warning signal, preemption, scancel).
        started: a rank 0 of the run ever ran (its lock file changed): else the launch failed.
        run_dir: the run directory (named in the lines).
        advice: what to check when the launch failed before the run started.
        requeue: ``slurm.requeue``; ``restarts`` of ``max_restarts`` already made.
        job_line: ``scontrol show job -o`` of this job (read only after a stop Slurm asked for).
    """
    resume = f"slaq run --resume {run_dir}"
    if status not in (EXIT_BAD_INPUT, EXIT_STOPPED) and not stop_asked and not started:
        return Ending(f"the MPI launch failed before the run started (status {status}, its "
                      f"message is above): {advice} (docs/slurm.md)", EXIT_ABORTED)
    if status == EXIT_DONE:
        return Ending("every job done", status)
    if status == EXIT_FAILED:
        return Ending(f"finished; at least one job failed (see the log and {run_dir}/metrics.h5)", status)
    if status == EXIT_BAD_INPUT:
        return Ending("bad input or run directory in use (the error is above); nothing was run", status)
    if status != EXIT_STOPPED:
        return Ending(f"slaq run exited with status {status}; after a crash: {resume}", status)
    if not stop_asked:  # RUN_DIR/STOP, a signal to rank 0: the user's "stop for a later resume"
        return Ending("stopped with checkpoints on request (RUN_DIR/STOP or a signal to rank 0), "
                      f"not requeued; resume with: {resume} (or submit again)", status)
    if cancelled_by_user(job_line):
        return Ending("ended by Slurm (scancel, or scontrol requeue, which restarts it): stopped with "
                      f"checkpoints; after a scancel, resume with: {resume} (or submit again)", status)
    final = f"stopped with checkpoints; resume with: {resume} (or submit again)"
    if requeue and restarts < max_restarts:
        return Ending("stopped with checkpoints; requeueing", EXIT_DONE, requeue=True,
                      fallback=final)
    return Ending(final, status)
