#!/bin/sh
# Our host's DH-HMAC-CHAP against Linux nvmet (6.12 guest kernel: NVMe target authentication
# built): nvmet's host entry gets a key (and a controller key), a hash and a DH group; our host
# (auth_host) authenticates its admin and I/O queues and moves verified data. Cases: SHA-256
# with the null group (unidirectional), SHA-512 with ffdhe2048 (bidirectional), SHA-256 with
# ffdhe3072 (bidirectional), and a wrong key, which nvmet refuses and our host reports as
# "authentication failed".
# Run it with: tests/vm/vm_run.sh --kernel 6.12 tests/vm/nvmet_auth_test.sh build-dir/tests/vm/auth_host
. "${NVMEOF_GUEST_LIB:?run this inside the guest through tests/vm/vm_run.sh}"
bin=${1:?usage: nvmet_auth_test.sh <auth_host binary>}

HOST=nqn.2024-01.io.nvmeof.test:auth-host
sub=$NVMET/subsystems/$NQN
hostdir=$NVMET/hosts/$HOST
step() { echo "nvmet_auth_test: $*"; }

[ -e "$NVMET/hosts" ] || skip "nvmet has no hosts directory"
mkdir "$hostdir" || fail "cannot create the nvmet host entry"
[ -e "$hostdir/dhchap_key" ] || skip "nvmet of $(uname -r) has no DH-HMAC-CHAP (dhchap_key missing)"
# nvmet takes no allowed host while any host may connect.
echo 0 >"$sub/attr_allow_any_host" || fail "cannot close $NQN to other hosts"
ln -s "$hostdir" "$sub/allowed_hosts/$HOST" || fail "cannot allow $HOST on $NQN"

key() { # <hmac 0-3> <length>: a fresh secret for HOST in the interchange form
    nvme gen-dhchap-key --nqn="$HOST" --hmac="$1" --key-length="$2" || fail "nvme gen-dhchap-key"
}

configure() { # <hash> <dhgroup> <host key> [ctrl key]
    echo "$1" >"$hostdir/dhchap_hash" || fail "dhchap_hash $1"
    echo "$2" >"$hostdir/dhchap_dhgroup" || fail "dhchap_dhgroup $2"
    echo "$3" >"$hostdir/dhchap_key" || fail "dhchap_key"
    # nvmet takes no empty key: a controller key, once set, stays until the next one.
    [ -z "${4:-}" ] || echo "$4" >"$hostdir/dhchap_ctrl_key" || fail "dhchap_ctrl_key"
}

expect_ok() { # <what> <auth_host args...>
    _what=$1
    shift
    step "$_what"
    "$bin" "$TCP1" "$HOST" "$@" >/tmp/auth.out 2>&1
    _rc=$?
    cat /tmp/auth.out
    [ $_rc = 0 ] || { dmesg | tail -n 8; fail "$_what: our host did not authenticate (rc $_rc)"; }
    grep -q "auth_host: ok" /tmp/auth.out || fail "$_what: no ok line"
}

k1=$(key 1 32)
configure "hmac(sha256)" null "$k1"
expect_ok "SHA-256, null group, unidirectional" "$k1"

k2=$(key 3 64)
c2=$(key 0 48)
configure "hmac(sha512)" ffdhe2048 "$k2" "$c2"
expect_ok "SHA-512, ffdhe2048, bidirectional" "$k2" "$c2"

configure "hmac(sha256)" ffdhe3072 "$k1" "$c2"
expect_ok "SHA-256, ffdhe3072, bidirectional" "$k1" "$c2"

step "a wrong key is refused"
configure "hmac(sha256)" ffdhe2048 "$k1"
wrong=$(key 1 32)
if "$bin" "$TCP1" "$HOST" "$wrong" >/tmp/auth.out 2>&1; then
    cat /tmp/auth.out
    fail "our host connected with a wrong key"
fi
cat /tmp/auth.out
grep -q "authentication failed" /tmp/auth.out || fail "the wrong key did not give 'authentication failed'"

step "a controller that cannot prove the controller key our host holds is refused"
configure "hmac(sha256)" ffdhe2048 "$k1" "$c2"
c3=$(key 0 48)
if "$bin" "$TCP1" "$HOST" "$k1" "$c3" >/tmp/auth.out 2>&1; then
    cat /tmp/auth.out
    fail "our host accepted a controller that could not prove the controller key"
fi
cat /tmp/auth.out
grep -q "authentication failed" /tmp/auth.out || fail "the wrong controller key did not give 'authentication failed'"

rm "$sub/allowed_hosts/$HOST"
echo 1 >"$sub/attr_allow_any_host"
rmdir "$hostdir"
step "pass"
