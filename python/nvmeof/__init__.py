"""NVMe over Fabrics from Python: one namespace over several paths, as a volume.

    import nvmeof

    with nvmeof.Volume(["127.0.0.1:4420", "127.0.0.2:4420"], nqn="nqn.2024-01.io:ns") as vol:
        buf = nvmeof.alloc(vol.block_size * 8)
        vol.pread(buf, 0)                              # blocking, the GIL released
        fut = vol.submit_read(buf, 4096)               # asynchronous
        fut.result()
        await vol.read(buf, 0)                         # from asyncio
        ring = vol.ring(nvmeof.alloc(32 * 4096), 4096)  # batches, no Python object per I/O
        ring.read(np.arange(32), offsets)              # one call starts 32 reads
        n = ring.reap(slots_out, status_out, timeout=1.0)

Offsets and lengths are bytes, multiples of `vol.block_size`. Buffers are any contiguous
buffer-protocol object (bytearray, memoryview, numpy array, CPU torch tensor).

Volumes run on an engine (reactor threads, one control thread, a small pool): by default the
process's shared one; `nvmeof.Host(reactors=2, poll="busy")` makes one of your own, and
`nvmeof.Volume(..., host=h)` opens a volume on it.

fork: a volume (or a Host) belongs to the process that opened it. Using it in a forked child (a
PyTorch DataLoader worker) raises ForkedVolumeError; open a new Volume in the child instead (in
the DataLoader's worker_init_fn).

The binding goes through the C API (nvmeof.h): its completion queue and eventfd are what
asyncio and polling loops need, and the Python package and every other FFI user then share one
tested surface.
"""

from __future__ import annotations

import asyncio
import atexit
import errno as _errno
import json
import logging
import os
import select
import threading
from typing import Iterable, List, Optional, Sequence, Tuple

from . import _core

__all__ = ["Host", "Volume", "Future", "Ring", "NvmeError", "ForkedVolumeError", "alloc", "status_str"]

_log = logging.getLogger("nvmeof")
_LEVELS = {3: logging.ERROR, 4: logging.WARNING, 6: logging.INFO}


def _on_log(level: int, msg: str) -> None:
    _log.log(_LEVELS.get(level, logging.WARNING), "%s", msg)


# The library's diagnostics go to the "nvmeof" logger; back to stderr before the interpreter
# goes away (a library thread must not wait for a GIL that no longer exists).
_core.set_log_handler(_on_log)
atexit.register(_core.set_log_handler, None)


def status_str(status: int) -> str:
    """A short name of an NVMe status, e.g. 'generic/lba-out-of-range (0x4080, dnr)'."""
    return _core.status_str(status)


class NvmeError(OSError):
    """An I/O completed with an NVMe error status (after the volume's retries and failover).

    `status` is the raw 15-bit status field; `sct`, `sc` and `dnr` its parts."""

    def __init__(self, status: int, what: str = "I/O"):
        self.status = status
        self.sct = (status >> 8) & 0x7
        self.sc = status & 0xFF
        self.dnr = bool((status >> 14) & 1)
        super().__init__(_errno.EIO, f"nvmeof: {what} failed: {status_str(status)}")


class ForkedVolumeError(RuntimeError):
    """A volume, or a Host, used in a process forked after it was opened."""


def _forked(what: str, pid: int) -> ForkedVolumeError:
    return ForkedVolumeError(
        f"nvmeof: this {what} was opened by process {pid} and cannot be used in process "
        f"{os.getpid()} (a fork child): open a new nvmeof.{what} in the child, e.g. in the "
        "DataLoader's worker_init_fn")


def alloc(nbytes: int, node: Optional[int] = None) -> memoryview:
    """`nbytes` zeroed, page-aligned bytes on NUMA node `node` (None: where the caller runs).

    Returns a writable memoryview (numpy.frombuffer, torch.frombuffer accept it); the memory is
    freed when the last view of it goes."""
    if nbytes <= 0:
        raise ValueError(f"nvmeof.alloc: nbytes must be > 0, got {nbytes}")
    return memoryview(_core.Buffer(nbytes, -1 if node is None else int(node)))


