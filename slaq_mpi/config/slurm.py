"""The ``slurm:`` section of the experiment YAML, validated into :class:`SlurmSettings`.

The experiment parser reads it once, into ``ExperimentSpec.slurm`` (None when the YAML has no
``slurm:`` section); :func:`settings_for` gives a spec's settings, Slurm's defaults for a spec
without one. Errors are :class:`~slaq_mpi.errors.ConfigError` naming the key, the bad value and
what is allowed; ``docs/slurm.md`` documents every key. :mod:`slaq_mpi.slurm` renders the batch
script from them and submits it.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from slaq_mpi._text import seconds
from slaq_mpi.config.schema import LEFT_OUT, Key, Schema, choice, flag, integers
from slaq_mpi.config.values import MAX_RANKS
from slaq_mpi.errors import NO_VALUE, ConfigError

if TYPE_CHECKING:
    from slaq_mpi.config.experiment import ExperimentSpec

__all__ = ["LAUNCHERS", "SlurmSettings", "parse_time", "settings_for", "settings_from_mapping"]

LAUNCHERS = ("srun", "mpiexec")
"""How the batch script starts the MPI ranks."""

_DEFAULT_LEAD = 120
_MAX_LEAD = 65535  # Slurm keeps the --signal lead time in 16 bits
_WORD = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]*$")
_WORD_LIST = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]*(,[A-Za-z0-9_][A-Za-z0-9_.+-]*)*$")
_PLUGIN = re.compile(r"^[a-z0-9_]+$")
_TIME_FORMS = "minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS or UNLIMITED"

# #SBATCH options that the ``slurm:`` section sets through its own keys, with the key to use.
_MANAGED_OPTIONS = {
    "--nodes": "nodes", "-N": "nodes",
    "--ntasks": "ntasks", "-n": "ntasks",
    "--time": "time", "-t": "time",
    "--partition": "partition", "-p": "partition",
    "--account": "account", "-A": "account",
    "--qos": "qos", "-q": "qos",
    "--job-name": "job_name", "-J": "job_name",
    "--output": "output", "-o": "output",
    "--error": "error", "-e": "error",
    "--chdir": "chdir", "-D": "chdir",
    "--signal": "signal_lead",
    "--requeue": "requeue", "--no-requeue": "requeue",
    "--no-kill": "no_kill", "-k": "no_kill",
    "--open-mode": "(always append, so the log keeps every restart)",
}


@dataclass(frozen=True)
class SlurmSettings:
    """One allocation: what the ``slurm:`` section of the YAML asks for, with defaults filled in.

    ``ntasks`` is the number of MPI ranks (one per core; rank 0 coordinates, the rest train).
    ``signal_lead`` is how many seconds before the time limit Slurm sends SIGUSR1 to the batch
    shell; ``no_kill`` (the default on more than one node) keeps the allocation when one of its
    nodes fails, so the run goes on on the others; ``max_restarts`` caps how often the job
    requeues itself after a graceful stop.
    """

    job_name: str = "slaq"
    nodes: int = 1
    ntasks: int = 8
    time: str = "01:00:00"
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    launcher: str = "srun"
    mpi: str = ""  # "": chosen in the job: pmix for Open MPI if srun offers it, else pmi2
    mpiexec: str = "mpiexec"
    launcher_args: tuple[str, ...] = ()
    signal_lead: int = _DEFAULT_LEAD
    requeue: bool = True
    no_kill: bool = False  # --no-kill: losing a node leaves the allocation to the others
    max_restarts: int = 10
    output: str = "slaq-%x-%j.out"
    error: str | None = None
    chdir: str | None = None
    python: str | None = None
    setup: tuple[str, ...] = ()
    extra: tuple[str, ...] = ()


def settings_for(spec: ExperimentSpec) -> SlurmSettings:
    """The settings of ``spec``: its ``slurm:`` section, or without one Slurm's defaults for its
    ``ranks``, ``epoch_seconds`` and ``name`` (which may not fit it: ``slaq submit`` refuses).

    Raises:
        ConfigError: the spec has no ``slurm:`` section and the defaults do not fit it.
    """
    if spec.slurm is not None:
        return spec.slurm
    return settings_from_mapping(None, ranks=spec.ranks, epoch_seconds=spec.epoch_seconds,
                                 name=spec.name)


def settings_from_mapping(raw: Mapping[str, Any] | None, *, ranks: int = 8,
                          epoch_seconds: float = 2.0, name: str = "slaq") -> SlurmSettings:
    """Validate a ``slurm:`` mapping (None: every default); ``ranks`` and ``epoch_seconds`` come
    from the experiment, and ``name`` is the default job name.

    Raises:
        ConfigError: naming ``slurm.KEY``, the value and what is allowed.
    """
    raw = {} if raw is None else raw
    given = _SCHEMA.parse(raw, "slurm")
    out = {key: val for key, val in given.items() if key not in _CHECKED_TOGETHER}
    out["job_name"] = given.get("job_name", name)
    out["ntasks"] = _ntasks(given, ranks)
    if out["ntasks"] < out["nodes"]:
        raise ConfigError("slurm.nodes", out["nodes"], f"must be at most ntasks ({out['ntasks']})")
    out.update(_launch(given))
    out["no_kill"] = given.get("no_kill", out["nodes"] > 1)
    limit = parse_time(given["time"])
    if "signal_lead" in given:
        out["signal_lead"] = _lead(given["signal_lead"], limit, epoch_seconds)
    else:
        out["signal_lead"] = _default_lead(raw.get("time", SlurmSettings.time), limit, epoch_seconds)
    return SlurmSettings(**out)


def parse_time(value: str) -> float:
    """Seconds in a Slurm ``--time`` value (``math.inf`` for UNLIMITED); ValueError if malformed."""
    text = value.strip()
    if text.upper() in ("UNLIMITED", "INFINITE"):
        return math.inf
    days = 0
    if "-" in text:
        day_part, text = text.split("-", 1)
        if not day_part.isdigit():
            raise ValueError(value)
        days = int(day_part)
        parts = text.split(":")
        if not 1 <= len(parts) <= 3 or not all(p.isdigit() for p in parts):
            raise ValueError(value)
        h, m, s = ([int(p) for p in parts] + [0, 0])[:3]
    else:
        parts = text.split(":")
        if not 1 <= len(parts) <= 3 or not all(p.isdigit() for p in parts):
            raise ValueError(value)
        nums = [int(p) for p in parts]
        if len(nums) == 1:
            h, m, s = 0, nums[0], 0
        elif len(nums) == 2:
            h, m, s = 0, nums[0], nums[1]
        else:
            h, m, s = nums
    return float(((days * 24 + h) * 60 + m) * 60 + s)


# --- single keys ---------------------------------------------------------------------------

def _word(val: Any, where: str) -> str:
    if not isinstance(val, str) or not _WORD.fullmatch(val):
        raise ConfigError(where, val, "must be a name of letters, digits, '_', '.', '+', '-'")
    return val


def _words(val: Any, where: str) -> str:
    if not isinstance(val, str) or not _WORD_LIST.fullmatch(val):
        raise ConfigError(where, val, "must be comma-separated names of letters, digits, '_', '.', "
                          "'+', '-'")
    return val


def _path(val: Any, where: str) -> str:
    if not isinstance(val, str) or not val or any(c.isspace() for c in val):
        raise ConfigError(where, val, "must be a non-empty path without spaces or newlines")
    return os.path.expanduser(val)  # ~ is the submitter's home: Slurm and quoting would not expand it


def _time(val: Any, where: str) -> str:
    if isinstance(val, int) and not isinstance(val, bool):
        raise ConfigError(where, val, "must be a quoted string such as \"04:00:00\" or \"90\" "
                          "(YAML reads unquoted 1:30 or 1:00:00 as a base-60 number)")
    if isinstance(val, str):
        try:
            limit = parse_time(val)
        except (ValueError, OverflowError):  # malformed, or beyond any float
            limit = 0.0
        if limit > 0:
            return val.strip()
    raise ConfigError(where, val, f"must be a positive Slurm time limit: {_TIME_FORMS}")


def _control(text: str) -> bool:
    """Whether ``text`` holds a newline, NUL or other control character (a tab is fine): each
    would break the one line of the batch script it is written into."""
    return any(ord(c) < 32 and c != "\t" or c == "\x7f" for c in text)


def _lines(val: Any, where: str) -> tuple[str, ...]:
    if isinstance(val, str):
        val = val.splitlines()
    if not isinstance(val, list) or not all(isinstance(v, str) for v in val):
        raise ConfigError(where, val, "must be a list of shell lines, e.g. "
                          "['module load openmpi', 'source ~/venvs/slaq/bin/activate']")
    if any(_control(v) for v in val):
        raise ConfigError(where, val, "each item must be one line of text (no newline or "
                          "other control character)")
    return tuple(v.rstrip() for v in val if v.strip())


def _managed(option: str) -> list[str]:
    """The options with their own key that sbatch would read ``option`` as: itself, the short
    flag it starts with (``-n4``), or the long options it abbreviates (``--outp``)."""
    if option in _MANAGED_OPTIONS:
        return [option]
    if not option.startswith("--"):
        return [option[:2]] if len(option) > 2 and option[:2] in _MANAGED_OPTIONS else []
    return [o for o in _MANAGED_OPTIONS if len(option) > 2 and o.startswith(option)]


def _extra(val: Any, where: str) -> tuple[str, ...]:
    if not isinstance(val, list):
        raise ConfigError(where, val, "must be a list of sbatch options, e.g. ['--mem=8G']")
    return tuple(_extra_option(item, f"{where}[{i}]") for i, item in enumerate(val))


def _extra_option(item: Any, where: str) -> str:
    if not isinstance(item, str) or _control(item):
        raise ConfigError(where, item, "must be one sbatch option as a string, e.g. '--mem=8G'")
    text = item.strip()
    if text.startswith("#SBATCH"):
        text = text[len("#SBATCH"):].strip()
    if not text.startswith("-"):
        raise ConfigError(where, item, "must be an sbatch option starting with '-', e.g. '--mem=8G'")
    option = re.split(r"[=\s]", text, maxsplit=1)[0]
    managed = _managed(option)
    if managed:
        key = _MANAGED_OPTIONS[managed[0]]
        hint = f"set it with slurm.{key}" if not key.startswith("(") else f"slaq sets it {key}"
        if option.startswith("--") and option not in managed:  # --outp: sbatch reads it as --output
            hint = (f"an abbreviation of {' or '.join(managed)} (sbatch takes unique prefixes "
                    f"of long options): {hint}")
        raise ConfigError(where, item, hint)
    return text


_SCHEMA = Schema({  # checked in this order; the keys left as given are checked together below
    "job_name": Key(_word, default=LEFT_OUT),
    "nodes": Key(integers(1), default=1),
    "ntasks": Key(integers(2, MAX_RANKS), default=LEFT_OUT),
    "cores": Key(integers(2, MAX_RANKS), default=LEFT_OUT),
    "time": Key(_time, default=SlurmSettings.time),
    "partition": Key(_words, nullable=True),
    "account": Key(_word, nullable=True),
    "qos": Key(_word, nullable=True),
    "launcher": Key(choice(LAUNCHERS), default=SlurmSettings.launcher),
    "mpi": Key(default=LEFT_OUT),
    "mpiexec": Key(default=LEFT_OUT),
    "launcher_args": Key(default=LEFT_OUT),
    "signal_lead": Key(default=LEFT_OUT),
    "requeue": Key(flag, default=SlurmSettings.requeue),
    "no_kill": Key(flag, default=LEFT_OUT),
    "max_restarts": Key(integers(0), default=SlurmSettings.max_restarts),
    "output": Key(_path, nullable=True, default=SlurmSettings.output),
    "error": Key(_path, nullable=True),
    "chdir": Key(_path, nullable=True),
    "python": Key(_path),
    "setup": Key(_lines, default=()),
    "extra": Key(_extra, default=()),
})
_CHECKED_TOGETHER = {"ntasks", "cores", "mpi", "mpiexec", "launcher_args", "signal_lead"}


# --- keys checked with others --------------------------------------------------------------

def _ntasks(given: Mapping[str, Any], ranks: int) -> int:
    """``ntasks`` (or its other name ``cores``): at least the experiment's ranks."""
    tasks = [(k, given[k]) for k in ("ntasks", "cores") if k in given]
    if len(tasks) == 2 and tasks[0][1] != tasks[1][1]:
        raise ConfigError("slurm.cores", tasks[1][1],
                          f"cores is another name for ntasks ({tasks[0][1]}); give one of them")
    if not tasks:
        return ranks
    key, value = tasks[0]
    if value < ranks:
        raise ConfigError(f"slurm.{key}", value,
                          f"must be at least the experiment's ranks ({ranks}): one MPI rank per task")
    return int(value)


