"""``launch(fn, *args, nprocs=N)``: a training function run on N forked
processes, the ranks of one process group, from a notebook or a script.

The rule kept here: the launching process never hangs on a job that cannot
finish, and is told which rank was lost. Each rank is a fork of this
process (so ``fn`` and its arguments are never pickled: a notebook's own
functions work), dies with its parent (``PR_SET_PDEATHSIG``), and joins the
group with ``timeout_s`` on every collective. When a rank dies (a signal, an
exit without a word) the others' next collective fails (gloo sees the
connection close, or the timeout passes) and they end with ``RankLost``;
whatever is still alive ``timeout_s`` plus a grace after the first rank
ended badly is killed. The launcher then raises ``RankLost`` naming the
rank that died and how.

A rank that hangs (a deadlock, a data iterable that never yields) ends
nothing: the others wait ``timeout_s`` for it at their next collective and
end with ``RankLost``. A rank ending so has found the group broken, so the
ranks still alive then get ``ENDING_S`` to end too, and the launcher ends
the rest: a hung rank is ended ``timeout_s`` + ``ENDING_S`` after it stopped
answering. Each rank tells the launcher, through memory they share, which
step it began last and when (``stepping``, called by the Trainer), so the
``RankLost`` raised names the rank that stopped answering, its last step
and how long before the launcher ended it.

What comes back is rank 0's return value, sent as JSON through a pipe
(orjson; no pickle): None, bools, ints, floats (exactly, float64), strings,
lists and dicts with str keys. A rank that raises sends its traceback as
text, raised here as ``LaunchError`` naming the rank.

CUDA cannot survive a fork: a process that initialised it is refused
(``LaunchError``) before anything is forked. With CUDA available and as many
devices as ranks, the ranks use NCCL, rank i on device i (CUDA first touched
in the child); else gloo on CPU, each rank given its share of the cores.
"""

from __future__ import annotations

import ctypes
import datetime
import mmap
import os
import selectors
import signal
import socket
import struct
import sys
import time
import traceback

import orjson

from .._base.errors import LaunchError, RankLost, SomatizeTypeError, SomatizeValueError

GRACE_S = 15  # after the group's timeout: how long the launcher waits for the ranks left before killing them
# After a rank ended with RankLost (a collective of its failed: the group is broken), how long the ranks still
# alive have to end by themselves (closing their Recorders) before the launcher ends them as not answering.
ENDING_S = 5
# A rank's last step begun and perf_counter_ns then (CLOCK_MONOTONIC: one clock for every process of the
# machine), in memory shared with the launcher: step -1 until a Trainer's first step.
_BEAT = struct.Struct("qq")
_beat = None  # in a rank launch forked: (the memory shared with the launcher, this rank's offset in it)
# A rank's first bytes on its pipe: ARRIVING as it calls init_process_group, JOINED once in the group. A
# forked child can hang before it gets there (a lock another thread of the parent held at the fork stays
# held): with no rank joined, no collective times out, so the launcher itself bounds the join by
# timeout_s + GRACE_S, and names a rank that never arrived (the others were waiting for it).
ARRIVING, JOINED = b".", b"+"
_PR_SET_PDEATHSIG = 1


