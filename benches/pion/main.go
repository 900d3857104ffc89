// pion-load: browser-like WebRTC clients from an independent stack (pion),
// to check the figures tutti's own generator (`tutti load`) reports.
//
// Each client offers one sendrecv Opus track with the RFC 6464 audio-level
// extension, as a browser does. A talker sends voice frames from an Ogg Opus
// file every 20 ms with their level, in ITU-T P.59 spurts and pauses; a silent
// client sends what a browser's Opus DTX sends: one comfort frame every
// 400 ms, level 127 (-no-levels and -no-dtx: a client that does neither). Clients join by
// REST (`POST …/participants`, JSON) or, with -ws, through the room's
// WebSocket (as the web page does; it stays open with the default events).
// Over the measured window it reports the server's CPU per participant per
// tick (from /proc/PID), its RSS, what the clients received (packets, loss,
// RFC 3550 jitter), the WebSocket traffic per client, and how late the
// generator's own sends were (so a run where it could not keep up shows).
//
// Loopback only. Every loop is bounded by -life.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand"
	"net"
	"net/http"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
	"github.com/pion/ice/v4"
	"github.com/pion/rtp"
	"github.com/pion/webrtc/v4"
)

var (
	baseURL   = flag.String("url", "http://127.0.0.1:28080", "the server's HTTP API (loopback)")
	clients   = flag.Int("n", 100, "clients")
	rooms     = flag.Int("rooms", 1, "rooms; clients are dealt to them in turn")
	talkers   = flag.Float64("talkers", 0.1, "share of each room's clients that talk (ITU-T P.59 on/off: spurts of 1.0 s, pauses of 1.6 s on average)")
	always    = flag.Bool("always", false, "talkers talk all the time (no P.59 pauses)")
	noLevels  = flag.Bool("no-levels", false, "send no audio level (the server must decode every packet to measure it)")
	noDTX     = flag.Bool("no-dtx", false, "silent clients send a frame every 20 ms instead of one every 400 ms")
	quietKind = flag.String("quiet", "silence", "what silent clients send: `silence` (a silence frame) or `noise` (frames of -noise: low noise, as a real microphone gives)")
	noiseFile = flag.String("noise", "noise.opus", "Ogg Opus file of low noise, for -quiet noise")
	useWS     = flag.Bool("ws", false, "join through the room's WebSocket and keep it open (as the page does)")
	life      = flag.Duration("life", 40*time.Second, "how long the clients stay after the last has joined")
	warmup    = flag.Duration("warmup", 5*time.Second, "not measured, after the last join")
	pid       = flag.Int("pid", 0, "the server's process id, for its CPU and RSS")
	opusFile  = flag.String("opus", "voice.opus", "Ogg Opus file of 20 ms frames that talkers send, looped")
	parallel  = flag.Int("parallel", 16, "joins in flight at once")
	roomNames = flag.String("prefix", "pion", "room ids are PREFIX-0, PREFIX-1, …")
	jsonOut   = flag.Bool("json", false, "also print the figures as one JSON line, last")
	stereo    = flag.Bool("stereo", false, "ask for stereo Opus (stereo=1), as the page and the SDK do: a spatial room's stereo render")
)

// RFC 6464's header extension, as browsers offer it.
const levelURI = "urn:ietf:params:rtp-hdrext:ssrc-audio-level"

// The Opus parameters of our offer: with -stereo, asking for stereo.
func opusFmtp() string {
	if *stereo {
		return "minptime=10;useinbandfec=1;usedtx=1;stereo=1"
	}
	return "minptime=10;useinbandfec=1;usedtx=1"
}

// What Opus DTX sends while silent: a 20 ms CELT silence frame.
var dtxFrame = []byte{0xf8, 0xff, 0xfe}

type client struct {
	idx    int
	room   string
	talker bool
	pc     *webrtc.PeerConnection
	track  *webrtc.TrackLocalStaticRTP
	extID  uint8 // the level extension's id in our offer (what we send)
	rxExt  uint8 // and in the server's answer (what we receive)
	ws     *websocket.Conn
	seq    uint16
	ts     uint32
	// P.59 on/off: talking now, and the tick it changes.
	talking bool
	flip    int

	// Received, from the measured window's start (reset at it).
	packets   atomic.Uint64
	payload   atomic.Uint64 // Opus payload bytes received
	stereoPkt atomic.Uint64 // received packets whose Opus TOC says stereo
	levelled  atomic.Uint64 // packets that carried an RFC 6464 level
	lost      atomic.Uint64
	jitterQ4  atomic.Uint64 // RFC 3550 jitter in 1/16 of a 48 kHz sample, last value
	wsMsgs    atomic.Uint64
	wsBytes   atomic.Uint64
	connected atomic.Bool
}