class Future:
    """The outcome of one asynchronous I/O. `result()` drives the volume's completions itself
    (no background thread), so it works in a plain polling loop."""

    __slots__ = ("_vol", "_done", "_status", "_nbytes", "_callbacks", "_what")

    def __init__(self, vol: "Volume", nbytes: int, what: str):
        self._vol = vol
        self._done = False
        self._status = 0
        self._nbytes = nbytes
        self._callbacks = None
        self._what = what

    def done(self) -> bool:
        return self._done

    def result(self, timeout: Optional[float] = None) -> int:
        """Bytes transferred; raises NvmeError for an error status, TimeoutError after
        `timeout` seconds."""
        if not self._done:
            self._vol._wait_for(self, timeout)
        if self._status:
            raise NvmeError(self._status, self._what)
        return self._nbytes

    def exception(self, timeout: Optional[float] = None) -> Optional[BaseException]:
        try:
            self.result(timeout)
        except NvmeError as e:
            return e
        return None

    @property
    def status(self) -> int:
        return self._status

    def add_done_callback(self, fn) -> None:
        if self._done:
            fn(self)
        else:
            self._callbacks = (self._callbacks or []) + [fn]

    def _complete(self, status: int) -> None:
        self._status = status
        self._done = True
        if self._callbacks:
            for fn in self._callbacks:
                fn(self)


_OP_NAMES = {_core.OP_READ: "read", _core.OP_WRITE: "write", _core.OP_FLUSH: "flush",
             _core.OP_WRITE_ZEROES: "write zeroes"}


_POLL = {"adaptive": _core.POLL_ADAPTIVE, "busy": _core.POLL_BUSY, "sleep": _core.POLL_SLEEP}
_PLACEMENT = {"numa": _core.PLACEMENT_NUMA, "unpinned": _core.PLACEMENT_UNPINNED}


