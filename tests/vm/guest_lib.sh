# Helpers for scripts that run inside the testbed guest (busybox sh).
# Source it with: . "$NVMEOF_GUEST_LIB"
#
# The guest's nvmet exports one subsystem, $NQN, with one namespace, through
#   port 1  tcp   $TCP1       (127.0.0.1:4420)
#   port 2  tcp   $TCP2       (127.0.0.2:4421)
#   port 3  rdma  $RDMA_ADDR  (10.10.10.1:4420, soft-RoCE rxe_d0 on dummy0)
# All ports start in ANA state optimized; the kernel host is not connected.
# Helpers return 0 on success, 77 when the guest kernel cannot do what is
# asked, anything else on failure.

NQN=nqn.2014-08.org.nvmexpress:nvmeof-testbed
TCP1=127.0.0.1:4420
TCP2=127.0.0.2:4421
RDMA_ADDR=10.10.10.1:4420
NVMET=/sys/kernel/config/nvmet
# The namespace's backing file (tmpfs, nvmet buffered_io): what the target really holds.
NS1_FILE=/run/nvmet-ns1.img
export NQN TCP1 TCP2 RDMA_ADDR NVMET NS1_FILE

# busybox runs its own applets before PATH: these name the real tools.
IP=/usr/sbin/ip
TC=/usr/sbin/tc

fail() { echo "FAIL: $*" >&2; exit 1; }
skip() { echo "SKIP: $*" >&2; exit 77; }
# run_timed CMD ARGS...: runs the command, then (through the payload's own `step`) says how long
# it took; its status is the command's.
run_timed() {
    _t0=$(cut -d' ' -f1 /proc/uptime)
    "$@" || return 1
    step "  took $(awk -v a="$_t0" -v b="$(cut -d' ' -f1 /proc/uptime)" 'BEGIN { printf "%.1f", b - a }') s"
}

# nvmet_ana_state <port> <optimized|non-optimized|inaccessible|persistent-loss|change>
nvmet_ana_state() {
    echo "$2" >"$NVMET/ports/$1/ana_groups/1/ana_state"
}

# Unlinking the subsystem from a port drops the host's connections there.
nvmet_port_remove() {
    rm "$NVMET/ports/$1/subsystems/$NQN"
}

nvmet_port_add() {
    ln -s "$NVMET/subsystems/$NQN" "$NVMET/ports/$1/subsystems/$NQN"
}

# netem_delay <iface> <ms>: delay every packet leaving <iface>; 0 removes it.
# On lo a packet leaves twice per round trip, so the RTT grows by 2*ms.
netem_delay() {
    if [ "$2" = 0 ]; then
        $TC qdisc del dev "$1" root 2>/dev/null
        return 0
    fi
    grep -q '^sch_netem ' /proc/modules || {
        echo "netem_delay: sch_netem is not available in this kernel" >&2
        return 77
    }
    $TC qdisc replace dev "$1" root netem delay "${2}ms"
}

# ctrl_state <nvmeX>: live, connecting, resetting, deleting, ...
ctrl_state() {
    cat "/sys/class/nvme/$1/state" 2>/dev/null || echo gone
}

# wait_ctrl_state <nvmeX> <state> [seconds]; "!state" waits for it to leave.
wait_ctrl_state() {
    _w=$((${3:-10} * 10))
    while [ $_w -gt 0 ]; do
        _s=$(ctrl_state "$1")
        case $2 in
            !*) [ "$_s" != "${2#!}" ] && return 0 ;;
            *) [ "$_s" = "$2" ] && return 0 ;;
        esac
        sleep 0.1
        _w=$((_w - 1))
    done
    echo "wait_ctrl_state: $1 is $(ctrl_state "$1"), wanted $2" >&2
    return 1
}

