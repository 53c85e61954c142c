"""nvmeof.Host against the embedded target: volumes of two namespaces on one engine, data checked
on each, the host's counts, its lifetime against its volumes', bad arguments, fork."""
import errno
import os

import pytest

import nvmeof
from conftest import run_in_child
from nvmeof import _testing

BS = 4096
# "0" when the library is built without metrics support (meson sets it from -Dmetrics).
METRICS = os.environ.get("NVMEOF_TEST_METRICS", "1") != "0"


def pattern(n, seed):
    return bytes(((i * 131 + seed * 7 + (i >> 9)) & 0xFF) for i in range(n))


@pytest.fixture(scope="module")
def target2():
    """Two ports to one subsystem with two namespaces (NSID 1 and 2) of 16 MiB."""
    t = _testing.Target(ports=2, size=16 << 20, block_size=BS, nqn="nqn.2024-01.io.nvmeof:host",
                        namespaces=2)
    yield t
    t.stop()


def open_on(host, t, nsid):
    return nvmeof.Volume(t.addresses, nqn=t.nqn, nsid=nsid, io_deadline=2.0, no_path_timeout=10.0,
                         host=host)


def test_two_volumes_share_one_host(target2):
    with nvmeof.Host(reactors=2, poll="adaptive", placement="unpinned") as h:
        s = h.stats()
        assert s["reactors"] == 2 and h.reactors == 2
        assert s["threads"] > s["reactors"]  # and the control thread and the pool
        assert s["volumes"] == 0
        with open_on(h, target2, 1) as a, open_on(h, target2, 2) as b:
            assert h.volumes == 2
            assert h.reactors == 2  # no volume added a thread
            # Two namespaces of one subsystem over the same paths: one set of controllers.
            assert h.stats()["subsystems"] == 1
            assert h.stats()["controllers"] >= 1
            da, db = pattern(8 * BS, 1), pattern(8 * BS, 2)
            # The same offset on both: each lands in its own namespace.
            futs = a.write_batch([(da[i * BS:(i + 1) * BS], (10 + i) * BS) for i in range(8)])
            assert b.pwrite(db, 10 * BS) == 8 * BS
            a.wait(futs, timeout=10.0)
            assert target2.read_ns(10 * BS, 8 * BS, nsid=1) == da
            assert target2.read_ns(10 * BS, 8 * BS, nsid=2) == db
            ra, rb = bytearray(8 * BS), bytearray(8 * BS)
            a.pread(ra, 10 * BS)
            b.submit_read(rb, 10 * BS).result(timeout=10.0)
            assert ra == da and rb == db
            assert h.stats()["reactor_wakeups"] > 0
        assert h.volumes == 0
        assert "0 volumes" in repr(h)
    assert h.closed
    assert repr(h) == "<nvmeof.Host closed>"


def test_volumes_outlive_the_host_handle(target2):
    h = nvmeof.Host(reactors=1)
    a = open_on(h, target2, 1)
    b = open_on(h, target2, 2)
    assert h.volumes == 2
    h.close()
    h.close()
    with pytest.raises(ValueError, match="Host is closed"):
        h.stats()
    # The volumes hold the engine: I/O goes on.
    a.pwrite(pattern(BS, 3), 40 * BS)
    b.pwrite(pattern(BS, 4), 40 * BS)
    a.close()
    out = bytearray(BS)
    b.pread(out, 40 * BS)
    assert out == pattern(BS, 4)
    b.close()  # the last holder: the engine stops
    assert target2.read_ns(40 * BS, BS, nsid=1) == pattern(BS, 3)
    with pytest.raises(ValueError, match="Host is closed"):
        open_on(h, target2, 1)


def test_discovery_on_a_host(target2):
    with nvmeof.Host() as h:
        with nvmeof.Volume(discovery=target2.addresses[0], nqn=target2.nqn, nsid=2, io_deadline=2.0,
                           host=h) as v:
            assert len(v.stats()["paths"]) == 2
            assert h.volumes == 1
            v.pwrite(pattern(BS, 5), 50 * BS)
            assert target2.read_ns(50 * BS, BS, nsid=2) == pattern(BS, 5)


def test_bad_arguments(target2):
    with pytest.raises(ValueError, match="reactors"):
        nvmeof.Host(reactors=0)
    with pytest.raises(ValueError, match="poll"):
        nvmeof.Host(poll="spin")
    with pytest.raises(ValueError, match="placement"):
        nvmeof.Host(placement="pinned")
    with pytest.raises(ValueError, match="cpus"):
        nvmeof.Host(cpus=[-1])
    with pytest.raises(TypeError, match="nvmeof.Host"):
        nvmeof.Volume(target2.addresses, nqn=target2.nqn, host="not a host")
    with nvmeof.Host() as h:
        with pytest.raises(ValueError, match="reactors is the Host's"):
            nvmeof.Volume(target2.addresses, nqn=target2.nqn, reactors=2, host=h)
        assert h.volumes == 0


