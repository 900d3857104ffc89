#!/usr/bin/env bash
# What metrics cost the server: the same load (`tutti load`) against a
# release server with metrics on (scraped every 5 s, as Prometheus would) and
# off (--metrics off: nothing recorded), alternated ROUNDS times in one
# session; server CPU read from /proc/PID/stat over a steady window. Then the
# CPU of one scrape: SCRAPES scrapes of an idle server against an equal idle
# window without scrapes.
#
#   cargo build --release --bin tutti
#   benches/metrics_overhead.sh [CLIENTS=200] [ROUNDS=3]
#
# Loopback only; every loop is bounded.
set -euo pipefail
cd "$(dirname "$0")/.."
clients=${1:-200}
rounds=${2:-3}
run_seconds=30   # each load run
settle=6         # after every client joined, before measuring
window=15        # measured
scrapes=1000
bin=target/release/tutti
# Ports of their own (override when taken): HTTP, UDP media, metrics.
http=127.0.0.1:${TUTTI_BENCH_HTTP_PORT:-28080}
media=127.0.0.1:${TUTTI_BENCH_MEDIA_PORT:-24000}
metrics=127.0.0.1:${TUTTI_BENCH_METRICS_PORT:-29464}
for addr in "$http" "$metrics"; do
    if curl -s -o /dev/null "http://$addr/"; then echo "$addr is taken; set TUTTI_BENCH_*_PORT" >&2; exit 1; fi
done

# CPU time of every live thread of PID, nanoseconds.
cpu_ns() { cat "/proc/$1"/task/*/schedstat | awk '{ s += $1 } END { printf "%.0f\n", s }'; }

start_server() { # METRICS-ADDR-OR-off
    # Loopback: no tokens, no per-address join limit (every client is 127.0.0.1).
    (exec "$bin" serve --http "$http" --media "$media" --metrics "$1" \
        --set auth.disabled=true --set limits.join_rate_per_second=0 >"${TMPDIR:-/tmp}/tutti-bench-server.log" 2>&1) &
    server=$!
    for _ in $(seq 100); do
        kill -0 "$server" 2>/dev/null || { echo "the server exited (ports taken?)" >&2; exit 1; }
        if curl -sf "http://$http/healthz" >/dev/null; then
            [ "$(cat "/proc/$server/comm")" = tutti ] || { echo "pid $server is not the server" >&2; exit 1; }
            return
        fi
        sleep 0.1
    done
    echo "the server did not start" >&2
    exit 1
}

stop_server() {
    kill -0 "$server" 2>/dev/null || { echo "the server exited early: see ${TMPDIR:-/tmp}/tutti-bench-server.log" >&2; exit 1; }
    kill "$server"
    wait "$server" 2>/dev/null || true
}

one_run() { # on|off
    if [ "$1" = on ]; then start_server "$metrics"; else start_server off; fi
    out=$(mktemp)
    "$bin" load --url "http://$http" -n "$clients" --life "$run_seconds" --cint 10 --sint 100000 >"$out" 2>&1 &
    local load_pid=$!
    for _ in $(seq 600); do grep -q "joining: $clients/$clients joined" "$out" && break; sleep 0.1; done
    sleep "$settle"
    local scraper=""
    if [ "$1" = on ]; then
        (for _ in $(seq 20); do curl -s "http://$metrics/metrics" >/dev/null; sleep 5; done) &
        scraper=$!
    fi
    local a b
    a=$(cpu_ns "$server")
    sleep "$window"
    b=$(cpu_ns "$server")
    [ -n "$scraper" ] && kill "$scraper" 2>/dev/null
    wait "$load_pid" || true
    local loss connected
    loss=$(grep -o 'loss % avg/min/max [0-9./]*' "$out" | tail -1 || echo "loss ?")
    # Clients that connected: the participants that cost.
    connected=$(sed -n 's/.*clients [0-9]*: connected \([0-9]*\),.*/\1/p' "$out" | tail -1)
    rm -f "$out"
    stop_server
    # µs of server CPU per connected participant per 20 ms tick.
    awk -v t=$((b - a)) -v w="$window" -v n="${connected:-0}" -v all="$clients" -v m="$1" -v loss="$loss" 'BEGIN {
        cpu = t / 1e9; per = n > 0 ? cpu * 1e6 / (n * w / 0.02) : 0;
        printf "metrics %-3s  server CPU %.2f s over %d s (%.1f %% of a core)  %d/%d connected  %.2f us/participant/tick  clients %s\n", m, cpu, w, 100 * cpu / w, n, all, per, loss }'
}

echo "$clients clients, 10 % talking; $rounds rounds of on/off"
# Alternate which goes first, so drift and warm-up hit both alike.
for r in $(seq "$rounds"); do
    if [ $((r % 2)) = 1 ]; then one_run on; one_run off; else one_run off; one_run on; fi
done

echo "one scrape:"
start_server "$metrics"
sleep 2
a=$(cpu_ns "$server"); sleep 5; b=$(cpu_ns "$server")
idle=$((b - a))
a=$(cpu_ns "$server")
t0=$(date +%s.%N)
for _ in $(seq "$scrapes"); do curl -s "http://$metrics/metrics" >/dev/null; done
t1=$(date +%s.%N)
b=$(cpu_ns "$server")
body=$(curl -s "http://$metrics/metrics" | wc -c)
stop_server
awk -v busy=$((b - a)) -v idle="$idle" -v t0="$t0" -v t1="$t1" -v n="$scrapes" -v bytes="$body" 'BEGIN {
    secs = t1 - t0; base = idle / 5 * secs;
    printf "%d scrapes in %.2f s: server CPU %.3f s (idle baseline over that time %.3f s): %.0f us of CPU per scrape, %d bytes\n",
        n, secs, busy / 1e9, base / 1e9, (busy - base) / 1e9 / n * 1e6, bytes }'