class Host:
    """The engine volumes run on: `reactors` reactor threads (each an io_uring that carries the
    I/O of every volume placed on it), one control thread (admin queues, keep-alive, reconnects)
    and a small pool for blocking work. Without one, volumes share the process's engine for
    their `reactors`; with `Volume(..., host=h)` they run on this one.

    Host(reactors=1, poll="adaptive", placement="numa", cpus=None, metrics_listen=None,
         caller_drive=False)
    poll: "adaptive" (spin briefly while I/O is outstanding, sleep when idle), "busy" (never
    sleep: the lowest latency, a whole CPU per reactor) or "sleep".
    placement: "numa" (reactor i pinned to cpus[i % len(cpus)], or to CPUs spread over the
    nodes when cpus is None; memory on the reactor's node) or "unpinned".
    metrics_listen: "ADDR:PORT" (port 0 picks one) serves the engine's Prometheus metrics at
    /metrics (nvmeof_host_*, and nvmeof_controller_* once per controller); `metrics_port` is the
    port bound. A library built without metrics support raises OSError (EOPNOTSUPP) for it.
    caller_drive: a thread waiting in `Ring.reap(..., timeout=...)` runs its volume's reactor
    itself, spinning, while the reactor's own thread sleeps (it takes the reactor back once no
    caller has driven it for a millisecond). For a loop that reaps and submits in batches: no
    hand-over between threads per batch and one busy thread fewer. While the loop runs Python
    code between reaps nothing polls that reactor, so keep the gaps short (under a millisecond).

    close() gives back this handle's reference: volumes opened on the host keep it running, and
    its threads stop when the last of them closes. Usable as a context manager.
    """

    def __init__(self, reactors: int = 1, poll: str = "adaptive", placement: str = "numa",
                 cpus: Optional[Sequence[int]] = None, metrics_listen: Optional[str] = None,
                 caller_drive: bool = False):
        if not 1 <= reactors <= 256:
            raise ValueError(f"nvmeof.Host: reactors must be in 1..256, got {reactors}")
        if poll not in _POLL:
            raise ValueError(f"nvmeof.Host: poll must be one of {', '.join(_POLL)}, got {poll!r}")
        if placement not in _PLACEMENT:
            raise ValueError(f"nvmeof.Host: placement must be one of {', '.join(_PLACEMENT)}, "
                             f"got {placement!r}")
        cpu_list = None if cpus is None else [int(c) for c in cpus]
        if cpu_list is not None and any(c < 0 for c in cpu_list):
            raise ValueError(f"nvmeof.Host: cpus must be CPU numbers >= 0, got {cpu_list}")
        self._pid = os.getpid()
        self._h = None
        self._h = _core.Host(reactors, _POLL[poll], _PLACEMENT[placement], cpu_list, metrics_listen or "",
                             bool(caller_drive))
        self.caller_drive: bool = bool(caller_drive)
        self.poll: str = poll
        self.placement: str = placement
        self.cpus: Optional[List[int]] = cpu_list

    def close(self) -> None:
        """Gives back this handle's reference (volumes on the host keep it). Idempotent."""
        h, self._h = self._h, None
        if h is not None:
            h.close()  # in a forked child this only forgets the handle

    def __enter__(self) -> "Host":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        if getattr(self, "_h", None) is not None:
            try:
                self.close()
            except Exception:
                pass

    @property
    def closed(self) -> bool:
        return self._h is None

    def _core(self):
        if self._h is None:
            raise ValueError("nvmeof: the Host is closed")
        if os.getpid() != self._pid:
            raise _forked("Host", self._pid)
        return self._h

    def stats(self) -> dict:
        """What the engine runs and costs now: reactors, threads (reactors, the control thread and
        the pool), volumes open on it, reactor_cpu_ns and reactor_wakeups (over all reactors),
        subsystems and controllers (volumes of one subsystem over the same paths and settings
        share its controllers)."""
        return self._core().stats()

    def add_discovery(self, addr: str, hostnqn: Optional[str] = None) -> None:
        """Persistent discovery: keeps a connection to the discovery controller at `addr`, reads
        its log at each connect and change event, and applies it to the volumes open on this host:
        a port listed for a volume's subsystem becomes a path, one no longer listed is removed.
        Returns at once. FileExistsError when it is watched already."""
        self._core().add_discovery(addr, hostnqn or "")

    def remove_discovery(self, addr: str) -> None:
        """Stops watching a discovery controller. FileNotFoundError when it is not watched."""
        self._core().remove_discovery(addr)

    def discovery(self) -> list:
        """The discovery controllers it watches: address, connected, log_reads, change_events,
        reconnects, genctr, entries, last_error."""
        return json.loads(self._core().discovery_json())

    def namespace_events(self) -> list:
        """Namespace changes its controllers reported since the last call, oldest first: dicts
        with kind ("added", "resized", "removed"), subnqn, nsid, size_blocks, block_size."""
        return json.loads(self._core().namespace_events_json())

    @property
    def reactors(self) -> int:
        return self.stats()["reactors"]

    @property
    def metrics_port(self) -> int:
        """The TCP port of the metrics endpoint (metrics_listen), 0 when there is none."""
        return self._core().metrics_port()

    @property
    def threads(self) -> int:
        return self.stats()["threads"]

    @property
    def volumes(self) -> int:
        """Volumes open on the host now."""
        return self.stats()["volumes"]

    def __repr__(self) -> str:
        if self._h is None:
            return "<nvmeof.Host closed>"
        s = self.stats()
        return (f"<nvmeof.Host {s['reactors']} reactors ({self.poll}, {self.placement}), "
                f"{s['volumes']} volumes>")


