"""The step supervisor of a slaq-mpi batch job: runs the MPI launch of ``slaq run``, asks it
for a graceful stop when Slurm signals the job, resumes the run on the nodes left when a node
of the allocation is lost, and decides how the batch job ends (requeue or not).

The batch script sets its variables and ``exec``\\ s it, so it is the batch job's own process::

    python .../slaq_mpi/slurm/supervise.py --run-dir RUN_DIR --config CONFIG --launcher srun \\
        --requeue 1 --max-restarts 3 --advice TEXT [--stop-asked USR1] -- LAUNCH... \\
        python .../slaq_mpi/__main__.py

It starts ``run CONFIG``, or ``run --resume RUN_DIR`` when RUN_DIR/state.json exists. A
warning signal (USR1), preemption or scancel (TERM) creates RUN_DIR/STOP once the run owns
RUN_DIR (state.json written: a fresh start moves an old RUN_DIR aside, so a STOP file made
too early would be lost); rank 0 then checkpoints every job and exits 75.

On several nodes it also keeps a guard step on another node (:mod:`slaq_mpi.slurm.guard`),
which requeues or cancels the job if this node (the batch script's and rank 0's) dies.

It watches the run's rank 0 through the run directory's lock (held by rank 0 while it runs):
once rank 0 has ended, a step still running after :data:`STEP_GRACE` seconds is stuck (srun
waits for a dead node) and is ended; at once if rank 0 said it lost ranks (status.json's
state ``ranks lost``, exit 76). A step that ended without a result of the run's own (done,
failed, bad input, stopped) and without a stop asked of the batch job is looked at: the nodes
of the allocation that no longer answer (:func:`lost_nodes`) are left out, and ``slaq run
--resume`` is launched again on the others with the tasks they hold
(:func:`relaunch_command`). Every decision is a plain function of what Slurm answered
(:func:`slaq_mpi.slurm.submit.run_cmd`, faked in the tests); how the job ends is
:func:`slaq_mpi.slurm.outcome.ending`.
"""

from __future__ import annotations

if __name__ == "__main__" and not __package__:  # run as a file: import this very copy
    import os as _os
    import sys as _sys

    _sys.path[0] = _os.path.dirname(_os.path.dirname(_os.path.dirname(_os.path.abspath(__file__))))

import argparse
import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from slaq_mpi.slurm.guard import GUARD_STEP, Heartbeat, guard_command
from slaq_mpi.slurm.outcome import ending

__all__ = ["STEP_GRACE", "Supervisor", "expand_tasks", "lost_nodes", "main", "relaunch_command",
           "should_relaunch", "start_command"]

STEP_GRACE = 5.0  # seconds a step may run on after its rank 0 ended before it is ended
STALL_SECONDS = 3.0  # a running job that has not iterated for this long (and
STALL_EPOCHS = 3  # this many epochs) makes the supervisor probe the nodes
POLL = 0.25  # seconds between looks at the step
PROBE_TIMEOUT = 6.0  # seconds a node has to run a probe task
CANCEL_TIMEOUT = 3.0  # seconds Slurm's commands get to cancel a stuck step (a dead node may hold them)
SAME_NODES_RESUMES = 2  # resumes on the same nodes after rank 0 lost ranks that every node answered,
SAME_NODES_WINDOW = 300.0  # in a row: each launch ended within this many seconds of its start
# exit statuses that are the run's own result: every job done, a job failed, bad input, stopped
_FINAL = {0, 1, 2, 75}
RANKS_LOST_STATE = "ranks lost"  # status.json's state when rank 0 lost ranks (exit 76)
_GONE_STATES = ("DOWN", "NOT_RESPONDING", "FAIL", "DRAIN", "POWER")

RunCmd = Callable[..., "subprocess.CompletedProcess[str]"]


def _say(msg: str) -> None:
    print(f"slaq supervise: {time.strftime('%F %T')} {msg}", flush=True)


