#!/usr/bin/env python3
"""nbdkit with nbdkit-nvmeof-plugin.so against nvmeof-target, driven by real NBD clients.

    nbdkit_test.py CASE      CASE: fio-reset | copy | errors

Environment: NVMEOF_TARGET (the nvmeof-target binary), NBDKIT_PLUGIN (the plugin's .so).
Everything runs on loopback: the target on 127.0.0.1 ports it picks, nbdkit on a Unix socket.
Every wait is for an event (a line, a file, a counter, a process exit) and has a bound; a test
fails with what it was waiting for. Exit code 77 (skipped) when nbdkit, fio or nbdcopy is missing.
"""

import hashlib
import json
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

NQN = "nqn.2024-01.io.nvmeof:nbdkit-test"
TARGET = os.environ.get("NVMEOF_TARGET", "")
PLUGIN = os.environ.get("NBDKIT_PLUGIN", "")


class Failure(Exception):
    pass


def wait_until(what, predicate, timeout_s, step_s=0.01):
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise Failure(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(step_s)


def read_line(proc, timeout_s, what):
    """The first line `proc` writes to its stdout, within timeout_s."""
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    buf = b""
    deadline = time.monotonic() + timeout_s
    while b"\n" not in buf:
        left = deadline - time.monotonic()
        if left <= 0 or not sel.select(left):
            raise Failure(f"timed out after {timeout_s} s waiting for {what}")
        chunk = os.read(proc.stdout.fileno(), 65536)
        if not chunk:
            raise Failure(f"{what}: the process exited (status {proc.wait()})")
        buf += chunk
    return buf.split(b"\n", 1)[0].decode()


def stop(proc, timeout_s=20):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class Target:
    """nvmeof-target with `ports` loopback ports and a control socket."""

    def __init__(self, tmp, ports=2, size="64M"):
        self.ctl_path = os.path.join(tmp, "target.ctl")
        self.log = open(os.path.join(tmp, "target.log"), "wb")
        args = [TARGET, "--nqn", NQN, "--size", size, "--control", self.ctl_path, "--json"]
        for _ in range(ports):
            args += ["--listen", "127.0.0.1:0"]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=self.log)
        desc = json.loads(read_line(self.proc, 20, "nvmeof-target to listen"))
        self.addresses = [p["address"] for p in desc["ports"]]

    def ctl(self, *words):
        r = subprocess.run([TARGET, "ctl", self.ctl_path, *words], capture_output=True, text=True,
                           timeout=20)
        if r.returncode != 0:
            raise Failure(f"nvmeof-target ctl {' '.join(words)}: {r.stderr.strip()}")
        return r.stdout

    def ports(self):
        return json.loads(self.ctl("stats"))["ports"]

    def close(self):
        stop(self.proc)
        self.log.close()


