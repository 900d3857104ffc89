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
http=127.0.0.1:${TUTTI_BENCH_HTTP_PORT:-28080}
media=127.0.0.1:${TUTTI_BENCH_MEDIA_PORT:-24000}
if curl -s -o /dev/null "http://$http/"; then echo "$http is taken; set TUTTI_BENCH_HTTP_PORT" >&2; exit 1; fi
log=${TMPDIR:-/tmp}/tutti-tcp-ab
ulimit -n 65536 2>/dev/null || true

one_run() { # udp|tcp
    local transport=$1
    # Loopback: no tokens, no per-address join or TCP limit (every client is 127.0.0.1).
    ("$bin" serve --http "$http" --media "$media" --metrics off --set auth.disabled=true \
        --set limits.join_rate_per_second=0 --set limits.tcp_max_per_ip=100000 \
        >"$log-server-$transport.log" 2>&1) &
    local server=$!
    for _ in $(seq 100); do
        curl -sf "http://$http/healthz" >/dev/null && break
        kill -0 "$server" 2>/dev/null || { echo "the server exited: see $log-server-$transport.log" >&2; exit 1; }
        sleep 0.1
    done
    local pid
    pid=$(pgrep -P "$server" -x tutti || echo "$server")
    "$bin" load --url "http://$http" -n "$clients" --cint 10 --server-pid "$pid" --details 0 \
        --transport "$transport" "${load_args[@]}" >"$log-load-$transport.log" 2>&1 || true
    kill "$server" 2>/dev/null || true
    wait "$server" 2>/dev/null || true
    echo "== $transport"
    awk '/^\[/{block=""} {block=block $0 "\n"} END {printf "%s", block}' "$log-load-$transport.log" |
        grep -E '^ *\[|MOS|loss %|server CPU|INVALID|warning' | sed 's/^/   /' || true
}

echo "$clients clients; $rounds rounds of udp / tcp"
for r in $(seq "$rounds"); do
    if [ $((r % 2)) = 1 ]; then one_run udp; one_run tcp; else one_run tcp; one_run udp; fi
done
