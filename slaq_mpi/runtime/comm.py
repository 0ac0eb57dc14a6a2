"""Every MPI call of slaq-mpi, behind small named wrappers.

The long waits do not busy-poll: MPICH spins at 100% CPU inside a blocking receive, which
steals cores from training when ranks outnumber cores. Waiting for the coordinator's plan, a
report, a barrier or a control exchange tests a request and sleeps between tests with a short
backoff (``_wait``). A job's own collectives (``MPIGroup.allreduce``, called every iteration)
block as usual on a node with a core per rank; on an oversubscribed node
(:func:`detect_oversubscription`) they too wait sleeping, so a rank waiting for a peer leaves
the CPU to the peer instead of spinning on it. The short collectives of a move (``Split``,
``Dup``, a group's ``bcast`` of a restored checkpoint) block as usual.
"""

from __future__ import annotations

import os
import pickle
import socket
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from mpi4py import MPI

from jobs.base import ReduceOp

TAG_REPORT = 11
TAG_ERROR = 12
TAG_START = 13
TAG_CUT = 14
_START_MESSAGE_MAX = 4000  # characters: well below mpi4py's 32 KiB receive buffer
_SLEEP_MIN = 0.0002
_SLEEP_MAX = 0.002
_OPS = {"sum": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN}
_WORLD = MPI.COMM_WORLD
_GROUP_SLEEP = 0.0001  # sleep between tests of a job's collective on an oversubscribed node
_GROUP_SPINS = 20  # tests before the first sleep: a collective whose peers are ready is quick
_oversubscribed = False


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


def _wait(request: MPI.Request, check: Callable[[], None] | None = None) -> Any:
    """Complete ``request`` by testing it with short sleeps in between (no spinning); ``check``
    is called between tests (it may raise to give up waiting)."""
    delay = _SLEEP_MIN
    while True:
        done, value = request.test()
        if done:
            return value
        if check is not None:
            check()
        time.sleep(delay)
        delay = min(delay * 1.5, _SLEEP_MAX)


def _wait_collective(request: MPI.Request, deadline: float | None = None) -> bool:
    """Complete a job's collective: a few quick tests, then tests with short sleeps. False if
    ``deadline`` (``time.monotonic()``) passes first (the request is left pending)."""
    for _ in range(_GROUP_SPINS):
        if request.Test():
            return True
    while not request.Test():
        if deadline is not None and time.monotonic() > deadline:
            return False
        time.sleep(_GROUP_SLEEP)
    return True


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
    launcher that binds each rank to its own core gives each a mask of one). If the ranks
    outnumber the CPUs, jobs' collectives wait sleeping from now on. Returns
    ``(busy ranks, cpus)`` of this node (cpus 0 on a node with no busy rank)."""
    global _oversubscribed
    local = _WORLD.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        mine = None if _WORLD.Get_rank() == 0 else (_cpu_set(),)
        masks = [m[0] for m in local.allgather(mine) if m is not None]  # the busy ranks'
    finally:
        local.Free()
    busy = len(masks)
    if all(m is not None for m in masks):
        cpus = len(frozenset[int]().union(*(m for m in masks if m is not None)))
    else:
        cpus = os.cpu_count() or 1
    _oversubscribed = busy > cpus
    return busy, cpus


class MPIGroup:
    """A job's group of ranks (implements :class:`jobs.base.GroupComm`)."""

    def __init__(self, comm: MPI.Comm, control: MPI.Comm | None = None) -> None:
        self._comm = comm
        self._control = control  # slaq's own exchanges (None: on ``comm``)
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
        done = _wait_collective(comm.Iallreduce(send, out, op=MPI.MAX), deadline)
        return out if done else None  # not done: the request stays pending, the caller ends the run

    def allreduce(self, array: np.ndarray, op: ReduceOp = "sum") -> np.ndarray:
        """Element-wise reduction over the group; every rank gets the result."""
        send = np.ascontiguousarray(array, dtype=np.float64)
        out = np.empty_like(send)
        if _oversubscribed and self.size > 1:
            _wait_collective(self._comm.Iallreduce(send, out, op=_OPS[op]))
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


def split(color: int | None, key: int, check: Callable[[], None] | None = None) -> MPIGroup | None:
    """Collective over the world: ranks passing the same ``color`` form one new group.

    Ranks passing ``None`` take part but get no group. Until every rank has arrived,
    ``check`` is called every few milliseconds: rank 0 raises from it when a worker posted
    an error (a rank that failed before the split would never arrive).
    """
    _wait(_WORLD.Ibarrier(), check)  # arrive without spinning; the split itself is then quick
    new = _WORLD.Split(MPI.UNDEFINED if color is None else color, key)
    return None if new == MPI.COMM_NULL else MPIGroup(new, new.Dup())


def barrier() -> None:
    """Wait (sleeping) until every rank of the world gets here."""
    _wait(_WORLD.Ibarrier())