class Volume:
    """One namespace over one or more paths (`"addr:port"`, `"tcp://[::1]:4420"`).

    Volume(paths, nqn=..., nsid=1, queue_depth=256, reactors=1, no_path_timeout=30.0,
           keep_alive_timeout=None, io_deadline=0.0, host=None)
    keep_alive_timeout: seconds; None: the shortest the controller allows (100 ms on the
    embedded target), the default of the C and C++ APIs too, since it bounds how soon a silent
    path is detected and how long its writes wait to be fenced (2 x KATO + CQT); 0: none. A
    host too loaded to answer in time has the path failed and reconnected (no I/O lost); such
    a host may ask for more (e.g. 5.0).
    host: an nvmeof.Host to run on (its reactors, poll mode and CPUs; `reactors` is then the
    host's, not given here). None: the process's shared engine with `reactors` reactors (1).
    io_deadline: seconds a command may take before its path is failed (0: derived from the
    path's latency, at most 25 ms; raise it on a heavily loaded host).
    Volume(discovery="addr:port", nqn=...)   every path a discovery controller lists
    hostnqn: the host NQN to connect as ("" derives one from a per-process host id).
    dhchap_secret / dhchap_ctrl_secret: DH-HMAC-CHAP secrets as `nvme gen-dhchap-key` prints
    them ("DHHC-1:0X:...:") or "@PATH" of a file; a wrong key raises PermissionError.
    tls_psk: NVMe/TCP TLS 1.3 with this pre-shared key as `nvme gen-tls-key` prints it
    ("NVMeTLSkey-1:0X:...:") or "@PATH" of a file; every queue of every path runs inside TLS.
    A refused key raises PermissionError (so does a plaintext volume on a port that requires
    TLS), a port that does not offer TLS OSError (EPROTONOSUPPORT), a malformed key ValueError.
    """

    def __init__(self, paths: Sequence[str] = (), nqn: str = "", *, nsid: int = 1,
                 queue_depth: int = 256, reactors: Optional[int] = None,
                 no_path_timeout: float = 30.0,
                 keep_alive_timeout: Optional[float] = None, io_deadline: float = 0.0,
                 discovery: Optional[str] = None, hostnqn: str = "",
                 dhchap_secret: str = "", dhchap_ctrl_secret: str = "", tls_psk: str = "",
                 host: Optional[Host] = None):
        if isinstance(paths, str):
            paths = [paths]
        paths = list(paths)
        if not nqn:
            raise ValueError("nvmeof.Volume: nqn (the subsystem NQN) is required")
        if not paths and not discovery:
            raise ValueError("nvmeof.Volume: give at least one path address or discovery=")
        if not 1 <= queue_depth <= 65536:
            raise ValueError(f"nvmeof.Volume: queue_depth must be in 1..65536, got {queue_depth}")
        if keep_alive_timeout is not None and keep_alive_timeout < 0:
            raise ValueError(f"nvmeof.Volume: keep_alive_timeout must be >= 0 (or None), got "
                             f"{keep_alive_timeout}")
        if keep_alive_timeout is None:
            kato_ms = _core.KATO_SHORTEST
        else:  # a positive timeout never rounds down to 0 (none)
            kato_ms = 0 if keep_alive_timeout == 0 else max(1, round(keep_alive_timeout * 1000))
        if host is not None:
            if not isinstance(host, Host):
                raise TypeError(f"nvmeof.Volume: host must be an nvmeof.Host, got "
                                f"{type(host).__name__}")
            if reactors is not None:
                raise ValueError("nvmeof.Volume: reactors is the Host's (nvmeof.Host(reactors=...)), "
                                 "not given with host=")
        h = host._core() if host is not None else None
        self._pid = os.getpid()
        self._v = None
        self._v = _core.Volume(paths, nqn, nsid, queue_depth, 1 if reactors is None else reactors,
                               int(no_path_timeout * 1000), kato_ms,
                               int(io_deadline * 1000), discovery or "", hostnqn,
                               dhchap_secret, dhchap_ctrl_secret, tls_psk, h)
        self.block_size: int = self._v.block_size
        self.size: int = self._v.size
        self.queue_depth: int = queue_depth
        self._efd = self._v.event_fd
        self._pending = {}          # cookie -> (future, buffer view kept alive)
        self._rings = {}            # ring tag -> Ring (held while the volume is open: its buffer
                                    # must outlive the ring's I/O in flight)
        self._next_ring = 0
        self._next_cookie = 1
        self._lock = threading.RLock()  # a done callback may submit more I/O
        self._loops = set()         # asyncio loops with a reader on the eventfd

    # -- lifetime -------------------------------------------------------------------------------
    def close(self) -> None:
        """Waits for I/O in flight, then disconnects. Idempotent."""
        v, self._v = self._v, None
        if v is None:
            return
        for loop in list(self._loops):
            try:
                loop.remove_reader(self._efd)
            except Exception:  # the loop may be closed already
                pass
        self._loops.clear()
        if os.getpid() != self._pid:
            v.close()  # in a forked child: only forgets the handle (the parent owns the volume)
            return
        v.close()
        # I/O that was in flight has completed meanwhile; settle its futures.
        for fut, _ in self._pending.values():
            if not fut._done:
                fut._complete(0x4370)  # host pathing error, DNR: the volume went away
        self._pending.clear()

    def __enter__(self) -> "Volume":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        if getattr(self, "_v", None) is not None:
            try:
                self.close()
            except Exception:
                pass

    @property
    def closed(self) -> bool:
        return self._v is None

    @property
    def event_fd(self) -> int:
        """An eventfd readable while completions wait; `drain()` them."""
        self._core()
        return self._efd

    def _core(self):
        if self._v is None:
            raise ValueError("nvmeof: I/O on a closed volume")
        if os.getpid() != self._pid:
            raise _forked("Volume", self._pid)
        return self._v

    # -- argument checks ------------------------------------------------------------------------
    def _view(self, buf, offset: int, writable: bool, what: str) -> memoryview:
        try:
            mv = memoryview(buf)
        except TypeError:
            mv = None
            # torch tensors do not export the buffer protocol; a CPU tensor's numpy() view
            # shares its memory (detach() too), so I/O lands in the tensor itself.
            if type(buf).__module__.startswith("torch") and hasattr(buf, "numpy"):
                dev = getattr(buf, "device", None)
                if dev is not None and getattr(dev, "type", "cpu") != "cpu":
                    raise TypeError(f"nvmeof: {what}: a torch tensor must be on the CPU, this "
                                    f"one is on {dev}") from None
                mv = memoryview(buf.detach().numpy())
        if mv is None:
            raise TypeError(f"nvmeof: {what}: buffer must support the buffer protocol "
                            f"(bytearray, memoryview, numpy array), got {type(buf).__name__}") from None
        if not mv.c_contiguous:
            raise ValueError(f"nvmeof: {what}: buffer must be C-contiguous")
        if writable and mv.readonly:
            raise TypeError(f"nvmeof: {what}: buffer is read-only")
        if mv.format != "B" or mv.ndim != 1:
            mv = mv.cast("B")
        n = mv.nbytes
        bs = self.block_size
        if n == 0 or n % bs:
            raise ValueError(f"nvmeof: {what}: buffer size {n} is not a positive multiple of "
                             f"the block size {bs}")
        if offset < 0 or offset % bs:
            raise ValueError(f"nvmeof: {what}: offset {offset} is not a multiple of the block "
                             f"size {bs}")
        if offset + n > self.size:
            raise ValueError(f"nvmeof: {what}: range {offset}+{n} is beyond the end of the "
                             f"volume ({self.size} bytes)")
        return mv

    # -- blocking I/O ---------------------------------------------------------------------------
    def pread(self, buf, offset: int) -> int:
        """Reads len(buf) bytes at `offset` into `buf`; returns the byte count."""
        v = self._core()
        mv = self._view(buf, offset, True, "pread")
        st = v.pread(mv, offset)
        if st:
            raise NvmeError(st, "read")
        return mv.nbytes

    def pwrite(self, buf, offset: int) -> int:
        """Writes `buf` at `offset`; returns the byte count."""
        v = self._core()
        mv = self._view(buf, offset, False, "pwrite")
        st = v.pwrite(mv, offset)
        if st:
            raise NvmeError(st, "write")
        return mv.nbytes

    def flush(self) -> None:
        st = self._core().flush()
        if st:
            raise NvmeError(st, "flush")

    # -- asynchronous I/O -----------------------------------------------------------------------
    def _submit(self, op: int, mv, offset: int, length: int) -> Future:
        v = self._core()
        fut = Future(self, length, _OP_NAMES[op])
        with self._lock:
            cookie = self._next_cookie
            self._next_cookie += 1
            self._pending[cookie] = (fut, mv)
            while True:
                rc = v.submit(op, mv, offset, length, cookie)
                if rc == 0:
                    return fut
                # Every slot busy (-EAGAIN): complete some, then retry.
                self._wait_locked(None)

    def submit_read(self, buf, offset: int) -> Future:
        mv = self._view(buf, offset, True, "submit_read")
        return self._submit(_core.OP_READ, mv, offset, mv.nbytes)

    def submit_write(self, buf, offset: int) -> Future:
        mv = self._view(buf, offset, False, "submit_write")
        return self._submit(_core.OP_WRITE, mv, offset, mv.nbytes)

    def submit_write_zeroes(self, nbytes: int, offset: int) -> Future:
        bs = self.block_size
        if nbytes <= 0 or nbytes % bs or offset < 0 or offset % bs or offset + nbytes > self.size:
            raise ValueError(f"nvmeof: write_zeroes: {offset}+{nbytes} is not a block-aligned "
                             f"range inside the volume ({self.size} bytes, {bs}-byte blocks)")
        return self._submit(_core.OP_WRITE_ZEROES, None, offset, nbytes)

    def submit_flush(self) -> Future:
        return self._submit(_core.OP_FLUSH, None, 0, 0)

    def submit_batch(self, op: str, items: Iterable[Tuple[object, int]]) -> List[Future]:
        """Starts many reads (op="read") or writes (op="write") of (buffer, offset) pairs in one
        call; returns their futures in order."""
        if op not in ("read", "write"):
            raise ValueError(f"nvmeof: submit_batch: op must be 'read' or 'write', got {op!r}")
        code = _core.OP_READ if op == "read" else _core.OP_WRITE
        writable = code == _core.OP_READ
        v = self._core()
        views = [(self._view(b, off, writable, "submit_batch"), off) for b, off in items]
        futs = [Future(self, mv.nbytes, op) for mv, _ in views]
        with self._lock:
            first = self._next_cookie
            self._next_cookie += len(views)
            for i, (mv, _) in enumerate(views):
                self._pending[first + i] = (futs[i], mv)
            done = 0
            while done < len(views):
                done += v.submit_many(code, views[done:], first + done)
                if done < len(views):
                    self._wait_locked(None)
        return futs

    def read_batch(self, items: Iterable[Tuple[object, int]]) -> List[Future]:
        return self.submit_batch("read", items)

    def write_batch(self, items: Iterable[Tuple[object, int]]) -> List[Future]:
        return self.submit_batch("write", items)

    # -- completions ----------------------------------------------------------------------------
    def _dispatch(self, events) -> int:
        pend = self._pending
        for cookie, status in events:
            if cookie >= _RING_TAG_BIT:  # a ring's I/O: kept for that ring's reap()
                self._rings[cookie & ~0xFFFFFFFF]._stash.append((cookie & 0xFFFFFFFF, status))
                continue
            fut, _ = pend.pop(cookie)
            fut._complete(status)
        return len(events)

    def ring(self, buffer, slot_bytes: int) -> "Ring":
        """A Ring over `buffer` cut into slots of `slot_bytes`: batched I/O without a Python
        object per I/O (see Ring)."""
        self._core()
        with self._lock:
            rid = self._next_ring
            self._next_ring += 1
            r = Ring(self, buffer, slot_bytes, rid)
            self._rings[r._r.tag] = r
            return r

    def drain(self) -> int:
        """Completes every finished I/O's future (never blocks); returns how many."""
        v = self._core()
        with self._lock:
            return self._dispatch(v.reap(1 << 30))

    def _wait_locked(self, timeout: Optional[float]) -> int:
        v = self._v
        n = self._dispatch(v.reap(1 << 30))
        if n:
            return n
        r, _, _ = select.select([self._efd], [], [], timeout)
        return self._dispatch(v.reap(1 << 30)) if r else 0

    def poll(self, timeout: Optional[float] = None) -> int:
        """Waits up to `timeout` seconds (None: until one arrives) for completions, completes
        their futures, returns how many."""
        self._core()
        with self._lock:
            return self._wait_locked(timeout)

    def _wait_for(self, fut: Future, timeout: Optional[float]) -> None:
        import time
        deadline = None if timeout is None else time.monotonic() + timeout
        while not fut._done:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            self._core()
            with self._lock:
                if fut._done:
                    break
                self._wait_locked(left if left is None else min(left, 1.0))
            if deadline is not None and time.monotonic() >= deadline and not fut._done:
                raise TimeoutError("nvmeof: I/O did not complete in time")

    @staticmethod
    def wait(futures: Iterable[Future], timeout: Optional[float] = None) -> None:
        """Waits for every future (raises NvmeError for the first failed one)."""
        for f in futures:
            f.result(timeout)

    # -- asyncio --------------------------------------------------------------------------------
    def _attach(self, loop: asyncio.AbstractEventLoop) -> None:
        if loop not in self._loops:
            loop.add_reader(self._efd, self.drain)
            self._loops.add(loop)

    async def _await(self, fut: Future):
        loop = asyncio.get_running_loop()
        self._attach(loop)
        if not fut._done:
            af = loop.create_future()
            fut.add_done_callback(lambda _f: af.done() or af.set_result(None))
            await af
        return fut.result()

    async def read(self, buf, offset: int) -> int:
        """`await vol.read(buf, offset)`: completion through the eventfd on the running loop."""
        return await self._await(self.submit_read(buf, offset))

    async def write(self, buf, offset: int) -> int:
        return await self._await(self.submit_write(buf, offset))

    async def aflush(self) -> None:
        await self._await(self.submit_flush())

    async def gather(self, futures: Sequence[Future]) -> List[int]:
        """Awaits many futures from submit_batch."""
        return [await self._await(f) for f in futures]

    # -- stats ----------------------------------------------------------------------------------
    def add_path(self, addr: str) -> int:
        """Adds a path (`"addr:port"`, a controller of the same subsystem) at run time and returns
        its index at once: it connects in the background and takes I/O once live. Every volume
        on the same controllers gains it. FileExistsError: already a path; ValueError: a bad
        address; OSError (EBUSY, ENOSPC) otherwise."""
        return self._core().add_path(addr)

    def remove_path(self, addr: str) -> None:
        """Removes a path at run time; returns once it is gone: it takes no new I/O, its commands
        complete (or move after their fence if it fails meanwhile), then it closes. No I/O fails
        for it. FileNotFoundError: not a path; TimeoutError: not gone in time."""
        self._core().remove_path(addr)

    def stats(self) -> dict:
        """The volume's statistics (the C API's JSON as a dict): namespace, selector, paths with
        state, I/Os, latency and errors, the failover timeline, totals."""
        return json.loads(self._core().stats_json())

    def __repr__(self) -> str:
        if self._v is None:
            return "<nvmeof.Volume closed>"
        return f"<nvmeof.Volume {self.size} bytes, {self.block_size}-byte blocks>"


