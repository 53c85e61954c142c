"""The nvmeof package against the embedded target: data, errors, batches, asyncio, faults, fork."""
import asyncio
import errno
import logging
import os

import pytest

import nvmeof
from conftest import run_in_child

BS = 4096


def pattern(n, seed):
    return bytes(((i * 131 + seed * 7 + (i >> 9)) & 0xFF) for i in range(n))


def test_open_properties_and_roundtrip(vol, target):
    assert vol.block_size == BS
    assert vol.size == 64 << 20
    data = pattern(4 * BS, 1)
    assert vol.pwrite(data, 8 * BS) == 4 * BS
    out = bytearray(4 * BS)
    assert vol.pread(out, 8 * BS) == 4 * BS
    assert out == data
    # The target holds what was written, byte for byte.
    assert target.read_ns(8 * BS, 4 * BS) == data
    vol.flush()


def test_buffer_kinds(vol):
    np = pytest.importorskip("numpy")
    a = np.arange(2 * BS // 8, dtype=np.uint64)
    vol.pwrite(a, 0)
    b = np.zeros_like(a)
    vol.pread(b, 0)
    assert (a == b).all()
    mv = memoryview(bytearray(BS))
    vol.pread(mv, 0)
    assert bytes(mv) == a.tobytes()[:BS]
    buf = nvmeof.alloc(2 * BS)
    vol.pread(buf, 0)
    assert bytes(buf) == a.tobytes()
    arr = np.frombuffer(buf, dtype=np.uint64)
    assert arr.ctypes.data % 4096 == 0
    assert (arr == a).all()


def test_torch_tensor(vol):
    torch = pytest.importorskip("torch")
    t = torch.arange(BS // 4, dtype=torch.int32)
    vol.pwrite(t, 3 * BS)
    r = torch.zeros(BS // 4, dtype=torch.int32)
    vol.pread(r, 3 * BS)  # straight into the tensor's memory
    assert torch.equal(t, r)
    r2 = torch.zeros(BS // 4, dtype=torch.int32)
    vol.pread(r2.numpy(), 3 * BS)  # its numpy view shares that memory too
    assert torch.equal(t, r2)


def test_alloc():
    b = nvmeof.alloc(10000, node=0)
    assert len(b) == 10000 and not b.readonly and bytes(b[:16]) == bytes(16)
    with pytest.raises(ValueError, match="nbytes"):
        nvmeof.alloc(0)


def test_bad_arguments(vol):
    with pytest.raises(ValueError, match="not a positive multiple of the block size"):
        vol.pread(bytearray(100), 0)
    with pytest.raises(ValueError, match="offset 512 is not a multiple"):
        vol.pread(bytearray(BS), 512)
    with pytest.raises(ValueError, match="beyond the end"):
        vol.pread(bytearray(BS), vol.size)
    with pytest.raises(ValueError, match="beyond the end"):
        vol.submit_write(bytes(2 * BS), vol.size - BS)
    with pytest.raises(ValueError, match="offset -4096"):
        vol.pwrite(bytes(BS), -BS)
    with pytest.raises(TypeError, match="read-only"):
        vol.pread(bytes(BS), 0)
    with pytest.raises(TypeError, match="buffer protocol"):
        vol.pwrite("not bytes", 0)
    with pytest.raises(ValueError, match="op must be"):
        vol.submit_batch("trim", [])
    with pytest.raises(ValueError, match="write_zeroes"):
        vol.submit_write_zeroes(100, 0)


def test_bad_open(target, caplog):
    with pytest.raises(ValueError, match="nqn"):
        nvmeof.Volume(target.addresses)
    with pytest.raises(ValueError, match="path"):
        nvmeof.Volume([], nqn=target.nqn)
    with pytest.raises(ValueError, match="cannot open"):
        nvmeof.Volume(["no:such:address"], nqn=target.nqn)
    with caplog.at_level(logging.INFO, logger="nvmeof"):
        with pytest.raises(OSError) as ei:
            nvmeof.Volume(["127.0.0.1:1"], nqn=target.nqn)
    assert ei.value.errno == errno.ECONNREFUSED
    # The library's diagnostics arrive through the "nvmeof" logger, not stderr.
    assert any("127.0.0.1:1" in r.getMessage() for r in caplog.records if r.name == "nvmeof")


def test_closed_volume(target):
    v = nvmeof.Volume(target.addresses, nqn=target.nqn, io_deadline=2.0)
    v.close()
    v.close()
    assert v.closed
    with pytest.raises(ValueError, match="closed volume"):
        v.pread(bytearray(BS), 0)
    with pytest.raises(ValueError, match="closed volume"):
        v.submit_read(bytearray(BS), 0)
    with pytest.raises(ValueError, match="closed volume"):
        v.stats()


def test_futures_and_polling_loop(target):
    # Fewer slots than I/Os: submission waits for completions (no -EAGAIN leaks out).
    with nvmeof.Volume(target.addresses, nqn=target.nqn, io_deadline=2.0, queue_depth=8) as v:
        n = 100
        futs = [v.submit_write(pattern(BS, i), (100 + i) * BS) for i in range(n)]
        while not all(f.done() for f in futs):
            v.poll(timeout=5.0)
        assert [f.result() for f in futs] == [BS] * n
        bufs = [bytearray(BS) for _ in range(n)]
        futs = [v.submit_read(bufs[i], (100 + i) * BS) for i in range(n)]
        nvmeof.Volume.wait(futs, timeout=10.0)
        assert all(bufs[i] == pattern(BS, i) for i in range(n))
        assert v.drain() == 0


def test_batch(vol, target):
    n = 64
    futs = vol.write_batch([(pattern(BS, 1000 + i), (300 + i) * BS) for i in range(n)])
    vol.wait(futs, timeout=10.0)
    bufs = [nvmeof.alloc(BS) for _ in range(n)]
    futs = vol.read_batch([(bufs[i], (300 + i) * BS) for i in range(n)])
    vol.wait(futs, timeout=10.0)
    assert all(bytes(bufs[i]) == pattern(BS, 1000 + i) for i in range(n))
    assert target.read_ns(300 * BS, BS) == pattern(BS, 1000)
    z = vol.submit_write_zeroes(2 * BS, 300 * BS)
    z.result(timeout=10.0)
    assert target.read_ns(300 * BS, 2 * BS) == bytes(2 * BS)
    vol.submit_flush().result(timeout=10.0)


@pytest.mark.parametrize("caller_drive", [False, True])
def test_ring(target, caller_drive):
    """Ring I/O: batches with no Python object per I/O, more I/Os than the volume has slots
    (partial starts), futures on the same volume meanwhile; every block verified on the target.
    On a Host(caller_drive=True) the waiting reap runs the volume's reactor on this thread (the
    host counts those turns); on the other, never."""
    import numpy as np
    slots, base = 16, 3000 + (100 if caller_drive else 0)
    host = nvmeof.Host(caller_drive=caller_drive, placement="unpinned")
    assert host.caller_drive is caller_drive
    with nvmeof.Volume(target.addresses, nqn=target.nqn, io_deadline=2.0, queue_depth=8, host=host) as v:
        buf = nvmeof.alloc(slots * BS)
        ring = v.ring(buf, BS)
        assert (ring.slots, ring.slot_bytes) == (slots, BS)
        for i in range(slots):
            buf[i * BS:(i + 1) * BS] = pattern(BS, 5000 + i)
        out_s = np.empty(slots, np.uint64)
        out_st = np.empty(slots, np.uint16)

        def run(op, offsets):
            todo = list(range(slots))
            done = []
            while todo or len(done) < slots:
                if todo:
                    k = op(np.array(todo, np.uint64), np.array([offsets[s] for s in todo], np.uint64))
                    todo = todo[k:]
                    f = v.submit_read(bytearray(BS), 0)  # a future between the ring's I/Os
                n = ring.reap(out_s, out_st, timeout=5.0)
                assert n > 0, "no ring completion within 5 s"
                assert (out_st[:n] == 0).all()
                done += [int(x) for x in out_s[:n]]
                f.result(timeout=5.0)
            assert sorted(done) == list(range(slots))

        offsets = [(base + 3 * s) * BS for s in range(slots)]
        run(ring.write, offsets)
        for s in range(slots):
            assert target.read_ns(offsets[s], BS) == pattern(BS, 5000 + s)
        buf[:] = bytes(slots * BS)
        run(ring.read, offsets)
        for s in range(slots):
            assert bytes(buf[s * BS:(s + 1) * BS]) == pattern(BS, 5000 + s)
        # Nothing waits: reap returns 0 at once.
        assert ring.reap(out_s, out_st) == 0
        # Bad input starts nothing and says why.
        with pytest.raises(ValueError, match="past the ring"):
            ring.read([0, slots], [0, 0])
        with pytest.raises(ValueError, match="block-aligned"):
            ring.read([0], [1])
        with pytest.raises(ValueError, match="inside the volume"):
            ring.read([0], [v.size])
        with pytest.raises(ValueError, match="same length"):
            ring.read([0, 1], [0])
        with pytest.raises(ValueError, match="uint16"):
            ring.reap(out_s, np.empty(4, np.int32))
        with pytest.raises(ValueError, match="block size"):
            v.ring(nvmeof.alloc(BS), BS + 1)
        with pytest.raises(ValueError, match="min_complete"):
            ring.reap(out_s, out_st, timeout=1.0, min_complete=0)
        with pytest.raises(ValueError, match="timeout"):
            ring.reap(out_s, out_st, timeout=-1.0)
        assert ring.reap(out_s, out_st, timeout=0.2) == 0
        # All of a batch in one call that waits for all of it.
        assert ring.read(np.arange(slots, dtype=np.uint64), np.array(offsets, np.uint64)) == min(slots, 8)
        assert ring.reap(out_s, out_st, timeout=10.0, min_complete=8) == 8
        assert (out_st[:8] == 0).all()
        stats = host.stats()
        if caller_drive:
            assert stats["driven_turns"] > 0 and stats["parks"] >= 1
        else:
            assert stats["driven_turns"] == 0 and stats["parks"] == 0
    host.close()


def test_asyncio(vol):
    async def main():
        n = 48
        await asyncio.gather(*(vol.write(pattern(BS, 2000 + i), (400 + i) * BS) for i in range(n)))
        bufs = [bytearray(BS) for _ in range(n)]
        got = await asyncio.gather(*(vol.read(bufs[i], (400 + i) * BS) for i in range(n)))
        assert got == [BS] * n
        assert all(bufs[i] == pattern(BS, 2000 + i) for i in range(n))
        futs = vol.read_batch([(bufs[i], (400 + i) * BS) for i in range(n)])
        assert await vol.gather(futs) == [BS] * n
        await vol.aflush()

    asyncio.run(asyncio.wait_for(main(), 20.0))


def test_nvme_error_status(vol, target):
    # Invalid Field in Command with DNR on both paths: not retried, raised with the status.
    for p in range(2):
        target.fail_commands(p, 0x4002)
    try:
        with pytest.raises(nvmeof.NvmeError) as ei:
            vol.pread(bytearray(BS), 0)
        assert ei.value.sct == 0 and ei.value.sc == 0x02 and ei.value.dnr
        assert "invalid" in str(ei.value).lower()
        f = vol.submit_write(bytes(BS), 0)
        with pytest.raises(nvmeof.NvmeError):
            f.result(timeout=10.0)
        assert isinstance(f.exception(), nvmeof.NvmeError)
    finally:
        for p in range(2):
            target.fail_commands(p, -1)
    vol.pread(bytearray(BS), 0)


def test_path_reset_mid_run(vol, target):
    """Path 0's connections are reset while I/O runs: every I/O still succeeds, data verified."""
    n = 256
    base = 1000
    first = vol.write_batch([(pattern(BS, 3000 + i), (base + i) * BS) for i in range(n)])
    target.reset(0)  # while (most of) the batch is in flight
    second = vol.write_batch([(pattern(BS, 4000 + i), (base + n + i) * BS) for i in range(n)])
    vol.wait(first + second, timeout=20.0)
    bufs = [bytearray(BS) for _ in range(2 * n)]
    vol.wait(vol.read_batch([(bufs[i], (base + i) * BS) for i in range(2 * n)]), timeout=20.0)
    for i in range(n):
        assert bufs[i] == pattern(BS, 3000 + i)
        assert bufs[n + i] == pattern(BS, 4000 + i)
    s = vol.stats()
    assert s["failed"] == 0
    assert s["paths"][0]["failovers"] >= 1 or any(e["path"] == 0 for e in s["timeline"])


def test_stats(vol):
    vol.pread(bytearray(BS), 0)
    s = vol.stats()
    assert set(s) >= {"namespace", "selector", "paths", "timeline", "completed", "failed", "waiting"}
    assert len(s["paths"]) == 2
    assert s["completed"] >= 1
    assert {"address", "state", "ios", "latency_us", "failovers"} <= set(s["paths"][0])


def test_fork(vol, target):
    vol.pwrite(pattern(BS, 5000), 2000 * BS)
    def child():
        try:
            vol.pread(bytearray(BS), 2000 * BS)
            return b"used the parent's volume without an error"
        except nvmeof.ForkedVolumeError as e:
            if b"worker_init_fn" not in str(e).encode():
                return b"unclear message"
        # The C layer refuses too, not only the Python check.
        try:
            vol._v.pread(bytearray(BS), 2000 * BS)
            return b"C layer accepted the forked volume"
        except OSError as e:
            if e.errno != errno.ECHILD:
                return b"C layer: wrong errno"
        with nvmeof.Volume(target.addresses, nqn=target.nqn, io_deadline=2.0) as mine:
            b = bytearray(BS)
            mine.pread(b, 2000 * BS)
            return b"ok" if b == pattern(BS, 5000) else b"child read wrong data"

    run_in_child(child)
    # The parent's volume is unaffected.
    b = bytearray(BS)
    vol.pread(b, 2000 * BS)
    assert b == pattern(BS, 5000)


def test_discovery(target):
    # Every path the target's discovery controller lists for the subsystem: both ports.
    with nvmeof.Volume(discovery=target.addresses[0], nqn=target.nqn, io_deadline=2.0) as v:
        assert len(v.stats()["paths"]) == 2
        v.pwrite(pattern(BS, 6000), 2100 * BS)
        assert target.read_ns(2100 * BS, BS) == pattern(BS, 6000)


def test_paths_at_run_time(target):
    """A path added to an open volume carries I/O once live; the first path removed while a batch
    is in flight: every I/O succeeds, data verified; bad and unknown addresses raise."""
    import time

    first, second = target.addresses
    with nvmeof.Volume([first], nqn=target.nqn, io_deadline=2.0, no_path_timeout=10.0) as v:
        with pytest.raises(FileExistsError):
            v.add_path(first)
        with pytest.raises(ValueError):
            v.add_path("127.0.0.1:0")
        assert v.add_path(second) == 1
        base = 3000
        n = 128
        ios = 0
        until = time.monotonic() + 20.0
        while time.monotonic() < until:  # until the new path has carried some of the writes
            v.wait(v.write_batch([(pattern(BS, 6000 + i), (base + i) * BS) for i in range(n)]), timeout=20.0)
            paths = {p["index"]: p for p in v.stats()["paths"]}
            ios = paths[1]["ios"] if 1 in paths and paths[1]["state"] == "live" else 0
            if ios > 0:
                break
        assert ios > 0
        batch = v.write_batch([(pattern(BS, 7000 + i), (base + n + i) * BS) for i in range(n)])
        v.remove_path(first)  # while the batch is in flight
        v.wait(batch, timeout=20.0)
        with pytest.raises(FileNotFoundError):
            v.remove_path(first)
        bufs = [bytearray(BS) for _ in range(2 * n)]
        v.wait(v.read_batch([(bufs[i], (base + i) * BS) for i in range(2 * n)]), timeout=20.0)
        for i in range(n):
            assert bufs[i] == pattern(BS, 6000 + i)
            assert bufs[n + i] == pattern(BS, 7000 + i)
        s = v.stats()
        assert s["failed"] == 0
        assert [p["index"] for p in s["paths"]] == [1]