def _launch(given: Mapping[str, Any]) -> dict[str, Any]:
    """The keys that apply to one launcher only: ``mpi`` (srun), ``mpiexec``, and
    ``launcher_args`` (named for the launcher)."""
    launcher = given["launcher"]
    out: dict[str, Any] = {}
    if "mpi" in given:
        out["mpi"] = _mpi(given["mpi"], launcher)
    if "mpiexec" in given:
        if launcher != "mpiexec":
            raise ConfigError("slurm.mpiexec", given["mpiexec"], "only applies to launcher: mpiexec")
        out["mpiexec"] = _path(given["mpiexec"], "slurm.mpiexec")
    if "launcher_args" in given:
        args = given["launcher_args"]
        if not isinstance(args, list) or not all(isinstance(a, str) and a and not _control(a) for a in args):
            raise ConfigError("slurm.launcher_args", args,
                              f"must be a list of extra arguments for {launcher}, each on one line, "
                              "e.g. [--cpu-bind=cores]")
        out["launcher_args"] = tuple(args)
    return out


def _mpi(mpi: Any, launcher: str) -> str:
    if launcher != "srun":
        raise ConfigError("slurm.mpi", mpi, "only applies to launcher: srun (mpiexec finds its own "
                          "process manager)")
    if not isinstance(mpi, str) or not _PLUGIN.fullmatch(mpi):
        raise ConfigError("slurm.mpi", mpi, "must be an srun MPI plugin name, as `srun --mpi=list` "
                          "shows (pmi2, pmix, cray_shasta, ...)")
    if mpi == "none":
        raise ConfigError("slurm.mpi", mpi, "srun --mpi=none starts N separate copies of rank 0; use "
                          "pmi2, pmix (if your MPI is built for it) or launcher: mpiexec")
    return mpi