# start_ublk <what> <command...>: runs an nvmeof-ublk command in the background (its stdout to
# /tmp/ublk.out, its stderr added to /tmp/ublk.err) and waits until it has printed its device;
# sets tool_pid. Fails with what the tool said when it exits first.
start_ublk() {
    _what=$1
    shift
    : >/tmp/ublk.out
    "$@" >/tmp/ublk.out 2>>/tmp/ublk.err &
    tool_pid=$!
    while [ ! -s /tmp/ublk.out ]; do
        kill -0 "$tool_pid" 2>/dev/null || { cat /tmp/ublk.err >&2; fail "$_what exited before serving"; }
        sleep 0.1
    done
}

# wait_path <path> [seconds]: namespaces appear a moment after the connect.
wait_path() {
    _w=$((${2:-5} * 10))
    while [ ! -e "$1" ] && [ $_w -gt 0 ]; do
        sleep 0.1
        _w=$((_w - 1))
    done
    [ -e "$1" ] || { echo "wait_path: no $1" >&2; return 1; }
}

# ana_state <nvmeX>: the state of ANA group 1 as the controller reports it
# in its ANA log page (read through the admin queue, so it works with
# multipath=N, where sysfs has no ana_state).
ana_state() {
    nvme ana-log "/dev/$1" -o json 2>/dev/null | tr -d ' \n' |
        sed -n 's/.*"state":"\([a-z-]*\)".*/\1/p'
}

# host_connect <trtype> <addr> <svcid> [nvme-connect options]
# Prints the new controller's name (nvmeX) once it is live. Reconnects are
# quick so path removal and return can be tested in seconds.
host_connect() {
    _before=" $(cd /sys/class/nvme 2>/dev/null && echo nvme*) "
    _t=$1 _a=$2 _p=$3
    shift 3
    nvme connect -t "$_t" -a "$_a" -s "$_p" -n "$NQN" --reconnect-delay=1 "$@" >&2 ||
        return 1
    for _c in /sys/class/nvme/nvme*; do
        _c=${_c##*/}
        case $_before in *" $_c "*) continue ;; esac
        wait_ctrl_state "$_c" live 10 || return 1
        echo "$_c"
        return 0
    done
    echo "host_connect: no new controller after connecting to $_a:$_p" >&2
    return 1
}