def launch(fn, *args, nprocs=2, backend=None, timeout_s=60, **kwargs):
    """Run ``fn(*args, **kwargs)`` on ``nprocs`` forked processes, ranks 0
    to nprocs-1 of one ``torch.distributed`` process group (``backend``:
    ``"gloo"`` or ``"nccl"``, by default NCCL when CUDA has a device for each
    rank, else gloo), every collective bounded by ``timeout_s`` seconds
    and a rank's way into the group by ``timeout_s`` + 15 (a forked rank
    that hangs before it, every rank even, is killed and named). Inside
    ``fn``, a ``Trainer`` trains data-parallel across the ranks and
    ``torch.distributed.get_rank()`` says which one it is. Returns what rank
    0 returns (JSON-like plain data). Raises ``RankLost`` naming a rank that
    died, or one that stopped answering (the others waited ``timeout_s``
    for it at a collective; the launcher ends it a few seconds after them,
    and names its last step), ``LaunchError`` naming one that raised.
    Linux (fork, pidfd, PR_SET_PDEATHSIG, shared memory)."""
    import torch

    if not callable(fn):
        raise SomatizeTypeError(f"launch(fn, ...) takes the function each rank runs; got {type(fn).__name__}")
    if isinstance(nprocs, bool) or not isinstance(nprocs, int) or nprocs < 1:
        raise SomatizeValueError(f"nprocs={nprocs!r}: give the number of ranks, a positive integer, like nprocs=2")
    if not (isinstance(timeout_s, (int, float)) and timeout_s > 0):
        raise SomatizeValueError(f"timeout_s={timeout_s!r}: give the collectives' timeout in seconds, like 60")
    if torch.cuda.is_initialized():
        raise LaunchError(
            "CUDA is already initialised in this process, and a forked rank cannot use it (the fork would "
            "crash). Restart the kernel and call launch(...) before anything touches CUDA (no .cuda(), "
            "no torch.cuda.* call that allocates), creating the model on the device inside fn; or run a "
            "script with python -m torch.distributed.run --nproc-per-node=N script.py"
        )
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        raise LaunchError("torch.distributed is already initialised in this process: launch(...) starts its own "
                          "process group in each rank; call it from a process that has none")
    if backend is None:
        # device_count asks NVML first, so the parent's CUDA stays untouched (is_available would init the
        # driver, and a forked rank could not use CUDA then)
        backend = "nccl" if torch.cuda.device_count() >= nprocs else "gloo"
    port = _free_port()
    parent = os.getpid()
    beats = mmap.mmap(-1, _BEAT.size * nprocs)  # shared with the forks (MAP_SHARED)
    for rank in range(nprocs):
        _BEAT.pack_into(beats, rank * _BEAT.size, -1, 0)
    children = {}  # pid -> (rank, read end of its pipe)
    try:
        for rank in range(nprocs):
            read, write = os.pipe()
            pid = os.fork()
            if pid == 0:  # the rank: never returns
                os.close(read)
                _rank(rank, nprocs, backend, port, timeout_s, parent, write, (beats, rank * _BEAT.size), fn, args,
                      kwargs)
            os.close(write)
            children[pid] = (rank, read)
        ended = _wait(children, timeout_s)
        steps = {rank: _BEAT.unpack_from(beats, rank * _BEAT.size) for rank in range(nprocs)}
    finally:
        beats.close()
    return _outcome(ended, nprocs, timeout_s, steps)


def stepping(step, at_ns):
    """In a rank ``launch`` forked, tell the launcher that step ``step``
    began at ``at_ns`` (``time.perf_counter_ns()``): what it says of a rank
    that stops answering. Elsewhere nothing."""
    if _beat is not None:
        _BEAT.pack_into(_beat[0], _beat[1], step, at_ns)


