#!/bin/sh
# nvmeof-bench against Linux nvmet over two paths from the guest's network namespace $NETNS
# (netns_setup), path 0 partitioned midway: the namespace's end of its veth goes down about a
# second into the timed phase (nvmeof-bench injects faults only into its embedded target), by
# link_switch, which says when to the nanosecond. The timed phase is seen from nvmet's ends of
# the veths: the first 512 KiB of read data leaving nvmet (a read prefill only writes), or of
# write data reaching it (writes have no prefill); the report's timeline then says where the cut
# really fell. Random reads, then random writes, `runs` times each; for each run the longest I/O
# of the timed phase, when path 0 failed after the cut, when its writes were fenced and by which
# rule; then the median and the maximum over the runs. A benchmark: nothing asserted on the
# figures, only that every run was clean (no errors, no mismatches, the cut inside the timed
# phase). TCG times are only good for comparing runs in the same guest.
# Run it with: tests/vm/vm_run.sh tests/vm/nvmet_partition_bench.sh build-dir/tools/nvmeof-bench \
#     build-dir/tests/vm/link_switch [runs] [secs] [bench flags...]
. "${NVMEOF_GUEST_LIB:?run this inside the guest through tests/vm/vm_run.sh}"
usage="usage: nvmet_partition_bench.sh <nvmeof-bench> <link_switch> [runs] [secs] [bench flags...]"
bench=${1:?$usage}
switch=${2:?$usage}
runs=${3:-5}
secs=${4:-3}
# Extra nvmeof-bench flags, words without spaces (e.g. --io-deadline 200ms).
[ $# -gt 4 ] && shift 4 || set --
extra=$*
cut_after=0.7  # seconds after the timed phase was seen (the sleep itself overshoots on TCG)
started_bytes=524288

say() { echo "nvmet_partition_bench: $*"; }
# Bytes through nvmet's ends of both veths: tx (to the host) or rx. No fork: read is a builtin.
veth_bytes() {
    read -r _b0 <"/sys/class/net/$NETNS_TIF0/statistics/$1_bytes"
    read -r _b1 <"/sys/class/net/$NETNS_TIF1/statistics/$1_bytes"
    echo $((_b0 + _b1))
}
# Waits until `dir` bytes grew by $started_bytes or the bench ended; false if it ended.
wait_timed_phase() {  # wait_timed_phase <pid> <rx|tx>
    _from=$(veth_bytes "$2")
    while kill -0 "$1" 2>/dev/null; do
        [ $(($(veth_bytes "$2") - _from)) -ge $started_bytes ] && return 0
        sleep 0.02
    done
    return 1
}

netns_setup || fail "netns_setup"
say "$NETNS reaches nvmet at $NETNS_ADDR0 ($NETNS_IF0) and $NETNS_ADDR1 ($NETNS_IF1); extra flags: ${extra:-none}"

# One line per run from the JSON report (nlohmann prints keys in order, so within a timeline
# entry "path" comes after every field it needs): the cut's offset into the timed phase, path 0's
# detection after the cut (from the start of the ioctl, which may take a while on TCG), its fence
# after detection, the rule, the longest I/O, the median I/O, errors, mismatches, failovers of
# the other path, how long the cut's ioctl took (ms) and the cause of path 0's failure.
summarise() {  # summarise <json> <ns before the cut> <ns after it> (CLOCK_MONOTONIC)
    awk -v cut="$2" -v width="$(($3 - $2))" '
        { line = $0; match(line, /^ */); depth = RLENGTH; gsub(/[",]/, "", line); sub(/^ */, "", line) }
        depth == 2 { top = line; sub(/:.*/, "", top) }
        { n = split(line, f, ": "); key = f[1]; val = f[2] }
        top == "total" && key == "max" && max == "" { max = val }
        top == "total" && key == "p50" && p50 == "" { p50 = val }
        depth == 2 && key == "errors" { errors = val }
        depth == 2 && key == "mismatches" { mism = val }
        key == "detect_ms" { dm = val }
        key == "detect_ns" { dn = val }
        key == "fenced_ms" { fm = val }
        key == "fence_rule" { fr = val; gsub(/ /, "_", fr) }
        key == "cause" { cs = substr(line, 8); gsub(/ /, "_", cs) }
        key == "path" && dm != "" { if (val == 0 && d0 == "") { d0 = dm; f0 = fm; r0 = fr; c0 = cs } else if (val != 0) other++; dm = "" }
        key == "path" && dn != "" { if (val == 0 && n0 == "") n0 = dn; dn = "" }
        END {
            if (n0 == "" || d0 == "") { print "none"; exit }
            t0 = n0 / 1e6 - d0                  # the timed phase began here (ms, monotonic)
            cut /= 1e6
            printf "%.0f %.1f %.1f %s %.1f %.3f %d %d %d %.1f %s\n", cut - t0, n0 / 1e6 - cut,
                f0 == "null" ? -1 : f0 - d0, r0 == "" ? "none" : r0, max / 1000, p50 / 1000,
                errors, mism, other + 0, width / 1e6, c0
        }' "$1"
}

results=/tmp/partition-bench.txt
: >"$results"
for rw in randread randwrite; do
    i=0
    while [ $i -lt "$runs" ]; do
        i=$((i + 1))
        out=/tmp/bench-$rw-$i.json
        $IP netns exec "$NETNS" "$bench" --target "$NETNS_ADDR0" --target "$NETNS_ADDR1" \
            --nqn "$NQN" --rw "$rw" --bs 4k --iodepth 16 --size 4m --runtime "${secs}s" \
            --fence-bound 100ms --seed "$i" --json $extra >"$out" 2>/tmp/bench.err &
        pid=$!
        # The switch waits on a pipe, so the cut itself starts no process on a busy guest.
        rm -f /tmp/cut.fifo
        mkfifo /tmp/cut.fifo
        "$switch" --netns "$NETNS" --on-line "$NETNS_IF0" down </tmp/cut.fifo >/tmp/cut.out &
        spid=$!
        exec 3>/tmp/cut.fifo
        dir=rx
        [ $rw = randread ] && dir=tx
        wait_timed_phase $pid $dir && sleep $cut_after
        echo cut >&3
        exec 3>&-
        wait $spid || fail "cannot cut path 0"
        cut=$(cat /tmp/cut.out)
        wait $pid
        rc=$?
        netns_link 0 up || fail "cannot heal path 0"
        s=$(summarise "$out" ${cut% *} ${cut#* })
        if [ $rc != 0 ] || [ "$s" = none ]; then
            tail -n 5 /tmp/bench.err
            grep -E '"(errors|mismatches|drained|status|count|cause|detect_ms|fence_rule)"' "$out" |
                head -n 40
            fail "$rw run $i: nvmeof-bench exit $rc, summary '$s'"
        fi
        # shellcheck disable=SC2086
        set -- $s
        fenced="fenced +${3} ms by ${4}"
        [ "$4" = none ] && fenced="not fenced before the run ended (nothing waited for it)"
        say "$rw run $i: cut ${1} ms into the timed phase (the ioctl took ${10} ms); path 0 failed" \
            "${2} ms after the cut (${11}), $fenced; longest I/O ${5} ms, median" \
            "${6} ms; errors $7, mismatches $8, failovers of path 1: $9"
        [ "$1" -gt 200 ] && [ "$1" -lt $((secs * 1000 - 300)) ] ||
            fail "$rw run $i: the cut missed the timed phase (${1} ms into it)"
        [ "$7" = 0 ] && [ "$8" = 0 ] || fail "$rw run $i: errors or mismatches"
        echo "$rw $s" >>"$results"
        # nvmet ends the cut controller by its keep-alive (1 to 2 s after the cut); let it.
        sleep 1
    done
done

say "over $runs runs each (ms; detect after the cut, fenced after detection):"
for rw in randread randwrite; do
    for col in 6:longest_io 3:detect 4:fenced; do
        n=${col%%:*}
        name=${col#*:}
        vals=$(awk -v rw="$rw" -v n="$n" '$1 == rw && $n >= 0 { print $n }' "$results" | sort -n | tr '\n' ' ')
        [ -n "$vals" ] || { say "$(printf '%-9s %-10s none' $rw $name)"; continue; }
        echo "$vals" | awk -v rw="$rw" -v name="$name" '{
            printf "nvmet_partition_bench: %-9s %-10s p50 %8.1f  max %8.1f  (%s)\n", rw, name,
                $(int((NF + 1) / 2)), $NF, $0 }'
    done
    awk -v rw="$rw" '$1 == rw { r[$5 == "none" ? "none (not fenced before the run ended)" : $5]++ }
        END { for (k in r) printf "nvmet_partition_bench: %-9s fence rule %s x%d\n", rw, k, r[k] }' "$results"
done
