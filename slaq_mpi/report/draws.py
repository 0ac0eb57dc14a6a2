"""The summary of an experiment over workload draws (``slaq simulate --draws``): per policy
and metric the median and interquartile range over the draws, each policy's per-draw change
against the baseline (the first policy), and its distance to the workload's bound.

It reads a :class:`~slaq_mpi.sim.draws.DrawSet` through what it offers (``policies``,
``seeds``, ``values(policy, metric)``), so it needs nothing else of the simulator.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

__all__ = ["DRAWS_FILE", "DRAW_METRICS", "PayloadDraws", "draws_payload", "format_draws"]

#: The file `slaq simulate --draws K --out DIR` writes in DIR.
DRAWS_FILE = "draws.json"

#: The metrics the text summary shows: (key, header, format).
DRAW_METRICS: tuple[tuple[str, str, str], ...] = (
    ("avg_normalized_loss", "avg norm loss", ".4f"),
    ("normalized_loss_job_s", "loss job-s", ".1f"),
    ("mean_time_to_90", "t90 mean s", ".1f"),
    ("mean_time_to_95", "t95 mean s", ".1f"),
)

_BOUND_KEYS = ("normalized_loss_job_s", "mean_time_to_90", "mean_time_to_95")


class Draws(Protocol):
    """What the summary reads of a set of draws."""

    @property
    def policies(self) -> list[str]: ...

    @property
    def seeds(self) -> list[int]: ...

    def values(self, policy: str, metric: str) -> np.ndarray: ...


def _stats(values: np.ndarray) -> dict[str, float]:
    v = values[np.isfinite(values)]
    if not len(v):
        return {"median": math.nan, "q1": math.nan, "q3": math.nan, "mean": math.nan}
    q1, med, q3 = np.percentile(v, [25, 50, 75])
    return {"median": float(med), "q1": float(q1), "q3": float(q3), "mean": float(v.mean())}


def _change(values: np.ndarray, base: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        out = (values - base) / base * 100.0
    return np.where(np.isfinite(out) & (base != 0), out, math.nan)


def _cell(values: np.ndarray, fmt: str, sign: bool = False) -> str:
    s = _stats(values)
    if not math.isfinite(s["median"]):
        return "-"
    f = ("+" if sign else "") + fmt
    return f"{s['median']:{f}} ({s['q1']:{f}}..{s['q3']:{f}})"


def _table(headers: Sequence[str], body: list[list[str]]) -> list[str]:
    widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(headers)]
    return ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths,
                                                                                          strict=True)))
            for row in [list(headers), *body]]


def format_draws(ds: Draws) -> str:
    """The text summary: medians (IQR) per policy and metric, the bound, the per-draw changes
    against the baseline, and each policy's job-seconds above the bound."""
    seeds, base = ds.seeds, ds.policies[0]
    head = ["policy"] + [h for _, h, _ in DRAW_METRICS]
    lines = [f"{len(seeds)} workload draws (seeds {seeds[0]}-{seeds[-1]}); median (interquartile "
             "range) over the draws"]
    body = [[p] + [_cell(ds.values(p, k), f) for k, _, f in DRAW_METRICS] for p in ds.policies]
    body.append(["bound"] + [_cell(ds.values("bound", k), f) if k in _BOUND_KEYS else "-"
                             for k, _, f in DRAW_METRICS])
    lines += _table(head, body)
    lines.append("bound: job-seconds, the higher of every job alone on all the cores it may use "
                 "from its arrival and the cluster's core-seconds given to the largest loss drops "
                 "per core-second first; t90/t95, every job alone (no policy can go below it); "
                 "the oracle is a clairvoyant greedy, not an optimum")
    if len(ds.policies) > 1:
        lines.append(f"change against {base} per draw, % (negative: lower): median (IQR)")
        lines += _table(head, [[p] + [_cell(_change(ds.values(p, k), ds.values(base, k)), ".1f", True)
                                      for k, _, _ in DRAW_METRICS] for p in ds.policies[1:]])
    bound = ds.values("bound", "normalized_loss_job_s")
    lines.append("normalized-loss job-seconds above the bound per draw, %: " + ", ".join(
        f"{p} {_cell(_change(ds.values(p, 'normalized_loss_job_s'), bound), '.1f', True)}"
        for p in ds.policies))
    return "\n".join(lines)


def _num(v: float) -> float | None:
    return float(v) if math.isfinite(v) else None


def draws_payload(ds: Draws, keys: Sequence[str]) -> dict[str, Any]:
    """The JSON of ``slaq simulate --draws``: per-draw arrays (index i: ``seeds[i]``) of every
    metric of ``keys`` per policy and of the bound, per-draw changes in percent against the
    baseline and above the bound, and the median, quartiles and mean of each."""
    base = ds.policies[0]
    names = [*ds.policies, "bound"]

    def arrays(p: str) -> dict[str, list[float | None]]:
        ks = _BOUND_KEYS if p == "bound" else keys
        return {k: [_num(v) for v in ds.values(p, k)] for k in ks}

    change = {p: {k: [_num(v) for v in _change(ds.values(p, k), ds.values(base, k))]
                  for k, _, _ in DRAW_METRICS} for p in ds.policies}
    bound_js = ds.values("bound", "normalized_loss_job_s")
    above = {p: [_num(v) for v in _change(ds.values(p, "normalized_loss_job_s"), bound_js)]
             for p in ds.policies}
    summary = {p: {k: {s: _num(v) for s, v in _stats(ds.values(p, k)).items()}
                   for k, _, _ in DRAW_METRICS if p != "bound" or k in _BOUND_KEYS} for p in names}
    change_summary = {p: {k: {s: _num(v) for s, v in _stats(np.array(
        [math.nan if x is None else x for x in vals])).items()} for k, vals in ch.items()}
        for p, ch in change.items()}
    return {"seeds": list(ds.seeds), "baseline": base,
            "policies": {p: arrays(p) for p in ds.policies}, "bound": arrays("bound"),
            "change_vs_baseline_pct": change, "above_bound_job_s_pct": above,
            "summary": summary, "change_summary": change_summary}


class PayloadDraws:
    """A set of draws read back from the JSON of :func:`draws_payload` (``draws.json``)."""

    def __init__(self, payload: dict[str, Any]):
        self.payload = payload
        self.policies: list[str] = list(payload["policies"])
        if payload.get("baseline") in self.policies:  # the baseline first, as when simulated
            self.policies.remove(payload["baseline"])
            self.policies.insert(0, payload["baseline"])

    @property
    def seeds(self) -> list[int]:
        """The seed of each draw."""
        return list(self.payload["seeds"])

    def values(self, policy: str, metric: str) -> np.ndarray:
        """``metric`` of ``policy`` (or ``bound``) on each draw, NaN where there is none."""
        table = self.payload["bound"] if policy == "bound" else self.payload["policies"][policy]
        vals = table.get(metric, [None] * len(self.seeds))
        return np.array([math.nan if v is None else v for v in vals], dtype=np.float64)
