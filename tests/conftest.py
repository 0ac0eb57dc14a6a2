"""The suite's tiers, its rules under CI, and shared fixtures.

Tiers (markers registered in pyproject.toml, with ``--strict-markers``):

* ``fast``: pure unit tests, no subprocess, no MPI, no mypy: ``pytest -m fast``. Every test
  not marked ``mpi``, ``slurm`` or ``slow`` and not listed in :data:`SLOW` is marked ``fast``
  here; a fast test that starts a subprocess fails, naming this file.
* ``slow``: unit tests that start processes (``slaq`` subprocesses, ruff, mypy) or take seconds.
* ``mpi``: launches real ``mpiexec``; ``slurm``: needs a running Slurm.

Under CI (the variable ``CI`` set to anything but ``''``, ``0``, ``false``, ``no`` or ``off``)
a skip not listed in :data:`EXPECTED_SKIPS` fails: a missing dependency must not pass
silently. Every test runs under a time limit (:data:`TIME_LIMITS`), a safety net behind the
limits of the process helpers (:mod:`tests.processes`).
"""

from __future__ import annotations

import os
import platform
import re
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.processes import (  # noqa: F401 - the helpers the test modules import from here
    ROOT,
    ROOT_OK,
    Started,
    mpiexec_path,
    open_mpi,
    run_mpi,
    run_slaq,
)

# Tests left out of the fast tier (marked slow): whole modules ("test_x.py") or one test with all
# its parameter sets ("test_x.py::test_name"). Each starts a subprocess (slaq, bash, ruff, mypy)
# or took over half a second here (pytest --durations=0); the rest, about 400 tests, is fast.
SLOW = (
    # modules with tests that start subprocesses
    "test_bad_input.py", "test_rundir.py", "test_sim_cli.py", "test_slurm_render.py", "test_state_memory.py",
    "test_static.py",
    # long property, simulation and plotting tests
    "test_sim_draws.py",
    "test_checkpoint_metrics.py::test_a_damaged_history_is_refused_as_bad_input_whatever_h5py_raises",
    "test_data.py::test_damage_anywhere_in_the_metadata_is_a_data_error",
    "test_placement.py::test_placement_is_a_partition_and_sticky",
    "test_policies_contract.py::test_allocations_respect_capacity_and_caps",
    "test_policies_finish_time_fair.py::test_worst_rho_is_the_least_achievable",
    "test_policies_goodput.py::test_allocation_maximizes_the_power_mean",
    "test_predict.py::test_any_history_gives_finite_nonnegative_reductions",
    "test_predict.py::test_curve_memo_gives_the_batch_fit_bit_for_bit_refitting_only_changed_histories",
    "test_predict.py::test_a_fit_does_not_depend_on_the_batch_it_is_computed_in",
    "test_predict.py::test_degenerate_histories_never_nan",
    "test_report.py::test_pngs_are_valid_with_expected_series",
    "test_report.py::test_report_command_writes_pngs",
    "test_report.py::test_core_share_titles_are_the_time_weighted_shares_of_the_table",
    "test_report.py::test_runs_of_different_workloads_are_not_compared",
    "test_report.py::test_window_option",
    "test_report.py::test_table_and_json",
    "test_report.py::test_metrics_roundtrip",
    "test_report.py::test_a_glob_over_runs_and_their_plots_reads_the_runs",
    "test_sim.py::test_time_noise_spreads_speeds_without_changing_their_mean",
    "test_sim.py::test_shipped_configs_describe_the_paper_and_scale_setups",
    "test_sim.py::test_a_job_made_years_long_by_its_overhead_or_comm_names_the_key_that_set_it",
    "test_sim.py::test_same_seed_same_result_different_seed_different_workload",
    "test_sim.py::test_a_job_that_would_run_for_years_is_refused_unless_the_run_is_bounded",
    "test_sim_policies.py::test_policies_yaml_runs_all_six_and_each_wins_its_metric",
    "test_sim_policies.py::test_new_policies_run_and_report_every_metric",
    "test_slaq_policy.py::test_policy_properties",
    "test_solvers.py::test_sparse_input_gives_the_losses_of_dense_input",
    "test_solvers.py::test_lda_bound_increases_every_iteration",
    "test_solvers.py::test_svm_matches_scipy",
    "test_solvers.py::test_protocol_and_state_round_trip",
    "test_throughput.py::test_any_observations_give_positive_finite_times",
)

