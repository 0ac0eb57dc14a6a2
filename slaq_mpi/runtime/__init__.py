"""The live run: every MPI call (:mod:`.comm`), rank 0's coordinator, the workers, epoch
timing, placement of jobs on ranks, the launcher and stop signals. The only layer that
imports mpi4py.
"""
