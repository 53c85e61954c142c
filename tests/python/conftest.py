import pytest

import nvmeof
from nvmeof import _testing


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
