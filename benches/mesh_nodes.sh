#!/usr/bin/env bash
# What one room across nodes costs each node, against the number of nodes
# in the room and K: N `tutti serve` processes on 127.0.0.2, .3, … (the same
# ports on each address) and a real redis-server, one room spread over all
# of them (`cluster.room_spread = "always"`), `tutti load` joining through
# the first node (REST joins, or with WS=1 through room WebSockets, as pages
# join: both are placed over the nodes).
# Per run it prints, per node and averaged: mesh datagrams and bytes sent
# per tick, and the node's CPU. N = 1 (a single node, no mesh) with the
# same clients per node is the baseline.
#
#   cargo build --release --bin tutti
#   benches/mesh_nodes.sh [N…]        default N = "1 2 4 8 16"
#   env: KS="3 5" (max_speakers), PER_NODE=8 (clients per node),
#        TALKERS=1.0 (share that talk, P.59 on/off), LIFE=30 (seconds),
#        BIN=target/release/tutti (the servers' and the generator's binary),
#        CINT=50 (ms between joins), WS=0 (1: clients join through and
#        hold the room's WebSocket),
#        KILL_AFTER= (seconds: after the window, kill -9 the last node and
#        print what the clients did: with WS=1 they rejoin through another
#        node on their own; the load's LIFE must leave them time),
#        OUT=/tmp/tutti-mesh-nodes (logs and JSON reports)
#
# Needs redis-server (Debian's redis-server). Loopback only; every loop is
# bounded; every process it starts is stopped on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${BIN:-$PWD/target/release/tutti}
[ -x "$bin" ] || { echo "build it first: cargo build --release --bin tutti" >&2; exit 1; }
command -v redis-server >/dev/null || { echo "needs redis-server (apt-get install redis-server)" >&2; exit 1; }
ns=${*:-1 2 4 8 16}
ks=${KS:-3 5}
per_node=${PER_NODE:-8}
talkers=${TALKERS:-1.0}
life=${LIFE:-30}
cint=${CINT:-50}
ws_flag=--no-ws
[ "${WS:-0}" = 1 ] && ws_flag=
kill_after=${KILL_AFTER:-}
out=${OUT:-${TMPDIR:-/tmp}/tutti-mesh-nodes}
mkdir -p "$out"
secret=mesh-bench-secret-0123456789abcdef0123
http=28180 metrics=29190 media=24100 redis_port=26390
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
}
trap cleanup EXIT

metric() { # ADDR NAME: the sum of a metric's samples
    curl -sf "http://$1/metrics" | awk -v m="$2" '$1 == m || index($1, m "{") == 1 { s += $NF } END { printf "%.0f", s }'
}

token=$(TUTTI_AUTH_SECRET=$secret "$bin" token --room '*' --identity bench --admin --ttl 3600)

