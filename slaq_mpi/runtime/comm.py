"""Every MPI call of slaq-mpi, behind small named wrappers.

Rank 0 talks to the workers through a :class:`CoordinatorLink` and each worker through a
:class:`WorkerLink`; each is created by its owner for the run and closed at its end, and holds
all the state of the messages in flight. A message that arrives is handed to the handler
registered for its :class:`Tag`, which decodes it and calls plain functions.

The long waits do not busy-poll: MPICH spins at 100% CPU inside a blocking receive, which
steals cores from training when ranks outnumber cores. Waiting for the coordinator's plan, a
report, a barrier or a control exchange tests a request and sleeps between tests
(:class:`~slaq_mpi.runtime.backoff.Backoff`). A job's own collectives
(``MPIGroup.allreduce``, called every iteration) block as usual on a node with a core per
rank; on an oversubscribed node (:func:`detect_oversubscription`) they too wait sleeping, so a
rank waiting for a peer leaves the CPU to the peer instead of spinning on it. The short
collectives of a move (``Split``, ``Dup``, a group's ``bcast`` of a restored checkpoint) block
as usual.
"""

from __future__ import annotations

import enum
import os
import pickle
import socket
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from mpi4py import MPI

from slaq_mpi.runtime.backoff import Backoff
from slaq_mpi.runtime.messages import Plan, Report
from slaq_mpi.runtime.protocol import ReduceOp


class Tag(enum.IntEnum):
    """The tags of point-to-point messages."""

    REPORT = 11  # a job leader's Report, to rank 0
    ERROR = 12  # a worker's unrecoverable error, to rank 0
    START = 13  # a rank's reason to refuse the start, to rank 0
    CUT = 14  # rank 0's ask to end an epoch early, to a job leader


_START_MESSAGE_MAX = 4000  # characters: well below mpi4py's 32 KiB receive buffer
_OPS = {"sum": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN}
_WORLD = MPI.COMM_WORLD
_PATIENT = Backoff(first=0.0002, longest=0.002)  # waits for another rank's message or arrival
# a job's collective on an oversubscribed node: a collective whose peers are ready is quick
_COLLECTIVE = Backoff(first=0.0001, longest=0.0001, spins=20)


def world_rank() -> int:
    """This process's rank in the world communicator."""
    return _WORLD.Get_rank()


def world_size() -> int:
    """Ranks in the world communicator."""
    return _WORLD.Get_size()


def hostname() -> str:
    """The node this rank runs on."""
    return socket.gethostname()


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
    local = _WORLD.Split_type(MPI.COMM_TYPE_SHARED)
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
                 sleep_waits: bool = False) -> None:
        self._comm = comm
        self._control = control  # slaq's own exchanges (None: on ``comm``)
        self._sleep_waits = sleep_waits
        self.rank: int = comm.Get_rank()
        self.size: int = comm.Get_size()

    def control_max(self, values: np.ndarray, deadline: float | None = None) -> np.ndarray | None:
        """Element-wise max of a few control values over the group, on a communicator of its
        own, so it can never be matched with a solver's collective (a rank whose solver raised
        does not meet its peers inside the solver's allreduce). None if ``deadline``
        (``time.monotonic()``) passes first: some rank of the group is not coming."""
        send = np.ascontiguousarray(values, dtype=np.float64)
        out = np.empty_like(send)
        comm = self._control if self._control is not None else self._comm
        done, _ = _complete(comm.Iallreduce(send, out, op=MPI.MAX), _COLLECTIVE, deadline)
        return out if done else None  # not done: the request stays pending, the caller ends the run

    def allreduce(self, array: np.ndarray, op: ReduceOp = "sum") -> np.ndarray:
        """Element-wise reduction over the group; every rank gets the result."""
        send = np.ascontiguousarray(array, dtype=np.float64)
        out = np.empty_like(send)
        if self._sleep_waits and self.size > 1:
            _complete(self._comm.Iallreduce(send, out, op=_OPS[op]), _COLLECTIVE)
        else:
            self._comm.Allreduce(send, out, op=_OPS[op])
        return out

    def bcast(self, obj: Any) -> Any:
        """The group leader's Python object, on every rank of the group."""
        return self._comm.bcast(obj, root=0)

    def free(self) -> None:
        """Release the communicators."""
        if self._control is not None:
            self._control.Free()
            self._control = None
        if self._comm != MPI.COMM_NULL and self._comm != _WORLD:  # the world is never freed
            self._comm.Free()


