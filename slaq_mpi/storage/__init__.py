"""Files a run leaves behind: durable writes, solver checkpoints, the run directory and its
lock, output-path checks and the metrics file. Imports no MPI.
"""
