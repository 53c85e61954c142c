"""NVMe/TCP TLS from Python: a volume opened with tls_psk runs every queue of both paths inside
TLS 1.3 against the embedded target's TLS-only ports and moves verified data; another key
raises PermissionError, no key on a TLS-only port too, a malformed key ValueError."""
import base64
import os
import time
import zlib

import pytest

import nvmeof
from nvmeof import _testing

HOST = "nqn.2024-01.io.nvmeof.test:python-tls"


def tls_key(key: bytes, hash_id: str = "01") -> str:
    """The NVMe TLS PSK interchange form: base64 of the key and its CRC-32 (little-endian)."""
    crc = zlib.crc32(key).to_bytes(4, "little")
    return f"NVMeTLSkey-1:{hash_id}:" + base64.b64encode(key + crc).decode() + ":"


def eventually(pred, timeout=5.0):
    """The target counts a refusal on its connection thread, maybe after the host saw it."""
    end = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > end:
            return False
        time.sleep(0.001)
    return True


def test_volume_through_tls_moves_data(tmp_path):
    key = tls_key(os.urandom(48), "02")  # SHA-384: TLS_AES_256_GCM_SHA384
    t = _testing.Target(ports=2, size=8 << 20, tls="required", tls_psk=key)
    try:
        path = tmp_path / "tls.key"
        path.write_text(key + "\n")
        for psk in (key, "@" + str(path)):
            with nvmeof.Volume(t.addresses, nqn=t.nqn, hostnqn=HOST, tls_psk=psk,
                               io_deadline=2.0) as v:
                data = os.urandom(256 << 10)
                assert v.pwrite(data, 1 << 20) == len(data)
                out = bytearray(len(data))
                assert v.pread(out, 1 << 20) == len(data)
                assert bytes(out) == data
            assert t.read_ns(1 << 20, len(data)) == data
        stats = [t.port_stats(p) for p in range(2)]
        assert sum(s["tls_sessions"] for s in stats) >= 8  # 2 opens x 2 paths x (admin + I/O)
        assert sum(s["tls_failures"] + s["tls_plaintext_refused"] for s in stats) == 0
    finally:
        t.stop()


def test_wrong_missing_or_malformed_key_is_refused():
    t = _testing.Target(ports=1, size=8 << 20, tls="required", tls_psk=tls_key(os.urandom(32)))
    try:
        with pytest.raises(PermissionError):
            nvmeof.Volume(t.addresses, nqn=t.nqn, hostnqn=HOST, tls_psk=tls_key(os.urandom(32)))
        assert eventually(lambda: t.port_stats(0)["tls_failures"] >= 1)
        with pytest.raises(PermissionError):
            nvmeof.Volume(t.addresses, nqn=t.nqn, hostnqn=HOST)
        assert eventually(lambda: t.port_stats(0)["tls_plaintext_refused"] >= 1)
        with pytest.raises(ValueError):
            nvmeof.Volume(t.addresses, nqn=t.nqn, hostnqn=HOST, tls_psk="NVMeTLSkey-1:01:bad:")
    finally:
        t.stop()