def test_cpus(target2):
    # A CPU this process may not use leaves its reactor unpinned: the host still works.
    with nvmeof.Host(reactors=2, cpus=[0, 1], poll="sleep") as h:
        assert h.cpus == [0, 1]
        with open_on(h, target2, 1) as v:
            v.pwrite(pattern(BS, 6), 60 * BS)
            out = bytearray(BS)
            v.pread(out, 60 * BS)
            assert out == pattern(BS, 6)


def test_fork(target2):
    h = nvmeof.Host()
    def child():
        try:
            h.stats()
            return b"used the parent's host without an error"
        except nvmeof.ForkedVolumeError as e:
            if b"nvmeof.Host" not in str(e).encode():
                return b"unclear message"
        try:
            open_on(h, target2, 1)
            return b"opened a volume on the parent's host"
        except nvmeof.ForkedVolumeError:
            pass
        # The C layer refuses too, not only the Python check.
        try:
            h._h.stats()
            return b"C layer accepted the forked host"
        except OSError as e:
            if e.errno != errno.ECHILD:
                return b"C layer: wrong errno"
        h.close()  # only forgets the handle
        with nvmeof.Host() as mine, open_on(mine, target2, 1) as v:
            v.pread(bytearray(BS), 0)
        return b"ok"

    run_in_child(child)
    # The parent's host is unaffected.
    with open_on(h, target2, 2) as v:
        assert h.volumes == 1
        v.pread(bytearray(BS), 0)
    h.close()


@pytest.mark.skipif(METRICS, reason="the library is built with metrics support")
def test_host_metrics_unsupported():
    """A library built without metrics support refuses an endpoint with EOPNOTSUPP."""
    with pytest.raises(OSError) as e:
        nvmeof.Host(metrics_listen="127.0.0.1:0")
    assert e.value.errno == errno.EOPNOTSUPP


@pytest.mark.skipif(not METRICS, reason="the library is built without metrics support")
def test_host_metrics_one_sample_per_controller(target2):
    """Host(metrics_listen=...) serves the engine's Prometheus metrics: two volumes of one
    subsystem over two paths show two controllers, each with both volumes on it."""
    import urllib.request

    with pytest.raises(ValueError, match="cannot start the host"):
        nvmeof.Host(metrics_listen="nonsense")
    with nvmeof.Host(placement="unpinned", metrics_listen="127.0.0.1:0") as h:
        port = h.metrics_port
        assert port > 0
        with open_on(h, target2, 1) as a, open_on(h, target2, 2) as b:
            a.pwrite(pattern(BS, 11), 60 * BS)
            b.pwrite(pattern(BS, 12), 60 * BS)
            body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
            lines = [l for l in body.splitlines() if l and not l.startswith("#")]
            assert "nvmeof_host_volumes 2" in lines
            assert "nvmeof_host_subsystems 1" in lines
            state = [l for l in lines if l.startswith("nvmeof_controller_state{")]
            vols = [l for l in lines if l.startswith("nvmeof_controller_volumes{")]
            assert len(state) == 2 and all(l.endswith(" 1") for l in state)  # both live
            assert len(vols) == 2 and all(l.endswith(" 2") for l in vols)
            ios = sum(float(l.rsplit(" ", 1)[1]) for l in lines
                      if l.startswith("nvmeof_controller_io_completed_total{"))
            assert ios >= 2  # the two writes, counted by the controllers that carried them
    with nvmeof.Host() as plain:
        assert plain.metrics_port == 0


def test_persistent_discovery(target2):
    """A watched discovery controller's ports become paths of a volume opened over one of them;
    the host lists it, refuses it twice, and stops watching it."""
    import time

    first, second = target2.addresses
    with nvmeof.Host() as h:
        v = nvmeof.Volume([first], nqn=target2.nqn, io_deadline=2.0, no_path_timeout=10.0, host=h)
        try:
            h.add_discovery(second)
            with pytest.raises(FileExistsError):
                h.add_discovery(second)
            until = time.monotonic() + 20.0
            while time.monotonic() < until and len(v.stats()["paths"]) < 2:
                time.sleep(0.01)
            assert sorted(p["address"].split("//")[-1] for p in v.stats()["paths"]) == sorted([first, second])
            d = h.discovery()
            assert len(d) == 1 and d[0]["connected"] and d[0]["log_reads"] >= 1
            v.pwrite(pattern(BS, 8), 8 * BS)
            buf = bytearray(BS)
            v.pread(buf, 8 * BS)
            assert buf == pattern(BS, 8)
            assert h.namespace_events() == []
            h.remove_discovery(second)
            with pytest.raises(FileNotFoundError):
                h.remove_discovery(second)
            assert h.discovery() == []
        finally:
            v.close()
