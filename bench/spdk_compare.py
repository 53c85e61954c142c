#!/usr/bin/env python3
"""SPDK side by side: workloads over NVMe/TCP on loopback, each initiator against each target, in
alternating rounds. By default 4 KiB random reads at each --iodepth; --workloads names others as
RW:BS:QD (RW randread, read, randwrite or write; BS with a k or m suffix), e.g. the large
transfers read:128k:8 read:128k:32 write:128k:8 write:128k:32 read:1m:4.

Initiators: SPDK's spdk_nvme_perf (polls) and nvmeof-bench (one reactor, in each --modes poll
mode; --no-verify, as perf checks no data either). Targets: SPDK's nvmf_tgt (a 64 MiB Malloc
bdev) and nvmeof-target (--poll busy, 64 MiB RAM namespace); --targets keeps one of them. Initiators run on --client-cpu,
targets on --server-cpu. Both targets stay up
for the whole run; the one not being measured is stopped (SIGSTOP), so a polling target never
takes the CPU from the other. Every round runs every pair once, the order turning each round,
so drift of a shared machine hits all pairs alike.

The report gives, per pair, the median over the rounds of each run's mean latency, its p99,
IOPS and MiB/s, then paired ratios (each round's ratio, median over the rounds):
  - initiator: nvmeof-bench over spdk_nvme_perf, on each target: mean latency, MiB/s and p99;
  - target: nvmeof-target over nvmf_tgt, for each initiator (mean latency).

SPDK is not a Debian package: build it with bench/spdk_baseline.sh (its binaries and rpc.py are
what --spdk names). A benchmark, not a test: nothing is asserted.
  bench/spdk_compare.py --spdk DIR [--build build] [--seconds 5] [--rounds 6] [--iodepth 1]
                        [--workloads RW:BS:QD ...] [--targets nvmf_tgt|nvmeof-target ...]
"""
import argparse
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

NQN = "nqn.2016-06.io.spdk:cnode1"
# spdk_nvme_perf sends an empty HOSTNQN unless it is given one; nvmeof-target refuses a Connect
# that names no host (Connect Invalid Parameters at the HOSTNQN offset), so perf names one.
HOSTNQN = "nqn.2014-08.org.nvmexpress:uuid:5d1e0c59-4a43-4bd1-9d7e-31a6b0c2f001"
# Our initiator connects every queue with SQ flow control off, and nvmf_tgt then ends each read
# with its C2HData (no CapsuleResp); perf is asked for the same, so both speak the same protocol
# (--perf-sq-flow-control keeps perf's default instead).
PERF_SQFC = ["--disable-sq-flow-control"]


def wait_port(port, timeout=20.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.1)
    return False


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def hugepages_free():
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("HugePages_Free:"):
                    free = int(line.split()[1])
        with open("/proc/mounts") as f:
            mounted = any(" hugetlbfs " in line for line in f)
        return free > 0 and mounted
    except OSError:
        return False


class Spdk:
    def __init__(self, root):
        self.root = root
        self.tgt = os.path.join(root, "build/bin/nvmf_tgt")
        self.perf = os.path.join(root, "build/bin/spdk_nvme_perf")
        self.rpc_py = os.path.join(root, "scripts/rpc.py")
        self.huge = hugepages_free()

    def mem(self, mb):
        return ["-s", str(mb)] if self.huge else ["--no-huge", "-s", str(mb)]

    def ok(self):
        return all(os.access(p, os.X_OK) for p in (self.tgt, self.perf)) and os.path.exists(self.rpc_py)


class Target:
    def __init__(self, name, proc):
        self.name, self.proc = name, proc

    def pause(self):
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self):
        self.proc.send_signal(signal.SIGCONT)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start_spdk_target(spdk, cpu, port, logdir):
    sock = os.path.join(logdir, "spdk.sock")
    log = open(os.path.join(logdir, "nvmf_tgt.log"), "w")
    proc = subprocess.Popen([spdk.tgt, "-m", hex(1 << cpu), *spdk.mem(1024), "-r", sock],
                            stdout=log, stderr=subprocess.STDOUT)
    t = Target("nvmf_tgt", proc)

    def rpc(*args):
        subprocess.run(["/usr/bin/python3", spdk.rpc_py, "-s", sock, "-t", "10", *args], check=True,
                       stdout=subprocess.DEVNULL)

    end = time.monotonic() + 30
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"nvmf_tgt exited (see {log.name})")
        if os.path.exists(sock):
            try:
                rpc("framework_wait_init")
                break
            except subprocess.CalledProcessError:
                pass
        if time.monotonic() > end:
            t.stop()
            raise RuntimeError("nvmf_tgt did not come up")
        time.sleep(0.2)
    rpc("nvmf_create_transport", "-t", "TCP")
    rpc("bdev_malloc_create", "-b", "Malloc0", "64", "4096")
    rpc("nvmf_create_subsystem", NQN, "-a", "-s", "SPDK00000000000001")
    rpc("nvmf_subsystem_add_ns", NQN, "Malloc0")
    rpc("nvmf_subsystem_add_listener", NQN, "-t", "tcp", "-a", "127.0.0.1", "-s", str(port))
    if not wait_port(port):
        t.stop()
        raise RuntimeError("nvmf_tgt does not listen")
    return t


