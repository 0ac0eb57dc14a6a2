"""Metric functions on hand-made traces with known answers."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from slaq_mpi.report.evaluation import (
    JobTrace,
    RunData,
    average_normalized_loss,
    avg_normalized_loss_series,
    common_l_star,
    comparison_window,
    completion_times,
    core_share_by_loss_group,
    makespan,
    mean_active_jobs,
    normalized_loss,
    normalized_loss_at,
    normalized_loss_job_seconds,
    observed_end,
    reduction_times,
    time_to_reduction,
)
from slaq_mpi.report.summary import summarize, summarize_runs


def job(name: str, arrival: float, losses: list[float], times: list[float], end: float = math.nan,
        l_star: float | None = None) -> JobTrace:
    n = len(losses)
    return JobTrace(name=name, algorithm="x", arrival=arrival, loss=np.array(losses, dtype=float),
                    time=np.array(times, dtype=float), cores=np.ones(n, dtype=np.int32),
                    iter_seconds=np.ones(n), end=end, l_star=l_star)


def run_of(jobs: list[JobTrace], epoch_time: list[float] | None = None,
           alloc: list[list[int]] | None = None, policy: str = "p") -> RunData:
    et = np.array(epoch_time or [], dtype=float)
    al = np.array(alloc or np.zeros((len(et), len(jobs))), dtype=np.int32).reshape(len(et), len(jobs))
    return RunData(name="t", policy=policy, seed=0, capacity=100, epoch_seconds=2.0, mode="simulate",
                   config="", jobs={j.name: j for j in jobs}, job_names=[j.name for j in jobs],
                   epoch_time=et, alloc=al, decision_ms=np.array([1.0, 3.0]), pause_ms=np.zeros(2))


A = job("a", 0.0, [10.0, 5.0, 1.0, 0.0], [1.0, 2.0, 3.0, 4.0], end=4.0)


def test_normalized_loss_known_values() -> None:
    assert normalized_loss([10.0, 5.0, 2.0], 10.0, 0.0) == pytest.approx([1.0, 0.5, 0.2])
    assert normalized_loss([4.0, 3.0], 4.0, 2.0) == pytest.approx([1.0, 0.5])
    # nothing to gain: defined as already converged
    assert normalized_loss([3.0, 3.0], 3.0, 3.0) == pytest.approx([0.0, 0.0])


def test_normalized_loss_step_function() -> None:
    t = np.array([-1.0, 0.5, 1.5, 2.5, 3.5, 4.0, 9.0])
    got = normalized_loss_at(A, 0.0, t)
    assert np.isnan(got[0]) and np.isnan(got[5]) and np.isnan(got[6])  # before arrival, after end
    assert got[1:5] == pytest.approx([1.0, 1.0, 0.5, 0.1])


def test_time_to_reduction() -> None:
    assert time_to_reduction(A, 0.0, 50) == pytest.approx(2.0)
    assert time_to_reduction(A, 0.0, 90) == pytest.approx(3.0)
    assert time_to_reduction(A, 0.0, 95) == pytest.approx(4.0)
    late = job("b", 10.0, [8.0, 4.0], [12.0, 15.0])
    assert time_to_reduction(late, 0.0, 50) == pytest.approx(5.0)  # measured from arrival
    assert math.isnan(time_to_reduction(late, 0.0, 90))  # never reached


def test_average_normalized_loss_one_job() -> None:
    # [0,2): 1.0, [2,3): 0.5, [3,4): 0.1 -> (2 + 0.5 + 0.1) / 4
    assert average_normalized_loss(run_of([A]), {"a": 0.0}) == pytest.approx(0.65)


def test_the_averages_are_exact_for_jobs_much_shorter_than_an_epoch() -> None:
    # a job of 0.1 s in a run with 2 s epochs: [0, .05) 1.0, [.05, .1) 0.2 (ends at .1)
    quick = job("q", 0.0, [10.0, 2.0, 1.0], [0.01, 0.05, 0.1], end=0.1)
    run = run_of([quick])
    assert average_normalized_loss(run, {"q": 0.0}) == pytest.approx((0.05 * 1.0 + 0.05 * 0.2) / 0.1)
    assert normalized_loss_job_seconds(run, {"q": 0.0}) == pytest.approx(0.06)
    assert mean_active_jobs(run, {"q": 0.0}) == pytest.approx(1.0)
    # a window far longer than the run costs nothing (no grid): the job counts while active
    huge = (0.0, 1e15)
    assert average_normalized_loss(run, {"q": 0.0}, window=huge) == pytest.approx(0.6)
    assert mean_active_jobs(run, {"q": 0.0}, window=huge) == pytest.approx(0.1 / 1e15)


def test_no_jobs_and_bad_losses_do_not_break_the_averages() -> None:
    empty = run_of([])
    assert math.isnan(average_normalized_loss(empty, {}, window=(0.0, 5.0)))
    assert normalized_loss_job_seconds(empty, {}, window=(0.0, 5.0)) == 0.0
    # a job reporting a NaN loss (it fails there) does not spoil the other job's figures
    a = job("a", 0.0, [10.0, math.nan, 5.0], [1.0, 2.0, 3.0], end=4.0)
    b = job("b", 0.0, [10.0, 5.0], [1.0, 2.0], end=10.0)
    run = run_of([a, b])
    stars = {"a": 0.0, "b": 0.0}
    assert math.isfinite(average_normalized_loss(run, stars))
    assert normalized_loss_job_seconds(run, stars) == pytest.approx(2.0 + 1.0 + 0.5 + 2.0 + 8 * 0.5)
    # a run whose only job arrives after it stopped is left out of the common window
    early = run_of([job("x", 5.0, [], [])], epoch_time=[0.0])
    assert comparison_window([run, early]) == pytest.approx((0.0, 10.0))


def test_average_over_active_jobs_only() -> None:
    b = job("b", 2.0, [], [])  # arrived at 2, never ran: 1.0 while active
    run = run_of([A, b])
    grid = np.arange(0.0, 4.0, 0.5)
    series = avg_normalized_loss_series(run, {"a": 0.0, "b": 0.0}, grid)
    assert series == pytest.approx([1, 1, 1, 1, 0.75, 0.75, 0.55, 0.55])
    assert average_normalized_loss(run, {"a": 0.0, "b": 0.0}) == pytest.approx(0.825)


def test_compared_runs_share_one_window() -> None:
    # the same job under two policies: "fast" converges by t=4; "slow" is behind until t=4,
    # then sits near L* until t=20. Over its own window the slow run's long low tail would
    # make it look better (0.1775 < 0.65); over the common window [0, 4) it is worse.
    fast = run_of([A], policy="fast")
    slow_a = job("a", 0.0, [10.0, 8.0, 5.0, 1.0, 0.1], [1.0, 2.0, 3.0, 4.0, 5.0], end=20.0)
    slow = run_of([slow_a], policy="slow")
    assert average_normalized_loss(slow, {"a": 0.0}) == pytest.approx(3.55 / 20)
    assert comparison_window([fast, slow]) == (0.0, 4.0)
    rows, window = summarize_runs({"fast": fast, "slow": slow})
    assert window == (0.0, 4.0)
    assert rows["fast"]["avg_normalized_loss"] == pytest.approx(0.65)
    assert rows["slow"]["avg_normalized_loss"] == pytest.approx(3.3 / 4)
    # one run alone: its own window; an explicit window wins
    alone, none = summarize_runs({"slow": slow}, {"a": 0.0})
    assert none is None and alone["slow"]["avg_normalized_loss"] == pytest.approx(3.55 / 20)
    given, win = summarize_runs({"fast": fast, "slow": slow}, window=(2.0, 4.0))
    assert win == (2.0, 4.0) and given["slow"]["avg_normalized_loss"] == pytest.approx(1.3 / 2)


def test_common_l_star_is_lowest_known_in_any_run() -> None:
    r1 = run_of([job("x", 0, [9.0, 3.0], [1, 2])])
    r2 = run_of([job("x", 0, [9.0, 4.0], [1, 2], l_star=2.5), job("y", 0, [5.0, 1.0], [1, 2])])
    ls = common_l_star([r1, r2])
    assert ls == {"x": 2.5, "y": 1.0}
    r3 = run_of([job("x", 0, [9.0, 2.0], [1, 2])])
    assert common_l_star([r1, r2, r3])["x"] == 2.0


def _shares_one_epoch_at_a_time(run: RunData, l_star: dict[str, float]) -> np.ndarray:
    """The definition, literally: per epoch, rank the active jobs and add up their cores."""
    out = np.full((len(run.epoch_time), 3), np.nan)
    for e, t in enumerate(run.epoch_time):
        vals = [(float(normalized_loss_at(run.jobs[n], l_star[n], np.array([t]))[0]), c, n)
                for c, n in enumerate(run.job_names)]
        active = sorted(((-v, c) for v, c, _ in vals if not math.isnan(v)))
        held = sum(float(run.alloc[e, c]) for _, c in active)
        if held > 0:
            for g, (lo, hi) in enumerate(((0.0, 0.25), (0.25, 0.5), (0.5, 1.01))):
                out[e, g] = sum(float(run.alloc[e, c]) for i, (_, c) in enumerate(active)
                                if lo <= i / len(active) < hi) / held
    return out


def test_core_shares_match_their_definition_on_random_runs() -> None:
    rng = np.random.default_rng(11)
    for _ in range(200):
        jobs = []
        for i in range(int(rng.integers(1, 9))):
            arrival = float(rng.integers(0, 6))
            steps = int(rng.integers(0, 6))
            losses = rng.choice([3.0, 2.0, 1.0, 0.5, np.nan, np.inf, -np.inf], size=steps).tolist()
            times = (arrival + np.sort(rng.uniform(0, 8, size=steps))).tolist()
            end = arrival + float(rng.uniform(0, 10)) if rng.random() < 0.7 else math.nan
            jobs.append(job(f"j{i}", arrival, [4.0, *losses], [arrival + 0.1, *times], end=end))
        epochs = np.sort(rng.choice(np.arange(0.0, 12.0, 0.5), size=int(rng.integers(1, 12)),
                                    replace=False)).tolist()
        if rng.random() < 0.2:  # a hand-made run need not list its epochs in order
            epochs = rng.permutation(epochs).tolist()
        run = run_of(jobs, epoch_time=epochs,
                     alloc=rng.integers(0, 4, size=(len(epochs), len(jobs))).tolist())
        l_star = {j.name: 0.0 for j in jobs}
        _, shares = core_share_by_loss_group(run, l_star)
        np.testing.assert_array_equal(shares, _shares_one_epoch_at_a_time(run, l_star))


def test_core_share_groups() -> None:
    # four active jobs with normalized losses 0.9, 0.6, 0.3, 0.1 at t=5 holding 10, 20, 30, 40 cores
    js = [job(n, 0.0, [1.0, v], [1.0, 2.0]) for n, v in (("h", 0.9), ("m", 0.6), ("l1", 0.3), ("l2", 0.1))]
    run = run_of(js, epoch_time=[5.0], alloc=[[10, 20, 30, 40]])
    times, shares = core_share_by_loss_group(run, {j.name: 0.0 for j in js})
    assert times.tolist() == [5.0]
    assert shares[0] == pytest.approx([0.1, 0.2, 0.7])
    s = summarize(run, {j.name: 0.0 for j in js})
    got = (s["core_share_high"], s["core_share_medium"], s["core_share_low"])
    assert got == pytest.approx((0.1, 0.2, 0.7))
    # epochs weigh as much as they last: 0.5 s with the allocation reversed, then 1.5 s until
    # the run stopped at 7 s
    run = dataclasses.replace(run_of(js, epoch_time=[5.0, 5.5], alloc=[[40, 30, 20, 10], [10, 20, 30, 40]]),
                  stopped=7.0)
    s = summarize(run, {j.name: 0.0 for j in js})
    got = (s["core_share_high"], s["core_share_medium"], s["core_share_low"])
    assert got == pytest.approx((0.25 * 0.4 + 0.75 * 0.1, 0.25 * 0.3 + 0.75 * 0.2,
                                 0.25 * 0.3 + 0.75 * 0.7))


def test_makespan_and_summary() -> None:
    b = job("b", 1.0, [4.0, 2.0], [3.0, 7.5], end=7.5)
    run = run_of([A, b])
    assert makespan(run) == pytest.approx(7.5)
    s = summarize(run, {"a": 0.0, "b": 0.0})
    assert s["decision_ms"] == pytest.approx(2.0)
    assert s["mean_time_to_90"] == pytest.approx(3.0)  # b never reaches 90%: left out
    assert s["reached_90"] == 1.0
    assert s["median_time_to_90"] == pytest.approx(3.0)
    assert reduction_times(run, {"a": 0.0, "b": 0.0}, 50) == pytest.approx([2.0, 6.5])


def test_completion_times_count_finished_jobs_only() -> None:
    done_a = dataclasses.replace(A, status="done")  # arrives 0, ends 4
    done_b = dataclasses.replace(job("b", 1.0, [4.0, 2.0], [3.0, 7.5], end=7.5), status="done")
    done_c = dataclasses.replace(job("c", 2.0, [4.0, 2.0], [3.0, 4.0], end=12.0), status="done")
    failed = dataclasses.replace(job("f", 0.0, [4.0], [1.0], end=2.0), status="failed")
    running = dataclasses.replace(job("r", 0.0, [4.0, 3.0], [1.0, 2.0]), status="running")
    run = run_of([done_a, done_b, done_c, failed, running])
    assert sorted(completion_times(run).tolist()) == pytest.approx([4.0, 6.5, 10.0])
    s = summarize(run, {j: 0.0 for j in run.jobs})
    assert s["median_completion"] == pytest.approx(6.5)
    assert s["mean_completion"] == pytest.approx((4.0 + 6.5 + 10.0) / 3)
    assert math.isnan(summarize(run_of([running]), {"r": 0.0})["mean_completion"])


# --- policy-comparison metrics: utility, finish-time fairness, speedup -------------------------

def timed_job(name: str, arrival: float, start: float, n: int, end: float | None = None,
              utility: dict[str, float] | None = None) -> JobTrace:
    """n iterations of 1 s each from ``start`` on 4 cores (t(a) = 4 / a); losses 10, 9, ..."""
    times = start + np.arange(1, n + 1, dtype=float)
    return JobTrace(name=name, algorithm="x", arrival=arrival, loss=10.0 - np.arange(n, dtype=float),
                    time=times, cores=np.full(n, 4, dtype=np.int32), iter_seconds=np.ones(n),
                    end=float(times[-1]) if end is None else end, max_cores=4, l_star=0.0,
                    utility=utility, scaling=(4.0, 0.0, 0.0))


def four_core_run(jobs: list[JobTrace], epoch: float = 4.0) -> RunData:
    last = max(j.end for j in jobs)
    et = np.arange(0.0, last, epoch)
    return RunData(name="t", policy="p", seed=0, capacity=4, epoch_seconds=epoch, mode="simulate",
                   config="", jobs={j.name: j for j in jobs}, job_names=[j.name for j in jobs],
                   epoch_time=et, alloc=np.zeros((len(et), len(jobs)), dtype=np.int32),
                   decision_ms=np.zeros(len(et)), pause_ms=np.zeros(len(et)))


def test_total_utility_counts_completion_times() -> None:
    from slaq_mpi.report.fairness import job_utility, total_utility

    spec = {"value": 10.0, "deadline": 4.0, "decay": 2.0}
    late = timed_job("late", 0.0, 0.0, 5, utility=spec)  # done at 5: halfway down the decay
    on_time = timed_job("ok", 0.0, 0.0, 3, utility=spec)
    unfinished = timed_job("open", 0.0, 0.0, 2, end=math.nan, utility=spec)
    plain = timed_job("plain", 0.0, 0.0, 2)
    run = four_core_run([late, on_time, unfinished, plain])
    assert job_utility(late) == pytest.approx(5.0)
    assert total_utility(run) == pytest.approx(15.0)
    assert summarize(run, {})["total_utility"] == pytest.approx(15.0)


def test_rho_of_a_lone_job_is_one_and_of_queued_jobs_follows_contention() -> None:
    from slaq_mpi.report.fairness import rhos

    assert rhos(four_core_run([timed_job("a", 0.0, 0.0, 10)])).tolist() == pytest.approx([1.0])
    # fifo: a runs [0, 10) on all 4 cores while b waits, then b runs [10, 20)
    # a: N = 2 on average -> 2 cores alone -> 20 s isolated: rho 10/20
    # b: N = (10 + 20)/20 = 1.5 -> 8/3 cores -> 15 s isolated: rho 20/15
    run = four_core_run([timed_job("a", 0.0, 0.0, 10), timed_job("b", 0.0, 10.0, 10)])
    assert rhos(run).tolist() == pytest.approx([0.5, 4.0 / 3.0])
    row = summarize(run, {})
    assert row["max_rho"] == pytest.approx(4.0 / 3.0)
    assert row["mean_rho"] == pytest.approx((0.5 + 4.0 / 3.0) / 2)



def test_rho_of_an_unfinished_job_ends_when_the_run_stopped_observing() -> None:
    # a live run records when its last (possibly cut) epoch ended: 11 s, not 8 + 4 s
    from slaq_mpi.report.fairness import rhos

    done = timed_job("a", 0.0, 0.0, 10)
    open_ = timed_job("open", 0.0, 0.0, 2, end=math.nan)
    run = dataclasses.replace(four_core_run([done]), jobs={"a": done, "open": open_},
                              job_names=["a", "open"], alloc=np.zeros((3, 2), dtype=np.int32),
                              stopped=11.0)
    # open: life 11 s, contention (11 + 10) / 11 -> 4 * 11 / 21 cores -> 2 iterations of
    # 21 / 11 s alone
    assert rhos(run)[1] == pytest.approx(11.0 / (2 * 21.0 / 11.0))

def test_speedups_against_the_equal_share() -> None:
    from slaq_mpi.report.fairness import speedups

    alone = four_core_run([timed_job("a", 0.0, 0.0, 10)])
    assert speedups(alone, {"a": 0.0}).tolist() == pytest.approx([1.0])
    # fifo on 4 s epochs; the first loss is the initial model's, so q = 1, 1, .9, .8, ...
    # a: epochs [0,4) 0.3/0.1, [4,8) 0.4/0.2, [8,10) 0.2/0.1 -> (4*3 + 4*2 + 2*2) / 10 = 2.4
    # b: waits [0,8) (0 each), then [8,12) 0.1/0.1, [12,16) and [16,20) alone: 1 -> 12/20
    run = four_core_run([timed_job("a", 0.0, 0.0, 10), timed_job("b", 0.0, 10.0, 10)])
    got = speedups(run, {"a": 0.0, "b": 0.0})
    assert got.tolist() == pytest.approx([2.4, 0.6])
    row = summarize(run, {"a": 0.0, "b": 0.0})
    assert row["min_speedup"] == pytest.approx(0.6)
    assert row["mean_speedup"] == pytest.approx(1.5)
    assert row["p_mean_speedup"] == pytest.approx(2.0 / (1 / 2.4 + 1 / 0.6))



def test_a_loss_that_creeps_up_near_convergence_counts_as_no_progress_in_a_speedup() -> None:
    from slaq_mpi.report.fairness import speedups

    # "a" runs alone on the 4 cores (1 s iterations) while three jobs wait: its equal share is
    # 1 core (4 s iterations). In its last epoch its loss creeps up by a hair, where an equal
    # share would have made one more, tiny, step down: that epoch's ratio was about -10**4.
    loss = np.concatenate((np.arange(16.0, 4.0, -1.0), [5.0 - 1e-6], [5.02] * 3))
    job = dataclasses.replace(timed_job("a", 0.0, 0.0, 16), loss=loss)
    waiting = [timed_job(f"w{i}", 0.0, 0.0, 0, end=math.nan) for i in range(3)]
    run = dataclasses.replace(four_core_run([job]), jobs={j.name: j for j in [job, *waiting]},
                              job_names=["a", "w0", "w1", "w2"],
                              alloc=np.zeros((4, 4), dtype=np.int32), stopped=16.0)
    got = float(speedups(run, {"a": 0.0})[0])
    # epochs [0,4), [4,8), [8,12): 4 iterations against 1 each; [12,16): 0
    assert 2.0 <= got <= 4.0, got


def test_speedup_of_an_unfinished_job_ends_when_the_run_stopped_observing() -> None:
    # "open" runs 1 s iterations where an equal share (2 cores, "idle" waits) takes 2 s; the
    # run stopped observing at 10 s, in the epoch that began at 8 s (planned to end at 12 s)
    from slaq_mpi.report.fairness import speedups

    open_ = timed_job("open", 0.0, 0.0, 10, end=math.nan)
    idle = timed_job("idle", 0.0, 0.0, 0, end=math.nan)
    run = dataclasses.replace(four_core_run([timed_job("a", 0.0, 0.0, 10)]),
                              jobs={"open": open_, "idle": idle}, job_names=["open", "idle"],
                              alloc=np.zeros((3, 2), dtype=np.int32), stopped=10.0)
    # epochs [0,4) 0.3/0.1, [4,8) 0.4/0.2, [8,10) 0.2/0.1 -> (4*3 + 4*2 + 2*2) / 10
    assert speedups(run, {"open": 0.0, "idle": 0.0})[0] == pytest.approx(2.4)


def test_a_job_that_never_ran_while_active_has_speedup_zero() -> None:
    # fifo on 4 cores: "a" runs while "starved" waits to the end, never iterating; "later"
    # arrives after the run stopped observing (never active: no speedup at all)
    from slaq_mpi.report.fairness import speedups

    starved = timed_job("starved", 0.0, 0.0, 0, end=math.nan)
    later = timed_job("later", 50.0, 50.0, 0, end=math.nan)
    run = dataclasses.replace(four_core_run([timed_job("a", 0.0, 0.0, 10)]),
                              jobs={"a": four_core_run([timed_job("a", 0.0, 0.0, 10)]).jobs["a"],
                                    "starved": starved, "later": later},
                              job_names=["a", "starved", "later"],
                              alloc=np.zeros((3, 3), dtype=np.int32), stopped=10.0)
    got = speedups(run, {"a": 0.0, "starved": 0.0, "later": 0.0})
    assert got[1] == 0.0 and math.isnan(got[2]), got
    row = summarize(run, {"a": 0.0, "starved": 0.0, "later": 0.0})
    assert row["min_speedup"] == 0.0 and row["p_mean_speedup"] == 0.0, row

def test_power_mean() -> None:
    from slaq_mpi.report.fairness import power_mean

    v = np.array([1.0, 4.0, np.nan])
    assert power_mean(v, -1.0) == pytest.approx(1.6)
    assert power_mean(v, 0.0) == pytest.approx(2.0)
    assert power_mean(v, 1.0) == pytest.approx(2.5)
    assert power_mean(np.array([0.0, 3.0]), -1.0) == 0.0
    assert math.isnan(power_mean(np.array([np.nan])))


def test_a_converged_job_kept_active_lowers_the_average_but_not_the_job_seconds() -> None:
    """The average over active jobs falls when a job at normalized loss 0 stays active longer;
    the integrated normalized loss (job-seconds) does not, and the active count shows why."""
    early = job("b", 0.0, [4.0, 0.0], [0.5, 1.0], end=2.0)
    late = job("b", 0.0, [4.0, 0.0], [0.5, 1.0], end=8.0)
    short, long_ = run_of([A, early]), run_of([A, late])
    stars = {"a": 0.0, "b": 0.0}
    window = (0.0, 8.0)
    assert average_normalized_loss(long_, stars, window=window) < \
        0.5 * average_normalized_loss(short, stars, window=window)
    # a: 1.0 for 2 s, 0.5 for 1 s, 0.1 for 1 s; b: 1.0 for 1 s, then 0
    for run in (short, long_):
        assert normalized_loss_job_seconds(run, stars, window=window) == pytest.approx(3.6)
    assert mean_active_jobs(long_, stars, window=window) > mean_active_jobs(short, stars, window=window)
    rows, _ = summarize_runs({"short": short, "long": long_}, stars, window=window)
    assert rows["long"]["normalized_loss_job_s"] == pytest.approx(rows["short"]["normalized_loss_job_s"])


def test_a_run_cut_short_is_judged_on_what_it_observed() -> None:
    # epochs at 0..8 s of 2 s: the run stopped observing at 10 s (--max-epochs, a time limit or
    # STOP). "c" had not arrived by then: it is not part of this run. "b" is unfinished: active
    # until the cut, not only until its last iteration.
    a = job("a", 0.0, [4.0, 2.0, 1.0], [2.0, 4.0, 6.0], end=6.0, l_star=0.0)
    b = job("b", 0.0, [8.0, 4.0], [3.0, 7.0], l_star=0.0)
    c = job("c", 50.0, [], [], l_star=0.0)
    run = run_of([a, b, c], epoch_time=[0.0, 2.0, 4.0, 6.0, 8.0],
                 alloc=[[1, 1, 0]] * 5)
    row = summarize(run, common_l_star([run]))
    assert row["makespan"] == pytest.approx(10.0)
    assert row["jobs"] == 2.0
    assert row["mean_active_jobs"] == pytest.approx((6.0 * 2 + 4.0 * 1) / 10.0)
    # the average over active jobs: a is 1 until its 2nd loss at 4 s, then .5 to its end at 6 s;
    # b is 1 until 7 s, then .5 until the cut
    grid = np.arange(0.0, 10.0, 0.5)
    na = np.where(grid < 4, 1.0, 0.5)
    nb = np.where(grid < 7, 1.0, 0.5)
    want = np.mean(np.where(grid < 6, (na + nb) / 2, nb))
    assert row["avg_normalized_loss"] == pytest.approx(want)
    rows, window = summarize_runs({"x": run, "y": run})
    assert window == pytest.approx((0.0, 10.0))
    assert rows["x"]["jobs"] == 2.0


def test_a_last_epoch_cut_short_by_an_arrival_ends_the_observation_there() -> None:
    # epochs at 0, 2, 4 of 2 s; "b" arrives at 5, which cut the last epoch to [4, 5): the run
    # stopped at 5 s, so b (never admitted) is not part of it and the makespan is 5 s
    a = job("a", 0.0, [4.0, 2.0, 1.0], [1.0, 3.0, 4.5], l_star=0.0)
    b = job("b", 5.0, [], [], l_star=0.0)
    run = run_of([a, b], epoch_time=[0.0, 2.0, 4.0], alloc=[[1, 0]] * 3)
    assert observed_end(run) == pytest.approx(5.0)
    row = summarize(run, common_l_star([run]))
    assert row["jobs"] == 1.0 and row["makespan"] == pytest.approx(5.0)


def test_a_finished_run_keeps_its_last_job_end_as_makespan() -> None:
    a = job("a", 0.0, [4.0, 2.0], [2.0, 5.0], end=5.0, l_star=0.0)
    run = run_of([a], epoch_time=[0.0, 2.0, 4.0], alloc=[[1]] * 3)  # last epoch ends at 6 s
    assert makespan(run) == pytest.approx(5.0)


def test_a_run_stopped_before_its_first_epoch_still_summarizes() -> None:
    # a live run stopped while waiting for its first arrival: no epochs, no iterations
    run = run_of([job("a", 5.0, [], [], l_star=0.0), job("b", 9.0, [], [], l_star=0.0)])
    row = summarize(run, common_l_star([run]))
    assert row["makespan"] == pytest.approx(4.0)
    assert row["jobs"] == 2.0

