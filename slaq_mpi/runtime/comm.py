"""Every MPI call of slaq-mpi, behind small named wrappers.

Rank 0 talks to the workers through a :class:`CoordinatorLink` and each worker through a
:class:`WorkerLink`; each is created by its owner for the run and closed at its end, and holds
all the state of the messages in flight. A message that arrives is handed to the handler
registered for its :class:`Tag`, which decodes it and calls plain functions.

Between start-up and shutdown nothing is collective over the world: rank 0 and the job
leaders exchange point-to-point messages, and a move builds the new job's communicator over
its own ranks only (``Create_group``). :func:`world_collectives` counts the world collectives
this process entered, so a run can show it.

The long waits do not busy-poll: MPICH spins at 100% CPU inside a blocking receive, which
steals cores from training when ranks outnumber cores. Waiting for an assignment, a report, a
barrier or a control exchange tests a request and sleeps between tests
(:class:`~slaq_mpi.runtime.backoff.Backoff`). A job's own collectives
(``MPIGroup.allreduce``, called every iteration) block as usual on a node with a core per
rank; on an oversubscribed node (:func:`detect_oversubscription`) they too wait sleeping, so a
rank waiting for a peer leaves the CPU to the peer instead of spinning on it. The short
collectives of a move over the job's own ranks (``Create_group``, ``Dup``, the ``bcast`` of a
restored checkpoint) block as usual.
"""

from __future__ import annotations

import contextlib
import enum
import os
import socket
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
from mpi4py import MPI

from slaq_mpi.errors import RanksLost
from slaq_mpi.runtime.backoff import Backoff
from slaq_mpi.runtime.messages import Assign, Report
from slaq_mpi.runtime.protocol import ReduceOp


class Tag(enum.IntEnum):
    """The tags of point-to-point messages."""

    REPORT = 11  # a job leader's Report, to rank 0
    ERROR = 12  # a worker's unrecoverable error, to rank 0
    START = 13  # a rank's reason to refuse the start, to rank 0
    ASSIGN = 14  # rank 0's Assign, to a worker rank
    RELEASE = 15  # rank 0's ask to stop a job for a move, to its leader
    SAVED = 16  # a released job's checkpoint is on disk: (job, iteration), to rank 0


_START_MESSAGE_MAX = 4000  # characters: well below mpi4py's 32 KiB receive buffer
_OPS = {"sum": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN}
_WORLD = MPI.COMM_WORLD
_world_calls = [0]  # world collectives this process entered (see world_collectives)
_PATIENT = Backoff(first=0.0002, longest=0.002)  # waits for another rank's message or arrival
# a job's collective on an oversubscribed node: a collective whose peers are ready is quick
_COLLECTIVE = Backoff(first=0.0001, longest=0.0001, spins=20)
_IDLE = Backoff(first=0.0002, longest=0.005)  # a free rank waiting for its next assignment


def world_rank() -> int:
    """This process's rank in the world communicator."""
    return _WORLD.Get_rank()


def world_size() -> int:
    """Ranks in the world communicator."""
    return _WORLD.Get_size()


def hostname() -> str:
    """The node this rank runs on."""
    return socket.gethostname()


def world_hosts() -> list[str]:
    """Collective over the world: the host of every rank, by rank."""
    return list(_world_collective().allgather(hostname()))


def world_collectives() -> int:
    """How many collectives over the world this process has entered so far."""
    return _world_calls[0]


def _world_collective() -> MPI.Comm:
    """The world communicator, for a collective over it (counted)."""
    _world_calls[0] += 1
    return _WORLD


def abort(code: int) -> None:
    """End every rank of the world at once (after an unrecoverable error)."""
    _WORLD.Abort(code)


def _complete(request: MPI.Request, backoff: Backoff = _PATIENT, deadline: float | None = None,
              between: Callable[[], object] | None = None) -> tuple[bool, Any]:
    """Wait for ``request`` without spinning (:meth:`Backoff.wait`); returns whether it
    completed before ``deadline`` (else it stays pending) and its received object."""
    got: list[Any] = []

    def test() -> bool:
        done, value = request.test()
        if done:
            got.append(value)
        return bool(done)

    done = backoff.wait(test, deadline, between)
    return done, (got[0] if done else None)


