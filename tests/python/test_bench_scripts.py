"""bench/spdk_compare.py's parts that run without SPDK: the TCP counters it reports beside each
run (read from this network namespace's /proc/net files) and its refusal without an SPDK build."""
import importlib.util
import os
import socket
import subprocess
import sys
import threading

import pytest

BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench")


@pytest.fixture(scope="module")
def spdk_compare():
    path = os.path.join(BENCH, "spdk_compare.py")
    if not os.path.exists(path):
        pytest.skip("no bench/ beside the tests (an installed package's run)")
    spec = importlib.util.spec_from_file_location("spdk_compare", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _loopback_transfer(nbytes):
    """Sends nbytes over a TCP connection on loopback and receives them all."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    got = []

    def recv_all(conn):
        n = 0
        while n < nbytes:
            b = conn.recv(1 << 20)
            if not b:
                break
            n += len(b)
        got.append(n)

    cli = socket.create_connection(srv.getsockname())
    conn, _ = srv.accept()
    t = threading.Thread(target=recv_all, args=(conn,))
    t.start()
    cli.sendall(b"\x5a" * nbytes)
    t.join(30)
    for s in (cli, conn, srv):
        s.close()
    assert got == [nbytes]


def test_tcp_counters_grow_with_loopback_traffic(spdk_compare):
    before = spdk_compare.tcp_counters()
    for k in ("RetransSegs", "OutSegs", "TCPHPAcks", "TCPPureAcks", "TCPDSACKRecv", "TCPOFOQueue"):
        assert k in before, k
    _loopback_transfer(16 << 20)
    after = spdk_compare.tcp_counters()
    # 16 MiB at most 64 KiB per segment: at least 256 segments went out.
    assert after["OutSegs"] - before["OutSegs"] >= 256
    assert all(after[k] >= before[k] for k in before)


def test_counted_reports_per_gib_moved(spdk_compare):
    def run():
        _loopback_transfer(8 << 20)
        return {"mib_s": 512.0, "seconds": 2}  # 1 GiB, as a bench run would report it

    r = spdk_compare.counted(run)
    per = r["tcp_per_gib"]
    assert set(per) >= {"RetransSegs", "OutSegs"}
    assert per["OutSegs"] >= 128  # the 8 MiB's segments, per the 1 GiB the run claimed


def test_without_spdk_it_says_so_and_skips(tmp_path):
    if not os.path.exists(os.path.join(BENCH, "spdk_compare.py")):
        pytest.skip("no bench/ beside the tests")
    out = subprocess.run([sys.executable, os.path.join(BENCH, "spdk_compare.py"), "--spdk", str(tmp_path)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 77
    assert "spdk_baseline.sh" in out.stderr
