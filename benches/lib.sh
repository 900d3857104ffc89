# Shared by the A/B scripts in benches/ (sourced, not run): the loopback
# ports, and a server started for one run and stopped after it.
#
#   bench_ports               sets $http and $media (TUTTI_BENCH_HTTP_PORT,
#                             TUTTI_BENCH_MEDIA_PORT), exits when $http is taken
#   start_server LOG BIN ARGS…  `BIN serve` on them, auth off and no per-address
#                             join limit (every client is 127.0.0.1), metrics off
#                             (or on BENCH_METRICS), plus ARGS;
#                             waits for /healthz (at most 10 s); sets $server (the
#                             background job) and $server_pid (the tutti process)
#   stop_server               stops it

bench_ports() {
    http=127.0.0.1:${TUTTI_BENCH_HTTP_PORT:-28080}
    media=127.0.0.1:${TUTTI_BENCH_MEDIA_PORT:-24000}
    if curl -s -o /dev/null "http://$http/"; then echo "$http is taken; set TUTTI_BENCH_HTTP_PORT" >&2; exit 1; fi
}

start_server() { # LOG BIN [serve args…]
    local log=$1 bin=$2
    shift 2
    ("$bin" serve --http "$http" --media "$media" --metrics "${BENCH_METRICS:-off}" \
        --set auth.disabled=true --set limits.join_rate_per_second=0 "$@" >"$log" 2>&1) &
    server=$!
    for _ in $(seq 100); do
        curl -sf "http://$http/healthz" >/dev/null && break
        kill -0 "$server" 2>/dev/null || { echo "the server exited: see $log" >&2; exit 1; }
        sleep 0.1
    done
    # The server process itself, not the subshell.
    server_pid=$(pgrep -P "$server" -x tutti || echo "$server")
}

stop_server() {
    kill "$server" 2>/dev/null || true
    wait "$server" 2>/dev/null || true
}
