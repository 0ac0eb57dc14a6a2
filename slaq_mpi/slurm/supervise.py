"""The step supervisor of a slaq-mpi batch job: runs the MPI launch of ``slaq run`` and, when a
node of the allocation is lost, ends the stuck step and resumes the run on the nodes left.

The batch script starts it in place of the launch itself::

    python .../slaq_mpi/slurm/supervise.py --run-dir RUN_DIR --launcher srun -- LAUNCH... \\
        python .../slaq_mpi/__main__.py run CONFIG

and takes its exit status as the run's. It watches the run's rank 0 through the run
directory's lock (held by rank 0 while it runs): once rank 0 has ended, a step still running
after :data:`STEP_GRACE` seconds is stuck (srun waits for a dead node) and is ended. A step that
ended without a result of the run's own (done, failed, bad input, stopped) and without a stop
asked of the batch job is looked at: the nodes of the allocation that no longer answer
(:func:`lost_nodes`) are left out, and ``slaq run --resume`` is launched again on the others
with the tasks they hold (:func:`relaunch_command`). Every decision is a plain function of
what Slurm answered (:func:`slaq_mpi.slurm.submit.run_cmd`, faked in the tests).
"""

from __future__ import annotations

if __name__ == "__main__" and not __package__:  # run as a file: import this very copy
    import os as _os
    import sys as _sys

    _sys.path[0] = _os.path.dirname(_os.path.dirname(_os.path.dirname(_os.path.abspath(__file__))))

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["STEP_GRACE", "Supervisor", "expand_tasks", "lost_nodes", "main", "relaunch_command",
           "should_relaunch"]

STEP_GRACE = 10.0  # seconds a step may run on after its rank 0 ended before it is ended
POLL = 0.25  # seconds between looks at the step
PROBE_TIMEOUT = 20.0  # seconds a node has to run a probe task
# exit statuses that are the run's own result: every job done, a job failed, bad input, stopped
_FINAL = {0, 1, 2, 75}
_GONE_STATES = ("DOWN", "NOT_RESPONDING", "FAIL", "DRAIN", "POWER")

RunCmd = Callable[..., "subprocess.CompletedProcess[str]"]


def _say(msg: str) -> None:
    print(f"slaq supervise: {time.strftime('%F %T')} {msg}", flush=True)


# --- decisions (pure, or Slurm through run_cmd) ------------------------------------------------

def expand_tasks(tasks_per_node: str, nodes: Sequence[str]) -> dict[str, int]:
    """Tasks per node from Slurm's ``SLURM_TASKS_PER_NODE`` (``"4(x2),3"``) over ``nodes`` in
    the allocation's order."""
    counts: list[int] = []
    for part in tasks_per_node.split(","):
        m = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", part)
        if m is None:
            raise ValueError(f"SLURM_TASKS_PER_NODE {tasks_per_node!r} is not a Slurm task count")
        counts += [int(m.group(1))] * int(m.group(2) or 1)
    if len(counts) != len(nodes):
        raise ValueError(f"SLURM_TASKS_PER_NODE {tasks_per_node!r} does not match {len(nodes)} nodes")
    return dict(zip(nodes, counts, strict=True))


def allocation_nodes(nodelist: str, run_cmd: RunCmd) -> list[str]:
    """The node names of a Slurm node list (``n[1-3]``), as ``scontrol show hostnames`` says."""
    proc = run_cmd(["scontrol", "show", "hostnames", nodelist])
    if proc.returncode != 0:
        raise RuntimeError(f"scontrol show hostnames {nodelist} failed: {proc.stderr.strip()}")
    return proc.stdout.split()


def node_state(node: str, run_cmd: RunCmd) -> str:
    """The ``State=`` of ``node`` as ``scontrol show node`` says ("" if it does not say)."""
    proc = run_cmd(["scontrol", "show", "node", node, "-o"])
    found = re.search(r"\bState=(\S+)", proc.stdout)
    return found.group(1) if proc.returncode == 0 and found else ""