func main() {
	flag.Parse()
	frames, err := readOpus(*opusFile)
	check(err, "reading "+*opusFile)
	quiet := [][]byte{dtxFrame}
	switch *quietKind {
	case "silence":
	case "noise":
		quiet, err = readOpus(*noiseFile)
		check(err, "reading "+*noiseFile)
	default:
		check(errors.New("not silence or noise"), "-quiet")
	}
	api := newAPI()
	for r := 0; r < *rooms; r++ {
		createRoom(fmt.Sprintf("%s-%d", *roomNames, r))
	}

	cs := make([]*client, *clients)
	perRoom := make([]int, *rooms)
	for i := range cs {
		r := i % *rooms
		k := perRoom[r]
		perRoom[r]++
		// Talkers are spread evenly within each room: k*share crosses an integer.
		talk := int(float64(k+1)**talkers) > int(float64(k)**talkers)
		cs[i] = &client{idx: i, room: fmt.Sprintf("%s-%d", *roomNames, r), talker: talk}
	}

	_, rssIdle := procStat(*pid)
	start := time.Now()
	sem := make(chan struct{}, *parallel)
	var wg sync.WaitGroup
	var failed atomic.Int64
	for _, c := range cs {
		sem <- struct{}{}
		wg.Add(1)
		go func(c *client) {
			defer func() { <-sem; wg.Done() }()
			if err := c.join(api); err != nil {
				if failed.Add(1) <= 5 {
					fmt.Fprintf(os.Stderr, "client %d: %v\n", c.idx, err)
				}
			}
		}(c)
	}
	wg.Wait()
	joined := time.Since(start)
	fmt.Printf("%d clients in %d rooms joined in %.1f s (%d failed), via %s\n",
		*clients, *rooms, joined.Seconds(), failed.Load(), map[bool]string{true: "WebSocket", false: "REST"}[*useWS])

	// The sender: one loop for all clients, every 20 ms.
	stop := make(chan struct{})
	var late lateness
	var sendWG sync.WaitGroup
	sendWG.Add(1)
	go func() { defer sendWG.Done(); sendLoop(cs, frames, quiet, stop, &late) }()

	time.Sleep(*warmup)
	for _, c := range cs {
		c.packets.Store(0)
		c.payload.Store(0)
		c.stereoPkt.Store(0)
		c.levelled.Store(0)
		c.lost.Store(0)
		c.wsMsgs.Store(0)
		c.wsBytes.Store(0)
	}
	late.reset()
	cpu0, _ := procStat(*pid)
	self0, _ := procStat(os.Getpid())
	t0 := time.Now()
	time.Sleep(*life - *warmup)
	cpu1, rss1 := procStat(*pid)
	self1, _ := procStat(os.Getpid())
	window := time.Since(t0).Seconds()
	close(stop)
	sendWG.Wait()

	report(cs, window, cpu1-cpu0, rssIdle, rss1, self1-self0, &late, int(failed.Load()))
	for _, c := range cs {
		if c.ws != nil {
			_ = c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(1000, ""), time.Now().Add(time.Second))
			_ = c.ws.Close()
		}
		if c.pc != nil {
			_ = c.pc.Close()
		}
	}
}

func newAPI() *webrtc.API {
	m := &webrtc.MediaEngine{}
	check(m.RegisterCodec(webrtc.RTPCodecParameters{
		RTPCodecCapability: webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeOpus, ClockRate: 48000, Channels: 2, SDPFmtpLine: opusFmtp()},
		PayloadType:        111,
	}, webrtc.RTPCodecTypeAudio), "registering Opus")
	check(m.RegisterHeaderExtension(webrtc.RTPHeaderExtensionCapability{URI: levelURI}, webrtc.RTPCodecTypeAudio), "registering the level extension")
	s := webrtc.SettingEngine{}
	s.SetNetworkTypes([]webrtc.NetworkType{webrtc.NetworkTypeUDP4})
	s.SetIncludeLoopbackCandidate(true)
	s.SetIPFilter(func(ip net.IP) bool { return ip.IsLoopback() })
	s.SetICEMulticastDNSMode(ice.MulticastDNSModeDisabled)
	return webrtc.NewAPI(webrtc.WithMediaEngine(m), webrtc.WithSettingEngine(s))
}

