#!/usr/bin/env bash
# Runs one example against a freshly started nvmeof-target on a free loopback port.
#   run_example.sh TARGET-BINARY EXAMPLE-BINARY [EXTRA-ARGS...]
# The example is called as `EXAMPLE ADDR:PORT NQN EXTRA-ARGS...`; its exit code is ours.
set -u
target_bin=$1
example_bin=$2
shift 2
nqn=nqn.2024-01.io.nvmeof:example
log=$(mktemp)
pid=
cleanup() {
  if [ -n "$pid" ]; then
    kill "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
  fi
  rm -f "$log"
}
trap cleanup EXIT

# Port 0: the target binds a free port and prints it, so parallel tests never collide.
"$target_bin" --listen 127.0.0.1:0 --nqn "$nqn" --size 16M >"$log" 2>&1 &
pid=$!
addr=
for _ in $(seq 1 100); do
  addr=$(sed -n 's/^nvmeof-target: listening on \([^ ]*\).*/\1/p' "$log" | head -n 1)
  [ -n "$addr" ] && break
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "run_example: nvmeof-target exited before listening:" >&2
    cat "$log" >&2
    pid=
    exit 1
  fi
  sleep 0.1
done
if [ -z "$addr" ]; then
  echo "run_example: nvmeof-target did not listen within 10 s" >&2
  exit 1
fi

"$example_bin" "$addr" "$nqn" "$@"
exit $?