def _deadline(timeout_s, launched=None, first_bad=None, first_lost=None):
    """When the launcher ends the ranks still alive (``time.monotonic``
    seconds), or None: ``timeout_s`` + GRACE_S after ``launched`` (given
    while a rank has not joined the group) and after ``first_bad`` (the
    first rank that ended badly: the others' next collective fails at once,
    or within the timeout), and ENDING_S after ``first_lost`` (the first
    that ended with RankLost: the group is broken, so a rank that has not
    ended by then stopped answering, or waits for one that did)."""
    due = [t + timeout_s + GRACE_S for t in (launched, first_bad) if t is not None]
    if first_lost is not None:
        due.append(first_lost + ENDING_S)
    return min(due, default=None)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank(rank, nprocs, backend, port, timeout_s, parent, write, beat, fn, args, kwargs):
    global _beat
    _beat = beat  # where stepping tells the launcher this rank's steps
    code, message = 1, {}
    try:
        try:
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        except (AttributeError, OSError):  # not Linux: the group's timeout still bounds the job
            pass
        if os.getppid() != parent:  # the parent died before the line above
            os._exit(1)
        import torch
        import torch.distributed as dist

        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), LOCAL_RANK=str(rank),
                          WORLD_SIZE=str(nprocs), LOCAL_WORLD_SIZE=str(nprocs))
        if backend == "nccl":
            torch.cuda.set_device(rank)
        else:  # the ranks share the cores, as torchrun's OMP_NUM_THREADS does
            torch.set_num_threads(max(1, (os.cpu_count() or 1) // nprocs))
        os.write(write, ARRIVING)
        dist.init_process_group(backend, rank=rank, world_size=nprocs,
                                timeout=datetime.timedelta(seconds=timeout_s))
        os.write(write, JOINED)
        value = fn(*args, **kwargs)
        if rank == 0:
            try:
                message = {"value": orjson.loads(orjson.dumps(value))}
            except (TypeError, orjson.JSONEncodeError):
                message = {"error": f"rank 0 returned a {type(value).__name__}, which launch sends back as JSON "
                                    "and cannot: return plain data (numbers, strings, lists, dicts with str keys; "
                                    "a tensor as t.tolist())", "type": "SomatizeTypeError"}
                raise SomatizeTypeError(message["error"]) from None
        code = 0
        dist.destroy_process_group()
    except BaseException as e:
        sys.last_exc = sys.last_value = e  # what the record says ended its run (record/_flusher)
        if "error" not in message:
            message = {"error": "".join(traceback.format_exception(e)), "type": type(e).__name__}
    finally:
        try:
            from ..record._flusher import close_all

            close_all()  # a Recorder left open: flushed, and its run interrupted with its cause
        except BaseException:
            pass
        try:
            data = orjson.dumps(message)
            while data:
                data = data[os.write(write, data):]
        except BaseException:
            pass
        os._exit(code)


def _wait(children, timeout_s):
    """Each rank's (rank, pid, how it ended, its message, its place in the
    order the ranks ended, how it hung before joining the group, when the
    launcher ended it or None), once all have ended or been killed when
    ``_deadline`` says."""
    sel = selectors.DefaultSelector()
    got, ended, order = {}, {}, []  # order: the ranks' pids as they ended
    pipes = {}
    for pid, (_, read) in children.items():
        os.set_blocking(read, False)  # a rank's pipe is read as far as it goes when the rank ends
        sel.register(read, selectors.EVENT_READ, ("pipe", pid))
        sel.register(os.pidfd_open(pid), selectors.EVENT_READ, ("pid", pid))
        got[pid], pipes[pid] = b"", read
    launched = time.monotonic()  # None once every rank has joined
    first_bad = first_lost = kill_again = None
    unjoined_killed = set()
    killed = {}  # pid -> perf_counter_ns when the launcher ended it

    def drain(pid):
        """Read what the rank's pipe holds; closed once the rank's end is reached."""
        while pipes[pid] is not None:
            try:
                chunk = os.read(pipes[pid], 1 << 16)
            except BlockingIOError:
                return
            got[pid] += chunk
            if not chunk:
                sel.unregister(pipes[pid])
                os.close(pipes[pid])
                pipes[pid] = None

    try:
        while len(ended) < len(children):
            due = [d for d in (_deadline(timeout_s, launched, first_bad, first_lost), kill_again) if d is not None]
            deadline = min(due, default=None)
            events = sel.select(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if not events and deadline is not None and time.monotonic() >= deadline:
                for pid in children:
                    if pid not in ended:
                        if not got[pid].startswith(ARRIVING + JOINED):
                            unjoined_killed.add(pid)
                        killed.setdefault(pid, time.perf_counter_ns())
                        os.kill(pid, signal.SIGKILL)
                launched = first_bad = first_lost = None
                kill_again = time.monotonic() + GRACE_S
                continue
            for key, _ in events:
                kind, pid = key.data
                if kind == "pipe":
                    drain(pid)
                    if launched is not None and all(got[p].startswith(ARRIVING + JOINED) for p in children):
                        launched = None  # every rank in the group: the collectives' timeout bounds them now
                    continue
                sel.unregister(key.fd)
                os.close(key.fd)
                _, status = os.waitpid(pid, 0)
                ended[pid] = status
                order.append(pid)
                drain(pid)  # its message, written before it exited
                if status != 0 and first_bad is None:
                    first_bad = time.monotonic()
                if first_lost is None and pid not in killed and (_message(got[pid]) or {}).get("type") == "RankLost":
                    first_lost = time.monotonic()
        for pid in pipes:  # what the pipes still hold
            drain(pid)
    except BaseException:  # Ctrl-C in the notebook: the ranks go too
        for pid in children:
            if pid not in ended:
                try:
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
                except OSError:
                    pass
        raise
    finally:
        sel.close()
        for read in pipes.values():  # one still open is held by a process of the rank's own (a DataLoader worker)
            if read is not None:
                os.close(read)
    out = []
    for pid, (rank, _) in children.items():
        message = _message(got[pid])
        # killed before joining: 2 when it never arrived at the group, 1 when it was waiting in it
        hung = 0 if pid not in unjoined_killed else 1 if got[pid].startswith(ARRIVING) else 2
        out.append((rank, pid, ended[pid], message, order.index(pid), hung, killed.get(pid)))
    return sorted(out)


def _message(said):
    """A rank's message (a dict) from what its pipe held, or None (none, or cut off)."""
    said = said.removeprefix(ARRIVING).removeprefix(JOINED)
    try:
        message = orjson.loads(said) if said else None
    except orjson.JSONDecodeError:
        return None
    return message if isinstance(message, dict) else None


def _outcome(ranks, nprocs, timeout_s, steps):
    """Rank 0's value, or the error naming the rank that caused the job's
    end. ``steps``: each rank's last step begun and perf_counter_ns then."""
    # A rank the launcher killed for never joining the group is the cause: the others waited for it
    # (their init_process_group timed out, or they were killed too).
    hung = sorted((-hung, rank, pid) for rank, pid, _, _, _, hung, _ in ranks if hung)
    if hung:
        _, rank, pid = hung[0]
        raise RankLost(
            f"rank {rank} of {nprocs} (pid {pid}) never joined the process group: {timeout_s + GRACE_S} s "
            f"after the launch (timeout_s={timeout_s}, and {GRACE_S} s more) it was still on its way, and was "
            "killed with the ranks left. A forked rank hangs like this when another thread of this process "
            "held a lock at the fork: launch(...) from a fresh kernel, or run a script with "
            "python -m torch.distributed.run --nproc-per-node=N script.py", lost=rank)
    by_end = sorted(ranks, key=lambda r: r[4])
    # the first rank to end without a word, the launcher not ending it, is the one lost
    lost = [(rank, pid, status) for rank, pid, status, message, _, _, killed in by_end if killed is None
            and (os.WIFSIGNALED(status) or message is None or (status != 0 and "error" not in message))]
    # the rank that raised first is the cause; the others' collectives then failed (RankLost, or torch's error)
    raised = [(rank, message) for rank, _, _, message, _, _, _ in by_end if message and "error" in message]
    others = "; ".join(f"rank {r}: {m['type']}" for r, m in raised) or "none raised"
    if lost:
        rank, pid, status = lost[0]
        how = (f"was killed by {signal.Signals(os.WTERMSIG(status)).name}" if os.WIFSIGNALED(status)
               else f"exited with status {os.WEXITSTATUS(status)} without a word")
        raise RankLost(
            f"rank {rank} of {nprocs} (pid {pid}) {how}; the other ranks stopped ({others}). "
            "Its run, if it recorded one, lists as interrupted; relaunch on the same number of ranks to "
            "resume from the last checkpoint.", lost=rank)
    first = next(((r, m) for r, m in raised if m["type"] != "RankLost"), None)
    if first is not None:  # a rank that raised is the cause, whatever the launcher ended after it
        rank, message = first
        raise LaunchError(f"rank {rank} of {nprocs} raised {message['type']}:\n{message['error']}", rank=rank)
    # ranks the launcher ended, once the others' collectives had failed: the one whose last step began
    # first stopped answering first (the others may have waited for it)
    stuck = sorted((steps[rank], rank, pid, killed) for rank, pid, status, message, _, _, killed in ranks
                   if killed is not None and os.WIFSIGNALED(status) and not (message and "error" in message))
    if stuck:
        (step, at), rank, pid, killed = stuck[0]
        last = (f"its last step, step {step}, began {(killed - at) / 1e9:.1f} s before the launcher ended it"
                if step >= 0 else "it had begun no step of a Trainer when the launcher ended it")
        raise RankLost(
            f"rank {rank} of {nprocs} (pid {pid}) stopped answering: {last}. The other ranks waited "
            f"timeout_s={timeout_s} s for it at a collective, or found the group broken, and stopped ({others}); "
            "the launcher then ended it (SIGKILL). A rank stops answering "
            "when it hangs (a deadlock, a data iterable that never yields, a wait on something that never "
            f"comes) or works longer than timeout_s between two collectives: look at what rank {rank} does "
            + (f"after step {step} begins" if step >= 0 else "before its first step")
            + ", or launch(..., timeout_s=) with more. Its run, if it recorded one, lists as interrupted; "
            "relaunch on the same number of ranks to resume from the last checkpoint.", lost=rank)
    if raised:
        rank, message = raised[0]
        raise RankLost(f"rank {rank} of {nprocs} raised {message['type']}:\n{message['error']}", rank=rank)
    return next(m for r, _, _, m, _, _, _ in ranks if r == 0).get("value")