func (c *client) join(api *webrtc.API) error {
	pc, err := api.NewPeerConnection(webrtc.Configuration{})
	if err != nil {
		return err
	}
	c.pc = pc
	track, err := webrtc.NewTrackLocalStaticRTP(webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeOpus, ClockRate: 48000, Channels: 2}, "audio", "pion")
	if err != nil {
		return err
	}
	c.track = track
	if _, err := pc.AddTransceiverFromTrack(track, webrtc.RTPTransceiverInit{Direction: webrtc.RTPTransceiverDirectionSendrecv}); err != nil {
		return err
	}
	pc.OnTrack(func(t *webrtc.TrackRemote, _ *webrtc.RTPReceiver) { go c.receive(t) })
	pc.OnConnectionStateChange(func(s webrtc.PeerConnectionState) {
		c.connected.Store(s == webrtc.PeerConnectionStateConnected)
	})
	offer, err := pc.CreateOffer(nil)
	if err != nil {
		return err
	}
	gathered := webrtc.GatheringCompletePromise(pc)
	if err := pc.SetLocalDescription(offer); err != nil {
		return err
	}
	select {
	case <-gathered:
	case <-time.After(10 * time.Second):
		return errors.New("ICE gathering did not complete in 10 s")
	}
	local := pc.LocalDescription().SDP
	c.extID = extmapID(local)
	var answer string
	if *useWS {
		answer, err = c.joinWS(local)
	} else {
		answer, err = joinREST(c.room, local)
	}
	if err != nil {
		return err
	}
	c.rxExt = extmapID(answer)
	if err := pc.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeAnswer, SDP: answer}); err != nil {
		return err
	}
	deadline := time.Now().Add(15 * time.Second)
	for !c.connected.Load() {
		if time.Now().After(deadline) {
			return errors.New("not connected in 15 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

func joinREST(room, offer string) (string, error) {
	body, _ := json.Marshal(map[string]string{"sdp": offer})
	resp, err := http.Post(*baseURL+"/v1/rooms/"+room+"/participants", "application/json", bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusCreated {
		return "", fmt.Errorf("join: %s: %s", resp.Status, b)
	}
	var a struct{ SDP string }
	if err := json.Unmarshal(b, &a); err != nil {
		return "", err
	}
	return a.SDP, nil
}

func (c *client) joinWS(offer string) (string, error) {
	u := "ws" + strings.TrimPrefix(*baseURL, "http") + "/v1/rooms/" + c.room + "/ws"
	ws, _, err := websocket.DefaultDialer.Dial(u, nil)
	if err != nil {
		return "", err
	}
	c.ws = ws
	msg, _ := json.Marshal(map[string]string{"type": "join", "sdp": offer})
	if err := ws.WriteMessage(websocket.TextMessage, msg); err != nil {
		return "", err
	}
	_ = ws.SetReadDeadline(time.Now().Add(15 * time.Second))
	for {
		_, b, err := ws.ReadMessage()
		if err != nil {
			return "", err
		}
		var m struct {
			Type, SDP, Code, Message string
		}
		if err := json.Unmarshal(b, &m); err != nil {
			return "", err
		}
		switch m.Type {
		case "answer":
			_ = ws.SetReadDeadline(time.Time{})
			go c.readWS()
			return m.SDP, nil
		case "error":
			return "", fmt.Errorf("join: %s: %s", m.Code, m.Message)
		}
	}
}

// readWS counts what the socket brings until it closes.
func (c *client) readWS() {
	for {
		_, b, err := c.ws.ReadMessage()
		if err != nil {
			return
		}
		c.wsMsgs.Add(1)
		c.wsBytes.Add(uint64(len(b)))
	}
}

// receive counts the server's packets, their sequence gaps and RFC 3550 jitter.
func (c *client) receive(t *webrtc.TrackRemote) {
	var last uint16
	var have bool
	var transit0 int64
	var jitter float64 // in 48 kHz samples
	start := time.Now()
	for {
		p, _, err := t.ReadRTP()
		if err != nil {
			return
		}
		arrival := int64(time.Since(start).Seconds() * 48000)
		transit := arrival - int64(p.Timestamp)
		if have {
			gap := p.SequenceNumber - last
			if gap > 1 && gap < 1000 {
				c.lost.Add(uint64(gap - 1))
			}
			d := float64(transit - transit0)
			if d < 0 {
				d = -d
			}
			jitter += (d - jitter) / 16
			c.jitterQ4.Store(uint64(jitter * 16))
		}
		have, last, transit0 = true, p.SequenceNumber, transit
		c.packets.Add(1)
		c.payload.Add(uint64(len(p.Payload)))
		if len(p.Payload) > 1 && p.Payload[0]&0x04 != 0 {
			c.stereoPkt.Add(1)
		}
		if c.rxExt != 0 && len(p.Header.GetExtension(c.rxExt)) == 1 {
			c.levelled.Add(1)
		}
	}
}

// lateness of the sender's ticks against their schedule.
type lateness struct {
	mu    sync.Mutex
	ticks []time.Duration
}

func (l *lateness) add(d time.Duration) { l.mu.Lock(); l.ticks = append(l.ticks, d); l.mu.Unlock() }
func (l *lateness) reset()              { l.mu.Lock(); l.ticks = l.ticks[:0]; l.mu.Unlock() }

func sendLoop(cs []*client, frames, quiet [][]byte, stop chan struct{}, late *lateness) {
	start := time.Now()
	for tick := 0; ; tick++ {
		due := start.Add(time.Duration(tick) * 20 * time.Millisecond)
		if d := time.Until(due); d > 0 {
			select {
			case <-stop:
				return
			case <-time.After(d):
			}
		} else {
			select {
			case <-stop:
				return
			default:
			}
		}
		late.add(time.Since(due))
		for _, c := range cs {
			// Connected only after join set its track (the callback that sets it comes later).
			if !c.connected.Load() {
				continue
			}
			c.ts += 960
			var payload []byte
			var level byte
			if c.talker && *always {
				c.talking = true
			} else if c.talker && tick >= c.flip {
				c.talking = !c.talking
				mean := 1.587 // s, P.59 pause
				if c.talking {
					mean = 1.004 // s, P.59 talkspurt
				}
				c.flip = tick + 1 + int(rand.ExpFloat64()*mean/0.020)
			}
			if c.talking {
				payload = frames[(tick+c.idx*37)%len(frames)]
				level = 0x80 | byte(15+c.idx%20) // voice, −15 to −34 dBov
			} else if *noDTX || (tick+c.idx)%20 == 0 {
				payload, level = quiet[(tick+c.idx*37)%len(quiet)], 127
			} else {
				continue // DTX: nothing while silent
			}
			c.seq++
			p := &rtp.Packet{Header: rtp.Header{Version: 2, SequenceNumber: c.seq, Timestamp: c.ts}, Payload: payload}
			if c.extID != 0 && !*noLevels {
				_ = p.Header.SetExtension(c.extID, []byte{level})
			}
			_ = c.track.WriteRTP(p)
		}
	}
}

// rssIdle: the server's RSS before the joins; rss1: at the window's end.
func report(cs []*client, window float64, cpuTicks uint64, rssIdle, rss1 uint64, selfTicks uint64, late *lateness, failed int) {
	n := 0
	var packets, levelled, lost, payload, stereoPkts uint64
	var jitters []float64
	var wsMsgs, wsBytes uint64
	nWS := 0
	for _, c := range cs {
		if !c.connected.Load() {
			continue
		}
		n++
		packets += c.packets.Load()
		payload += c.payload.Load()
		stereoPkts += c.stereoPkt.Load()
		levelled += c.levelled.Load()
		lost += c.lost.Load()
		jitters = append(jitters, float64(c.jitterQ4.Load())/16/48)
		if c.ws != nil {
			nWS++
			wsMsgs += c.wsMsgs.Load()
			wsBytes += c.wsBytes.Load()
		}
	}
	sort.Float64s(jitters)
	ticks := window / 0.020
	cpuS := float64(cpuTicks) / 100
	fmt.Printf("window %.1f s, %d clients connected at its end\n", window, n)
	if *pid != 0 && n > 0 {
		fmt.Printf("server CPU: %.1f %% of a core, %.2f µs per participant per tick; RSS %.1f MB (%.1f before the joins: %.0f KiB per participant)\n",
			100*cpuS/window, cpuS*1e6/float64(n)/ticks, float64(rss1)/1e6, float64(rssIdle)/1e6, (float64(rss1)-float64(rssIdle))/float64(n)/1024)
	}
	if n > 0 {
		fmt.Printf("received: %.1f packets per client per second, loss %.3f %%, jitter p50/p95/max %.1f / %.1f / %.1f ms\n",
			float64(packets)/float64(n)/window, 100*float64(lost)/float64(max(packets+lost, 1)),
			pct(jitters, 0.5), pct(jitters, 0.95), pct(jitters, 1))
		fmt.Printf("media: %.0f Opus payload bytes per client per second, %.1f %% of the packets stereo\n",
			float64(payload)/float64(n)/window, 100*float64(stereoPkts)/float64(max(packets, 1)))
	}
	if nWS > 0 {
		fmt.Printf("WebSocket: %.2f messages and %.0f bytes per client per second\n",
			float64(wsMsgs)/float64(nWS)/window, float64(wsBytes)/float64(nWS)/window)
	}
	late.mu.Lock()
	ls := make([]float64, len(late.ticks))
	for i, d := range late.ticks {
		ls[i] = d.Seconds() * 1000
	}
	late.mu.Unlock()
	sort.Float64s(ls)
	fmt.Printf("generator: %.0f %% of a core; its sends late p50/p99/max %.1f / %.1f / %.1f ms\n",
		float64(selfTicks)/window, pct(ls, 0.5), pct(ls, 0.99), pct(ls, 1))
	if pct(ls, 0.99) > 10 {
		fmt.Println("INVALID: the generator did not keep up (1 % of its sends more than 10 ms late)")
	}
	if *jsonOut {
		per := func(v uint64, k int) float64 { return float64(v) / float64(max(k, 1)) / window }
		out, _ := json.Marshal(map[string]any{
			"clients":                        len(cs),
			"failed":                         failed,
			"connected":                      n,
			"window_s":                       window,
			"packets_per_client_per_s":       per(packets, n),
			"payload_bytes_per_client_per_s": per(payload, n),
			"stereo_share":                   float64(stereoPkts) / float64(max(packets, 1)),
			"levelled_share":                 float64(levelled) / float64(max(packets, 1)),
			"loss_percent":                   100 * float64(lost) / float64(max(packets+lost, 1)),
			"ws_clients":                     nWS,
			"ws_messages_per_client_per_s":   per(wsMsgs, nWS),
			"generator_late_p99_ms":          pct(ls, 0.99),
		})
		fmt.Println(string(out))
	}
}

func pct(v []float64, q float64) float64 {
	if len(v) == 0 {
		return 0
	}
	i := int(q * float64(len(v)-1))
	return v[i]
}

// procStat: CPU ticks (user + system) and RSS bytes of a process.
func procStat(pid int) (uint64, uint64) {
	if pid == 0 {
		return 0, 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0
	}
	// Fields after the command's closing parenthesis; utime and stime are 14 and 15.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	u, _ := strconv.ParseUint(f[11], 10, 64)
	s, _ := strconv.ParseUint(f[12], 10, 64)
	st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	var rss uint64
	for _, line := range strings.Split(string(st), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			kb, _ := strconv.ParseUint(strings.Fields(line)[1], 10, 64)
			rss = kb * 1024
		}
	}
	return u + s, rss
}

func createRoom(id string) {
	body, _ := json.Marshal(map[string]string{"id": id})
	resp, err := http.Post(*baseURL+"/v1/rooms", "application/json", bytes.NewReader(body))
	check(err, "creating room "+id)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusConflict {
		b, _ := io.ReadAll(resp.Body)
		check(fmt.Errorf("%s: %s", resp.Status, b), "creating room "+id)
	}
}

var extmapRe = regexp.MustCompile(`a=extmap:(\d+) ` + regexp.QuoteMeta(levelURI))

// extmapID: the id a description gives the level extension (0: none).
func extmapID(s string) uint8 {
	m := extmapRe.FindStringSubmatch(s)
	if m == nil {
		return 0
	}
	id, _ := strconv.Atoi(m[1])
	return uint8(id)
}

// readOpus: the Opus packets of an Ogg file (RFC 7845), without its two header packets.
func readOpus(path string) ([][]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var packets [][]byte
	var cur []byte
	for len(b) >= 27 {
		if string(b[:4]) != "OggS" {
			return nil, errors.New("not an Ogg page")
		}
		nseg := int(b[26])
		if len(b) < 27+nseg {
			return nil, errors.New("short Ogg page")
		}
		table := b[27 : 27+nseg]
		body := b[27+nseg:]
		for _, l := range table {
			if len(body) < int(l) {
				return nil, errors.New("short Ogg page")
			}
			cur = append(cur, body[:l]...)
			body = body[l:]
			if l < 255 { // a packet ends here
				packets = append(packets, cur)
				cur = nil
			}
		}
		b = body
	}
	if len(packets) < 3 {
		return nil, errors.New("no Opus packets")
	}
	return packets[2:], nil // OpusHead and OpusTags
}

func check(err error, what string) {
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", what, err)
		os.Exit(1)
	}
}
