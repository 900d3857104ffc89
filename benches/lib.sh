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
#   pion_media PREFIX         builds benches/pion's generator ($gen) and makes
#                             its talkers' voice (PREFIX-voice.opus, $voice) and
#                             4 s of low noise, about -60 dBFS (PREFIX-noise.opus,
#                             $noise, for `-quiet noise`); needs Go, python3, opusenc

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

pion_media() { # PREFIX
    gen=benches/pion/pion-load voice=$1-voice.opus noise=$1-noise.opus
    (cd benches/pion && go build -o pion-load .)
    opusenc --quiet --framesize 20 --bitrate 32 examples/audio/alice.wav "$voice"
    python3 -c '
import random, struct, sys, wave
random.seed(7)
w = wave.open(sys.argv[1], "wb"); w.setnchannels(1); w.setsampwidth(2); w.setframerate(48000)
w.writeframes(b"".join(struct.pack("<h", max(-32768, min(32767, int(random.gauss(0, 33))))) for _ in range(4 * 48000)))
' "$1-noise.wav"
    opusenc --quiet --framesize 20 --bitrate 32 "$1-noise.wav" "$noise"
}
