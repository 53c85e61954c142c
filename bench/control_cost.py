#!/usr/bin/python3
"""What an enabled control socket plus metrics endpoint costs a volume: 4 KiB QD 32 random-read
IOPS of nvmeof-bench against its embedded target, runs with both off and with both on
(--control-dir, --metrics-listen) alternating in one session (ABBA order, so a drift of the
machine's load falls on both alike), and, with --scrape, a third kind of run in which the
metrics are scraped and the control socket asked for stats once a second meanwhile.

Prints each run, then the on/off IOPS ratio per pair with its mean, standard deviation, min
and max. Not a test: a benchmark (the ratio depends on the machine and its load).

usage: bench/control_cost.py [--bench build/tools/nvmeof-bench] [--pairs 5] [--runtime 5s]
                             [--scrape] [--json]
"""
import argparse
import glob
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scraper(stop, port, control_dir, counts):
    while not stop.wait(1.0):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read()
            counts["metrics"] += 1
        except OSError:
            pass
        for path in glob.glob(os.path.join(control_dir, "nvmeof-*.sock")):
            try:
                with socket.socket(socket.AF_UNIX) as s:
                    s.settimeout(2)
                    s.connect(path)
                    s.sendall(b'{"op":"stats"}\n')
                    data = b""
                    while not data.endswith(b"\n"):
                        chunk = s.recv(65536)
                        if not chunk:
                            break
                        data += chunk
                counts["control"] += 1
            except OSError:
                pass


def run(args, mode):
    cmd = [args.bench, "--embedded", "--rw", "randread", "--bs", "4k", "--iodepth", "32",
           "--runtime", args.runtime, "--size", "64m", "--no-verify", "--json"]
    control_dir = None
    port = None
    if mode != "off":
        control_dir = tempfile.mkdtemp(prefix="nvmeof-control-cost.")
        port = free_port()
        cmd += ["--control-dir", control_dir, "--metrics-listen", f"127.0.0.1:{port}"]
    stop = threading.Event()
    counts = {"metrics": 0, "control": 0}
    t = None
    if mode == "scraped":
        t = threading.Thread(target=scraper, args=(stop, port, control_dir, counts))
        t.start()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    stop.set()
    if t:
        t.join()
    if control_dir:
        for f in glob.glob(os.path.join(control_dir, "*")):
            os.unlink(f)
        os.rmdir(control_dir)
    if p.returncode != 0:
        sys.exit(f"nvmeof-bench failed ({p.returncode}): {p.stderr[-2000:]}")
    j = json.loads(p.stdout)
    return {"mode": mode, "iops": j["total"]["iops"], "p99_us": j["total"]["latency_us"]["p99"],
            "cpu_us_per_io": j["reactor_cpu"]["us_per_io"], "scrapes": counts}


def summary(ratios):
    return {"mean": statistics.mean(ratios), "median": statistics.median(ratios),
            "stdev": statistics.stdev(ratios) if len(ratios) > 1 else 0.0,
            "min": min(ratios), "max": max(ratios), "pairs": len(ratios)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", default="build/tools/nvmeof-bench")
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--runtime", default="5s")
    ap.add_argument("--scrape", action="store_true", help="also runs scraped once a second")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    modes = ["on", "scraped"] if args.scrape else ["on"]
    runs = []
    for i in range(args.pairs):
        order = ["off"] + modes if i % 2 == 0 else list(reversed(["off"] + modes))
        for mode in order:
            r = run(args, mode)
            r["pair"] = i
            runs.append(r)
            if not args.json:
                print(f"pair {i} {mode:8s} iops {r['iops']:9.0f}  p99 {r['p99_us']:8.1f} us  "
                      f"reactor cpu {r['cpu_us_per_io']:.2f} us/io  scrapes {r['scrapes']}", flush=True)
    result = {"command": " ".join(sys.argv), "runs": runs}
    # IOPS, and the reactor's CPU time per I/O (less sensitive to other processes taking the CPU).
    for key, what in (("iops", "IOPS"), ("cpu_us_per_io", "reactor CPU per I/O")):
        for mode in modes:
            ratios = []
            for i in range(args.pairs):
                off = next(r for r in runs if r["pair"] == i and r["mode"] == "off")
                on = next(r for r in runs if r["pair"] == i and r["mode"] == mode)
                ratios.append(on[key] / off[key])
            result[f"{key}_ratio_{mode}_off"] = summary(ratios)
            if not args.json:
                s = result[f"{key}_ratio_{mode}_off"]
                print(f"{what} ratio {mode}/off over {s['pairs']} pairs: median {s['median']:.3f}, mean {s['mean']:.3f}, "
                      f"stdev {s['stdev']:.3f}, min {s['min']:.3f}, max {s['max']:.3f}")
    if args.json:
        print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
