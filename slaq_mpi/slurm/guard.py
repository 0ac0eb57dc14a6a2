"""The guard of a slaq-mpi batch job on several nodes: ends or requeues the job when the node
running its batch script (and rank 0) dies.

With ``--no-kill`` Slurm keeps an allocation whose node failed, and it treats the batch
script's node like any other: it removes the node from the job and kills the batch script's
step, but the job itself stays RUNNING on the other nodes, with nothing running in it, until
its time limit. So the step supervisor (:mod:`slaq_mpi.slurm.supervise`) starts a guard, a
one-task step on another node of the allocation, and shows it that it lives by rewriting a
heartbeat file beside the run directory (:class:`Heartbeat`, ``.NAME.alive``) every second.
When the heartbeat stops changing for :data:`GUARD_SECONDS` (watched on the guard's own clock:
the nodes' clocks may differ) and the batch script's node does not answer a probe (a one-task
step there), the batch script is gone: the guard requeues the job
(``scontrol requeue``; its restart resumes the run from the checkpoints) or, with
``requeue: false``, cancels it, so the allocation is not held. The supervisor writes ``done``
into the file and ends the guard when it ends itself.

Run as a file (``python .../slaq_mpi/slurm/guard.py --run-dir RUN_DIR --requeue 1``) inside
the allocation; :class:`Watch` holds its decision, a plain function of what it read when.
"""

from __future__ import annotations

if __name__ == "__main__" and not __package__:  # run as a file: import this very copy
    import os as _os
    import sys as _sys

    _sys.path[0] = _os.path.dirname(_os.path.dirname(_os.path.dirname(_os.path.abspath(__file__))))

import argparse
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

__all__ = ["DONE", "GUARD_SECONDS", "GUARD_STEP", "Heartbeat", "Watch", "alive_path", "guard_command",
           "main"]

GUARD_SECONDS = 15.0  # seconds of an unchanged heartbeat after which the batch script is gone
BEAT = 1.0  # seconds between two heartbeats
GUARD_STEP = "slaq-guard"  # the guard's step name (the supervisor never cancels it as stuck)
DONE = "done"  # the heartbeat's last word: the batch script ended by itself

RunCmd = Callable[..., "subprocess.CompletedProcess[str]"]


def alive_path(run_dir: str | Path) -> Path:
    """The heartbeat file of the batch job running ``run_dir``: ``.NAME.alive`` beside it (a
    fresh start moves an old run directory aside, and the file with it if it were inside)."""
    run_dir = Path(run_dir).resolve()
    return run_dir.parent / f".{run_dir.name}.alive"


class Heartbeat:
    """Rewrites the heartbeat file with a new count every :data:`BEAT` seconds, in a thread of
    its own (the supervisor's own waits do not delay it)."""

    def __init__(self, run_dir: str | Path) -> None:
        self.path = alive_path(run_dir)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, daemon=True)
        self.count = 0

    def start(self) -> Heartbeat:
        """Write the first beat now, then keep beating."""
        self._write(str(self.count))
        self._thread.start()
        return self

    def _write(self, text: str) -> None:
        try:
            tmp = self.path.with_name(self.path.name + ".tmp")
            tmp.write_text(text)
            tmp.replace(self.path)
        except OSError:  # a full disk or a hiccup of the shared filesystem: the next beat
            pass

    def _beat(self) -> None:
        while not self._stop.wait(BEAT):
            self.count += 1
            self._write(str(self.count))

    def stop(self) -> None:
        """Stop beating and write :data:`DONE`: the guard exits without acting."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        self._write(DONE)


class Watch:
    """The guard's view of the heartbeat: :meth:`see` each reading (None: unreadable)."""

    def __init__(self, now: float, patience: float = GUARD_SECONDS) -> None:
        self.patience = patience
        self.last: str | None = None
        self.since = now

    def see(self, text: str | None, now: float) -> str:
        """``"done"`` (the batch script ended), ``"gone"`` (it stopped beating for
        :attr:`patience` seconds) or ``"alive"``."""
        if text is not None and text.strip() == DONE:
            return "done"
        if text is not None and text != self.last:
            self.last, self.since = text, now
        return "gone" if now - self.since > self.patience else "alive"