def lost_nodes(nodes: Sequence[str], here: str, job_id: str, run_cmd: RunCmd) -> list[str]:
    """The nodes of ``nodes`` that are gone: Slurm marks them down (or not responding), or a
    one-task probe step on the node fails. ``here`` (the batch script's node) is alive."""
    lost = []
    for node in nodes:
        if node == here:
            continue
        state = node_state(node, run_cmd)
        if any(word in state.upper() for word in _GONE_STATES):
            lost.append(node)
            continue
        try:
            probe = run_cmd(["srun", "--overlap", f"--jobid={job_id}", "-w", node, "-N1", "-n1",
                             "--mpi=none", "true"], timeout=PROBE_TIMEOUT)
        except Exception:  # no answer in time: as gone as a refusal
            lost.append(node)
            continue
        if probe.returncode != 0:
            lost.append(node)
    return lost


def should_relaunch(status: int, stop_asked: bool, rank0_started: bool) -> bool:
    """Whether a step that ended with ``status`` may have lost a node worth resuming without:
    not when the run gave its own result (done, failed, bad input, stopped), was asked to stop by the
    batch script (a signal to the job), or never started (a launch failure)."""
    return status not in _FINAL and not stop_asked and rank0_started


def relaunch_command(launch: Sequence[str], launcher: str, excluded: Sequence[str],
                     survivors: dict[str, int], slaq: Sequence[str], run_dir: str) -> list[str]:
    """The command that resumes the run on ``survivors`` (node -> tasks) without the
    ``excluded`` nodes: the launch with the nodes and task count narrowed, then ``slaq``'s
    Python and ``__main__.py`` (the first two words of ``slaq``) with ``run --resume RUN_DIR``."""
    tasks = sum(survivors.values())
    if launcher == "srun":
        head = [launch[0], "--overlap", f"--exclude={','.join(excluded)}", f"--nodes={len(survivors)}",
                f"--ntasks={tasks}", *launch[1:]]
    else:  # Hydra: its -n replaced, the hosts given with their slots
        head, skip = [launch[0]], False
        for word in launch[1:]:
            if skip:
                skip = False
                continue
            if word in ("-n", "-np"):
                skip = True
                continue
            head.append(word)
        head[1:1] = ["-n", str(tasks), "-hosts", ",".join(f"{n}:{c}" for n, c in survivors.items())]
    return [*head, *slaq[:2], "run", "--resume", run_dir]


# --- the running step ------------------------------------------------------------------------

@dataclass
class Step:
    """One launch of the run's ranks."""

    proc: subprocess.Popen[bytes]
    started: float


