#!/usr/bin/env bash
# Server CPU per participant over UDP against ICE-TCP: the same load
# (`tutti load`) against one server, all clients over UDP then all over TCP
# (`--transport`), alternated ROUNDS times in one session so the figures can
# be compared on a noisy machine. Each prints the load tester's final
# summary (server CPU per participant per tick from /proc/PID, quality,
# INVALID when the generator fell behind).
#
#   cargo build --release --bin tutti
#   benches/tcp_ab.sh CLIENTS ROUNDS [load args…]     e.g. benches/tcp_ab.sh 500 2 --life 30 --no-ws
#
# Loopback only; every loop is bounded.
set -euo pipefail
cd "$(dirname "$0")/.."
clients=$1 rounds=$2
shift 2
load_args=("$@")
bin=target/release/tutti
# shellcheck source=benches/lib.sh
. benches/lib.sh
bench_ports
log=${TMPDIR:-/tmp}/tutti-tcp-ab
ulimit -n 65536 2>/dev/null || true

one_run() { # udp|tcp
    local transport=$1
    # No per-address TCP limit either (every client is 127.0.0.1).
    start_server "$log-server-$transport.log" "$bin" --set limits.tcp_max_per_ip=100000
    "$bin" load --url "http://$http" -n "$clients" --cint 10 --server-pid "$server_pid" --details 0 \
        --transport "$transport" "${load_args[@]}" >"$log-load-$transport.log" 2>&1 || true
    stop_server
    echo "== $transport"
    awk '/^\[/{block=""} {block=block $0 "\n"} END {printf "%s", block}' "$log-load-$transport.log" |
        grep -E '^ *\[|MOS|loss %|server CPU|INVALID|warning' | sed 's/^/   /' || true
}

echo "$clients clients; $rounds rounds of udp / tcp"
for r in $(seq "$rounds"); do
    if [ $((r % 2)) = 1 ]; then one_run udp; one_run tcp; else one_run tcp; one_run udp; fi
done
