"""Pin this rank as told, then detect oversubscription, for the binding test.

Usage: oversubscription.py spread|same

``spread`` pins each busy rank (all but rank 0) to a CPU of its own, as a launcher that binds
ranks to cores does; ``same`` pins them all to one CPU. Rank 0 (the coordinator) keeps its mask.
Every rank prints ``RANK BUSY CPUS OVERSUBSCRIBED`` as it sees them.
"""

from __future__ import annotations

import os
import sys

from slaq_mpi.runtime import comm


def main() -> int:
    mode = sys.argv[1]
    rank = comm.world_rank()
    cpus = sorted(os.sched_getaffinity(0))
    if rank > 0:
        os.sched_setaffinity(0, {cpus[(rank - 1) % len(cpus)] if mode == "spread" else cpus[0]})
    busy, usable = comm.detect_oversubscription()
    print(f"{rank} {busy} {usable} {busy > usable}", flush=True)
    comm.barrier()
    return 0


if __name__ == "__main__":
    sys.exit(main())