class Supervisor:
    """Runs the step, ends it when stuck, resumes the run without lost nodes."""

    def __init__(self, run_dir: Path, launcher: str, command: list[str], run_cmd: RunCmd,
                 env: dict[str, str]) -> None:
        self.run_dir = run_dir
        self.launcher = launcher
        self.command = command
        self.run_cmd = run_cmd
        self.env = env
        self.stop_asked = False
        self.excluded: list[str] = []

    def on_stop(self, signum: int, _frame: object) -> None:
        """The batch script was asked to stop (it tells this process with the same signal)."""
        self.stop_asked = True

    def _rank0_running(self) -> bool:
        from slaq_mpi.storage.rundir import holder_of

        return holder_of(self.run_dir) is not None

    def _heartbeat_stale(self) -> bool:
        """Rank 0 runs but has not rewritten status.json for far longer than its decisions
        take (at least 10 epochs, at least 120 s): it is stuck."""
        status = self.run_dir / "status.json"
        try:
            age = time.time() - status.stat().st_mtime
            epoch = float(json.loads(status.read_text()).get("epoch_seconds", 1.0))
        except (OSError, ValueError):
            return False
        return age > max(120.0, 10 * epoch)

    def run_step(self, command: list[str]) -> tuple[int, bool]:
        """Run ``command`` to its end (ending it if stuck); returns its exit status and whether
        rank 0 ever ran."""
        _say(f"launching: {' '.join(command)}")
        proc = subprocess.Popen(command, env=self.env)
        seen, ended_at = False, None
        while proc.poll() is None:
            time.sleep(POLL)
            running = self._rank0_running()
            seen |= running
            if seen and not running and ended_at is None:
                ended_at = time.monotonic()
            stuck = ended_at is not None and time.monotonic() - ended_at > STEP_GRACE
            if stuck or (running and self._heartbeat_stale()):
                why = ("rank 0 ended but the step did not" if stuck
                       else "rank 0 has stopped deciding")
                _say(f"{why}: ending the step")
                _end(proc)
                break
        status = proc.wait()
        return (128 - status if status < 0 else status), seen or self._lock_written()

    def _lock_written(self) -> bool:
        from slaq_mpi.storage.rundir import lock_path

        try:
            return lock_path(self.run_dir).stat().st_mtime >= self._launched
        except OSError:
            return False

    def supervise(self) -> int:
        """Run the launch; resume it on the nodes left while nodes are lost. Returns the exit
        status of the last launch."""
        job = os.environ.get("SLURM_JOB_ID", "")
        command = self.command
        while True:
            self._launched = time.time()
            status, started = self.run_step(command)
            several = int(os.environ.get("SLURM_JOB_NUM_NODES", "1") or 1) > 1
            if not should_relaunch(status, self.stop_asked, started) or not job or not several:
                return status
            try:
                nodes = allocation_nodes(os.environ.get("SLURM_JOB_NODELIST", ""), self.run_cmd)
                tasks = expand_tasks(os.environ.get("SLURM_TASKS_PER_NODE", ""), nodes)
                alive = [n for n in nodes if n not in self.excluded]
                lost = lost_nodes(alive, socket.gethostname(), job, self.run_cmd)
            except (RuntimeError, ValueError, OSError) as exc:
                _say(f"the step ended with status {status}; cannot tell which nodes are left ({exc})")
                return status
            if not lost:
                _say(f"the step ended with status {status} and every node answers: not resumed here")
                return status
            self.excluded += lost
            survivors = {n: tasks[n] for n in nodes if n not in self.excluded}
            if sum(survivors.values()) < 2:
                _say(f"lost node(s) {', '.join(lost)}: fewer than 2 tasks left, the run cannot go on")
                return status
            _say(f"lost node(s) {', '.join(lost)}; resuming on {', '.join(survivors)} "
                 f"({sum(survivors.values())} tasks)")
            command = relaunch_command(self.launch, self.launcher, self.excluded, survivors,
                                       self.slaq, str(self.run_dir))
            # the new step may share the nodes with the old one until Slurm has cleaned it up
            # (Hydra starts its proxies with srun too)
            self.env = {**self.env, "SLURM_OVERLAP": "1"}

    @property
    def launch(self) -> list[str]:
        return self.command[:self._slaq_at]

    @property
    def slaq(self) -> list[str]:
        return self.command[self._slaq_at:]

    @property
    def _slaq_at(self) -> int:
        """Where the slaq command starts in the launch: the word before ``.../__main__.py``."""
        at = next((i for i, w in enumerate(self.command) if w.endswith("__main__.py")), None)
        if at is None or at == 0:
            raise ValueError(f"no .../__main__.py in the command {self.command}")
        return at - 1


def _end(proc: subprocess.Popen[bytes]) -> None:
    """End a stuck step: SIGTERM, then SIGKILL a few seconds later."""
    proc.terminate()
    try:
        proc.wait(timeout=3)
    except subprocess.TimeoutExpired:
        proc.kill()


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: ``--run-dir RUN_DIR --launcher srun|mpiexec -- COMMAND...``."""
    parser = argparse.ArgumentParser(prog="supervise.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--launcher", choices=("srun", "mpiexec"), required=True)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    from slaq_mpi.slurm.submit import run_cmd

    sup = Supervisor(Path(args.run_dir), args.launcher, command, run_cmd, dict(os.environ))
    for sig in (signal.SIGUSR1, signal.SIGTERM):
        signal.signal(sig, sup.on_stop)
    return sup.supervise()


if __name__ == "__main__":
    sys.exit(main())