def start_our_target(build, cpu, port, logdir):
    log = open(os.path.join(logdir, "nvmeof-target.log"), "w")
    proc = subprocess.Popen(["taskset", "-c", str(cpu), os.path.join(build, "tools/nvmeof-target"),
                             "--listen", f"127.0.0.1:{port}", "--poll", "busy", "--size", "64M", "--nqn", NQN],
                            stdout=log, stderr=subprocess.STDOUT)
    t = Target("nvmeof-target", proc)
    if not wait_port(port):
        t.stop()
        raise RuntimeError(f"nvmeof-target does not listen (see {log.name})")
    return t


def parse_size(text):
    m = re.fullmatch(r"(\d+)([kKmM]?)", text)
    if not m:
        raise argparse.ArgumentTypeError(f"{text}: not a size (4096, 4k, 1m)")
    return int(m.group(1)) << {"": 0, "k": 10, "m": 20}[m.group(2).lower()]


def parse_workload(text):
    parts = text.split(":")
    if len(parts) != 3 or parts[0] not in ("randread", "read", "randwrite", "write"):
        raise argparse.ArgumentTypeError(f"{text}: a workload is RW:BS:QD (RW randread, read, randwrite or write)")
    bs = parse_size(parts[1])
    if bs == 0 or bs % 4096:
        raise argparse.ArgumentTypeError(f"{text}: BS must be a positive multiple of 4 KiB")
    if not parts[2].isdigit() or not 1 <= int(parts[2]) <= 1024:
        raise argparse.ArgumentTypeError(f"{text}: QD must be 1 to 1024")
    return (parts[0], bs, int(parts[2]))


def wl_name(wl):
    rw, bs, qd = wl
    size = f"{bs >> 20}m" if bs % (1 << 20) == 0 else f"{bs >> 10}k"
    return f"{rw}:{size}:{qd}"


# TCP counters of this network namespace (/proc/net/snmp, /proc/net/netstat) that tell two
# initiators' TCP behaviour apart on loopback: retransmitted segments (and how many of them the
# receiver reported as duplicates: spurious), segments the receiver queued out of order, and the
# ACKs the sender processed (fast path and pure). Namespace-wide: other traffic counts too.
TCP_COUNTERS = {"Tcp": ["RetransSegs", "OutSegs"],
                "TcpExt": ["TCPDSACKRecv", "TCPOFOQueue", "TCPHPAcks", "TCPPureAcks"]}


def tcp_counters():
    got = {}
    for path in ("/proc/net/snmp", "/proc/net/netstat"):
        try:
            lines = open(path).read().splitlines()
        except OSError:
            continue
        for names, values in zip(lines[::2], lines[1::2]):
            group, keys = names.split(":")[0], names.split()[1:]
            vals = values.split()[1:]
            for k, v in zip(keys, vals):
                if k in TCP_COUNTERS.get(group, ()):
                    got[k] = int(v)
    return got


def counted(fn):
    """fn() with the TCP counters' growth over it, per GiB the run moved, in run["tcp_per_gib"]."""
    before = tcp_counters()
    run = fn()
    after = tcp_counters()
    gib = run["mib_s"] * run.get("seconds", 0) / 1024
    run["tcp_per_gib"] = {k: (after[k] - before[k]) / gib if gib else None for k in after if k in before}
    return run


def run_perf(spdk, cpu, port, wl, secs):
    rw, bs, depth = wl
    trid = f"trtype:tcp adrfam:IPv4 traddr:127.0.0.1 trsvcid:{port} subnqn:{NQN} hostnqn:{HOSTNQN}"
    out = subprocess.run([spdk.perf, "-q", str(depth), "-o", str(bs), "-w", rw, "-t", str(secs),
                          "-c", hex(1 << cpu), *spdk.mem(512), "-L", *PERF_SQFC, "-r", trid],
                         capture_output=True, text=True, timeout=secs + 60)
    text = out.stdout + out.stderr
    m = re.search(r"^Total\s*:\s*([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)", text, re.M)
    if out.returncode != 0 or not m:
        raise RuntimeError("spdk_nvme_perf failed:\n" + text[-2000:])
    p99 = re.search(r"^\s*99\.00000%\s*:\s*([\d.]+)us", text, re.M)
    return {"iops": float(m.group(1)), "mib_s": float(m.group(2)), "mean_us": float(m.group(3)),
            "p99_us": float(p99.group(1)) if p99 else None, "seconds": secs}


