#!/usr/bin/env bash
# The same browser-like load from an independent WebRTC stack (pion, in Go:
# benches/pion/main.go) against two servers or two settings, alternated
# ROUNDS times in one session: the check that a figure `tutti load` reports
# is not an artefact of our own generator. The server is pinned to core 0
# and the generator to core 1 (`taskset`), so the server's CPU is its own;
# `PIN=0` runs both unpinned (for more clients than one core of pion holds:
# about 500; the server's CPU is still its own, read from /proc, but the two
# compete for the cores).
#
#   cargo build --release --bin tutti
#   benches/pion_ab.sh ROUNDS NAME_A 'SERVER_A [serve args…]' NAME_B 'SERVER_B [serve args…]' [pion-load args…]
#   e.g. benches/pion_ab.sh 2 ws target/release/tutti rest target/release/tutti -n 400 -- -ws
#
# pion-load arguments before `--` go to both runs; after it, to A's only
# (so one build can be measured with and without a client setting). Needs
# Go, python3 and opusenc (Debian's opus-tools) for the talkers' voice and
# the low noise of `-quiet noise`.
# Loopback only; every loop is bounded.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=$1 name_a=$2 cmd_a=$3 name_b=$4 cmd_b=$5
shift 5
both=() only_a=()
while [ $# -gt 0 ]; do
    if [ "$1" = -- ]; then shift; only_a=("$@"); break; fi
    both+=("$1"); shift
done
# shellcheck source=benches/lib.sh
. benches/lib.sh
bench_ports
log=${TMPDIR:-/tmp}/tutti-pion
pion_media "$log"

one_run() { # NAME 'CMD…' [extra pion-load args…]
    local name=$1 bin extra
    read -r bin extra <<<"$2"
    shift 2
    # shellcheck disable=SC2086
    start_server "$log-server-$name.log" "$bin" --set limits.max_connections_per_address=100000 $extra
    local pin=()
    if [ "${PIN:-1}" != 0 ]; then
        taskset -a -pc 0 "$server_pid" >/dev/null
        pin=(taskset -c 1)
    fi
    "${pin[@]}" "$gen" -url "http://$http" -pid "$server_pid" -opus "$voice" -noise "$noise" "${both[@]}" "$@" >"$log-load-$name.log" 2>&1 || true
    local skipped
    skipped=$( (grep -o 'ticks skipped ticks=[0-9]*' "$log-server-$name.log" || true) | awk -F= '{s+=$2} END {print s+0}')
    stop_server
    echo "== $name"
    sed 's/^/   /' "$log-load-$name.log"
    echo "   mixer ticks skipped (server log): $skipped"
}

echo "$rounds rounds of $name_a / $name_b: pion-load ${both[*]} (A: ${only_a[*]})"
for r in $(seq "$rounds"); do
    if [ $((r % 2)) = 1 ]; then one_run "$name_a" "$cmd_a" "${only_a[@]}"; one_run "$name_b" "$cmd_b"
    else one_run "$name_b" "$cmd_b"; one_run "$name_a" "$cmd_a" "${only_a[@]}"; fi
done
