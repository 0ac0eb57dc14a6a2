"""Slurm: the ``slurm:`` settings, the sbatch script renderer and ``slaq submit``. Every Slurm
command goes through one ``run_cmd``. Imports no MPI.
"""
