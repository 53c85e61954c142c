#!/usr/bin/env python3
"""The Python package against the C++ forms, one nvmeof-target process, alternating rounds:

  * pread 4 KiB at QD1 (Python, GIL released while waiting) vs `co_await volume.read` (coro_qd1)
  * 4 KiB random reads at QD 32: Python with a Ring (arrays in, arrays out, no Python object
    per I/O), the same Ring on a Host(caller_drive=True) (the reaping thread runs the reactor,
    reaping --min-complete at a time), Python with futures (read_batch + poll) and nvmeof-bench
  * the data loader example (examples/dataloader.py) over the same target: samples/s

    PYTHONPATH=build/python python3 bench/python_bench.py build [--rounds 3]
"""
import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys
import time

import numpy as np

import nvmeof

NQN = "nqn.2024-01.io.nvmeof:pybench"
BS = 4096


def start_target(build):
    p = subprocess.Popen([os.path.join(build, "tools", "nvmeof-target"), "--listen", "127.0.0.1:0",
                          "--nqn", NQN, "--size", "256M"], stdout=subprocess.PIPE, text=True)
    for line in p.stdout:
        m = re.match(r"nvmeof-target: listening on (\S+)", line)
        if m:
            return p, m.group(1)
    raise RuntimeError("nvmeof-target did not start")


