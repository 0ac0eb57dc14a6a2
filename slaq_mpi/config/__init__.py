"""The experiment YAML: spec dataclasses, validation, and the memory and data checks made
before anything runs. Imports no MPI.
"""
