"""Mutations of every shipped config (configs/*.yaml): `slaq validate` accepts the result or
refuses it with one line, never a traceback.

Each mutation takes one key, at any depth, and deletes it, writes it twice (a YAML duplicate
key), or sets it to null, a list, a mapping, a huge or negative number, or an empty or very
long string. The config is written back as flow-style YAML (JSON-like text, which can hold a
key twice) and validated in-process through :func:`slaq_mpi.cli.main`.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slaq_mpi import cli

pytestmark = pytest.mark.slow  # about 0.1 s per example

CONFIGS = sorted((Path(__file__).resolve().parents[1] / "configs").glob("*.yaml"))


class Pairs(list[Any]):
    """A YAML mapping as its (key, value) pairs, so that a key can be written twice."""


class Verbatim(str):
    """YAML text written as it is (a number too long for Python's int to str conversion)."""


def pairs(node: Any) -> Any:
    """``node`` with every mapping turned into :class:`Pairs`."""
    if isinstance(node, dict):
        return Pairs((k, pairs(v)) for k, v in node.items())
    if isinstance(node, list):
        return [pairs(v) for v in node]
    return node


def key_paths(node: Any, at: tuple[int, ...] = ()) -> Iterator[tuple[int, ...]]:
    """The path of every key in ``node``: list indices and pair indices, the last one a pair's."""
    if isinstance(node, Pairs):
        for i, (_, value) in enumerate(node):
            yield (*at, i)
            yield from key_paths(value, (*at, i))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from key_paths(value, (*at, i))


def _child(node: Any, step: int) -> Any:
    return node[step][1] if isinstance(node, Pairs) else node[step]


def mutated(tree: Any, path: tuple[int, ...], how: str, value: Any = None) -> Any:
    """A copy of ``tree`` with the key at ``path`` deleted, duplicated or set to ``value``."""
    if len(path) > 1:
        copy = Pairs(tree) if isinstance(tree, Pairs) else list(tree)
        inner = mutated(_child(tree, path[0]), path[1:], how, value)
        copy[path[0]] = (tree[path[0]][0], inner) if isinstance(tree, Pairs) else inner
        return copy
    out = Pairs(tree)
    i = path[0]
    if how == "delete":
        del out[i]
    elif how == "duplicate":
        out.insert(i + 1, out[i])
    else:
        out[i] = (out[i][0], pairs(value))
    return out


def flow_yaml(node: Any) -> str:
    """``node`` as one line of flow-style YAML (a :class:`Pairs` key given twice stays twice)."""
    if isinstance(node, Pairs):
        return "{" + ", ".join(f"{flow_yaml(k)}: {flow_yaml(v)}" for k, v in node) + "}"
    if isinstance(node, list):
        return "[" + ", ".join(flow_yaml(v) for v in node) + "]"
    if isinstance(node, Verbatim):
        return str(node)
    if isinstance(node, float) and not math.isfinite(node):
        return ".nan" if math.isnan(node) else ".inf" if node > 0 else "-.inf"
    if node is None or isinstance(node, bool | int | float | str):
        return json.dumps(node)
    raise TypeError(node)


HUGE_OR_NEGATIVE = [10**400, 2**64, 10**20, 1e308, math.inf, -math.inf, math.nan, -1, -0.5,
                    -(10**20), -1e-300, Verbatim("9" * 5000)]
VALUES = st.one_of(
    st.none(),
    st.lists(st.one_of(st.integers(-2, 3), st.sampled_from(["", "slaq", "x"])), max_size=3),
    st.dictionaries(st.sampled_from(["a", "name", "path", "value", "1"]), st.integers(-1, 3),
                    max_size=2),
    st.sampled_from(HUGE_OR_NEGATIVE),
    st.sampled_from(["", "x" * 5000, "/" * 5000, "a" * 300 + ".h5"]),
)


TREES = {path.name: pairs(yaml.safe_load(path.read_text())) for path in CONFIGS}
KEYS = {name: list(key_paths(tree)) for name, tree in TREES.items()}


@st.composite
def mutations(draw: st.DrawFn) -> tuple[str, str]:
    """A shipped config's name and one mutation of it as YAML text."""
    name = draw(st.sampled_from(sorted(TREES)))
    tree = TREES[name]
    where = draw(st.sampled_from(KEYS[name]))
    how = draw(st.sampled_from(["delete", "duplicate", "set"]))
    value = draw(VALUES) if how == "set" else None
    return name, flow_yaml(mutated(tree, where, how, value)) + "\n"


def validate(text: str) -> tuple[int, str, list[str]]:
    """``slaq validate`` of ``text`` in a fresh directory: status, stderr and any warnings."""
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cfg = Path(tmp) / "c.yaml"
        cfg.write_text(text)
        err, here = io.StringIO(), os.getcwd()
        os.chdir(tmp)  # the configs' relative output_dir lands here
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
                status = cli.main(["validate", str(cfg)])
        finally:
            os.chdir(here)
    return status, err.getvalue(), [str(w.message) for w in caught]


def check_outcome(text: str) -> None:
    status, err, caught = validate(text)
    lines = [line for line in err.splitlines() if line.strip()]
    assert not caught, caught
    assert status in (0, 2), (status, err)
    if status == 2:
        assert len(lines) == 1 and lines[0].startswith("slaq: error: "), err
    else:
        assert not lines, err


@pytest.mark.parametrize("name", sorted(TREES))
def test_every_shipped_config_validates_as_written_in_flow_style(name: str) -> None:
    assert validate(flow_yaml(TREES[name]) + "\n") == (0, "", [])


@settings(max_examples=150, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(mutations())
def test_a_mutated_shipped_config_is_accepted_or_refused_in_one_line(case: tuple[str, str]) -> None:
    check_outcome(case[1])


@pytest.mark.parametrize("generator", [["classification"], {"name": "blobs"}, []])
def test_a_generator_given_as_a_list_or_mapping_is_refused_in_one_line(generator: Any) -> None:
    raw = {"name": "t", "jobs": [{"name": "a", "algorithm": "logreg", "dataset": {
        "generator": generator, "rows": 100, "features": 3}}]}
    status, err, _ = validate(yaml.safe_dump(raw))
    assert status == 2
    assert err == (f"slaq: error: jobs[0].dataset.generator: {generator!r} is not allowed; allowed: "
                   "blobs, classification, documents, regression (or give a path)\n")


def experiment(rows: Any = 100, **top: Any) -> str:
    """A one-job experiment as flow-style YAML, with its top-level keys ``top``."""
    job = {"name": "a", "algorithm": "logreg",
           "dataset": {"generator": "classification", "rows": rows, "features": 3}}
    return flow_yaml(pairs({"name": "t", "jobs": [job], **top})) + "\n"


@pytest.mark.parametrize(("text", "line"), [
    (experiment(seed=Verbatim("9" * 5000)), "is not allowed; a value in its YAML cannot be read "
     "(Exceeds the limit (4300 digits) for integer string conversion: value has 5000 digits)"),
    (experiment(policy={"name": "goodput", "params": {"p": 10**400}}),
     f"policy 'goodput' parameter p is {10**400}; it must be a finite number"),
    (experiment(rows=2**64), f"jobs[0].dataset.rows: {2**64} is not allowed; must be an integer in "
     f"[1, {2**63 - 1}]"),
    (experiment(epoch_seconds=1e308, slurm={"time": "UNLIMITED"}),
     "slurm.signal_lead: its default, three epochs (inf s), is above the 65535 s Slurm allows"),
])
def test_numbers_beyond_any_float_are_refused_in_one_line(text: str, line: str) -> None:
    """Numbers the mutations reach, in keys the shipped configs leave out."""
    status, err, caught = validate(text)
    assert (status, caught) == (2, []) and err.count("\n") == 1, err
    assert line in err, err
