"""One validator for the keyed mappings of the experiment YAML.

A :class:`Schema` declares the keys a mapping allows, how each value is checked and what it is
when left out. :meth:`Schema.parse` refuses anything else with a one-line
:class:`~slaq_mpi.errors.ConfigError` naming the full key path, the bad value and what is
allowed. Rules between keys (one key needs another, two exclude each other) stay with the
section that has them. Imports nothing of slaq but its errors and value checks, so the policies
may use it without loading the config parser.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from slaq_mpi.config.values import integer, number
from slaq_mpi.errors import NO_VALUE, ConfigError

__all__ = [
    "LEFT_OUT", "MAPPING", "Check", "Key", "Schema", "as_given", "choice", "flag", "integers",
    "key_path", "keyed", "numbers", "section",
]

Check = Callable[[Any, str], Any]
"""A value check: ``(value, key path)`` to the parsed value, or a :class:`ConfigError`."""

LEFT_OUT: Any = object()
"""The default of a key that is absent from the parsed mapping when the YAML leaves it out."""

MAPPING = "must be a mapping of key: value"


def key_path(where: str, key: object) -> str:
    """The full path of ``key`` inside the mapping at ``where`` (``""``: the top level)."""
    return f"{where}.{key}" if where else str(key)


def keyed(raw: Any, where: str, allowed: Collection[str], shape: str = MAPPING) -> Mapping[Any, Any]:
    """``raw`` if it is a mapping whose keys are all in ``allowed``.

    Raises:
        ConfigError: ``shape`` when it is not a mapping (naming ``where``, ``config`` at the
            top level); for the first unknown key, its path and the allowed keys.
    """
    if not isinstance(raw, Mapping):
        raise ConfigError(where or "config", raw, shape)
    for key in raw:
        if key not in allowed:
            shown = ", ".join(sorted(allowed)) or "none"
            raise ConfigError(key_path(where, key), NO_VALUE, f"unknown key; allowed keys: {shown}")
    return raw


def as_given(val: Any, where: str) -> Any:
    """The value unchecked (the section's own code checks it)."""
    return val


@dataclass(frozen=True)
class Key:
    """One allowed key of a :class:`Schema`.

    Attributes:
        check: parses the value given (see :data:`Check`).
        default: the value when the key is left out (:data:`LEFT_OUT`: absent from the result).
        nullable: a null value counts as the key left out (else the check sees ``None``).
        required: the error text when the key is left out (None: the key is optional).
    """

    check: Check = as_given
    default: Any = None
    nullable: bool = False
    required: str | None = None


@dataclass(frozen=True)
class Schema:
    """The keys a mapping allows, checked in the order declared.

    Attributes:
        keys: each allowed key and its :class:`Key`.
        shape: the error text when the value is not a mapping.
    """

    keys: Mapping[str, Key]
    shape: str = MAPPING

    def parse(self, raw: Any, where: str) -> dict[str, Any]:
        """Every declared key of the mapping ``raw`` at ``where``, checked or defaulted.

        Raises:
            ConfigError: not a mapping, an unknown key, a required key left out (a null one
                shown as ``None``), or the first value its check refuses.
        """
        given = keyed(raw, where, self.keys, self.shape)
        out: dict[str, Any] = {}
        for name, key in self.keys.items():
            path = key_path(where, name)
            if name in given and not (key.nullable and given[name] is None):
                out[name] = key.check(given[name], path)
            elif key.required is not None:
                raise ConfigError(path, None if name in given else NO_VALUE, key.required)
            elif key.default is not LEFT_OUT:
                out[name] = key.default
        return out


# --- checks --------------------------------------------------------------------------------

def integers(lo: int, hi: int | None = None) -> Check:
    """An integer in ``[lo, hi]`` (``hi`` None: no bound)."""
    return lambda val, where: integer(val, where, lo, hi)


def numbers(lo: float, open_lo: bool = False, hi: float = math.inf) -> Check:
    """A finite number ``>= lo`` (``> lo`` with ``open_lo``) and ``<= hi``, as a float."""
    return lambda val, where: number(val, where, lo, open_lo, hi)


def choice(options: Collection[str]) -> Check:
    """One of ``options`` (strings only, so a list or mapping given is refused, not looked up)."""
    def check(val: Any, where: str) -> str:
        if not isinstance(val, str) or val not in options:
            raise ConfigError(where, val, f"allowed: {', '.join(options)}")
        return val
    return check


def flag(val: Any, where: str) -> bool:
    """``true`` or ``false``."""
    if not isinstance(val, bool):
        raise ConfigError(where, val, "must be true or false")
    return val


def section(val: Any, where: str) -> Mapping[Any, Any]:
    """A mapping whose keys the section checks itself (declare it ``nullable``, default ``{}``)."""
    if not isinstance(val, Mapping):
        raise ConfigError(where, val, f"{MAPPING} (or leave the key out)")
    return val