class Nbdkit:
    """nbdkit in the foreground serving the plugin on a Unix socket."""

    def __init__(self, tmp, params):
        self.sock = os.path.join(tmp, "nbd.sock")
        pidfile = os.path.join(tmp, "nbdkit.pid")
        self.log_path = os.path.join(tmp, "nbdkit.log")
        log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(["nbdkit", "--foreground", "--unix", self.sock,
                                      "--pidfile", pidfile, PLUGIN, *params],
                                     stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        log.close()
        # nbdkit writes its pid file once it accepts connections.
        wait_until("nbdkit to write its pid file (ready)",
                   lambda: os.path.exists(pidfile) or self.proc.poll() is not None, 30)
        if self.proc.poll() is not None:
            raise Failure(f"nbdkit exited with {self.proc.returncode}:\n{self.log()}")
        self.uri = f"nbd+unix:///?socket={self.sock}"

    def log(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def close(self):
        stop(self.proc)


def run(args, timeout_s, what):
    r = subprocess.run(args, capture_output=True, text=True, timeout=timeout_s)
    if r.returncode != 0:
        raise Failure(f"{what} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    return r


def sha256(path, length=None):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        left = length if length is not None else 1 << 62
        while left > 0:
            chunk = f.read(min(left, 1 << 20))
            if not chunk:
                break
            h.update(chunk)
            left -= len(chunk)
    return h.hexdigest()


def fio_verify_across_resets(tmp):
    """fio --ioengine=nbd writes 64 MiB with crc32c verification, then reads it all back and
    checks it; path 0 is reset while the writes run and path 1 while the verifying reads run.
    Both resets must land while fio runs and be followed by a reconnect, and fio must end with
    no error and every block verified."""
    target = Target(tmp)
    kit = None
    fio = None
    try:
        kit = Nbdkit(tmp, [f"path={a}" for a in target.addresses] + [f"nqn={NQN}"])
        out = os.path.join(tmp, "fio.json")
        fio = subprocess.Popen(["fio", "--name=verify", "--ioengine=nbd", f"--uri={kit.uri}",
                                "--rw=randwrite", "--bs=4k", "--iodepth=16", "--size=64M",
                                "--verify=crc32c", "--verify_fatal=1", "--do_verify=1",
                                "--output-format=json", f"--output={out}"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

        def total(key):
            return sum(p[key] for p in target.ports())

        for port, phase, key in ((0, "writes", "writes"), (1, "verifying reads", "reads")):
            wait_until(f"fio's {phase} to reach the target",
                       lambda: total(key) >= 1000 or fio.poll() is not None, 120)
            if fio.poll() is not None:
                raise Failure(f"fio ended before path {port} was reset during its {phase}")
            before = target.ports()[port]["connections"]
            target.ctl("fault", str(port), "reset")
            if fio.poll() is not None:
                raise Failure(f"fio ended while path {port} was being reset")
            wait_until(f"path {port} to reconnect after its reset",
                       lambda: target.ports()[port]["connections"] > before, 60)
        try:
            fio_out = fio.communicate(timeout=300)[0].decode(errors="replace")
        except subprocess.TimeoutExpired:
            raise Failure("fio did not finish within 300 s")
        if fio.returncode != 0:
            raise Failure(f"fio failed ({fio.returncode}):\n{fio_out}\nnbdkit:\n{kit.log()}")
        with open(out) as f:
            job = json.load(f)["jobs"][0]
        if job["error"] != 0:
            raise Failure(f"fio reports error {job['error']}")
        size = 64 << 20
        if job["write"]["io_bytes"] != size or job["read"]["io_bytes"] != size:
            raise Failure(f"fio wrote {job['write']['io_bytes']} and verified "
                          f"{job['read']['io_bytes']} bytes, expected {size} each")
        print(f"fio: 64 MiB written and verified (crc32c) across a reset of each path, 0 errors; "
              f"write {job['write']['iops']:.0f} IOPS, verify {job['read']['iops']:.0f} IOPS")
    finally:
        if fio and fio.poll() is None:
            fio.kill()
            fio.wait()
        if kit:
            kit.close()
        target.close()


def nbdcopy_in_and_out(tmp):
    """nbdcopy a random file in and back out (pwrite, pread, flush), then a file with a hole
    over it (nbdcopy zeroes the hole: zero), then fio trims a range (trim): every copy out
    equals what was put in, the trimmed range reads back as zeroes."""
    size = 16 << 20
    target = Target(tmp, ports=2, size="16M")
    kit = None
    try:
        kit = Nbdkit(tmp, [f"path={a}" for a in target.addresses] + [f"nqn={NQN}"])
        first = os.path.join(tmp, "first.img")
        with open(first, "wb") as f:
            f.write(os.urandom(size))
        run(["nbdcopy", "--flush", first, kit.uri], 120, "nbdcopy into the volume")
        out = os.path.join(tmp, "out.img")
        run(["nbdcopy", kit.uri, out], 120, "nbdcopy out of the volume")
        if sha256(out) != sha256(first):
            raise Failure("the copy out differs from the file copied in")
        if sum(p["writes"] for p in target.ports()) == 0:
            raise Failure("the target saw no write")

        # 4 MiB to 8 MiB a hole: the volume there holds the first file's random data until
        # nbdcopy zeroes it.
        holed = os.path.join(tmp, "holed.img")
        with open(holed, "wb") as f:
            f.write(os.urandom(4 << 20))
            f.seek(8 << 20)
            f.write(os.urandom(size - (8 << 20)))
        run(["nbdcopy", "--flush", holed, kit.uri], 120, "nbdcopy of a file with a hole")
        os.unlink(out)
        run(["nbdcopy", kit.uri, out], 120, "nbdcopy out of the volume")
        if sha256(out) != sha256(holed):
            raise Failure("the copy out differs from the file with a hole copied in "
                          "(the hole not zeroed?)")

        # Trim 12 MiB to 14 MiB: deallocated blocks of the target read as zeroes.
        run(["fio", "--name=trim", "--ioengine=nbd", f"--uri={kit.uri}", "--rw=trim",
             "--bs=1M", "--offset=12M", "--size=2M"], 120, "fio --rw=trim")
        os.unlink(out)
        run(["nbdcopy", kit.uri, out], 120, "nbdcopy out of the volume")
        with open(holed, "rb") as f:
            expect = bytearray(f.read())
        expect[12 << 20:14 << 20] = bytes(2 << 20)
        with open(out, "rb") as f:
            if f.read() != expect:
                raise Failure("after the trim the volume differs from the file with 12-14 MiB "
                              "zeroed")
        print("nbdcopy: 16 MiB in and out twice, checksums equal; the hole zeroed, the trimmed "
              "range reads zeroes")
    finally:
        if kit:
            kit.close()
        target.close()


def qemu_block_layer(tmp):
    """qemu's block layer (qemu-img, qemu-io: the same NBD client qemu-system uses for a drive)
    reaches the volume: it sees its size, a file converted into it converts back out equal, and
    a pattern qemu-io writes it reads back."""
    size = 16 << 20
    target = Target(tmp, ports=2, size="16M")
    kit = None
    try:
        kit = Nbdkit(tmp, [f"path={a}" for a in target.addresses] + [f"nqn={NQN}"])
        info = json.loads(run(["qemu-img", "info", "--output=json", kit.uri], 60, "qemu-img info").stdout)
        if info.get("virtual-size") != size:
            raise Failure(f"qemu-img sees {info.get('virtual-size')} bytes, not {size}")
        src = os.path.join(tmp, "src.img")
        with open(src, "wb") as f:
            f.write(os.urandom(size))
        run(["qemu-img", "convert", "-n", "-f", "raw", "-O", "raw", src, kit.uri], 120,
            "qemu-img convert into the volume")
        out = os.path.join(tmp, "back.img")
        run(["qemu-img", "convert", "-f", "raw", "-O", "raw", kit.uri, out], 120,
            "qemu-img convert out of the volume")
        if sha256(out) != sha256(src):
            raise Failure("what qemu-img converted out differs from what it converted in")
        r = run(["qemu-io", "-f", "raw", "-c", "write -P 0xa7 3M 256k", "-c", "flush",
                 "-c", "read -P 0xa7 3M 256k", kit.uri], 60, "qemu-io write, flush, read -P")
        if "Pattern verification failed" in r.stdout + r.stderr:
            raise Failure(f"qemu-io read back another pattern:\n{r.stdout}")
        if sum(p["writes"] for p in target.ports()) == 0:
            raise Failure("the target saw no write")
        print("qemu: qemu-img sees 16 MiB, converts 16 MiB in and out equal; qemu-io's pattern "
              "reads back")
    finally:
        if kit:
            kit.close()
        target.close()


def nbdkit_fails(tmp, params, expect, what):
    """nbdkit with `params` exits non-zero within a bound, its stderr containing `expect`."""
    r = subprocess.run(["nbdkit", "--foreground", "--unix", os.path.join(tmp, "bad.sock"),
                        PLUGIN, *params], stdin=subprocess.DEVNULL, capture_output=True,
                       text=True, timeout=60)
    if r.returncode == 0:
        raise Failure(f"{what}: nbdkit exited 0")
    if expect not in r.stderr:
        raise Failure(f"{what}: nbdkit's error lacks {expect!r}:\n{r.stderr}")
    print(f"{what}: {r.stderr.strip()}")


def free_loopback_port():
    """A port nothing listens on: bound, then closed again (connecting to it is refused)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def errors(tmp):
    """What nbdkit says for a bad option, a missing NQN, a bad value and an unreachable path,
    and what the plugin declares (--help, --dump-plugin)."""
    nbdkit_fails(tmp, ["path=127.0.0.1:4420", f"nqn={NQN}", "bogus=1"],
                 "unknown parameter 'bogus'", "a bad option")
    nbdkit_fails(tmp, ["path=127.0.0.1:4420"], "nqn=NQN is required", "no nqn")
    nbdkit_fails(tmp, [f"nqn={NQN}"], "at least one path=ADDR:PORT", "no path")
    nbdkit_fails(tmp, ["path=127.0.0.1:4420", f"nqn={NQN}", "tls=maybe"],
                 "tls=maybe: expected auto, on or off", "a bad value")
    port = free_loopback_port()
    nbdkit_fails(tmp, [f"path=127.0.0.1:{port}", f"nqn={NQN}"],
                 f"cannot open nsid 1 of {NQN} at path=127.0.0.1:{port}: Connection refused",
                 "an unreachable path")
    # A reachable target that does not have the subsystem.
    target = Target(tmp, ports=1, size="16M")
    try:
        nbdkit_fails(tmp, [f"path={target.addresses[0]}", "nqn=nqn.2024-01.io.nvmeof:absent"],
                     "cannot open nsid 1 of nqn.2024-01.io.nvmeof:absent", "an unknown subsystem")
    finally:
        target.close()

    r = run(["nbdkit", PLUGIN, "--help"], 30, "nbdkit nvmeof --help")
    for word in ("path=ADDR:PORT", "nqn=NQN", "dhchap-secret=", "tls-psk="):
        if word not in r.stdout:
            raise Failure(f"--help lacks {word!r}:\n{r.stdout}")
    r = run(["nbdkit", PLUGIN, "--dump-plugin"], 30, "nbdkit nvmeof --dump-plugin")
    for line in ("thread_model=parallel", "has_pread=1", "has_pwrite=1", "has_flush=1",
                 "has_trim=1", "has_zero=1"):
        if line not in r.stdout.splitlines():
            raise Failure(f"--dump-plugin lacks {line!r}:\n{r.stdout}")
    print("errors: each refused with its reason; --help and --dump-plugin as declared")


CASES = {"fio-reset": fio_verify_across_resets, "copy": nbdcopy_in_and_out, "errors": errors,
         "qemu": qemu_block_layer}


def main():
    if len(sys.argv) != 2 or sys.argv[1] not in CASES:
        print(f"usage: {sys.argv[0]} {'|'.join(CASES)}", file=sys.stderr)
        return 2
    tools = ("nbdkit", "qemu-img", "qemu-io") if sys.argv[1] == "qemu" else ("nbdkit", "fio", "nbdcopy")
    for tool in tools:
        if not shutil.which(tool):
            print(f"skipped: {tool} is not installed")
            return 77
    if not (os.access(TARGET, os.X_OK) and os.path.exists(PLUGIN)):
        print("NVMEOF_TARGET and NBDKIT_PLUGIN must name the built binaries", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="nbdkit-test-") as tmp:
        try:
            CASES[sys.argv[1]](tmp)
        except Failure as e:
            print(f"FAIL: {e}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
