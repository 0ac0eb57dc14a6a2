"""The sbatch script of one slaq-mpi experiment, rendered from its ``slurm:`` settings.

The script has three parts: a header (the ``#SBATCH`` directives and how the job stops and
requeues), the settings of this job (site setup, the Python, the MPI launch line, the config
and run directory), and a fixed body, the same for every job, kept as package data in
``sbatch_body.sh`` beside this module: it hands the batch job over to the step supervisor
(:mod:`slaq_mpi.slurm.supervise`), which starts or resumes the run, turns Slurm's signals into
a graceful stop, and decides how the job ends (requeue after a stop).
"""

from __future__ import annotations

import shlex
from functools import cache
from importlib import resources

from slaq_mpi.slurm.settings import SlurmSettings

__all__ = ["render_sbatch"]

_HEADER = """\
#!/bin/bash
# slaq.sbatch - run one slaq-mpi experiment in one Slurm allocation.
#
# One MPI rank per task: rank 0 schedules, the others train; SLAQ moves ranks between the
# experiment's jobs every epoch. Written by `slaq submit` from the YAML's `slurm:` section
# (docs/slurm.md){how}
#
# Flow: SIGUSR1 comes {lead} s before the time limit (SIGTERM on preemption or scancel); the step
# supervisor this script execs creates RUN_DIR/STOP; rank 0 finishes the epoch, checkpoints
# every job and exits 75; then
{after}
# resumes from it. Exit 0: every job done; 1: a job failed; 2: bad input (or RUN_DIR in use);
# 3: aborted on an error, or the MPI launch failed before the run started; 75: stopped, not
# requeued; 76: ranks lost (a node failed) and the run could not go on here (resume it).
"""
_BY_HAND = """; this copy uses the defaults and can also be submitted by hand:
#
#     sbatch [--ntasks=N --time=T --partition=P --account=A] slurm/slaq.sbatch CONFIG.yaml [RUN_DIR]"""
_REQUEUES = """\
# the supervisor requeues the job (not after scancel, nor after a stop asked inside the run: a
# RUN_DIR/STOP you create, a signal to rank 0). A restart finds RUN_DIR/state.json and"""
_NO_REQUEUE = """\
# the job ends there (slurm.requeue: false, so it is not requeued): submit it again, and the
# new job finds RUN_DIR/state.json and"""


def render_sbatch(settings: SlurmSettings, config: str | None = None,
                  run_dir: str | None = None, package: str | None = None) -> str:
    """The batch script for ``settings``. ``config`` and ``run_dir`` are written into the script
    (absolute paths, as ``slaq submit`` passes them); when ``config`` is None the script takes
    CONFIG.yaml [RUN_DIR] as its arguments. ``package`` is the directory of the slaq_mpi
    package the ranks run (``slaq submit`` passes its own, so the job runs the code that checked
    it, whatever the job's working directory holds); None: the one ``slurm.python`` imports
    when the job starts. Pure: no files, no environment, no clock."""
    s = settings
    how = _BY_HAND if config is None else f" for {config}." if config.isprintable() else "."  # one line
    lines = [_HEADER.format(lead=s.signal_lead, how=how,
                            after=_REQUEUES if s.requeue else _NO_REQUEUE).rstrip("\n")]
    directives = [
        f"--job-name={s.job_name}",
        f"--nodes={s.nodes}",
        f"--ntasks={s.ntasks}",
        f"--time={s.time}",
    ]
    directives += [f"--{k}={v}" for k, v in
                   (("partition", s.partition), ("account", s.account), ("qos", s.qos)) if v]
    directives += [f"--signal=B:USR1@{s.signal_lead}", "--requeue" if s.requeue else "--no-requeue",
                   "--open-mode=append", f"--output={s.output}"]
    if s.no_kill:
        directives.append("--no-kill")
    if s.error:
        directives.append(f"--error={s.error}")
    if s.chdir:
        directives.append(f"--chdir={s.chdir}")
    directives += list(s.extra)
    lines += [f"#SBATCH {d}" for d in directives]
    lines.append("")
    lines += _body(s, config, run_dir, package)
    return "\n".join(lines) + "\n"