def world_group() -> MPIGroup:
    """The world communicator as a group (tests and single-job tools)."""
    return MPIGroup(_WORLD)


def _split(color: int | None, key: int, between: Callable[[], object] | None = None,
           sleep_waits: bool = False) -> MPIGroup | None:
    """Collective over the world: ranks passing the same ``color`` form one new group; ranks
    passing ``None`` take part but get none. ``between`` is called while the ranks arrive."""
    _complete(_WORLD.Ibarrier(), between=between)  # arrive without spinning; the split is then quick
    new = _WORLD.Split(MPI.UNDEFINED if color is None else color, key)
    return None if new == MPI.COMM_NULL else MPIGroup(new, new.Dup(), sleep_waits)


def barrier() -> None:
    """Wait (sleeping) until every rank of the world gets here."""
    _complete(_WORLD.Ibarrier())


def first_failure(message: str | None) -> tuple[int, str] | None:
    """Collective over the world: ``(rank, message)`` of the lowest rank that passed a
    message, or None if none did. Only rank 0 is given that rank's message (one small
    point-to-point); the other ranks get the rank and ``""``."""
    size, me = world_size(), world_rank()
    mine = np.array([me if message is not None else size], dtype=np.int32)
    lowest = np.zeros(1, dtype=np.int32)
    _complete(_WORLD.Iallreduce(mine, lowest, op=MPI.MIN))
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


def root_value(value: int) -> int:
    """Collective over the world: every rank gets rank 0's small integer ``value`` (the
    others pass any)."""
    buf = np.array([value], dtype=np.int32)
    _complete(_WORLD.Ibcast(buf, root=0))
    return int(buf[0])


Handler = Callable[[Any], None]


class CoordinatorLink:
    """Rank 0's end of a run's messages: it sends the plans and the asks to cut an epoch,
    and hands every report or error that arrives to the handler of its tag (``handlers``:
    ``Tag.REPORT`` gets a :class:`Report`, ``Tag.ERROR`` a worker's error mapping).

    Created by the coordinator for the run; :meth:`close` ends it.
    """

    ORDER = (Tag.ERROR, Tag.REPORT)  # an error is handled before any report

    def __init__(self, handlers: Mapping[Tag, Handler]) -> None:
        self._handlers = dict(handlers)
        self._cut_sends: list[tuple[MPI.Request, np.ndarray]] = []  # kept until complete

    def broadcast_plan(self, plan: Plan) -> None:
        """Send ``plan`` to every worker (:meth:`WorkerLink.recv_plan`)."""
        payload = np.frombuffer(pickle.dumps(plan, protocol=pickle.HIGHEST_PROTOCOL), dtype=np.uint8)
        header = np.array([payload.size], dtype=np.int64)
        _complete(_WORLD.Ibcast(header, root=0))
        _WORLD.Bcast(payload, root=0)

    def join_split(self) -> None:
        """Take part (with no group) in the world split of a plan that moves jobs, handling
        workers' errors while the ranks arrive (a rank that failed would never arrive)."""
        _split(None, key=0, between=lambda: self._poll((Tag.ERROR,)))

    def send_cut(self, leaders: Sequence[int], epoch: int) -> None:
        """Ask these job leaders to end epoch ``epoch`` at their next check (a job finished
        early and its cores are to be given out again). Does not wait for delivery."""
        self._cut_sends[:] = [(r, b) for r, b in self._cut_sends if not r.Test()]
        for dest in leaders:
            box = np.array([epoch], dtype=np.int64)
            self._cut_sends.append((_WORLD.Isend(box, dest=dest, tag=Tag.CUT), box))

    def wait(self, deadline: float | None = None) -> bool:
        """Handle the next message that arrives (sleeping until one does); False if
        ``deadline`` (``time.monotonic()``) passes first."""
        return _PATIENT.wait(lambda: self._poll(self.ORDER), deadline)

    def _poll(self, tags: Sequence[Tag]) -> bool:
        """Hand one waiting message of ``tags`` (in that order) to its handler; whether there
        was one."""
        status = MPI.Status()
        for tag in tags:
            if _WORLD.Iprobe(source=MPI.ANY_SOURCE, tag=tag, status=status):
                self._handlers[tag](_WORLD.recv(source=status.Get_source(), tag=tag))
                return True
        return False

    def close(self) -> None:
        """At the end of the run, after the plan that stops it: complete the asks to cut
        (8-byte sends, complete once buffered), then meet every rank."""
        for request, _box in self._cut_sends:
            _complete(request)
        self._cut_sends.clear()
        barrier()


