"""Constructor checks of policy parameters: each names the one parameter at fault."""

from __future__ import annotations

from typing import Any

from slaq_mpi.brain.memo import CurveMemo

MAX_WINDOW = 1000  # losses fitted per job at most (the fits cost jobs x window each decision)


def require(name: str, value: Any, ok: bool, allowed: str) -> None:
    """Raise ``ValueError("NAME must be ALLOWED (got VALUE)")`` unless ``ok``.

    ``get_policy`` turns it into a :class:`~slaq_mpi.policies.PolicyError`, which the
    experiment YAML shows as one line naming the policy.
    """
    if not ok:
        raise ValueError(f"{name} must be {allowed} (got {value!r})")


def require_window(window: int) -> None:
    """Check the loss-curve fit's ``window`` (losses fitted per job)."""
    require("window", window, 3 <= window <= MAX_WINDOW, f"an integer in [3, {MAX_WINDOW}]")


def require_decay(decay: float) -> None:
    """Check the loss-curve fit's ``decay`` (e-folding length of its weights, iterations)."""
    require("decay", decay, decay > 0, "> 0")  # `not nan > 0`: NaN is refused too


def curve_memo(window: int, decay: float) -> CurveMemo:
    """The loss-curve fits of a policy whose ``window`` and ``decay`` pass the checks above."""
    require_window(window)
    require_decay(decay)
    return CurveMemo(int(window), float(decay))
