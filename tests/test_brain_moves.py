"""A move is worth its cost: slaq_mpi.brain.moves and the policies that use it."""

from __future__ import annotations

import numpy as np
import pytest

from slaq_mpi.brain.moves import allocation_value, hold_current, moved_jobs, settle_moves
from slaq_mpi.policies.slaq import SlaqPolicy
from slaq_mpi.policies.snapshot import ClusterSnapshot, JobSnapshot


def arr(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int64)


def speed_value(rate: np.ndarray, diminishing: float = 0.0):
    """Gain of job i on a cores over s seconds: rate[i] * s * a / (1 + diminishing * a)."""
    def value(cores: np.ndarray, seconds: np.ndarray) -> np.ndarray:
        a = np.asarray(cores, dtype=np.float64)
        return rate * np.asarray(seconds) * a / (1.0 + diminishing * a)
    return value


def test_who_pays_a_move() -> None:
    current = arr(2, 0, 0, 3, 4)
    alloc = arr(3, 2, 1, 0, 4)
    started = np.array([True, False, True, True, True])
    # grows: pays; new job starting: no; a stopped job coming back: pays (restore);
    # stopped: no progress to lose; unchanged: no
    assert moved_jobs(current, alloc, started).tolist() == [True, False, True, False, False]


def test_the_value_of_an_allocation_charges_each_moved_job_its_pause() -> None:
    value = speed_value(np.array([1.0, 1.0]))
    current, started = arr(2, 2), np.array([True, True])
    assert allocation_value(arr(2, 2), current, started, 2.0, 0.5, value) == pytest.approx(8.0)
    # both moved: 3 cores * 1.5 s + 1 core * 1.5 s
    assert allocation_value(arr(3, 1), current, started, 2.0, 0.5, value) == pytest.approx(6.0)
    # a pause longer than the epoch leaves nothing, never less
    assert allocation_value(arr(3, 1), current, started, 2.0, 5.0, value) == 0.0


def test_the_held_allocation_is_made_valid_moving_as_few_jobs_as_it_can() -> None:
    # rows: a (held 4), b (held 2), c (new); 8 cores, 2 free
    held = hold_current(arr(4, 2, 0), arr(3, 2, 3), caps=arr(8, 8, 8), capacity=8)
    assert held is not None and held.tolist() == [4, 2, 2]  # the free cores go to the new job
    # no free core: the new job takes one from the job the proposal shrinks most
    held = hold_current(arr(5, 3, 0), arr(3, 3, 2), caps=arr(8, 8, 8), capacity=8)
    assert held is not None and held.tolist() == [4, 3, 1]
    # a job that ended is no longer a row: its cores go toward the proposal, the job it grows most first
    held = hold_current(arr(2, 2), arr(2, 6), caps=arr(8, 8), capacity=8)
    assert held is not None and held.tolist() == [2, 6]
    # caps (a job's max cores) apply to what it holds; cores the proposal leaves idle stay idle
    held = hold_current(arr(6, 1), arr(2, 2), caps=arr(4, 2), capacity=8)
    assert held is not None and held.tolist() == [4, 2]
    assert hold_current(arr(6, 6), arr(4, 4), caps=arr(8, 8), capacity=8) is None


def test_a_reshuffle_worth_less_than_its_pauses_keeps_the_held_allocation() -> None:
    value = speed_value(np.array([1.0, 1.02]))  # b is 2% faster per core than a
    current, started = arr(4, 4), np.array([True, True])
    proposal = arr(3, 5)  # gains 0.02 core-rate for 2 s; costs both jobs a pause
    kept = settle_moves(current, proposal, arr(8, 8), 8, started, 2.0, 0.05, value)
    assert kept.tolist() == [4, 4]
    # free moves: the better allocation is taken
    assert settle_moves(current, proposal, arr(8, 8), 8, started, 2.0, 0.0, value).tolist() == [3, 5]
    # a gain well above the pauses is taken
    value = speed_value(np.array([1.0, 2.0]))
    assert settle_moves(current, proposal, arr(8, 8), 8, started, 2.0, 0.05, value).tolist() == [3, 5]


def test_a_new_job_and_idle_cores_are_gains_of_the_proposal() -> None:
    value = speed_value(np.array([1.0, 1.0, 1.0]), diminishing=0.5)
    started = np.array([True, True, False])
    # c arrived, no core free: the proposal that gives it cores wins although it moves a and b
    out = settle_moves(arr(4, 4, 0), arr(3, 3, 2), arr(8, 8, 8), 8, started, 2.0, 0.05, value)
    assert out.tolist() == [3, 3, 2]
    # a job ended and left 4 cores idle: they are given out, to the job the proposal grows
    out = settle_moves(arr(2, 2), arr(2, 6), arr(8, 8), 8, np.array([True, True]), 2.0, 0.05,
                       speed_value(np.array([1.0, 1.0])))
    assert out.tolist() == [2, 6]


def _job(i: int, n: int, cores: int) -> JobSnapshot:
    losses = tuple(1.0 / (1.0 + 0.3 * k) for k in range(n))
    return JobSnapshot(job_id=f"j{i}", losses=losses, throughput=((4, 0.5),) * 3,
                       cores=cores, max_cores=64, convergence="sublinear", arrival=float(i))


def test_slaq_does_not_churn_ranks_for_a_small_gain() -> None:
    jobs = (_job(0, 30, 5), _job(1, 30, 3))  # twins, held unevenly
    free = ClusterSnapshot(8, 60.0, 2.0, jobs, move_seconds=0.0)
    assert sorted(SlaqPolicy().allocate(free).values()) == [4, 4]  # the greedy splits them evenly
    # 4 + 4 gains about 1% over 5 + 3; a pause of 2.5% of the epoch costs both jobs more
    costly = ClusterSnapshot(8, 60.0, 2.0, jobs, move_seconds=0.05)
    assert SlaqPolicy().allocate(costly) == {"j0": 5, "j1": 3}
    # a new job is given cores however costly the moves that makes room for it
    new = JobSnapshot(job_id="j2", losses=(), throughput=(), cores=0, max_cores=64, arrival=70.0)
    alloc = SlaqPolicy().allocate(ClusterSnapshot(8, 70.0, 2.0, (*jobs, new), move_seconds=0.5))
    assert alloc["j2"] >= 1 and sum(alloc.values()) == 8


def test_slaq_moves_fewer_jobs_in_simulation_than_its_greedy_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    from slaq_mpi.policies import slaq as slaq_module
    from slaq_mpi.sim import ScalingModel, SimJob, simulate

    jobs = []
    for i in range(6):
        k = np.arange(121, dtype=np.float64)
        curve = 1.0 / (1.0 + (0.05 + 0.04 * i) * k)
        jobs.append(SimJob(name=f"j{i}", algorithm="x", convergence="sublinear", arrival=3.0 * i,
                           curve=curve, l_star=0.0, scaling=ScalingModel(work=2.0 + i, overhead=0.01),
                           max_cores=16, stop_iter=120, max_iterations=120))

    def moves(run) -> int:  # decisions at which a job paused
        return int(np.isfinite(run.pause_ms).sum())

    settled = simulate(jobs, SlaqPolicy(), capacity=16, epoch_seconds=1.0, reconfigure_seconds=0.05)
    monkeypatch.setattr(slaq_module, "settle_moves", lambda current, proposed, *args: proposed)
    greedy = simulate(jobs, SlaqPolicy(), capacity=16, epoch_seconds=1.0, reconfigure_seconds=0.05)
    assert moves(settled) < 0.5 * moves(greedy), (moves(settled), moves(greedy))