def run_bench(build, mode, cpu, port, wl, secs):
    rw, bs, depth = wl
    out = subprocess.run([os.path.join(build, "tools/nvmeof-bench"), "--target", f"127.0.0.1:{port}", "--nqn", NQN,
                          "--rw", rw, "--bs", str(bs), "--iodepth", str(depth), "--poll", mode,
                          "--cpus", str(cpu), "--runtime", f"{secs}s", "--size", "64m", "--no-verify", "--json",
                          "--no-progress"],
                         capture_output=True, text=True, timeout=secs + 60)
    if out.returncode != 0:
        raise RuntimeError("nvmeof-bench failed:\n" + (out.stdout + out.stderr)[-2000:])
    r = json.loads(out.stdout)["read" if "read" in rw else "write"]
    return {"iops": r["iops"], "mib_s": r["mib_per_s"], "mean_us": r["latency_us"]["mean"],
            "p99_us": r["latency_us"]["p99"], "seconds": secs}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--spdk", required=True, help="SPDK tree with build/bin/{nvmf_tgt,spdk_nvme_perf} and scripts/rpc.py")
    ap.add_argument("--build", default="build", help="our build directory")
    ap.add_argument("--seconds", type=int, default=5, help="per run")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--iodepth", type=int, nargs="+", default=[1],
                    help="queue depths of 4 KiB random reads (each a set of runs), when no --workloads")
    ap.add_argument("--workloads", type=parse_workload, nargs="+", default=None,
                    help="RW:BS:QD each, e.g. read:128k:8 write:128k:32 read:1m:4 (instead of --iodepth)")
    ap.add_argument("--targets", nargs="+", choices=["nvmf_tgt", "nvmeof-target"], default=["nvmf_tgt", "nvmeof-target"],
                    help="targets to run against (default both)")
    ap.add_argument("--modes", nargs="+", default=["busy"], choices=["busy", "adaptive", "sleep"],
                    help="nvmeof-bench poll modes")
    ap.add_argument("--client-cpu", type=int, default=0)
    ap.add_argument("--server-cpu", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--verbose", action="store_true", help="each run's figures on stderr as it ends")
    ap.add_argument("--tcp-counters", action="store_true",
                    help="also report TCP's counters per GiB moved (retransmits, spurious ones, out-of-order, ACKs)")
    ap.add_argument("--perf-sq-flow-control", action="store_true",
                    help="leave SQ flow control on for spdk_nvme_perf (its default; ours always asks for it off)")
    a = ap.parse_args()
    if a.perf_sq_flow_control:
        PERF_SQFC.clear()
    workloads = a.workloads or [("randread", 4096, d) for d in a.iodepth]
    spdk = Spdk(a.spdk)
    if not spdk.ok():
        print(f"spdk_compare: no SPDK build under {a.spdk} (bench/spdk_baseline.sh builds one)", file=sys.stderr)
        return 77

    logdir = tempfile.mkdtemp(prefix="spdk_compare.")
    targets = []
    try:
        ports = []
        if "nvmf_tgt" in a.targets:
            ports.append(free_port())
            targets.append(start_spdk_target(spdk, a.server_cpu, ports[-1], logdir))
        if "nvmeof-target" in a.targets:
            ports.append(free_port())
            targets.append(start_our_target(a.build, a.server_cpu, ports[-1], logdir))
        for t in targets:
            t.pause()
        inits = [("spdk_nvme_perf", None)] + [(f"nvmeof-bench {m}", m) for m in a.modes]
        res = {}  # (depth, init, target) -> [run, ...]
        for r in range(a.rounds):
            order = list(range(len(targets)))
            if r % 2:
                order.reverse()
            for ti in order:
                t = targets[ti]
                t.resume()
                try:
                    for wl in workloads:
                        io = inits[r % len(inits):] + inits[:r % len(inits)]
                        for name, mode in io:
                            t0 = time.monotonic()
                            run = counted(lambda: run_perf(spdk, a.client_cpu, ports[ti], wl, a.seconds) if mode is None
                                          else run_bench(a.build, mode, a.client_cpu, ports[ti], wl, a.seconds))
                            res.setdefault((wl, name, t.name), []).append(run)
                            if a.verbose:
                                print(f"spdk_compare: {name} -> {t.name} {wl_name(wl)}: {run['mean_us']:.2f} us mean, "
                                      f"p99 {run['p99_us']} us, {run['iops']:.0f} IOPS, {run['mib_s']:.1f} MiB/s "
                                      f"({time.monotonic() - t0:.1f} s)", file=sys.stderr)
                finally:
                    t.pause()
            print(f"spdk_compare: round {r + 1}/{a.rounds} done", file=sys.stderr)
    finally:
        for t in targets:
            t.stop()

    def med(runs, k):
        v = [x[k] for x in runs if x[k] is not None]
        return statistics.median(v) if v else float("nan")

    def paired(num, den, k):
        v = [x[k] / y[k] for x, y in zip(num, den) if x[k] and y[k]]
        return statistics.median(v) if v else float("nan")

    report = {"seconds": a.seconds, "rounds": a.rounds, "client_cpu": a.client_cpu, "server_cpu": a.server_cpu,
              "hugepages": spdk.huge, "pairs": [], "initiator_ratios": [], "target_ratios": []}
    tnames = [t.name for t in targets]
    for wl in workloads:
        rw, bs, depth = wl
        for name, _ in inits:
            for tn in tnames:
                runs = res[(wl, name, tn)]
                report["pairs"].append({"workload": wl_name(wl), "rw": rw, "bs": bs, "iodepth": depth,
                                        "initiator": name, "target": tn,
                                        "mean_us_median": med(runs, "mean_us"), "p99_us_median": med(runs, "p99_us"),
                                        "iops_median": med(runs, "iops"), "mib_s_median": med(runs, "mib_s"),
                                        "tcp_per_gib_median": {k: med([x["tcp_per_gib"] for x in runs], k)
                                                               for k in runs[0]["tcp_per_gib"]},
                                        "runs": runs})
        for name, _ in inits[1:]:
            for tn in tnames:
                ours, theirs = res[(wl, name, tn)], res[(wl, "spdk_nvme_perf", tn)]
                report["initiator_ratios"].append({"workload": wl_name(wl), "iodepth": depth, "initiator": name,
                                                   "target": tn,
                                                   "mean_over_spdk_perf": paired(ours, theirs, "mean_us"),
                                                   "mib_s_over_spdk_perf": paired(ours, theirs, "mib_s"),
                                                   "p99_over_spdk_perf": paired(ours, theirs, "p99_us")})
        if len(tnames) == 2:
            for name, _ in inits:
                report["target_ratios"].append({"workload": wl_name(wl), "iodepth": depth, "initiator": name,
                                                "nvmeof_target_over_nvmf_tgt": paired(res[(wl, name, "nvmeof-target")],
                                                                                      res[(wl, name, "nvmf_tgt")],
                                                                                      "mean_us")})
    if a.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"Loopback NVMe/TCP, initiator CPU {a.client_cpu}, target CPU {a.server_cpu}, "
          f"{a.rounds} rounds x {a.seconds} s per pair (medians over the rounds)")
    print(f"  {'workload':<16} {'initiator':<22} {'target':<15} {'mean us':>9} {'p99 us':>9} {'IOPS':>10} {'MiB/s':>9}")
    for p in report["pairs"]:
        print(f"  {p['workload']:<16} {p['initiator']:<22} {p['target']:<15} {p['mean_us_median']:>9.2f} "
              f"{p['p99_us_median']:>9.2f} {p['iops_median']:>10.0f} {p['mib_s_median']:>9.1f}")
    if a.tcp_counters:
        keys = [k for ks in TCP_COUNTERS.values() for k in ks]
        print("TCP counters per GiB moved (this network namespace, medians over the rounds):")
        print(f"  {'workload':<16} {'initiator':<22} {'target':<15} " + " ".join(f"{k:>12}" for k in keys))
        for p in report["pairs"]:
            t = p["tcp_per_gib_median"]
            print(f"  {p['workload']:<16} {p['initiator']:<22} {p['target']:<15} " +
                  " ".join(f"{t.get(k, float('nan')):>12.1f}" for k in keys))
    print("Paired ratios (each round's, median over the rounds):")
    for x in report["initiator_ratios"]:
        print(f"  {x['workload']} {x['initiator']} over spdk_nvme_perf, target {x['target']}: "
              f"mean {x['mean_over_spdk_perf']:.2f}x, MiB/s {x['mib_s_over_spdk_perf']:.2f}x, "
              f"p99 {x['p99_over_spdk_perf']:.2f}x")
    for x in report["target_ratios"]:
        print(f"  {x['workload']} nvmeof-target over nvmf_tgt, initiator {x['initiator']}: "
              f"mean {x['nvmeof_target_over_nvmf_tgt']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