def py_qd1(vol, n):
    buf = nvmeof.alloc(BS)
    lat = []
    blocks = min(vol.size // BS, 4096)
    for i in range(n):
        t0 = time.perf_counter_ns()
        vol.pread(buf, ((i * 7919) % blocks) * BS)
        lat.append((time.perf_counter_ns() - t0) / 1000.0)
    lat.sort()
    return statistics.fmean(lat), lat[len(lat) // 2]


def py_qd32(vol, seconds):
    rng = random.Random(1)
    blocks = min(vol.size // BS, 1 << 18)
    bufs = [nvmeof.alloc(BS) for _ in range(32)]
    futs = vol.read_batch([(b, rng.randrange(blocks) * BS) for b in bufs])
    slot_of = {id(f): i for i, f in enumerate(futs)}
    done = 0
    t0 = time.perf_counter()
    end = t0 + seconds
    while time.perf_counter() < end:
        vol.poll(1.0)
        free = [slot_of.pop(id(f)) for f in futs if f.done()]
        for f in futs:
            if f.done():
                f.result()
        done += len(free)
        futs = [f for f in futs if not f.done()]
        new = vol.read_batch([(bufs[i], rng.randrange(blocks) * BS) for i in free])
        for i, f in zip(free, new):
            slot_of[id(f)] = i
        futs += new
    dt = time.perf_counter() - t0
    vol.wait(futs, timeout=10.0)
    return done / dt


def py_ring_qd32(vol, seconds, min_complete=1):
    """32 reads in flight through a Ring: each pass reaps what finished (at least
    `min_complete`) and restarts those slots at new random offsets, two calls per pass whatever
    the batch."""
    rng = np.random.default_rng(1)
    blocks = min(vol.size // BS, 1 << 18)
    ring = vol.ring(nvmeof.alloc(32 * BS), BS)
    slots = np.empty(32, np.uint64)
    status = np.empty(32, np.uint16)
    ring.read(np.arange(32, dtype=np.uint64), rng.integers(0, blocks, 32, dtype=np.uint64) * BS)
    inflight = 32
    done = 0
    t0 = time.perf_counter()
    end = t0 + seconds
    while time.perf_counter() < end:
        n = ring.reap(slots, status, timeout=1.0, min_complete=min_complete)
        if status[:n].any():
            raise RuntimeError(f"ring read failed: {nvmeof.status_str(int(status[:n].max()))}")
        done += n
        started = ring.read(slots[:n], rng.integers(0, blocks, n, dtype=np.uint64) * BS)
        inflight += started - n
        if started != n:
            raise RuntimeError("the volume refused ring reads with 32 in flight")
    dt = time.perf_counter() - t0
    while inflight:
        inflight -= ring.reap(slots, status, timeout=10.0)
    return done / dt


def dataloader_rate(addr, batched, workers=2, caller_drive=False):
    """Samples/s of the data loader example (16 KiB records, verified) on this target, or None
    when torch is missing."""
    try:
        import torch  # noqa: F401
    except ImportError:
        return None
    ex = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "dataloader.py")
    out = subprocess.run([sys.executable, ex, "--paths", addr, "--nqn", NQN, "--io-deadline", "2",
                          "--workers", str(workers)] + (["--batched"] if batched else [])
                         + (["--caller-drive"] if caller_drive else []), check=True, capture_output=True, text=True).stdout
    m = re.search(r"([0-9]+) samples/s", out)
    return float(m.group(1)) if m else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--count", type=int, default=5000)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--min-complete", type=int, default=16, help="the caller-driven Ring's reap batch")
    a = ap.parse_args()
    target, addr = start_target(a.build)
    try:
        py1, cpp1, py32, ring32, cpp32, drive32 = [], [], [], [], [], []
        for _ in range(a.rounds):
            with nvmeof.Volume([addr], nqn=NQN, io_deadline=2.0) as vol:
                py1.append(py_qd1(vol, a.count))
            out = subprocess.run([os.path.join(a.build, "bench", "coro_qd1"), addr, NQN, str(a.count)],
                                 check=True, capture_output=True, text=True).stdout
            j = json.loads(out.strip().splitlines()[-1])
            cpp1.append((j["mean_us"], j["p50_us"]))
            with nvmeof.Volume([addr], nqn=NQN, io_deadline=2.0) as vol:
                py32.append(py_qd32(vol, a.seconds))
            with nvmeof.Volume([addr], nqn=NQN, io_deadline=2.0) as vol:
                ring32.append(py_ring_qd32(vol, a.seconds))
            host = nvmeof.Host(caller_drive=True)
            with nvmeof.Volume([addr], nqn=NQN, io_deadline=2.0, host=host) as vol:
                drive32.append(py_ring_qd32(vol, a.seconds, a.min_complete))
            host.close()
            out = subprocess.run([os.path.join(a.build, "tools", "nvmeof-bench"), "--target", addr,
                                  "--nqn", NQN, "--rw", "randread", "--bs", "4k", "--iodepth", "32",
                                  "--runtime", f"{int(a.seconds * 1000)}ms", "--io-deadline", "2s",
                                  "--json"], check=True, capture_output=True, text=True).stdout
            cpp32.append(json.loads(out)["total"]["iops"])
        med = statistics.median
        p_mean, p_p50 = med(x[0] for x in py1), med(x[1] for x in py1)
        c_mean, c_p50 = med(x[0] for x in cpp1), med(x[1] for x in cpp1)
        print(f"QD1 4 KiB read: Python pread mean {p_mean:.1f} us (p50 {p_p50:.1f}), "
              f"C++ co_await mean {c_mean:.1f} us (p50 {c_p50:.1f}); ratio {p_mean / c_mean:.2f}x "
              f"(p50 {p_p50 / c_p50:.2f}x)")
        print(f"QD32 4 KiB randread: Python Ring {med(ring32):.0f} IOPS, Python futures {med(py32):.0f} IOPS, "
              f"nvmeof-bench {med(cpp32):.0f} IOPS; ratios Ring {med(ring32) / med(cpp32):.2f}, "
              f"futures {med(py32) / med(cpp32):.2f} (each the median of per-round ratios: "
              f"{med(r / c for r, c in zip(ring32, cpp32)):.2f}, {med(p / c for p, c in zip(py32, cpp32)):.2f})")
        print(f"QD32 4 KiB randread, Ring on Host(caller_drive=True), min_complete {a.min_complete}: "
              f"{med(drive32):.0f} IOPS; ratio {med(drive32) / med(cpp32):.2f} "
              f"(median of per-round ratios {med(d / c for d, c in zip(drive32, cpp32)):.2f})")
        print(f"rounds: py_qd1 {py1} cpp_qd1 {cpp1} ring_qd32 {[round(x) for x in ring32]} "
              f"drive_qd32 {[round(x) for x in drive32]} "
              f"py_qd32 {[round(x) for x in py32]} cpp_qd32 {cpp32}")
        for batched, drive in ((False, False), (True, False), (True, True)):
            rate = dataloader_rate(addr, batched, caller_drive=drive)
            if rate is not None:
                how = ("batches through a Ring, the reaping thread drives" if drive else
                       "batches through a Ring" if batched else "one pread per sample")
                print(f"data loader example (2 workers, 16 KiB records, verified, {how}): {rate:.0f} samples/s")
    finally:
        target.terminate()
        target.wait()


if __name__ == "__main__":
    sys.exit(main())