def _body(s: SlurmSettings, config: str | None, run_dir: str | None,
          package: str | None) -> list[str]:
    q = shlex.quote
    if s.launcher == "srun":
        plugin = f"--mpi={q(s.mpi)}" if s.mpi else '--mpi="$MPI_PLUGIN"'
        launch = ["srun", plugin, "--kill-on-bad-exit=1", *map(q, s.launcher_args)]
    else:
        launch = [q(s.mpiexec), "-n", '"$SLURM_NTASKS"', *map(q, s.launcher_args)]
    out = ["# --- site setup (slurm.setup): modules, virtualenv ---"]
    out += list(s.setup) or ["# (none)"]
    out += ["", "set -u", f"PYTHON={q(s.python or 'python3')}",
            f"MAX_RESTARTS={s.max_restarts}", f"REQUEUE={'1' if s.requeue else '0'}",
            "# the Python must import slaq-mpi and mpi4py; the MPI library it loads is logged",
            f'if ! MPI_LIB=$("$PYTHON" -c {q(_MPI_LIBRARY)} 2>&1); then',
            '    echo "slaq.sbatch: $PYTHON cannot import slaq_mpi here ($(hostname): ${MPI_LIB##*$\'\\n\'});'
            ' set slurm.python to the Python slaq-mpi is installed in, or activate its environment in'
            ' slurm.setup" >&2',
            "    exit 2",
            "fi"]
    if package is not None:
        out += ["# the slaq_mpi the ranks run: the package slaq submit imported",
                f"SLAQ_PKG={q(package)}"]
    else:
        out += ["# the slaq_mpi the ranks run: the package $PYTHON imports now (every launch of this",
                "# job runs this one copy)",
                f'SLAQ_PKG=$("$PYTHON" -c {q(_PACKAGE_DIR)})']
    if s.launcher == "srun" and not s.mpi:
        out += ["# slurm.mpi unset: Open MPI is launched through PMIx (if this Slurm has it), other",
                "# MPIs through PMI-2",
                "MPI_PLUGIN=pmi2",
                'case $MPI_LIB in *"Open MPI"*)',
                '    srun --mpi=list 2>&1 | grep -qw pmix && MPI_PLUGIN=pmix ;;',
                "esac"]
    out.append(f"LAUNCH=({' '.join(launch)})")
    out.append(f"LAUNCHER={s.launcher}")
    advice = ("check slurm.mpi (srun --mpi=list) or use launcher: mpiexec" if s.launcher == "srun"
              else "check the mpiexec and launcher_args of the slurm: section")
    out.append(f"LAUNCH_ADVICE={q(advice)}   # said if the launch fails before the run starts")
    if config is None:
        out += [
            'CONFIG=${1:?"usage: sbatch slurm/slaq.sbatch CONFIG.yaml [RUN_DIR]"}',
            "# the config's output_dir; a config that cannot be read ends the job here, in one line",
            'OUT_DIR=$("$PYTHON" -c \'import sys; from slaq_mpi.config.experiment import load',
            'try: print(load(sys.argv[1], check_files=False).output_dir.resolve())',
            'except Exception as exc: sys.exit(f"slaq: error: {exc}")\' "$CONFIG") || exit 2',
            'RUN_DIR=${2:-$OUT_DIR}',
            "# a fresh start writes into the config's output_dir: RUN_DIR must be it, or a run to resume",
            'if [ -n "$OUT_DIR" ] && [ ! -f "$RUN_DIR/state.json" ] && '
            '[ "$(readlink -m "$RUN_DIR")" != "$OUT_DIR" ]; then',
            '    echo "slaq.sbatch: RUN_DIR $RUN_DIR holds no run to resume, and a new run of $CONFIG '
            'goes into its output_dir $OUT_DIR: leave RUN_DIR out, or give a run directory to resume" >&2',
            '    exit 2',
            'fi',
        ]
    else:
        out += [f"CONFIG={q(config)}", f"RUN_DIR={q(run_dir or '')}"]
    out += ["", *_fixed_body().splitlines()]
    return out


# Prints the first line of the MPI library's version (Open MPI's ends in a NUL byte), without
# initializing MPI.
_MPI_LIBRARY = ("import slaq_mpi, mpi4py; mpi4py.rc.initialize = False; from mpi4py import MPI; "
                "print(MPI.Get_library_version().split(chr(0))[0].strip().splitlines()[0])")


_PACKAGE_DIR = "import os, slaq_mpi; print(os.path.dirname(os.path.abspath(slaq_mpi.__file__)))"


@cache
def _fixed_body() -> str:
    """The part of every batch script that no setting changes (``sbatch_body.sh``)."""
    return resources.files("slaq_mpi.slurm").joinpath("sbatch_body.sh").read_text(encoding="utf-8")