class WorkerLink:
    """A worker's end of a run's messages: it receives the plans, sends its job's reports
    and its errors, and hands every ask to cut an epoch to ``on_cut`` (with the epoch).
    ``sleep_waits``: its jobs' collectives wait sleeping (see :class:`MPIGroup`).

    Created by the worker for the run; :meth:`close` ends it.
    """

    def __init__(self, on_cut: Callable[[int], None], sleep_waits: bool = False) -> None:
        self._on_cut = on_cut
        self.sleep_waits = sleep_waits
        self._cut_box = np.zeros(1, dtype=np.int64)
        self._cut_recv: MPI.Request | None = None
        self._posted: list[MPI.Request] = []  # errors in flight, kept alive until the abort

    def recv_plan(self) -> Plan:
        """Wait (sleeping, not spinning) for the next plan from rank 0."""
        header = np.zeros(1, dtype=np.int64)
        _complete(_WORLD.Ibcast(header, root=0))
        payload = np.empty(int(header[0]), dtype=np.uint8)
        _WORLD.Bcast(payload, root=0)
        plan: Plan = pickle.loads(payload.tobytes())
        return plan

    def split(self, color: int | None, key: int) -> MPIGroup | None:
        """Collective over the world: the ranks passing the same ``color`` form one job's new
        group; ``None`` takes part and joins none."""
        return _split(color, key, sleep_waits=self.sleep_waits)

    def send_report(self, report: Report) -> None:
        """A job leader: send ``report`` to rank 0."""
        _complete(_WORLD.isend(report, dest=0, tag=Tag.REPORT))

    def post_error(self, info: Mapping[str, str]) -> None:
        """Post an unrecoverable error to rank 0 without waiting for delivery."""
        self._posted.append(_WORLD.isend(dict(info), dest=0, tag=Tag.ERROR))

    def poll(self) -> None:
        """Hand every ask to cut an epoch that has arrived to ``on_cut``.

        A receive stays posted between calls: a test of it sees a message that has arrived,
        where a probe can miss one until a later call has let MPI progress.
        """
        while True:
            if self._cut_recv is None:
                self._cut_recv = _WORLD.Irecv(self._cut_box, source=0, tag=Tag.CUT)
            if not self._cut_recv.Test():
                return
            self._cut_recv = None
            self._on_cut(int(self._cut_box[0]))

    def close(self) -> None:
        """At the end of the run: meet every rank, take the asks that have arrived, then
        cancel the posted receive (an ask still in flight is dropped with the world)."""
        barrier()
        self.poll()
        if self._cut_recv is not None:
            self._cut_recv.Cancel()
            self._cut_recv.Wait()
            self._cut_recv = None
