#!/usr/bin/env python3
"""A KV-cache block tier on an NVMe-oF volume, in the shape of LMCache's native storage plugin
contract: fixed-size slots on the namespace, a key -> slot index, batched get/set/exists/delete
that complete through one eventfd, drained by the caller's event loop.

    tier = KVCacheTier(vol, slot_size=64 << 10)
    rid = tier.submit_batch_set(keys, buffers)     # returns a request id at once
    ...select/poll/asyncio on tier.event_fd...
    for rid, ok, result in tier.drain_completions(): ...

Run against the embedded target (from the build tree, PYTHONPATH=build/python):
    python3 examples/kv_cache_tier.py --embedded --batch 16
or a real subsystem:  --paths 10.0.0.1:4420 10.0.0.2:4420 --nqn nqn....
"""
import argparse
import os
import random
import select
import struct
import sys
import time

import nvmeof


class KVCacheTier:
    """Keys (bytes or str) -> fixed-size slots. One request per submit_batch_* call; its
    completion is (request_id, ok, result): get -> list of bools (hit and read), set -> None,
    exists -> list of bools, delete -> list of bools (was present)."""

    def __init__(self, vol: nvmeof.Volume, slot_size: int):
        if slot_size <= 0 or slot_size % vol.block_size:
            raise ValueError(f"slot_size must be a multiple of the block size {vol.block_size}")
        self._vol = vol
        self.slot_size = slot_size
        self.nslots = vol.size // slot_size
        self._index = {}                       # key -> slot
        self._free = list(range(self.nslots - 1, -1, -1))
        self._next_rid = 1
        self._open = {}                        # rid -> [left, ok, result, on_done]
        self._ready = []                       # (rid, ok, result) not yet drained

    # -- the plugin contract --------------------------------------------------------------------
    @property
    def event_fd(self) -> int:
        """Readable while completions wait for drain_completions()."""
        return self._vol.event_fd

    def submit_batch_set(self, keys, buffers) -> int:
        if len(keys) != len(buffers):
            raise ValueError("keys and buffers differ in length")
        items, slots = [], []
        for k, b in zip(keys, buffers):
            slot = self._index.get(k)
            if slot is None:
                if not self._free:
                    raise MemoryError("KV tier full")
                slot = self._free.pop()
            slots.append(slot)
            items.append((b, slot * self.slot_size))

        def publish(_ok, _res):
            for k, slot in zip(keys, slots):
                self._index[k] = slot  # visible to gets once written

        return self._start(self._vol.write_batch(items), None, publish)

    def submit_batch_get(self, keys, buffers) -> int:
        if len(keys) != len(buffers):
            raise ValueError("keys and buffers differ in length")
        hits = [k in self._index for k in keys]
        items = [(b, self._index[k] * self.slot_size) for k, b, h in zip(keys, buffers, hits) if h]
        return self._start(self._vol.read_batch(items) if items else [], hits, None)

    def submit_batch_exists(self, keys) -> int:
        return self._now([k in self._index for k in keys])

    def submit_batch_delete(self, keys) -> int:
        out = []
        for k in keys:
            slot = self._index.pop(k, None)
            out.append(slot is not None)
            if slot is not None:
                self._free.append(slot)
        return self._now(out)

    def drain_completions(self):
        """Every finished request as (request_id, ok, result); never blocks."""
        self._vol.drain()
        out, self._ready = self._ready, []
        return out

    def close(self) -> None:
        self._vol.close()

    # -- internals ------------------------------------------------------------------------------
    def _start(self, futures, result, on_done) -> int:
        rid = self._next_rid
        self._next_rid += 1
        if not futures:
            return self._now(result, rid)
        state = [len(futures), True, result, on_done]
        self._open[rid] = state

        def one_done(f):
            if f.status:
                state[1] = False
            state[0] -= 1
            if state[0] == 0:
                del self._open[rid]
                if state[3] and state[1]:
                    state[3](state[1], state[2])
                self._ready.append((rid, state[1], state[2]))

        for f in futures:
            f.add_done_callback(one_done)
        return rid

    def _now(self, result, rid=None) -> int:
        if rid is None:
            rid = self._next_rid
            self._next_rid += 1
        self._ready.append((rid, True, result))
        os.eventfd_write(self._vol.event_fd, 1)  # the same fd: the event loop wakes for it too
        return rid


