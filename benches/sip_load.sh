#!/usr/bin/env bash
# Phone legs against browser legs: CALLS SIPp calls (Debian's sip-tester)
# with PCMA RTP into one room, then the same number of WebRTC clients from
# pion (benches/pion, an independent stack) into one room, alternated ROUNDS
# times in one session. Both loads are alike: 10 % talk (a voice, looped),
# the others send low noise (about -60 dBFS, as a real line or microphone
# does), every leg hears the room.
#
# For each SIP run it checks that every call was up (SIPp's counters: no
# failed call, no retransmission timeout; the room lists CALLS), then reads
# the server's CPU over WINDOW seconds from /proc and prints µs per
# participant per tick, the RTP packets sent and received, and the mixer's
# skipped ticks; the pion run prints the same from its side.
#
#   cargo build --release --bin tutti
#   benches/sip_load.sh CALLS ROUNDS            # e.g. benches/sip_load.sh 200 2
#   env: WINDOW=30 WARMUP=5 RATE=10 (calls set up per second) SIP_ONLY=1
#        SIP_SET=key=value (one more --set for the SIP run's server, e.g.
#        room.noise_suppression=off: phone callers are noise-suppressed by
#        default, browsers are not)
#
# Needs sipp (sip-tester), Go, python3 and opusenc (opus-tools).
# Loopback only; every loop is bounded.
set -euo pipefail
cd "$(dirname "$0")/.."
calls=$1 rounds=$2
window=${WINDOW:-30} warmup=${WARMUP:-5} rate=${RATE:-10}
bin=${BIN:-$PWD/target/release/tutti}
[ -x "$bin" ] || { echo "build it first: cargo build --release --bin tutti" >&2; exit 1; }
command -v sipp >/dev/null || { echo "needs sipp (apt-get install sip-tester)" >&2; exit 1; }
# shellcheck source=benches/lib.sh
. benches/lib.sh
bench_ports
sip=127.0.0.1:${TUTTI_BENCH_SIP_PORT:-25060}
metrics=127.0.0.1:${BENCH_METRICS_PORT:-29090}
log=${TMPDIR:-/tmp}/tutti-sip-load
mkdir -p "$log"
trap 'pkill -f "sipp $sip" 2>/dev/null; [ -z "${server:-}" ] || stop_server' EXIT
talkers=$(((calls + 9) / 10))
quiet=$((calls - talkers))

# The callers' audio: 8 kHz PCMA RTP in pcap files SIPp replays (its
# play_pcap_audio: from the port each call's SDP offers, [auto_media_port],
# so tutti's symmetric RTP takes each call's packets as its own), long
# enough for the whole call: a voice, looped, and low noise.
hold_s=$(((calls + rate - 1) / rate + 3 + warmup + window + 5))
python3 - "$log" "$hold_s" <<'EOF' 2>/dev/null
import audioop, random, struct, sys, wave
d, seconds = sys.argv[1], int(sys.argv[2])
w = wave.open("examples/audio/alice.wav")
pcm = w.readframes(w.getnframes())
if w.getnchannels() == 2:
    pcm = audioop.tomono(pcm, 2, 0.5, 0.5)