echo "| nodes | K | clients | node | datagrams/tick | bytes/tick | CPU % of a core | mesh late/tick |"
echo "|---:|---:|---:|---|---:|---:|---:|---:|"
for k in $ks; do
    for n in $ns; do
        redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no >"$out/redis.log" 2>&1 &
        pids+=($!)
        for _ in $(seq 50); do redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break; sleep 0.1; done
        nodes=()
        for i in $(seq 2 $((n + 1))); do
            ip=127.0.0.$i
            TUTTI_AUTH_SECRET=$secret \
            TUTTI_CLUSTER_REDIS_URL=redis://127.0.0.1:$redis_port/0 \
            TUTTI_CLUSTER_NODE_ID=node-$i \
            TUTTI_CLUSTER_API_URL=http://$ip:$http \
            TUTTI_CLUSTER_MEDIA_ADDR=$ip:$media \
            TUTTI_CLUSTER_ROOM_SPREAD=always \
            TUTTI_CLUSTER_CAPACITY=1000 \
            TUTTI_LIMITS_JOIN_RATE_PER_SECOND=0 \
            TUTTI_LIMITS_MAX_CONNECTIONS=100000 TUTTI_LIMITS_MAX_CONNECTIONS_PER_ADDRESS=100000 \
            TUTTI_IO_THREADS=1 TUTTI_MIX_THREADS=1 \
                "$bin" serve --http "$ip:$http" --media "$ip:$media" --metrics "$ip:$metrics" \
                >"$out/node-$i.log" 2>&1 &
            pids+=($!)
            nodes+=("$ip")
        done
        for ip in "${nodes[@]}"; do
            for _ in $(seq 100); do curl -sf "http://$ip:$http/readyz" >/dev/null && break; sleep 0.1; done
        done
        curl -sf -X POST "http://${nodes[0]}:$http/v1/rooms" -H "Authorization: Bearer $token" \
            -H 'Content-Type: application/json' -d "{\"id\":\"wide\",\"max_speakers\":$k}" >/dev/null
        clients=$((n * per_node))
        # The window: after every join and a warm-up, read the counters, wait, read again.
        # shellcheck disable=SC2086 # $ws_flag: one word or none
        TUTTI_TOKEN=$token "$bin" load --url "http://${nodes[0]}:$http" --room wide -n "$clients" $ws_flag \
            --cint "$cint" --talkers "$talkers" --life "$life" --warmup 3 --details 0 \
            --report "$out/load-n$n-k$k.json" >"$out/load-n$n-k$k.log" 2>&1 &
        load=$!
        pids+=($load)
        sleep $((clients * cint / 1000 + 6))
        declare -A t0=() d0=() b0=() l0=() c0=() p=()
        for ip in "${nodes[@]}"; do
            t0[$ip]=$(metric "$ip:$metrics" tutti_mix_ticks_total)
            d0[$ip]=$(metric "$ip:$metrics" tutti_mesh_datagrams_sent_total)
            b0[$ip]=$(metric "$ip:$metrics" tutti_mesh_sent_bytes_total)
            l0[$ip]=$(metric "$ip:$metrics" 'tutti_mesh_datagrams_dropped_total{reason="late"}')
            p[$ip]=$(ss -ltnpH "src $ip:$http" | sed -n 's/.*pid=\([0-9]*\).*/\1/p' | head -1)
            c0[$ip]=$(awk '{print $14 + $15}' "/proc/${p[$ip]}/stat")
        done
        w0=$(date +%s.%N)
        sleep 10
        w1=$(date +%s.%N)
        tck=$(getconf CLK_TCK)
        sum_d=0 sum_b=0 sum_c=0
        for ip in "${nodes[@]}"; do
            ticks=$(( $(metric "$ip:$metrics" tutti_mix_ticks_total) - t0[$ip] ))
            [ "$ticks" -gt 0 ] || ticks=1
            dg=$(( $(metric "$ip:$metrics" tutti_mesh_datagrams_sent_total) - d0[$ip] ))
            by=$(( $(metric "$ip:$metrics" tutti_mesh_sent_bytes_total) - b0[$ip] ))
            late=$(( $(metric "$ip:$metrics" 'tutti_mesh_datagrams_dropped_total{reason="late"}') - l0[$ip] ))
            c1=$(awk '{print $14 + $15}' "/proc/${p[$ip]}/stat")
            row=$(awk -v dg="$dg" -v by="$by" -v t="$ticks" -v c0="${c0[$ip]}" -v c1="$c1" -v tck="$tck" \
                -v w0="$w0" -v w1="$w1" -v late="$late" \
                'BEGIN { printf "%.2f | %.0f | %.1f | %.3f", dg / t, by / t, 100 * (c1 - c0) / tck / (w1 - w0), late / t }')
            echo "| $n | $k | $clients | $ip | $row |"
        done
        if [ -n "$kill_after" ] && [ "$n" -gt 1 ]; then
            sleep "$kill_after"
            last=${nodes[$((n - 1))]}
            echo "    kill -9 of node $last at $(date +%T.%N | cut -c1-12)"
            kill -9 "${p[$last]}"
        fi
        wait "$load" || true
        grep -E '^PASS|^FAIL|^INVALID|mouth-to-ear, talker|server CPU|hand-over' "$out/load-n$n-k$k.log" | sed 's/^/    /' || true
        sed -n '/^== nodes ==/,/^$/p' "$out/load-n$n-k$k.log" | sed 's/^/    /'
        cleanup
        pids=()
        sleep 1
    done
done
