"""The simulator: the same policies as the live coordinator, on simulated jobs.

Entry points: :func:`run_policies` (several policies, same workload), :func:`simulate` (one
policy), :func:`compare_with_run` (a real run against its calibrated simulation).
"""

from slaq_mpi.sim.curves import Curve, CurveLibrary
from slaq_mpi.sim.engine import SimulationError, simulate
from slaq_mpi.sim.run import compare_with_run, prepare, run_policies
from slaq_mpi.sim.scaling import ScalingModel, fit_scaling
from slaq_mpi.sim.settings import SimSettings, parse_settings
from slaq_mpi.sim.workload import SimJob, build_workload

__all__ = [
    "Curve",
    "CurveLibrary",
    "ScalingModel",
    "SimJob",
    "SimSettings",
    "SimulationError",
    "build_workload",
    "compare_with_run",
    "fit_scaling",
    "parse_settings",
    "prepare",
    "run_policies",
    "simulate",
]
