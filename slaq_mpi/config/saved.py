"""The experiment as a real run kept it: the ``config`` attribute of its metrics.h5.

``slaq run`` writes no ``utility`` attribute per job; its jobs' ``utility:`` specs are in the
config text it kept, which :func:`read_run` reads them from.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from slaq_mpi.config.yaml_loader import yaml_loader
from slaq_mpi.errors import ConfigError
from slaq_mpi.policies.utility import validate_utility
from slaq_mpi.storage.metrics import RunData, read_metrics

__all__ = ["job_utilities", "read_run"]


def job_utilities(text: str) -> dict[str, dict[str, float]]:
    """Each job's validated ``utility:`` in an experiment's YAML ``text``, by job name; jobs
    without one, or with one that is not valid, and text that is not YAML are left out."""
    try:
        raw = yaml.load(text, Loader=yaml_loader())  # noqa: S506 - a safe loader
        jobs = raw.get("jobs", []) if isinstance(raw, dict) else []
    except yaml.YAMLError:
        return {}
    out = {}
    for job in jobs if isinstance(jobs, list) else []:
        if isinstance(job, dict) and "utility" in job:
            try:
                out[str(job.get("name"))] = validate_utility(job["utility"], "utility")
            except ConfigError:
                continue
    return out


def read_run(path: str | Path) -> RunData:
    """The run in ``path`` (:func:`~slaq_mpi.storage.metrics.read_metrics`), its jobs given
    their ``utility:`` from the kept config when it is a real run's.

    Raises:
        DataError: as :func:`~slaq_mpi.storage.metrics.read_metrics`.
    """
    run = read_metrics(path)
    if run.mode == "run":
        given = job_utilities(run.config)
        for name, job in run.jobs.items():
            if job.utility is None:
                job.utility = given.get(name)
    return run