pcm, _ = audioop.ratecv(pcm, 2, 1, w.getframerate(), 8000, None)
random.seed(7)
noise = b"".join(struct.pack("<h", max(-32768, min(32767, int(random.gauss(0, 33))))) for _ in range(4 * 8000))
for name, data in (("talk", pcm), ("noise", noise)):
    alaw = audioop.lin2alaw(data, 2)
    frames = seconds * 50
    with open(f"{d}/{name}.pcap", "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        for i in range(frames):
            at = (i * 160) % (len(alaw) - 160)
            rtp = struct.pack("!BBHII", 0x80, 8, i & 0xFFFF, i * 160, 0x5EED) + alaw[at:at + 160]
            udp = struct.pack("!HHHH", 4000, 4002, 8 + len(rtp), 0) + rtp
            ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), i & 0xFFFF, 0, 64, 17, 0,
                             bytes([127, 0, 0, 1]), bytes([127, 0, 0, 1])) + udp
            frame = b"\x00" * 12 + b"\x08\x00" + ip
            t = i * 20_000
            f.write(struct.pack("<IIII", t // 1_000_000, t % 1_000_000, len(frame), len(frame)) + frame)
EOF

# A caller that plays PCAP and hangs up after HOLD_MS. (Not SIPp's
# rtp_stream: Debian's SIPp 3.6.1 sends every call's stream from one socket
# and offers one port for all of them.)
scenario() { # PCAP HOLD_MS
    cat <<EOF
<?xml version="1.0" encoding="ISO-8859-1" ?>
<scenario name="tutti phone caller">
  <send retrans="500">
    <![CDATA[
      INVITE sip:[service]@[remote_ip]:[remote_port] SIP/2.0
      Via: SIP/2.0/[transport] [local_ip]:[local_port];branch=[branch]
      From: <sip:caller[call_number]@[local_ip]:[local_port]>;tag=[pid]SIPpTag00[call_number]
      To: <sip:[service]@[remote_ip]:[remote_port]>
      Call-ID: [call_id]
      CSeq: 1 INVITE
      Contact: <sip:caller[call_number]@[local_ip]:[local_port]>
      Max-Forwards: 70
      Content-Type: application/sdp
      Content-Length: [len]

      v=0
      o=- [pid][call_number] 1 IN IP[local_ip_type] [local_ip]
      s=-
      c=IN IP[media_ip_type] [media_ip]
      t=0 0
      m=audio [auto_media_port+8] RTP/AVP 8
      a=rtpmap:8 PCMA/8000
      a=ptime:20
    ]]>
  </send>
  <recv response="100" optional="true"/>
  <recv response="180" optional="true"/>
  <recv response="200" rtd="true"/>
  <send>
    <![CDATA[
      ACK sip:[service]@[remote_ip]:[remote_port] SIP/2.0
      Via: SIP/2.0/[transport] [local_ip]:[local_port];branch=[branch]
      From: <sip:caller[call_number]@[local_ip]:[local_port]>;tag=[pid]SIPpTag00[call_number]
      To: <sip:[service]@[remote_ip]:[remote_port]>[peer_tag_param]
      Call-ID: [call_id]
      CSeq: 1 ACK
      Contact: <sip:caller[call_number]@[local_ip]:[local_port]>
      Max-Forwards: 70
      Content-Length: 0
    ]]>
  </send>
  <nop><action><exec play_pcap_audio="$1"/></action></nop>
  <pause milliseconds="$2"/>
  <send retrans="500">
    <![CDATA[
      BYE sip:[service]@[remote_ip]:[remote_port] SIP/2.0
      Via: SIP/2.0/[transport] [local_ip]:[local_port];branch=[branch]
      From: <sip:caller[call_number]@[local_ip]:[local_port]>;tag=[pid]SIPpTag00[call_number]
      To: <sip:[service]@[remote_ip]:[remote_port]>[peer_tag_param]
      Call-ID: [call_id]
      CSeq: 2 BYE
      Contact: <sip:caller[call_number]@[local_ip]:[local_port]>
      Max-Forwards: 70
      Content-Length: 0
    ]]>
  </send>
  <recv response="200" crlf="true"/>
</scenario>
EOF
}

metric() { # NAME: the sum of a metric's samples
    curl -sf --max-time 2 "http://$metrics/metrics" | awk -v m="$1" '$1 == m || index($1, m "{") == 1 { s += $NF } END { printf "%.0f", s }'
}

cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }

sip_run() {
    local setup=$(((calls + rate - 1) / rate + 3))
    local hold=$(((setup + warmup + window + 5) * 1000))
    scenario "$log/talk.pcap" "$hold" >"$log/talk.xml"
    scenario "$log/noise.pcap" "$hold" >"$log/noise.xml"
    # The phones' ears: a socket on every port the calls offer, counting what the mix sends there.
    python3 - "$talkers" "$quiet" "$((hold / 1000 + 10))" >"$log/sink.txt" <<'EOF' &
import selectors, signal, socket, sys, time
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
talk, quiet, life = (int(x) for x in sys.argv[1:4])
ports = [30008 + 4 * i for i in range(talk)] + [40008 + 4 * i for i in range(quiet)]
sel = selectors.DefaultSelector()
count = {}
for p in ports:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", p))
    s.setblocking(False)
    sel.register(s, selectors.EVENT_READ, p)
    count[p] = 0
end = time.time() + life
try:
    while time.time() < end:
        for key, _ in sel.select(1):
            try:
                while True:
                    key.fileobj.recv(2048)
                    count[key.data] += 1
            except BlockingIOError:
                pass
finally:
    heard = sum(1 for c in count.values() if c > 0)
    print(f"{heard} {len(ports)} {min(count.values())}", flush=True)
EOF
    sink=$!
    BENCH_METRICS=$metrics start_server "$log/server-sip.log" "$bin" \
        --set sip.enabled=true --set "sip.listen=$sip" --set 'sip.trusted=["127.0.0.0/8"]' \
        --set 'rtp_in.trusted=["127.0.0.0/8"]' ${SIP_SET:+--set "$SIP_SET"}
    curl -sf -X POST "http://$http/v1/rooms" -H 'content-type: application/json' -d '{"id":"phones"}' >/dev/null
    local common=(-s phones -i 127.0.0.1 -r "$rate" -rp 1000 -t u1 -nostdin -bg -trace_stat -fd 1
        -trace_err)
    (cd "$log" && sipp "$sip" -sf talk.xml -m "$talkers" -l "$talkers" -p 25100 -cp 25102 -mp 30000 "${common[@]}" -stf talk.csv >/dev/null 2>&1 || true)
    (cd "$log" && sipp "$sip" -sf noise.xml -m "$quiet" -l "$quiet" -p 25101 -cp 25103 -mp 40000 "${common[@]}" -stf noise.csv >/dev/null 2>&1 || true)
    local up=0
    for _ in $(seq $((setup * 10))); do
        up=$(metric tutti_mix_participants)
        [ "${up:-0}" -ge "$calls" ] && break
        sleep 0.1
    done
    sleep "$warmup"
    local listed t0 t1 c0 c1 in0 in1 out0 out1 skipped
    listed=$(metric tutti_mix_participants)
    in0=$(metric tutti_rtp_in_packets_received_total) out0=$(metric tutti_rtp_in_packets_sent_total)
    c0=$(cpu_ticks "$server_pid") t0=$(date +%s.%N)
    sleep "$window"
    c1=$(cpu_ticks "$server_pid") t1=$(date +%s.%N)
    in1=$(metric tutti_rtp_in_packets_received_total) out1=$(metric tutti_rtp_in_packets_sent_total)
    skipped=$(metric tutti_mix_tick_overruns_total)
    # Let the calls end (BYE), then read SIPp's counters.
    for _ in $(seq $((hold / 100 + 100))); do pgrep -f "sipp $sip" >/dev/null || break; sleep 0.1; done
    pkill -f "sipp $sip" 2>/dev/null || true
    stop_server
    kill "$sink" 2>/dev/null || true
    wait "$sink" 2>/dev/null || true
    echo "   phones that heard the room: $(awk '{ print $1 " of " $2 " (fewest packets: " $3 ")" }' "$log/sink.txt")"
    python3 - "$calls" "$listed" "$c0" "$c1" "$t0" "$t1" "$in0" "$in1" "$out0" "$out1" "${skipped:-0}" "$log" <<'EOF'
import csv, sys
calls, listed, c0, c1, t0, t1, in0, in1, out0, out1, skipped = (float(x or 0) for x in sys.argv[1:12])
d = sys.argv[12]
def last(name):
    rows = list(csv.DictReader(open(f"{d}/{name}.csv"), delimiter=";"))
    return rows[-1] if rows else {}
s = [last("talk"), last("noise")]
get = lambda k: sum(int(r.get(k, 0) or 0) for r in s)
window = t1 - t0
cpu = (c1 - c0) / 100
n = listed
print(f"   calls: {get('SuccessfulCall(C)')} of {int(calls)} successful, {get('FailedCall(C)')} failed, "
      f"{get('Retransmissions(C)')} retransmissions, {get('FailedMaxUDPRetrans(C)')} retransmission timeouts; "
      f"the room listed {int(listed)} in the window")
if n:
    print(f"   server CPU: {100 * cpu / window:.1f} % of a core, {cpu * 1e6 / n / (window / 0.02):.2f} µs per participant per tick")
    print(f"   RTP: {(in1 - in0) / n / window:.1f} packets per call per second in, {(out1 - out0) / n / window:.1f} out; "
          f"mixer ticks skipped (whole run): {int(skipped)}")
EOF
}

pion_run() {
    [ -n "${gen:-}" ] || pion_media "$log/pion"
    BENCH_METRICS=$metrics start_server "$log/server-pion.log" "$bin" --set limits.max_connections_per_address=100000
    "$gen" -url "http://$http" -pid "$server_pid" -opus "$voice" -noise "$noise" -quiet noise -n "$calls" \
        -talkers 0.1 -always -life "$((warmup + window))s" -warmup "${warmup}s" >"$log/pion.log" 2>&1 || true
    local skipped
    skipped=$(metric tutti_mix_tick_overruns_total)
    stop_server
    grep -E 'window|server CPU|received:|joins' "$log/pion.log" | sed 's/^/   /' || true
    echo "   mixer ticks skipped: ${skipped:-0}"
}

echo "$rounds rounds: $calls PCMA calls from SIPp ($talkers talking) against $calls pion WebRTC clients (10 % talking)"
for r in $(seq "$rounds"); do
    if [ $((r % 2)) = 1 ]; then
        echo "== sip"; sip_run
        [ -n "${SIP_ONLY:-}" ] || { echo "== pion"; pion_run; }
    else
        [ -n "${SIP_ONLY:-}" ] || { echo "== pion"; pion_run; }
        echo "== sip"; sip_run
    fi
done