def _say_batch(msg: str) -> None:
    """A line about the batch job itself (its start, a signal, how it ends)."""
    print(f"slaq.sbatch: {time.strftime('%F %T')} job {os.environ.get('SLURM_JOB_ID', '?')} "
          f"restart {os.environ.get('SLURM_RESTART_COUNT', '0')}: {msg}", flush=True)


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
    one-task probe step on the node (all probed at once) fails or does not end within
    :data:`PROBE_TIMEOUT`. ``here`` (the batch script's node) is alive."""
    others = [n for n in nodes if n != here]
    down = {n for n in others if any(w in node_state(n, run_cmd).upper() for w in _GONE_STATES)}

    def answers(node: str) -> bool:
        try:
            probe = run_cmd(["srun", "--overlap", f"--jobid={job_id}", "-w", node, "-N1", "-n1",
                             "--mpi=none", "true"], timeout=PROBE_TIMEOUT)
        except Exception:  # no answer in time: as gone as a refusal
            return False
        return probe.returncode == 0

    probed = [n for n in others if n not in down]
    with ThreadPoolExecutor(max_workers=max(1, len(probed))) as pool:
        alive = dict(zip(probed, pool.map(answers, probed), strict=True))
    return [n for n in others if n in down or not alive[n]]


def should_relaunch(status: int, stop_asked: bool, rank0_started: bool) -> bool:
    """Whether a step that ended with ``status`` may have lost a node worth resuming without:
    not when the run gave its own result (done, failed, bad input, stopped), was asked to stop by the
    batch script (a signal to the job), or never started (a launch failure)."""
    return status not in _FINAL and not stop_asked and rank0_started


def start_command(launch_and_slaq: Sequence[str], run_dir: Path, config: str) -> list[str]:
    """The first launch of a batch job: ``run --resume RUN_DIR`` when RUN_DIR/state.json
    exists (a requeued job, or a submit of a run to resume), else ``run CONFIG``."""
    if (run_dir / "state.json").is_file():
        return [*launch_and_slaq, "run", "--resume", str(run_dir)]
    return [*launch_and_slaq, "run", config]


def relaunch_command(launch: Sequence[str], launcher: str, excluded: Sequence[str],
                     survivors: dict[str, int], slaq: Sequence[str], run_dir: str) -> list[str]:
    """The command that resumes the run on ``survivors`` (node -> tasks) without the
    ``excluded`` nodes (none: on the same nodes): the launch with the nodes and task count
    narrowed, then ``slaq``'s Python and ``__main__.py`` (the first two words of ``slaq``)
    with ``run --resume RUN_DIR``."""
    tasks = sum(survivors.values())
    if launcher == "srun":
        exclude = [f"--exclude={','.join(excluded)}"] if excluded else []
        head = [launch[0], "--overlap", *exclude, f"--nodes={len(survivors)}",
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
        self._stop_made = False  # RUN_DIR/STOP created for the stop asked
        self.excluded: list[str] = []  # nodes lost so far
        self.lost: list[str] = []  # nodes found lost while the latest step ran
        self.ended = False  # the latest step was ended here
        self.ranks_lost = False  # the latest step's rank 0 lost ranks (status.json says so)
        self._probes = ThreadPoolExecutor(max_workers=1)  # the nodes are probed beside the watch
        self._probe: Future[list[str]] | None = None  # a probe of the nodes under way
        self.requeue = False  # slurm.requeue: what the guard does when this node is lost
        self.guarded = False  # keep a guard step on another node (main sets it on several nodes)
        self.guard: subprocess.Popen[bytes] | None = None  # the guard step (guard.py)
        self._guard_node = ""
        self._launched = 0.0

    def on_stop(self, signum: int, _frame: object) -> None:
        """Slurm signalled the batch job (warning signal, preemption, scancel): ask rank 0 for
        a graceful stop (RUN_DIR/STOP, once the run owns RUN_DIR); no resume after this."""
        _say_batch(f"got SIG{signal.Signals(signum).name[3:]}: asking for a graceful stop")
        self.stop_asked = True
        self._make_stop()

    def _make_stop(self) -> None:
        """Create RUN_DIR/STOP for a stop asked, once the run owns RUN_DIR (state.json)."""
        if self.stop_asked and not self._stop_made and (self.run_dir / "state.json").is_file():
            (self.run_dir / "STOP").touch()
            self._stop_made = True

    def _rank0(self) -> tuple[int, str] | None:
        """Rank 0's pid and host, as the run directory's lock file says (the latest rank 0's,
        alive or not; None: no lock file yet)."""
        from slaq_mpi.storage.rundir import lock_path

        try:
            text = lock_path(self.run_dir).read_text()
        except OSError:
            return None
        found = re.match(r"pid (\d+) on (\S+?),? ", text + " ")
        return (int(found.group(1)), found.group(2)) if found else None

    def _rank0_running(self) -> bool:
        """Whether rank 0 runs: its process is alive, when it runs on this node (as it does
        under srun and Hydra); elsewhere, whether the run directory's lock is held. The lock
        file is read, never locked, on this node: a lock taken here even for an instant could
        make a starting rank 0 find the run directory in use."""
        rank0 = self._rank0()
        if rank0 is not None and rank0[1] == socket.gethostname():
            return _alive(rank0[0])
        from slaq_mpi.storage.rundir import holder_of

        return rank0 is not None and holder_of(self.run_dir) is not None

    def _written_by_this_launch(self, status: dict[str, object] | None) -> float | None:
        """When this launch's rank 0 wrote ``status`` (status.json), or None: there is none,
        it has no time, or it is older than this launch (a requeued job finds the last one's)."""
        if status is None:
            return None
        try:
            updated = float(status["updated"])  # type: ignore[arg-type]
        except (KeyError, TypeError, ValueError):
            return None
        return updated if updated >= self._launched else None

    def _heartbeat_stale(self, status: dict[str, object] | None) -> bool:
        """Rank 0 runs but has not rewritten status.json for far longer than its decisions
        take (at least 10 epochs, at least 120 s): it is stuck. A status.json older than this
        launch says nothing of its rank 0 (which writes its first once its data and record
        are ready, after a requeue often minutes after the last launch's), as none does."""
        updated = self._written_by_this_launch(status)
        return updated is not None and time.time() - updated > max(120.0, 10 * _epoch(status or {}))

    def _says_ranks_lost(self, status: dict[str, object] | None) -> bool:
        """Whether ``status`` (status.json) is this launch's rank 0 saying it lost ranks."""
        return (status is not None and status.get("state") == RANKS_LOST_STATE
                and self._written_by_this_launch(status) is not None)

    def _read_status(self) -> dict[str, object] | None:
        try:
            status = json.loads((self.run_dir / "status.json").read_text())
        except (OSError, ValueError):
            return None
        return status if isinstance(status, dict) else None

    def _rank_hosts(self) -> set[str] | None:
        """The hosts the ranks of the latest launch run on (RUN_DIR/hosts.json; None: unknown)."""
        try:
            return set(json.loads((self.run_dir / "hosts.json").read_text())["hosts"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def find_lost(self) -> list[str]:
        """The nodes of the allocation (those the ranks ran on, when known) that are gone."""
        nodes = allocation_nodes(os.environ.get("SLURM_JOB_NODELIST", ""), self.run_cmd)
        ranks_on = self._rank_hosts()
        alive = [n for n in nodes if n not in self.excluded and (ranks_on is None or n in ranks_on)]
        return lost_nodes(alive, socket.gethostname(), os.environ.get("SLURM_JOB_ID", ""), self.run_cmd)

    def run_step(self, command: list[str]) -> tuple[int, bool]:
        """Run ``command`` to its end (ending it if stuck); returns its exit status and whether
        rank 0 ever ran. Nodes found lost while it ran are kept in :attr:`lost`."""
        _say(f"launching: {' '.join(command)}")
        proc = subprocess.Popen(command, env=self.env)
        self.lost, self.ended = [], False
        seen, ended_at = False, None
        watch = Progress()
        several = int(os.environ.get("SLURM_JOB_NUM_NODES", "1") or 1) > 1
        while proc.poll() is None:
            time.sleep(POLL)
            self._make_stop()
            running = self._rank0_running()
            if running and not seen:  # the launch is up: its own start is not slowed by the guard's
                self.ensure_guard()
            seen |= running
            if seen and not running and ended_at is None:
                ended_at = time.monotonic()
            status = self._read_status() if running or ended_at is not None else None
            why = ""
            if ended_at is not None and self._says_ranks_lost(status):
                why = "rank 0 lost ranks and ended"
            elif ended_at is not None and time.monotonic() - ended_at > STEP_GRACE:
                why = "rank 0 ended but the step did not"
            elif not running:
                status = None
            elif self._heartbeat_stale(status):
                why = "rank 0 has stopped deciding"
            elif several and status is not None and watch.stalled(status, time.monotonic()) \
                    and self._probe is None:
                self._probe = self._probes.submit(self.find_lost)
            if not why and self._probe is not None and self._probe.done():
                self.lost = self._probe_result()
                if self.lost:
                    why = f"lost node(s) {', '.join(self.lost)}"
            if why:
                _say(f"{why}: ending the step")
                self.ended = True
                self._end(proc)
                break
        status_code = proc.wait()
        code = 128 - status_code if status_code < 0 else status_code
        self.ranks_lost = self._says_ranks_lost(self._read_status())
        return code, seen or self._lock_written()

    def _probe_result(self) -> list[str]:
        """The nodes the probe under way (waited for) found lost; [] if none ran or it failed."""
        probe, self._probe = self._probe, None
        if probe is None:
            return []
        try:
            return probe.result()
        except (RuntimeError, ValueError, OSError) as exc:
            _say(f"cannot tell which nodes answer ({exc})")
            return []

    def _cancel_steps(self) -> None:
        """Kill the job's steps through Slurm (the tasks on the nodes that answer)."""
        job = os.environ.get("SLURM_JOB_ID", "")
        if not job:
            return
        try:
            steps = self.run_cmd(["squeue", "-h", "-s", "-j", job, "-o", "%i %j"], timeout=CANCEL_TIMEOUT)
            for line in steps.stdout.splitlines():
                step, _, name = line.strip().partition(" ")
                if step.rsplit(".", 1)[-1].isdigit() and name.strip() != GUARD_STEP:
                    self.run_cmd(["scancel", "--signal=KILL", step], timeout=CANCEL_TIMEOUT)
        except Exception as exc:  # srun is ended all the same
            _say(f"could not cancel the step through Slurm ({exc})")

    def _end(self, proc: subprocess.Popen[bytes]) -> None:
        """End a stuck step: its tasks killed through Slurm (on the nodes that answer; beside
        the rest, as a dead node may hold Slurm's answer), srun ended, and rank 0 killed if it
        still holds the run directory from this node."""
        threading.Thread(target=self._cancel_steps, daemon=True).start()
        proc.terminate()
        try:
            proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            proc.kill()
        deadline = time.monotonic() + STEP_GRACE
        while time.monotonic() < deadline and self._rank0_running():
            rank0 = self._rank0()
            if rank0 is not None and rank0[1] == socket.gethostname():
                try:
                    os.kill(rank0[0], signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(POLL)

    def _lock_written(self) -> bool:
        from slaq_mpi.storage.rundir import lock_path

        try:
            return lock_path(self.run_dir).stat().st_mtime >= self._launched
        except OSError:
            return False

    def ensure_guard(self) -> None:
        """On several nodes, a guard step runs on another node than this one (guard.py): it
        ends or requeues the job if this node dies. Started again if its node was lost."""
        job = os.environ.get("SLURM_JOB_ID", "")
        several = int(os.environ.get("SLURM_JOB_NUM_NODES", "1") or 1) > 1
        if not self.guarded or not job or not several:
            return
        if self.guard is not None and self.guard.poll() is None:
            if self._guard_node not in self.excluded:
                return
            self.guard.kill()  # its node is lost (its srun may wait for it): no waiting here
        self.guard = None
        try:
            nodes = allocation_nodes(os.environ.get("SLURM_JOB_NODELIST", ""), self.run_cmd)
        except (RuntimeError, ValueError, OSError) as exc:
            _say(f"no guard of this node ({exc})")
            return
        others = [n for n in nodes if n != socket.gethostname() and n not in self.excluded]
        if others:
            self._guard_node = others[0]
            self.guard = subprocess.Popen(
                guard_command(self.slaq[0], str(self.run_dir), self.requeue, others[0], job),
                env={**self.env, "SLURM_OVERLAP": "1"})

    def stop_guard(self) -> None:
        """End the guard step (after the heartbeat said the batch script is done)."""
        if self.guard is None or self.guard.poll() is not None:
            return
        self.guard.terminate()
        try:
            self.guard.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.guard.kill()

    def supervise(self) -> int:
        """Run the launch; resume it on the nodes left while nodes are lost. Returns the exit
        status of the last launch."""
        job = os.environ.get("SLURM_JOB_ID", "")
        command = self.command
        same_nodes = 0
        while True:
            self._launched = time.time()
            began = time.monotonic()
            status, started = self.run_step(command)
            if time.monotonic() - began > SAME_NODES_WINDOW:
                same_nodes = 0
            if self.ended:  # rank 0 may have finished the run before the step was ended
                from slaq_mpi.runtime.resume import finished_status

                done = finished_status(self.run_dir)
                if done is not None:
                    return done
            several = int(os.environ.get("SLURM_JOB_NUM_NODES", "1") or 1) > 1
            if not should_relaunch(status, self.stop_asked, started) or not job or not several:
                return status
            try:
                nodes = allocation_nodes(os.environ.get("SLURM_JOB_NODELIST", ""), self.run_cmd)
                tasks = expand_tasks(os.environ.get("SLURM_TASKS_PER_NODE", ""), nodes)
                lost = self.lost or self._probe_result() or self.find_lost()
            except (RuntimeError, ValueError, OSError) as exc:
                _say(f"the step ended with status {status}; cannot tell which nodes are left ({exc})")
                return status
            if not lost and self.ranks_lost and same_nodes < SAME_NODES_RESUMES:
                same_nodes += 1
                survivors = {n: tasks[n] for n in nodes if n not in self.excluded}
                _say(f"rank 0 lost ranks but every node answers: resuming on {', '.join(survivors)} "
                     f"({sum(survivors.values())} tasks)")
                command = relaunch_command(self.launch, self.launcher, self.excluded, survivors,
                                           self.slaq, str(self.run_dir))
                self.env = {**self.env, "SLURM_OVERLAP": "1"}
                continue
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


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs on this node (a zombie has ended)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] not in ("Z", "X")


def _epoch(status: dict[str, object]) -> float:
    try:
        return max(0.01, float(status.get("epoch_seconds", 1.0)))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return 1.0


class Progress:
    """Whether the run's jobs go on: a running job whose iterations have not grown for
    :data:`STALL_EPOCHS` epochs (at least :data:`STALL_SECONDS`) may have lost its ranks; then
    the nodes are probed, at most once per that interval."""

    def __init__(self) -> None:
        self.iterations: dict[str, int] = {}
        self.since: dict[str, float] = {}
        self.probed = -math.inf

    def stalled(self, status: dict[str, object], now: float) -> bool:
        """Take ``status`` (status.json at ``now``); True when a probe is due."""
        bound = max(STALL_SECONDS, STALL_EPOCHS * _epoch(status))
        jobs = status.get("jobs")
        stuck = False
        for job in jobs if isinstance(jobs, list) else []:
            if not isinstance(job, dict) or job.get("status") != "running":
                continue
            name, its = str(job.get("name")), int(job.get("iterations") or 0)
            if self.iterations.get(name) != its:
                self.iterations[name], self.since[name] = its, now
            elif now - self.since[name] > bound:
                stuck = True
        if stuck and now - self.probed > bound:
            self.probed = now
            return True
        return False


def _answer(run_cmd: RunCmd, argv: list[str]) -> str | None:
    """What Slurm's command ``argv`` printed, or None if it failed (or does not exist)."""
    try:
        proc = run_cmd(argv, timeout=60)
    except Exception:  # the command missing, or no answer: as a refusal
        return None
    return proc.stdout if proc.returncode == 0 else None


def main(argv: Sequence[str] | None = None) -> int:
    """Command line (see the module's docstring); returns the batch job's exit status."""
    sup_box: list[Supervisor] = []
    early: list[int] = []

    def on_signal(signum: int, frame: object) -> None:
        if sup_box:
            sup_box[0].on_stop(signum, frame)
        else:
            early.append(signum)

    for sig in (signal.SIGUSR1, signal.SIGTERM):  # first: the batch script ignores them meanwhile
        signal.signal(sig, on_signal)
    parser = argparse.ArgumentParser(prog="supervise.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--config", required=True)
    parser.add_argument("--launcher", choices=("srun", "mpiexec"), required=True)
    parser.add_argument("--requeue", choices=("0", "1"), default="0")
    parser.add_argument("--max-restarts", type=int, default=0)
    parser.add_argument("--advice", default="")
    parser.add_argument("--stop-asked", choices=("USR1", "TERM"))
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    launch = args.command[1:] if args.command[:1] == ["--"] else args.command
    from slaq_mpi.slurm.submit import run_cmd
    from slaq_mpi.storage.rundir import lock_path

    run_dir = Path(args.run_dir)
    (run_dir / "STOP").unlink(missing_ok=True)  # a leftover would stop this start at once
    command = start_command(launch, run_dir, args.config)
    resuming = "--resume" in command[-3:]
    _say_batch(f"resuming {run_dir}" if resuming else f"starting {args.config} into {run_dir}")
    sup = Supervisor(run_dir, args.launcher, command, run_cmd, dict(os.environ))
    sup.requeue = args.requeue == "1"
    sup_box.append(sup)
    for signum in early + ([signal.Signals[f"SIG{args.stop_asked}"]] if args.stop_asked else []):
        sup.on_stop(signum, None)

    def lock_text() -> str:
        try:
            return lock_path(run_dir).read_text()
        except OSError:
            return ""

    before = lock_text()
    several = int(os.environ.get("SLURM_JOB_NUM_NODES", "1") or 1) > 1
    heartbeat = Heartbeat(run_dir).start() if several else None
    sup.guarded = several
    try:
        status = sup.supervise()
    finally:
        if heartbeat is not None:
            heartbeat.stop()
        sup.stop_guard()
    job = os.environ.get("SLURM_JOB_ID", "")
    asked_by_slurm = status == 75 and sup.stop_asked and job
    job_line = (_answer(run_cmd, ["scontrol", "show", "job", job, "-o"]) or "") if asked_by_slurm else ""
    end = ending(status, sup.stop_asked, lock_text() != before, run_dir=str(run_dir),
                 advice=args.advice, requeue=args.requeue == "1",
                 restarts=int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0),
                 max_restarts=args.max_restarts, job_line=job_line)
    _say_batch(end.say)
    if end.requeue:
        (run_dir / "STOP").unlink(missing_ok=True)
        if _answer(run_cmd, ["scontrol", "requeue", job]) is not None:
            return end.status
        _say_batch("scontrol requeue failed")
        _say_batch(end.fallback)
        return status
    return end.status


if __name__ == "__main__":
    sys.exit(main())