def fill_block(buf: memoryview, key: int) -> None:
    n = len(buf)
    buf[:] = (struct.pack("<Q", key) * (n // 8 + 1))[:n]


def check_block(buf, key: int) -> bool:
    return bytes(buf[:16]) == struct.pack("<QQ", key, key) and bytes(buf[-8:]) == struct.pack("<Q", key)


def wait_for(tier: KVCacheTier, rid: int, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while True:
        for r, ok, res in tier.drain_completions():
            if r == rid:
                return ok, res
            raise RuntimeError(f"unexpected completion {r}")
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"request {rid} did not complete")
        select.select([tier.event_fd], [], [], left)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--paths", nargs="*", default=[])
    ap.add_argument("--nqn", default="")
    ap.add_argument("--embedded", action="store_true", help="start the embedded target (build tree)")
    ap.add_argument("--io-deadline", type=float, default=0.0,
                    help="seconds before a slow command fails its path (0: derived)")
    ap.add_argument("--slot-size", type=int, default=64 << 10)
    ap.add_argument("--keys", type=int, default=256)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--iterations", type=int, default=500)
    args = ap.parse_args()

    target = None
    if args.embedded:
        from nvmeof import _testing
        target = _testing.Target(ports=2, size=64 << 20)
        args.paths, args.nqn = target.addresses, target.nqn
    if not args.paths or not args.nqn:
        ap.error("give --paths and --nqn, or --embedded")

    with nvmeof.Volume(args.paths, nqn=args.nqn, io_deadline=args.io_deadline) as vol:
        tier = KVCacheTier(vol, args.slot_size)
        nkeys = min(args.keys, tier.nslots)
        keys = list(range(1, nkeys + 1))
        bufs = [nvmeof.alloc(args.slot_size) for _ in range(args.batch)]
        for i in range(0, nkeys, args.batch):
            chunk = keys[i:i + args.batch]
            for k, b in zip(chunk, bufs):
                fill_block(b, k)
            ok, _ = wait_for(tier, tier.submit_batch_set(chunk, bufs[:len(chunk)]))
            assert ok, "set failed"
        ok, res = wait_for(tier, tier.submit_batch_exists([1, nkeys, nkeys + 1]))
        assert res == [True, True, False], res

        rng = random.Random(1)
        lat = []
        for _ in range(args.iterations):
            chunk = rng.sample(keys, args.batch)
            t0 = time.perf_counter_ns()
            ok, hits = wait_for(tier, tier.submit_batch_get(chunk, bufs))
            lat.append((time.perf_counter_ns() - t0) / 1000.0)
            assert ok and all(hits)
            for k, b in zip(chunk, bufs):
                if not check_block(b, k):
                    print(f"kv_cache_tier: key {k}: wrong data", file=sys.stderr)
                    return 1
        ok, res = wait_for(tier, tier.submit_batch_delete([1, 1]))
        assert res == [True, False]
        ok, hits = wait_for(tier, tier.submit_batch_get([1], bufs[:1]))
        assert hits == [False]
        lat.sort()

        def pct(p):
            return lat[min(len(lat) - 1, int(p / 100.0 * len(lat)))]

        mb = args.batch * args.slot_size / 1e6
        print(f"kv_cache_tier: {args.iterations} batched gets of {args.batch} x {args.slot_size >> 10} KiB "
              f"(every block verified): p50 {pct(50):.0f} us, p90 {pct(90):.0f} us, p99 {pct(99):.0f} us, "
              f"max {lat[-1]:.0f} us; {mb / (pct(50) / 1e6):.0f} MB/s at p50")
    if target:
        target.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
