"""Datasets: the HDF5 format and per-rank row shards, synthetic generators, and converters
from LibSVM, CSV and .npy. Imports no MPI.
"""