def _default_lead(time: Any, limit: float, epoch_seconds: float) -> int:
    """Three epochs (at least the 120 s default), which must fit in Slurm's range and the limit."""
    three = 3 * epoch_seconds
    if three > _MAX_LEAD:
        raise ConfigError("slurm.signal_lead", NO_VALUE,
                          f"its default, three epochs ({three:.6g} s), is above the {_MAX_LEAD} s "
                          "Slurm allows: give slurm.signal_lead (more than one epoch) or "
                          "shorten epoch_seconds")
    lead = max(_DEFAULT_LEAD, math.ceil(three))
    if lead >= limit:
        raise ConfigError("slurm.time", time,
                          f"leaves no room for the default warning {lead} s before the limit; "
                          "give a longer time or a smaller slurm.signal_lead")
    return lead


def _lead(lead: Any, limit: float, epoch_seconds: float) -> int:
    if isinstance(lead, bool) or not isinstance(lead, int) or not 1 <= lead <= _MAX_LEAD:
        raise ConfigError("slurm.signal_lead", lead, f"must be whole seconds from 1 to {_MAX_LEAD}")
    if lead <= epoch_seconds:
        raise ConfigError("slurm.signal_lead", lead, f"must exceed one epoch ({epoch_seconds:g} s): the "
                          "stop finishes the current epoch and checkpoints before the limit")
    if lead >= limit:
        raise ConfigError("slurm.signal_lead", lead, f"must be less than the time limit ({seconds(limit)} s)")
    return lead
