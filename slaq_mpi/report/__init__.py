"""The paper's evaluation metrics, fairness measures, summary tables and plots, as pure
functions of a run's traces (real or simulated). Imports no MPI.
"""