def first_failure(message: str | None) -> tuple[int, str] | None:
    """Collective over the world: ``(rank, message)`` of the lowest rank that passed a
    message, or None if none did. Only rank 0 is given that rank's message (one small
    point-to-point); the other ranks get the rank and ``""``."""
    size, me = world_size(), world_rank()
    mine = np.array([me if message is not None else size], dtype=np.int32)
    lowest = np.zeros(1, dtype=np.int32)
    _wait(_WORLD.Iallreduce(mine, lowest, op=MPI.MIN))
    first = int(lowest[0])
    if first == size:
        return None
    if first == me:
        if me == 0:
            return first, message or ""
        _wait(_WORLD.isend((message or "")[:_START_MESSAGE_MAX], dest=0, tag=TAG_START))
    if me == 0:
        return first, str(_wait(_WORLD.irecv(source=first, tag=TAG_START)))
    return first, ""


def root_value(value: int) -> int:
    """Collective over the world: every rank gets rank 0's small integer ``value`` (the
    others pass any)."""
    buf = np.array([value], dtype=np.int32)
    _wait(_WORLD.Ibcast(buf, root=0))
    return int(buf[0])


def broadcast_plan(plan: Any) -> None:
    """Rank 0: send ``plan`` to every rank (they receive it with :func:`recv_plan`)."""
    payload = np.frombuffer(pickle.dumps(plan, protocol=pickle.HIGHEST_PROTOCOL), dtype=np.uint8)
    header = np.array([payload.size], dtype=np.int64)
    _wait(_WORLD.Ibcast(header, root=0))
    _WORLD.Bcast(payload, root=0)


def recv_plan() -> Any:
    """Workers: wait (sleeping, not spinning) for the next plan from rank 0."""
    header = np.zeros(1, dtype=np.int64)
    _wait(_WORLD.Ibcast(header, root=0))
    payload = np.empty(int(header[0]), dtype=np.uint8)
    _WORLD.Bcast(payload, root=0)
    return pickle.loads(payload.tobytes())


def send_report(report: Any) -> None:
    """A job leader: send ``report`` to rank 0."""
    _wait(_WORLD.isend(report, dest=0, tag=TAG_REPORT))


_posted: list[MPI.Request] = []


def post_error(info: Any) -> None:
    """Any worker: post an unrecoverable error to rank 0 without waiting for delivery."""
    _posted.append(_WORLD.isend(info, dest=0, tag=TAG_ERROR))  # kept alive until the abort


_cut_sends: list[tuple[MPI.Request, np.ndarray]] = []
_cut_box = np.zeros(1, dtype=np.int64)
_cut_recv: MPI.Request | None = None


def send_cut(leaders: list[int], epoch: int) -> None:
    """Rank 0: ask these job leaders to end epoch ``epoch`` at their next check (a job
    finished early and its cores are to be given out again). Does not wait for delivery."""
    _cut_sends[:] = [(r, b) for r, b in _cut_sends if not r.Test()]
    for dest in leaders:
        box = np.array([epoch], dtype=np.int64)
        _cut_sends.append((_WORLD.Isend(box, dest=dest, tag=TAG_CUT), box))


def cut_asked(epoch: int) -> bool:
    """Any worker: whether rank 0 asked to end epoch ``epoch`` early. Takes every ask that
    has arrived; asks for earlier epochs (they crossed that epoch's end) are dropped.

    A receive stays posted between calls: a test of it sees a message that has arrived,
    where a probe can miss one until a later call has let MPI progress.
    """
    global _cut_recv
    asked = False
    while True:
        if _cut_recv is None:
            _cut_recv = _WORLD.Irecv(_cut_box, source=0, tag=TAG_CUT)
        if not _cut_recv.Test():
            return asked
        _cut_recv = None
        asked |= int(_cut_box[0]) == epoch


def settle_cuts() -> None:
    """Rank 0, at the end of the run: complete its asks to end an epoch early (8-byte
    sends, complete once buffered)."""
    for request, _box in _cut_sends:
        _wait(request)
    _cut_sends.clear()


def stop_cut_listening() -> None:
    """Any worker, at the end of the run: take the asks that have arrived, then cancel the
    posted receive (an ask still in flight is dropped with the world)."""
    global _cut_recv
    cut_asked(-1)
    if _cut_recv is not None:
        _cut_recv.Cancel()
        _cut_recv.Wait()
        _cut_recv = None


def poll_error() -> Any | None:
    """Rank 0: a worker's posted error (see :func:`post_error`) if one is waiting, else None."""
    status = MPI.Status()
    if _WORLD.Iprobe(source=MPI.ANY_SOURCE, tag=TAG_ERROR, status=status):
        return _WORLD.recv(source=status.Get_source(), tag=TAG_ERROR)
    return None


def poll_message() -> tuple[str, Any] | None:
    """Rank 0: one waiting report or error, as ``("report"|"error", payload)``, else None."""
    error = poll_error()
    if error is not None:
        return "error", error
    status = MPI.Status()
    if _WORLD.Iprobe(source=MPI.ANY_SOURCE, tag=TAG_REPORT, status=status):
        return "report", _WORLD.recv(source=status.Get_source(), tag=TAG_REPORT)
    return None


def wait_message(deadline: float | None = None) -> tuple[str, Any] | None:
    """Rank 0: the next report or error, sleeping between probes; None at ``deadline``."""
    delay = _SLEEP_MIN
    while True:
        msg = poll_message()
        if msg is not None:
            return msg
        if deadline is not None and time.monotonic() >= deadline:
            return None
        time.sleep(delay)
        delay = min(delay * 1.5, _SLEEP_MAX)
