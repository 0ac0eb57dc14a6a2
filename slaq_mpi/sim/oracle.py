"""``oracle``: a simulation-only policy that knows every job's true loss curve and speed.

It runs SLAQ's greedy (every job starts with one core, then each further core goes to the job
whose true normalized loss drops the most with it over the next epoch) on the TRUE normalized
loss ``(L - L*) / (L0 - L*)`` and the TRUE seconds per iteration, instead of predictions. It is
a clairvoyant greedy, not a bound: it shows how much of a greedy's gain ``slaq``'s predictions
capture, and a policy can beat it (``sim/bound.py`` holds a true lower bound on job-seconds).

With at least as many cores as jobs, the greedy's allocation is kept only if its true gain
net of the moves it makes beats that of the allocation held now, as ``slaq`` does
(:func:`slaq_mpi.brain.moves.settle_moves`, with the true gains).

Gains are counted on the loss of the model being trained: after ``n`` reports the model's loss
is ``curve[n]``, which the job reports one iteration later. Counting instead on the reported
loss, a new job's first iteration gains nothing (it only measures ``L0``), its gains stop being
concave, and a greedy then keeps every new job on one core.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from slaq_mpi.brain.moves import settle_moves
from slaq_mpi.policies.snapshot import ClusterSnapshot, JobSnapshot
from slaq_mpi.sim.workload import SimJob

__all__ = ["OraclePolicy"]


class OraclePolicy:
    """Greedy allocation on true future curves (simulator only: needs :meth:`bind_truth`)."""

    name = "oracle"

    def __init__(self) -> None:
        self._truth: dict[str, tuple[np.ndarray, SimJob]] = {}
        self._iters: dict[tuple[str, int, float], np.ndarray] = {}
        # per (job, max_cores, span), the last gains and the ``done`` they are for: a job reports
        # about once an epoch and decisions come more often, so many see the same ``done``
        self._last: dict[tuple[str, int, float], tuple[int, np.ndarray]] = {}
        self._margs: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    def bind_truth(self, jobs: Mapping[str, SimJob]) -> None:
        """Give the policy the simulated jobs (their true curves and scaling models)."""
        self._truth = {name: (job.normalized_curve(), job) for name, job in jobs.items()}
        self._iters = {}
        self._last = {}
        self._margs = {}

    def _gains(self, job_id: str, done: int, max_cores: int, epoch: float) -> np.ndarray:
        """True normalized loss reduction over the next epoch with 0..n cores.

        n is at most ``max_cores`` and never past the core count that minimizes the job's
        seconds per iteration (more cores only slow it down). The array returned is shared:
        callers do not change it.
        """
        key = (job_id, max_cores, epoch)
        last = self._last.get(key)
        if last is not None and last[0] == done:
            return last[1]
        gains = self._new_gains(job_id, done, max_cores, epoch)
        self._last[key] = (done, gains)
        return gains

    def _new_gains(self, job_id: str, done: int, max_cores: int, epoch: float) -> np.ndarray:
        """:meth:`_gains`, computed."""
        if job_id not in self._truth:
            raise KeyError(f"oracle: no truth for job {job_id!r}; it runs only in the simulator")
        curve, job = self._truth[job_id]
        key = (job_id, max_cores, epoch)
        iters = self._iters.get(key)
        if iters is None:
            sc = job.scaling
            best = sc.work * math.log(2) / sc.comm if sc.comm > 0 else math.inf
            n = int(max(1, min(max_cores, best + 2)))
            iters = epoch / sc.seconds_array(np.arange(1, n + 1))
            self._iters[key] = iters
        last = len(curve) - 1
        here = min(done, last)
        stop = min(last, int(math.ceil(here + iters[-1])) + 1)
        seg = curve[here : stop + 1]
        pos = np.minimum(iters, stop - here)
        return np.concatenate(([0.0], seg[0] - np.interp(pos, np.arange(len(seg)), seg)))

    def _marginals(self, job_id: str, gains: np.ndarray) -> np.ndarray:
        """The positive marginal gains of one more core, made non-increasing, of ``gains``
        (from :meth:`_gains`, at least 2 cores; kept while the job's gains are the same)."""
        last = self._margs.get(job_id)
        if last is not None and last[0] is gains:
            return last[1]
        m = np.minimum.accumulate(np.diff(gains[1:]))
        m = m[m > 0]
        self._margs[job_id] = (gains, m)
        return m

    def allocate(self, snapshot: ClusterSnapshot) -> dict[str, int]:
        """Cores per job id: one each, then the largest true marginal reductions.

        Each job's marginal gains are made non-increasing (running minimum), so the greedy
        choice of one core at a time equals taking the largest marginals overall.
        """
        cap = snapshot.capacity
        jobs = list(snapshot.jobs)
        if not jobs or cap <= 0:
            return {}
        gains = {
            j.job_id: self._gains(j.job_id, len(j.losses), max(1, min(j.max_cores, cap)),
                                  snapshot.epoch_seconds)
            for j in jobs
        }
        if len(jobs) > cap:
            jobs.sort(key=lambda j: (-gains[j.job_id][1], j.arrival, j.job_id))
            jobs = jobs[:cap]
        alloc = {j.job_id: 1 for j in jobs}
        left = cap - len(jobs)
        margs, owner = [], []
        for i, j in enumerate(jobs):
            g = gains[j.job_id]
            if len(g) > 2:
                margs.append(self._marginals(j.job_id, g))
                owner.append(i)
        if left > 0 and margs:
            for i, more in zip(owner, _largest_counts(margs, left), strict=True):
                alloc[jobs[i].job_id] += more
        if len(jobs) < len(snapshot.jobs):
            return alloc
        return self._settle(snapshot, jobs, alloc, gains)

    def _settle(self, snapshot: ClusterSnapshot, jobs: list[JobSnapshot],
                alloc: dict[str, int], gains: dict[str, np.ndarray]) -> dict[str, int]:
        """``alloc``, or the allocation held now if the moves it makes cost more than they
        truly gain over the next epoch (``gains``: each job's over a whole epoch)."""
        cap = snapshot.capacity
        caps = np.array([max(1, min(j.max_cores, cap)) for j in jobs], dtype=np.int64)
        epoch = float(snapshot.epoch_seconds)

        def value(cores: np.ndarray, seconds: np.ndarray) -> np.ndarray:
            out = np.zeros(len(jobs))
            for i in np.flatnonzero(cores > 0).tolist():
                j = jobs[i]
                g = gains[j.job_id] if seconds[i] == epoch else self._gains(
                    j.job_id, len(j.losses), int(caps[i]), float(seconds[i]))
                out[i] = g[min(int(cores[i]), len(g) - 1)]
            return out

        settled = settle_moves(
            np.array([j.cores for j in jobs], dtype=np.int64),
            np.array([alloc[j.job_id] for j in jobs], dtype=np.int64), caps, cap,
            np.array([bool(j.losses) for j in jobs], dtype=bool), float(snapshot.epoch_seconds),
            float(snapshot.move_seconds), value)
        return {j.job_id: int(c) for j, c in zip(jobs, settled.tolist(), strict=True)}


def _largest_counts(margs: list[np.ndarray], k: int) -> list[int]:
    """Per array of ``margs``, how many of the ``k`` largest values of them all are its (all of
    them if there are at most ``k``), ties at the ``k``-th largest as ``np.argpartition`` of the
    arrays laid end to end chooses them."""
    flat = np.concatenate(margs)
    if len(flat) <= k:
        return [len(m) for m in margs]
    kth = np.partition(flat, len(flat) - k)[len(flat) - k]
    counts = [int(np.count_nonzero(m >= kth)) for m in margs]
    if sum(counts) == k:  # no value equal to the k-th largest is left out: no tie to break
        return counts
    who = np.repeat(np.arange(len(margs)), [len(m) for m in margs])
    top = np.argpartition(-flat, k - 1)[:k]
    return np.bincount(who[top], minlength=len(margs)).tolist()
