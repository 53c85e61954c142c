import os

import pytest

import nvmeof
from nvmeof import _testing

# The pip install test (tests/pip) runs this suite against an installed package: make sure the
# package under test is that one, not a build tree on the path.
_expect = os.environ.get("NVMEOF_EXPECT_PACKAGE_UNDER")
if _expect:
    for _m in (nvmeof, nvmeof._core, _testing):
        if not os.path.realpath(_m.__file__).startswith(os.path.realpath(_expect) + os.sep):
            raise ImportError(f"{_m.__name__} imported from {_m.__file__}, not from {_expect}")


@pytest.fixture(scope="session")
def target():
    """The embedded target: two ports (two paths) to one 64 MiB namespace, 4 KiB blocks."""
    t = _testing.Target(ports=2, size=64 << 20, block_size=4096)
    yield t
    t.stop()


@pytest.fixture
def vol(target):
    with nvmeof.Volume(target.addresses, nqn=target.nqn, io_deadline=2.0, no_path_timeout=10.0) as v:
        yield v


def run_in_child(child) -> None:
    """Runs `child()` in a forked child, which returns b"ok" or what went wrong; asserts in the
    parent that it said b"ok" and exited 0. The child never returns into pytest, and anything it
    raises comes back as its message."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            msg = child()
            code = 0 if msg == b"ok" else 1
            os.write(w, msg)
        except BaseException as e:  # noqa: BLE001: report anything to the parent
            os.write(w, repr(e).encode()[:200])
        finally:
            os._exit(code)
    os.close(w)
    msg = os.read(r, 256)
    os.close(r)
    _, status = os.waitpid(pid, 0)
    assert msg == b"ok"
    assert os.waitstatus_to_exitcode(status) == 0