_RING_TAG_BIT = 1 << 63


class Ring:
    """Batched reads and writes without a Python object per I/O, for loops that keep many I/Os
    in flight (data loaders, KV-cache tiers). Made by `Volume.ring(buffer, slot_bytes)`: the
    buffer (e.g. `nvmeof.alloc(n * slot_bytes)` or a numpy array) is cut into `slots` slots of
    `slot_bytes` bytes, each I/O moves one whole slot.

        ring = vol.ring(nvmeof.alloc(32 * 4096), 4096)
        slots_out = np.empty(32, np.uint64); status_out = np.empty(32, np.uint16)
        ring.read(np.arange(32), offsets)                 # starts up to 32 reads in one call
        n = ring.reap(slots_out, status_out, timeout=1.0)  # the slots that finished, statuses
        # slots_out[:n] may be reused at once: ring.read(slots_out[:n], new_offsets)

    read()/write() take arrays (or sequences) of slot numbers and byte offsets and return how
    many started: fewer than given when every I/O slot of the volume is busy (reap, then start
    the rest). reap() fills the caller's arrays (numpy uint64 and uint16) and returns how many;
    a status is an NVMe status (0: success, see nvmeof.status_str). A slot must not be given to
    a new I/O before its previous one was reaped. Rings and futures may share a volume.
    """

    def __init__(self, vol: "Volume", buffer, slot_bytes: int, rid: int):
        self._vol = vol
        self._buffer = buffer  # the object itself, alive while I/O may land in it
        self._r = _core.Ring(vol._v, buffer, slot_bytes, rid)
        self.slots: int = self._r.slots
        self.slot_bytes: int = self._r.slot_bytes
        self._stash = []  # (slot, status) reaped on the volume's other paths (futures, poll)

    def read(self, slots, offsets) -> int:
        """Starts a read of each slot slots[i] from byte offset offsets[i]; returns how many
        started."""
        self._vol._core()
        with self._vol._lock:
            return self._r.submit(_core.OP_READ, slots, offsets)

    def write(self, slots, offsets) -> int:
        """Starts a write of each slot slots[i] to byte offset offsets[i]; returns how many
        started."""
        self._vol._core()
        with self._vol._lock:
            return self._r.submit(_core.OP_WRITE, slots, offsets)

    def reap(self, slots_out, status_out, timeout: Optional[float] = 0.0, min_complete: int = 1) -> int:
        """Moves finished I/Os into slots_out / status_out (numpy uint64 / uint16 arrays);
        returns how many. When fewer than `min_complete` have finished, waits up to `timeout`
        seconds for that many of the volume's I/Os (0: never waits, None: no limit); on a
        Host(caller_drive=True) this thread runs the volume's reactor meanwhile."""
        vol = self._vol
        vol._core()
        if min_complete < 1:
            raise ValueError(f"nvmeof.Ring: min_complete must be >= 1, got {min_complete}")
        if timeout is not None and timeout < 0:
            raise ValueError(f"nvmeof.Ring: timeout must be >= 0 or None, got {timeout}")
        with vol._lock:
            n = self._reap_locked(slots_out, status_out)
            cap = min(len(slots_out), len(status_out))
            if n < min(min_complete, cap) and timeout != 0:
                others = []
                n += self._r.reap_wait(slots_out[n:], status_out[n:], others, min_complete - n,
                                       -1 if timeout is None else int(timeout * 1e6))
                if others:
                    vol._dispatch(others)
            return n

    def _reap_locked(self, slots_out, status_out) -> int:
        n = 0
        cap = min(len(slots_out), len(status_out))
        if self._stash:
            k = min(cap, len(self._stash))
            for i in range(k):
                slots_out[i], status_out[i] = self._stash[i]
            del self._stash[:k]
            n = k
        if n < cap:
            others = []
            n += self._r.reap(slots_out[n:], status_out[n:], others)
            if others:
                self._vol._dispatch(others)
        return n
