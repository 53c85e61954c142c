"""DH-HMAC-CHAP from Python: a volume opened with the host's secret authenticates to the
embedded target (every queue of both paths) and moves verified data; a wrong key raises
PermissionError; no key is refused too."""
import base64
import os
import zlib

import pytest

import nvmeof
from nvmeof import _testing

HOST = "nqn.2024-01.io.nvmeof.test:python-auth"


def secret(key: bytes) -> str:
    """The interchange form (no transformation): base64 of the key and its CRC-32."""
    crc = zlib.crc32(key).to_bytes(4, "little")
    return "DHHC-1:00:" + base64.b64encode(key + crc).decode() + ":"


def test_volume_authenticates_and_moves_data(tmp_path):
    key, ctrl = secret(os.urandom(32)), secret(os.urandom(48))
    t = _testing.Target(ports=2, size=8 << 20, hosts=[(HOST, key, ctrl)])
    try:
        path = tmp_path / "ctrl.key"
        path.write_text(ctrl + "\n")
        with nvmeof.Volume(t.addresses, nqn=t.nqn, hostnqn=HOST, dhchap_secret=key,
                           dhchap_ctrl_secret="@" + str(path), io_deadline=2.0) as v:
            data = os.urandom(64 << 10)
            assert v.pwrite(data, 1 << 20) == len(data)
            out = bytearray(len(data))
            assert v.pread(out, 1 << 20) == len(data)
            assert bytes(out) == data
        assert t.read_ns(1 << 20, len(data)) == data
        auths = sum(t.port_stats(p)["authentications"] for p in range(2))
        assert auths >= 4  # two admin queues and an I/O queue per path at least
        assert sum(t.port_stats(p)["auth_failures"] for p in range(2)) == 0
    finally:
        t.stop()


def test_wrong_or_missing_key_is_refused():
    key = secret(os.urandom(32))
    t = _testing.Target(ports=1, size=8 << 20, hosts=[(HOST, key, "")])
    try:
        with pytest.raises(PermissionError):
            nvmeof.Volume(t.addresses, nqn=t.nqn, hostnqn=HOST, dhchap_secret=secret(os.urandom(32)))
        with pytest.raises(PermissionError):
            nvmeof.Volume(t.addresses, nqn=t.nqn, hostnqn=HOST)
        with pytest.raises(ValueError):
            nvmeof.Volume(t.addresses, nqn=t.nqn, hostnqn=HOST, dhchap_secret="DHHC-1:00:bad:")
        assert t.port_stats(0)["auth_failures"] >= 1
    finally:
        t.stop()