def _cpu_set() -> frozenset[int] | None:
    """The CPUs this process may run on (its affinity mask, e.g. a Slurm allocation's cpuset
    or the launcher's binding); None where the platform does not say."""
    try:
        return frozenset(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return None


def detect_oversubscription() -> tuple[int, int]:
    """Collective over the world: count the busy ranks (all but rank 0, which mostly sleeps)
    on this node and the CPUs they may use together (the union of their affinity masks: a
    launcher that binds each rank to its own core gives each a mask of one). Returns
    ``(busy ranks, cpus)`` of this node (cpus 0 on a node with no busy rank); the ranks
    outnumber the CPUs if busy > cpus (then pass ``sleep_waits`` to :class:`WorkerLink`)."""
    local = _world_collective().Split_type(MPI.COMM_TYPE_SHARED)
    try:
        mine = None if _WORLD.Get_rank() == 0 else (_cpu_set(),)
        masks = [m[0] for m in local.allgather(mine) if m is not None]  # the busy ranks'
    finally:
        local.Free()
    if all(m is not None for m in masks):
        cpus = len(frozenset[int]().union(*(m for m in masks if m is not None)))
    else:
        cpus = os.cpu_count() or 1
    return len(masks), cpus


class MPIGroup:
    """A job's group of ranks (implements :class:`slaq_mpi.runtime.protocol.GroupComm`).

    ``sleep_waits``: its collectives wait sleeping (the node's ranks outnumber its CPUs)."""

    def __init__(self, comm: MPI.Comm, control: MPI.Comm | None = None,
                 sleep_waits: bool = False, control_ready: MPI.Request | None = None) -> None:
        self._comm = comm
        self._control = control  # slaq's own exchanges (None: on ``comm``)
        self._control_ready = control_ready  # the control communicator's Idup, until complete
        self._sleep_waits = sleep_waits
        self.rank: int = comm.Get_rank()
        self.size: int = comm.Get_size()
        self._pending: tuple[MPI.Request, np.ndarray, np.ndarray] | None = None

    def _control_comm(self) -> MPI.Comm:
        if self._control_ready is not None:
            _complete(self._control_ready, _COLLECTIVE)
            self._control_ready = None
        return self._control if self._control is not None else self._comm

    def post_control(self, values: np.ndarray) -> None:
        """Start the element-wise max of a few control values over the group without waiting
        (at most one in flight; :meth:`control_result` gives it). It runs on a communicator of
        the group's own, so it can never be matched with a solver's collective (a rank whose
        solver raised does not meet its peers inside the solver's allreduce)."""
        assert self._pending is None, "one control exchange at a time"
        send = np.ascontiguousarray(values, dtype=np.float64)
        out = np.empty_like(send)
        self._pending = (self._control_comm().Iallreduce(send, out, op=MPI.MAX), send, out)

    def control_result(self, deadline: float | None = None) -> np.ndarray | None:
        """The result of the control exchange :meth:`post_control` started (waiting, sleeping,
        until it completes); None if ``deadline`` (``time.monotonic()``) passes first: some
        rank of the group is not coming (the exchange stays pending)."""
        assert self._pending is not None, "no control exchange in flight"
        request, _send, out = self._pending
        done, _ = _complete(request, _COLLECTIVE, deadline)
        if not done:
            return None  # the caller ends the run
        self._pending = None
        return out

    def allreduce(self, array: np.ndarray, op: ReduceOp = "sum") -> np.ndarray:
        """Element-wise reduction over the group; every rank gets the result."""
        send = np.ascontiguousarray(array, dtype=np.float64)
        out = np.empty_like(send)
        if self._sleep_waits and self.size > 1:
            _complete(self._comm.Iallreduce(send, out, op=_OPS[op]), _COLLECTIVE)
        else:
            self._comm.Allreduce(send, out, op=_OPS[op])
        return out

    def bcast(self, obj: Any, root: int = 0) -> Any:
        """The Python object of the group's rank ``root`` (the leader by default), on every
        rank of the group."""
        return self._comm.bcast(obj, root=root)

    def free(self) -> None:
        """Release the communicators."""
        if self._control_ready is not None:
            _complete(self._control_ready, _COLLECTIVE)
            self._control_ready = None
        if self._control is not None:
            self._control.Free()
            self._control = None
        if self._comm != MPI.COMM_NULL and self._comm != _WORLD:  # the world is never freed
            self._comm.Free()


def world_group() -> MPIGroup:
    """The world communicator as a group (tests and single-job tools)."""
    return MPIGroup(_WORLD)


def job_group(ranks: Sequence[int], tag: int, sleep_waits: bool = False) -> MPIGroup:
    """Collective over ``ranks`` only (world ranks, this one among them): their new group, in
    world-rank order. Concurrent calls over disjoint rank sets do not meet; ``tag`` tells
    apart calls that could. The group's control communicator is duplicated without waiting:
    the first control exchange completes it."""
    members = _WORLD.Get_group().Incl(sorted(ranks))
    try:
        new = _WORLD.Create_group(members, tag)
    finally:
        members.Free()
    control, ready = new.Idup()
    return MPIGroup(new, control, sleep_waits, ready)


def barrier() -> None:
    """Wait (sleeping) until every rank of the world gets here."""
    _complete(_world_collective().Ibarrier())


def first_failure(message: str | None) -> tuple[int, str] | None:
    """Collective over the world: ``(rank, message)`` of the lowest rank that passed a
    message, or None if none did. Only rank 0 is given that rank's message (one small
    point-to-point); the other ranks get the rank and ``""``."""
    size, me = world_size(), world_rank()
    mine = np.array([me if message is not None else size], dtype=np.int32)
    lowest = np.zeros(1, dtype=np.int32)
    _complete(_world_collective().Iallreduce(mine, lowest, op=MPI.MIN))
    first = int(lowest[0])
    if first == size:
        return None
    if first == me:
        if me == 0:
            return first, message or ""
        _complete(_WORLD.isend((message or "")[:_START_MESSAGE_MAX], dest=0, tag=Tag.START))
    if me == 0:
        return first, str(_complete(_WORLD.irecv(source=first, tag=Tag.START))[1])
    return first, ""


def gather_to_root(value: Any) -> list[Any] | None:
    """Collective over the world: rank 0 gets every rank's small picklable ``value``, by rank
    (the others get None)."""
    return _world_collective().gather(value, root=0)  # type: ignore[no-any-return]


def root_value(value: int) -> int:
    """Collective over the world: every rank gets rank 0's small integer ``value`` (the
    others pass any)."""
    buf = np.array([value], dtype=np.int32)
    _complete(_world_collective().Ibcast(buf, root=0))
    return int(buf[0])


def _finish(during_run: int) -> list[int] | None:
    """Collective over the world at shutdown: every rank arrives (sleeping), then rank 0 gets
    each rank's count of world collectives during the run (the others get None)."""
    barrier()
    return _world_collective().gather(during_run, root=0)


Handler = Callable[[Any], None]


@contextlib.contextmanager
def _lost_on_failure(doing: str) -> Iterator[None]:
    """Turn an MPI error of rank 0's messages into :class:`RanksLost` (the peer's process or
    its node is gone, the usual reason a point-to-point message fails)."""
    try:
        yield
    except MPI.Exception as exc:
        raise RanksLost(f"{doing}: {exc}") from exc


class _Sends:
    """Point-to-point sends in flight, kept until complete (their buffers with them)."""

    def __init__(self) -> None:
        self._pending: list[MPI.Request] = []

    def add(self, request: MPI.Request) -> None:
        if len(self._pending) > 64:
            self._pending = [r for r in self._pending if not r.Test()]
        self._pending.append(request)

    def complete(self) -> None:
        for request in self._pending:
            _complete(request)
        self._pending.clear()


class CoordinatorLink:
    """Rank 0's end of a run's messages: it sends assignments and asks to release a job, and
    hands every report or error that arrives to the handler of its tag (``handlers``:
    ``Tag.REPORT`` gets a :class:`Report`, ``Tag.ERROR`` a worker's error mapping,
    ``Tag.SAVED`` a released job's ``(job, iteration)`` whose checkpoint is on disk).

    Created by the coordinator for the run; :meth:`close` ends it.
    """

    ORDER = (Tag.ERROR, Tag.REPORT, Tag.SAVED)  # an error is handled before any report

    def __init__(self, handlers: Mapping[Tag, Handler]) -> None:
        self._handlers = dict(handlers)
        self._sends = _Sends()
        self._mark = world_collectives()
        self.releases: dict[int, int] = {}  # rank -> asks to release sent to it

    def assign(self, rank: int, order: Assign) -> None:
        """Send ``order`` to worker ``rank`` (:meth:`WorkerLink.wait_assign`); does not wait.

        Raises:
            RanksLost: the send failed (here or in an earlier send it completes).
        """
        with _lost_on_failure(f"sending rank {rank} its assignment"):
            self._sends.add(_WORLD.isend(order, dest=rank, tag=Tag.ASSIGN))

    def release(self, leader: int, job: str) -> None:
        """Ask ``job``'s leader to stop it at its next check, checkpoint it and report
        (:meth:`WorkerLink.released`); does not wait (raises :class:`RanksLost` as
        :meth:`assign`)."""
        with _lost_on_failure(f"asking rank {leader} to release {job}"):
            self._sends.add(_WORLD.isend(job, dest=leader, tag=Tag.RELEASE))
        self.releases[leader] = self.releases.get(leader, 0) + 1

    def wait(self, deadline: float | None = None, idle: bool = False) -> bool:
        """Handle the next message that arrives (sleeping until one does), and every message
        already there after it; False if ``deadline`` (``time.monotonic()``) passes first.
        ``idle``: no job trains, so no message is expected soon (sleep longer between tests)."""
        if not (_IDLE if idle else _PATIENT).wait(self._poll, deadline):
            return False
        while self._poll():  # and every other message already there
            pass
        return True

    def _poll(self) -> bool:
        """Hand one waiting message (an error before any report) to its handler; whether
        there was one."""
        status = MPI.Status()
        for tag in self.ORDER:
            with _lost_on_failure("receiving from the workers"):
                got = _WORLD.Iprobe(source=MPI.ANY_SOURCE, tag=tag, status=status)
                message = _WORLD.recv(source=status.Get_source(), tag=tag) if got else None
            if got:
                self._handlers[tag](message)
                return True
        return False

    def close(self) -> int:
        """At the end of the run, after every worker was told to exit: complete the sends,
        meet every rank; returns the most world collectives any rank entered during the run."""
        self._sends.complete()
        counts = _finish(world_collectives() - self._mark)
        return max(counts or [0])


class WorkerLink:
    """A worker's end of a run's messages: it waits for assignments, takes rank 0's asks to
    release its job, and sends its job's reports and its errors. ``sleep_waits``: its jobs'
    collectives wait sleeping (see :class:`MPIGroup`).

    Created by the worker for the run; :meth:`close` ends it.
    """

    def __init__(self, sleep_waits: bool = False) -> None:
        self.sleep_waits = sleep_waits
        self._sends = _Sends()
        self._posted: list[MPI.Request] = []  # errors in flight, kept alive until the abort
        self._mark = world_collectives()
        self._releases = 0  # asks to release taken

    def wait_assign(self, between: Callable[[], object] | None = None) -> Assign:
        """Wait (sleeping, not spinning) for rank 0's next assignment; ``between`` is called
        between tests."""
        got: list[Assign] = []

        def arrived() -> bool:
            if _WORLD.Iprobe(source=0, tag=Tag.ASSIGN):
                got.append(_WORLD.recv(source=0, tag=Tag.ASSIGN))
                return True
            return False

        _IDLE.wait(arrived, between=between)
        return got[0]

    def released(self) -> set[str]:
        """A job leader: the jobs rank 0 has asked to release since the last call."""
        jobs: set[str] = set()
        # MPICH moves a message that arrived while this rank computed into its queue during
        # a first probe, which still answers no: probing once before the loop takes an ask at
        # the boundary after it arrived, not a whole chunk later
        _WORLD.Iprobe(source=0, tag=Tag.RELEASE)
        while _WORLD.Iprobe(source=0, tag=Tag.RELEASE):
            jobs.add(str(_WORLD.recv(source=0, tag=Tag.RELEASE)))
            self._releases += 1
        return jobs

    def send_report(self, report: Report) -> None:
        """A job leader: send ``report`` to rank 0 without waiting for delivery."""
        self._sends.add(_WORLD.isend(report, dest=0, tag=Tag.REPORT))

    def send_saved(self, job: str, iteration: int) -> None:
        """Tell rank 0 that the checkpoint of a job this rank released is on disk."""
        self._sends.add(_WORLD.isend((job, iteration), dest=0, tag=Tag.SAVED))

    def post_error(self, info: Mapping[str, str]) -> None:
        """Post an unrecoverable error to rank 0 without waiting for delivery."""
        self._posted.append(_WORLD.isend(dict(info), dest=0, tag=Tag.ERROR))

    def close(self, releases: int) -> None:
        """At the end of the run (after rank 0's order to exit, which says how many
        ``releases`` it sent this rank): take the asks still unread, complete the sends, meet
        every rank."""
        while self._releases < releases:
            _complete(_WORLD.irecv(source=0, tag=Tag.RELEASE))
            self._releases += 1
        self._sends.complete()
        _finish(world_collectives() - self._mark)
