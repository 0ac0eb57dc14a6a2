"""Constructor checks of policy parameters: each names the one parameter at fault."""

from __future__ import annotations

from typing import Any


def require(name: str, value: Any, ok: bool, allowed: str) -> None:
    """Raise ``ValueError("NAME must be ALLOWED (got VALUE)")`` unless ``ok``.

    ``get_policy`` turns it into a :class:`~slaq_mpi.policies.PolicyError`, which the
    experiment YAML shows as one line naming the policy.
    """
    if not ok:
        raise ValueError(f"{name} must be {allowed} (got {value!r})")