def guard_command(python: str, run_dir: str, requeue: bool, node: str, job: str) -> list[str]:
    """The step that runs the guard on ``node`` of Slurm job ``job``."""
    return ["srun", "--overlap", f"--jobid={job}", f"--job-name={GUARD_STEP}", "-w", node, "-N1", "-n1",
            "--mpi=none", python, str(Path(__file__).resolve()), "--run-dir", run_dir,
            "--requeue", "1" if requeue else "0"]


def _job_field(job: str, key: str, run_cmd: RunCmd) -> str:
    """``key``'s value in ``scontrol show job -o`` of ``job`` ("" if Slurm does not say)."""
    try:
        info = run_cmd(["scontrol", "show", "job", job, "-o"], timeout=30).stdout
    except Exception:
        return ""
    found = re.search(rf"\b{key}=(\S+)", info)
    return found.group(1) if found else ""


def _say(job: str, msg: str, run_cmd: RunCmd) -> None:
    """Append ``msg`` to the job's log (the guard's own output goes through the batch node's
    srun, which died with the node); print it if the log cannot be written."""
    line = f"slaq guard: {time.strftime('%F %T')} job {job}: {msg}"
    try:
        with open(_job_field(job, "StdOut", run_cmd), "a") as log:
            log.write(line + "\n")
    except OSError:
        print(line, flush=True)


def _batch_node_answers(job: str, run_cmd: RunCmd) -> bool:
    """Whether the batch script's node answers a probe (a one-task step there: the supervisor's
    :func:`~slaq_mpi.slurm.supervise.lost_nodes`): a heartbeat that stopped on a node that
    answers is a slow or stuck filesystem, not a lost node."""
    from slaq_mpi.slurm.supervise import lost_nodes

    host = _job_field(job, "BatchHost", run_cmd)
    return bool(host) and not lost_nodes([host], "", job, run_cmd)


def guard(run_dir: Path, requeue: bool, run_cmd: RunCmd, job: str,
          clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> int:
    """Watch the heartbeat until the batch script ends (0) or is gone: then requeue or cancel
    the job (0 if Slurm took the command, 1 if not)."""
    path = alive_path(run_dir)
    watch = Watch(clock())
    while True:
        try:
            text: str | None = path.read_text()
        except OSError:
            text = None
        seen = watch.see(text, clock())
        if seen == "done":
            return 0
        if seen == "gone":
            if not _batch_node_answers(job, run_cmd):
                break
            watch.since = clock()  # the node answers: keep watching
        sleep(BEAT / 2)
    act = ["scontrol", "requeue", job] if requeue else ["scancel", job]
    _say(job, f"the batch script has not beaten for {watch.patience:g} s: its node is lost; "
              + ("requeueing the job (its restart resumes the run)" if requeue else
                 f"cancelling the job (requeue: false); resume with: slaq run --resume {run_dir}"),
         run_cmd)
    try:
        done = run_cmd(act, timeout=60).returncode == 0
    except Exception:
        done = False
    if not done:
        _say(job, f"{' '.join(act)} failed", run_cmd)
    return 0 if done else 1


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: ``--run-dir RUN_DIR --requeue 0|1`` (inside the job's allocation)."""
    parser = argparse.ArgumentParser(prog="guard.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--requeue", choices=("0", "1"), required=True)
    args = parser.parse_args(argv)
    from slaq_mpi.slurm.submit import run_cmd

    return guard(Path(args.run_dir), args.requeue == "1", run_cmd, os.environ.get("SLURM_JOB_ID", ""))


if __name__ == "__main__":
    sys.exit(main())