# host_connect_tcp [addr] [svcid] [options]: defaults to $TCP1.
host_connect_tcp() {
    _a=${1:-${TCP1%:*}} _p=${2:-${TCP1#*:}}
    if [ $# -gt 2 ]; then shift 2; else set --; fi
    host_connect tcp "$_a" "$_p" "$@"
}

# host_connect_rdma [addr] [svcid] [options]: defaults to $RDMA_ADDR.
host_connect_rdma() {
    _a=${1:-${RDMA_ADDR%:*}} _p=${2:-${RDMA_ADDR#*:}}
    if [ $# -gt 2 ]; then shift 2; else set --; fi
    host_connect rdma "$_a" "$_p" "$@"
}

host_disconnect_all() {
    nvme disconnect-all >/dev/null 2>&1
    _w=50
    while [ -n "$(ls /sys/class/nvme 2>/dev/null)" ] && [ $_w -gt 0 ]; do
        sleep 0.1
        _w=$((_w - 1))
    done
    [ -z "$(ls /sys/class/nvme 2>/dev/null)" ]
}

# ctrl_reset <nvmeX>: resets the controller and waits until it is live again.
ctrl_reset() {
    echo 1 >"/sys/class/nvme/$1/reset_controller" || return 1
    wait_ctrl_state "$1" live 10
}

# numa_setup: under vm_run.sh --numa, gives eth0 (node 0) and eth1 (node 1) an address each and
# adds an nvmet TCP port on each: $NUMA_PORT0 at $NUMA_ADDR0 and $NUMA_PORT1 at $NUMA_ADDR1.
# NUMA_IF0 / NUMA_IF1 name the interfaces.
NUMA_IF0=eth0 NUMA_IF1=eth1
NUMA_PORT0=10 NUMA_PORT1=11
NUMA_ADDR0=10.0.2.15:4430 NUMA_ADDR1=10.0.3.15:4431
export NUMA_IF0 NUMA_IF1 NUMA_PORT0 NUMA_PORT1 NUMA_ADDR0 NUMA_ADDR1
numa_setup() {
    [ -d /sys/class/net/$NUMA_IF1 ] || { echo "numa_setup: no $NUMA_IF1 (vm_run.sh --numa?)" >&2; return 77; }
    for _i in 0 1; do
        eval _if=\$NUMA_IF$_i _addr=\$NUMA_ADDR$_i _port=\$NUMA_PORT$_i
        $IP link set "$_if" up || return 1
        $IP addr add "${_addr%:*}/24" dev "$_if" || return 1
        nvmet_tcp_port "$_port" "$_addr" || return 1
    done
}

# nvmet_tcp_port <id> <addr:svcid>: a new nvmet TCP port exporting $NQN.
nvmet_tcp_port() {
    mkdir "$NVMET/ports/$1" &&
        echo tcp >"$NVMET/ports/$1/addr_trtype" &&
        echo ipv4 >"$NVMET/ports/$1/addr_adrfam" &&
        echo "${2%:*}" >"$NVMET/ports/$1/addr_traddr" &&
        echo "${2#*:}" >"$NVMET/ports/$1/addr_trsvcid" &&
        nvmet_port_add "$1"
}

# netns_setup: a network namespace $NETNS in which a host program (`$IP netns exec $NETNS prog`)
# reaches nvmet over two veth pairs, one per path, and can be cut off from it:
#   path i: $NETNS_IF<i> in $NETNS (10.214.<i>.2) <-> $NETNS_TIF<i> here (10.214.<i>.1),
#           nvmet port $NETNS_PORT<i> listening at $NETNS_ADDR<i>.
# A link taken down (either end) drops everything silently: no RST, no ICMP, a pulled cable.
# Each subnet also gets an `unreachable` route at metric $NETNS_UNREACHABLE_METRIC on both sides,
# added before its link exists: with a link down, nothing for it may leave by another route.
NETNS=host
NETNS_IF0=nvh0 NETNS_IF1=nvh1
NETNS_TIF0=nvt0 NETNS_TIF1=nvt1
NETNS_ADDR0=10.214.0.1:4420 NETNS_ADDR1=10.214.1.1:4420
NETNS_PORT0=20 NETNS_PORT1=21
NETNS_UNREACHABLE_METRIC=4000
export NETNS NETNS_IF0 NETNS_IF1 NETNS_TIF0 NETNS_TIF1 NETNS_ADDR0 NETNS_ADDR1 NETNS_PORT0 NETNS_PORT1
netns_setup() {
    $IP netns add "$NETNS" || return 1
    $IP -n "$NETNS" link set lo up || return 1
    for _i in 0 1; do
        eval _h=\$NETNS_IF$_i _t=\$NETNS_TIF$_i _addr=\$NETNS_ADDR$_i _port=\$NETNS_PORT$_i
        _net=10.214.$_i
        $IP route add unreachable "$_net.0/24" metric $NETNS_UNREACHABLE_METRIC || return 1
        $IP -n "$NETNS" route add unreachable "$_net.0/24" metric $NETNS_UNREACHABLE_METRIC || return 1
        $IP link add "$_t" type veth peer name "$_h" netns "$NETNS" || return 1
        $IP addr add "$_net.1/24" dev "$_t" || return 1
        $IP -n "$NETNS" addr add "$_net.2/24" dev "$_h" || return 1
        $IP link set "$_t" up || return 1
        $IP -n "$NETNS" link set "$_h" up || return 1
        nvmet_tcp_port "$_port" "$_addr" || return 1
    done
}

# netns_link <i> up|down: path i's end in $NETNS (the host side of the cable).
netns_link() {
    eval _h=\$NETNS_IF$1
    $IP -n "$NETNS" link set "$_h" "$2"
}
