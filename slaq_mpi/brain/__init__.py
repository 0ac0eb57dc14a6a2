"""SLAQ's quality model: loss-curve fitting and prediction, and the throughput model of
seconds per iteration against cores. Pure numpy/scipy; imports no MPI, no config loader.
"""
