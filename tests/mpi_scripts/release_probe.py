"""Rank 0 asks rank 1 to release a job while rank 1 is busy; rank 1 then checks once, as a
job leader does at a chunk boundary, and must take the ask at that first check.

Usage: release_probe.py. Rank 1 prints ``taken at the first check: JOBS`` (a Python list).
"""

from __future__ import annotations

import time

from slaq_mpi.runtime import comm


def main() -> int:
    rank = comm.world_rank()
    if rank == 0:
        link = comm.CoordinatorLink({})
        link.release(1, "busy-job")
        end = time.monotonic() + 0.6
        while time.monotonic() < end:  # rank 0 goes on with its loop meanwhile
            link.wait(deadline=min(end, time.monotonic() + 0.01))
        link.close()
    else:
        link = comm.WorkerLink()
        time.sleep(0.3)  # an iteration: the ask arrives meanwhile
        taken = sorted(link.released())
        print(f"taken at the first check: {taken}", flush=True)
        link.close(releases=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