# Skips that are no missing piece: (pattern of the reason, why it is fine under CI too).
EXPECTED_SKIPS = (
    (r"needs 2 CPUs to bind two ranks apart", "a property of the machine, not of its setup"),
    (r"losing rank 0's node is opt-in", "the emulated cluster's PMI-2 misreads make it flaky "
                                        "(tests/test_multinode_live.py)"),
)

# Seconds a test may take (setup, call and teardown each), by tier; the first marker found wins.
TIME_LIMITS = (("slurm", 1800.0), ("mpi", 900.0), ("slow", 600.0), ("fast", 120.0))

FALSE_WORDS = ("", "0", "false", "no", "off")


# platform.uname() runs `uname -p` once per process, on first use (scipy asks on import): ask here,
# before the fast tier's tests, which may start no process.
platform.processor()


def under_ci() -> bool:
    """Whether the suite runs under CI (any value of ``CI`` other than a false one)."""
    return os.environ.get("CI", "").strip().lower() not in FALSE_WORDS


def _slow(item: pytest.Item) -> bool:
    module = Path(str(item.fspath)).name
    name = f"{module}::{getattr(item, 'originalname', item.name)}"
    return module in SLOW or name in SLOW


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if not any(item.get_closest_marker(m) for m in ("mpi", "slurm", "slow")):
            item.add_marker(pytest.mark.slow if _slow(item) else pytest.mark.fast)


@pytest.fixture(autouse=True)
def _fast_starts_no_process(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A test of the fast tier fails if it starts a subprocess."""
    if request.node.get_closest_marker("fast") is None:
        return

    def refuse(self: subprocess.Popen[Any], args: Any, *rest: Any, **kwargs: Any) -> None:
        pytest.fail(f"a test of the fast tier started a subprocess ({args!r}): mark it "
                    "@pytest.mark.slow, or list it in SLOW in tests/conftest.py")

    monkeypatch.setattr(subprocess.Popen, "_execute_child", refuse)


def _skip_reason(longrepr: Any) -> str:
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2])
    return str(longrepr)


def _unexpected_skip(report: pytest.CollectReport | pytest.TestReport) -> None:
    """Under CI, turn a skip not in :data:`EXPECTED_SKIPS` into a failure."""
    if not (report.skipped and under_ci()) or hasattr(report, "wasxfail"):
        return
    reason = _skip_reason(report.longrepr)
    if any(re.search(pattern, reason) for pattern, _ in EXPECTED_SKIPS):
        return
    report.outcome = "failed"
    report.longrepr = (f"skipped under CI ({reason}): under CI a missing dependency or service "
                       "fails; install it, or list the skip in EXPECTED_SKIPS in tests/conftest.py")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    _unexpected_skip(outcome.get_result())  # type: ignore[attr-defined]


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Iterator[None]:
    outcome = yield
    _unexpected_skip(outcome.get_result())  # type: ignore[attr-defined]


class TimeLimitExceeded(Exception):
    """A test ran past its tier's limit (:data:`TIME_LIMITS`)."""


def _limit(item: pytest.Item) -> float:
    return next((s for m, s in TIME_LIMITS if item.get_closest_marker(m)), TIME_LIMITS[-1][1])


def _bounded(item: pytest.Item, phase: str) -> Iterator[None]:
    seconds = _limit(item)

    def expired(_signum: int, _frame: Any) -> None:
        raise TimeLimitExceeded(f"{item.nodeid}: {phase} took over {seconds:g} s (TIME_LIMITS in "
                                "tests/conftest.py)")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    yield from _bounded(item, "setup")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    yield from _bounded(item, "the test")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    yield from _bounded(item, "teardown")


@pytest.fixture
def launch(tmp_path: Path) -> Iterator[Callable[..., Started]]:
    """Start ``slaq ARGS`` in the background (``launch(args, cwd)``); whatever still runs at the
    end of the test is killed, with everything it started."""
    started: list[Started] = []

    def start(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> Started:
        proc = Started(args, cwd, tmp_path / "logs", env)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.stop()


@pytest.fixture(scope="session", autouse=True)
def _private_data_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The suite's generated datasets go to a data cache of its own (shared by its tests and
    the processes they start), never the user's ~/.cache/slaq-mpi/data."""
    before = os.environ.get("SLAQ_DATA_CACHE")
    os.environ["SLAQ_DATA_CACHE"] = str(tmp_path_factory.mktemp("data-cache"))
    yield
    if before is None:
        del os.environ["SLAQ_DATA_CACHE"]
    else:
        os.environ["SLAQ_DATA_CACHE"] = before
