// tutti's browser client: join a room through its WebSocket with one
// audio track, hear the room's mix, see who is there and who is talking.
//
// Flow: check (or create) the room over REST → microphone → the room's
// ICE servers (STUN/TURN, `GET …/ice-servers`) → RTCPeerConnection offer
// with every ICE candidate in it (the server is ICE-lite and does not
// trickle) → WebSocket `join` → `answer` → audio. Room events arrive on the
// same WebSocket; closing it leaves the room.
//
// The level meters (WebAudio) never hold up the call: when the browser
// cannot start an AudioContext (no audio output device, a headless
// browser), the call goes on without meters and the page says so. When the
// connection drops (ICE `disconnected` for a moment, or `failed`), the page
// restarts ICE: a new offer to `PATCH …/participants/{id}` (application/sdp),
// whose answer is the 200's body; it gives up after RESTART_GRACE_MS.
//
// The access token comes in the link's fragment (`#token=…`: a fragment
// reaches neither the server's logs nor a Referer), or, from older links,
// in the query (`?token=`, moved to the fragment on load). Before anyone
// clicks, the page asks the server about the room with it, so a missing,
// refused, expired or other room's token is told at once, each in its own
// words. A room's moderator gets an Invite control: the server mints a
// guest token for the room (`POST …/invites`) and the page copies the link.
//
// For tests and debugging the page keeps its state in `window.tuttiState`
// (plain data) and its WebRTC and WebAudio objects in `window.tuttiDebug`.
'use strict';

(() => {
  const $ = (id) => document.getElementById(id);

  /** Everything the page shows, as plain data. */
  const state = {
    phase: 'idle', // idle | joining | in-call | left | error
    room: '',
    name: '',
    me: null, // our participant id
    muted: false,
    participants: [], // [{id, name, talking, muted, you, hand, listenOnly}]
    admin: false, // our token is an admin's for the room: the stage controls show
    locked: false, // the room takes no new joins
    connection: 'new', // RTCPeerConnection.connectionState
    error: null, // {code, text}
    notice: '',
    micLevelDb: -Infinity,
    roomLevelDb: -Infinity,
    offerSdp: '',
    answerSdp: '',
    meters: 'off', // off | starting | on | unavailable
    iceServers: 0, // how many ICE servers the server gave
    iceRestarts: [], // [{at, status, code}]: each restart's offer and what the server said
    access: 'unknown', // unknown | ok | token_missing | token_invalid | token_expired | wrong_room: the pre-join check
    invite: null, // {url, permissions, expiresAt, copied}: the last invite link made
  };
  window.tuttiState = state;
  const debug = { pc: null, audioContext: null, micAnalyser: null, remoteAnalyser: null, stream: null };
  window.tuttiDebug = debug;

  /** The current call's resources, or null. */
  let call = null;

  const JOIN_TIMEOUT_MS = 15000;
  const GATHER_TIMEOUT_MS = 3000;
  const CONNECT_TIMEOUT_MS = 15000;
  /** How long the AudioContext may take to start before the meters are given up. */
  const AUDIO_START_MS = 2000;
  /** How long ICE may stay `disconnected` before the page restarts it. */
  const DISCONNECTED_WAIT_MS = 2000;
  /** How long after the connection dropped the page keeps trying to restore it. */
  const RESTART_GRACE_MS = 15000;
  // How long the page tries to take its participant over with a new socket
  // after losing one (within the server's limits.ws_resume_seconds, 10 s).
  const RESUME_WINDOW_MS = 9000;
  /** Between restart attempts that failed. */
  const RESTART_RETRY_MS = 2000;

  class TuttiError extends Error {
    constructor(code, message, status) {
      super(message || code);
      this.code = code;
      this.status = status || 0;
    }
  }

  // ---- What to tell a person -------------------------------------------

  function explain(err) {
    const code = (err && err.code) || '';
    const status = (err && err.status) || 0;
    // A ban is a 403, but not the token's fault.
    if (code === 'banned') return 'A moderator removed you from this room; you cannot rejoin it for now.';
    const tokenText = explainToken(code);
    if (tokenText) return tokenText;
    if (status === 401 || status === 403 || /token|unauthori[sz]ed|forbidden/i.test(code)) {
      return 'Your access token was refused. Check the token (or the link you were given) and try again.';
    }
    switch (code) {
      case 'room_full':
        return `The room “${state.room}” is full. Try again later, or pick another room.`;
      case 'server_full':
        return 'The server is at capacity right now. Please try again in a little while.';
      case 'room_not_found':
        return `There is no room called “${state.room}” (yet: its host opens it by joining first).`;
      case 'bad_room_id':
        return 'A room name is 1 to 64 letters, digits, “-” or “_”.';
      case 'shutting_down':
        return 'The server is restarting. Please try again in a moment.';
      case 'bad_sdp':
        return 'The server could not use the audio your browser offered (it needs Opus). Try a current Chrome, Firefox or Safari.';
      case 'mic_denied':
        return 'Microphone access was denied. Allow the microphone for this site (the icon in the address bar), then join again.';
      case 'mic_missing':
        return 'No microphone was found. Plug one in, then join again.';
      case 'mic_busy':
        return 'Your microphone could not be started: another application may be using it.';
      case 'insecure':
        return 'The browser allows the microphone only on https:// pages or on localhost. Open this page over https.';
      case 'no_webrtc':
        return 'This browser cannot make audio calls (no WebRTC). Try a current Chrome, Firefox or Safari.';
      case 'network':
        return 'The server could not be reached. Check your connection and try again.';
      case 'socket_refused':
        return 'The server refused the room’s live connection. If you use an access token, it may have been refused.';
      case 'socket_lost':
        return 'The connection to the server was lost, so the call has ended.';
      case 'ice_failed':
        return 'The audio connection could not be set up: the network may block UDP traffic to the server.';
      case 'ice_lost':
        return `The audio connection was lost and could not be restored within ${RESTART_GRACE_MS / 1000} seconds, so the call has ended.`;
      case 'restart_refused':
        return `The audio connection was lost, and the server refused to restore it (${(err && err.message) || 'no reason given'}), so the call has ended.`;
      case 'timeout':
        return 'The server did not answer in time. Please try again.';
      case 'timed_out':
        return 'You were disconnected: the server stopped receiving your audio.';
      case 'failed':
        return 'The audio connection failed, so the call has ended.';
      case 'room_closed':
        return 'The room was closed, so the call has ended.';
      case 'removed':
        return 'You were removed from the room.';
      case 'kicked':
        return 'A moderator removed you from the room.';
      case 'room_locked':
        return `The room “${state.room}” is locked: it takes no new participants right now.`;
      case 'shutdown':
        return 'The server is shutting down, so the call has ended. Please try again in a moment.';
      case 'replaced':
        return 'Someone joined this room with your link or token (you, in another tab or on another device?), so this page left the call.';
      default:
        return `Something went wrong: ${(err && err.message) || code || 'unknown error'}.`;
    }
  }

  // ---- Access tokens: where they come from, what is wrong with them --------

  /** The sentence for a token problem the server named (its 401/403 code), or ''. */
  function explainToken(code) {
    switch (code) {
      case 'token_missing':
        return 'This page needs an access token: open the link tutti printed when it started (under “Open in a browser:”), or ask the room’s host for an invite link.';
      case 'token_invalid':
        return 'Your access token was refused: this server did not make it (a link cut short, or a server restarted since, with a new secret). Ask for a new link.';
      case 'token_expired':
        return 'Your access token expired. Ask the room’s host for a new link (or open the one tutti printed again).';
      case 'wrong_room':
        return `Your access token is for another room, not “${state.room}”. Open the link you were given as it is, or ask for one for this room.`;
      default:
        return '';
    }
  }

  /**
   * The token of the page's link: from the fragment (`#token=…`), else from
   * the query of an older link (`?token=…`), which is moved to the
   * fragment so it is not sent again.
   */
  function linkToken() {
    const fragment = new URLSearchParams(location.hash.replace(/^#/, ''));
    const query = new URLSearchParams(location.search);
    const token = fragment.get('token') || query.get('token') || '';
    if (query.has('token')) {
      const url = new URL(location.href);
      url.searchParams.delete('token');
      if (token) url.hash = new URLSearchParams({ token }).toString();
      history.replaceState(null, '', url);
    }
    return token;
  }

  /**
   * Before anyone clicks: asks the server about the room with the page's
   * token (or none), so a token problem is told at once. Without a room
   * name, the room list stands in (its answer says the same of the token).
   * With auth off, or a good token, nothing is shown.
   */
  async function checkAccess(room, token) {
    const path = /^[A-Za-z0-9_-]{1,64}$/.test(room) ? `v1/rooms/${encodeURIComponent(room)}` : 'v1/rooms';
    let r;
    try {
      r = await send(apiUrl(path), { headers: authHeaders(token) });
    } catch (_) {
      return; // the join will say the server cannot be reached
    }
    if (r.status !== 401 && r.status !== 403) {
      state.access = 'ok';
      return;
    }
    const err = await errorOf(r);
    // A room admin's token cannot list every room: that says nothing about the token.
    if (path === 'v1/rooms' && err.code === 'forbidden') {
      state.access = 'ok';
      return;
    }
    state.access = explainToken(err.code) ? err.code : 'ok';
    if (state.access !== 'ok' && state.phase === 'idle') {
      state.room = room;
      showError(err);
    }
  }

  /**
   * A link pasted into this tab that differs only in its fragment (the
   * same page with an invite's token) does not reload the page: take its
   * token, and check it again. In a call, the call goes on as it is.
   */
  function onHashChange() {
    if (call) return;
    const token = linkToken();
    if (!token) return;
    $('token').value = token;
    clearMessages();
    state.access = 'unknown';
    checkAccess($('room').value.trim(), token);
  }

  /** Why a room socket closed, as an error code, when the server said: 4001 token expired, 4409 replaced. */
  function closeReason(ev) {
    if (ev && ev.code === 4001) return 'token_expired';
    if (ev && ev.code === 4409) return 'replaced';
    return '';
  }

  /** `token_expiring`: the server will close the socket when the token expires. */
  function onTokenExpiring(msg) {
    const at = Number(msg.expires_at) * 1000;
    const when = Number.isFinite(at) ? new Date(at).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' }) : 'soon';
    showNotice(`Your access token expires at ${when}: the call will end then. Ask the room’s host for a new link.`);
  }

  function showError(err) {
    state.error = { code: (err && err.code) || 'error', text: explain(err) };
    const el = $('error');
    el.textContent = state.error.text;
    el.hidden = false;
  }

  function clearMessages() {
    state.error = null;
    state.notice = '';
    $('error').hidden = true;
    $('notice').hidden = true;
  }

  function showNotice(text) {
    state.notice = text;
    $('notice').textContent = text;
    $('notice').hidden = false;
  }

  function setStatus(text) {
    $('status').textContent = text;
  }

  // ---- REST and WebSocket ------------------------------------------------

  function apiUrl(path) {
    return new URL(path, document.baseURI);
  }

  function authHeaders(token, extra) {
    const h = Object.assign({}, extra || {});
    if (token) h.Authorization = `Bearer ${token}`;
    return h;
  }

  async function errorOf(response) {
    let body = {};
    try {
      body = await response.json();
    } catch (_) {
      // not JSON: the status says enough
    }
    return new TuttiError(body.code || `http_${response.status}`, body.message || response.statusText, response.status);
  }

  async function send(url, options) {
    try {
      return await fetch(url, Object.assign({ cache: 'no-store' }, options));
    } catch (_) {
      throw new TuttiError('network');
    }
  }

  /** Makes sure the room exists (creating it if needed) and has space. */
  async function ensureRoom(room, token) {
    const path = `v1/rooms/${encodeURIComponent(room)}`;
    let r = await send(apiUrl(path), { headers: authHeaders(token) });
    if (r.status === 404) {
      const err = await errorOf(r);
      if (err.code !== 'room_not_found') throw err;
      r = await send(apiUrl('v1/rooms'), {
        method: 'POST',
        headers: authHeaders(token, { 'Content-Type': 'application/json' }),
        body: JSON.stringify({ id: room }),
      });
      if (r.status === 403) {
        // A guest's token may join the room, not create it: for them, it is not there.
        const refused = await errorOf(r);
        throw refused.code === 'forbidden' ? new TuttiError('room_not_found') : refused;
      }
      if (r.status !== 201 && r.status !== 409) throw await errorOf(r);
      return;
    }
    if (!r.ok) throw await errorOf(r);
    const info = await r.json();
    const summary = info && info.room;
    if (summary && summary.participants >= summary.max_participants) throw new TuttiError('room_full');
  }

  /**
   * The STUN/TURN servers the server wants this client to use, as
   * `RTCConfiguration.iceServers`. Without them (an older server, an error)
   * the call is tried directly, as before.
   */
  async function iceServers(room, token) {
    try {
      const r = await send(apiUrl(`v1/rooms/${encodeURIComponent(room)}/ice-servers`), { headers: authHeaders(token) });
      if (!r.ok) return [];
      const body = await r.json();
      return Array.isArray(body.ice_servers) ? body.ice_servers : [];
    } catch (_) {
      return [];
    }
  }

  function socketUrl(room, token) {
    const url = apiUrl(`v1/rooms/${encodeURIComponent(room)}/ws`);
    url.protocol = url.protocol === 'https:' ? 'wss:' : 'ws:';
    if (token) url.searchParams.set('token', token);
    return url;
  }

  /** Opens the room's WebSocket; resolves once its first snapshot arrived. */
  /**
   * Cluster mode: the room is on another node (a socket opened on the
   * wrong node), or went there (a drain). Goes there with the message's
   * single-use ticket, never with our token: that node burns it and sends
   * us to its page with a token for this room. `extra`: more of the page's
   * query to carry (`autojoin`, `muted`, `hand` after a drain).
   */
  function followMoved(room, msg, extra) {
    const here = new URLSearchParams(location.search);
    const there = msg.ticket
      ? new URL(`/v1/rooms/${encodeURIComponent(room)}/enter`, msg.api_url)
      : new URL(location.pathname, msg.api_url);
    for (const key of ['name', 'processing']) if (here.get(key)) there.searchParams.set(key, here.get(key));
    if (!here.get('name') && state.name) there.searchParams.set('name', state.name);
    for (const [key, value] of Object.entries(extra)) there.searchParams.set(key, value);
    there.searchParams.set('room', room);
    if (msg.ticket) there.searchParams.set('ticket', msg.ticket);
    location.assign(there.href);
  }

  /**
   * A drain in a cluster: the room went to another node mid-call. The page
   * leaves here and joins there at once, as it was (muted or not, its hand).
   */
  function onMoved(mine, msg) {
    if (!msg.api_url || !msg.room) return;
    const self = me();
    const extra = { autojoin: '1' };
    if (state.muted) extra.muted = '1';
    if (self && self.hand) extra.hand = '1';
    showNotice('The server is restarting: moving your call to another server…');
    const room = state.room;
    leave();
    followMoved(room, msg, extra);
  }

  function openSocket(room, token) {
    return new Promise((resolve, reject) => {
      const ws = new WebSocket(socketUrl(room, token));
      const timer = setTimeout(() => {
        ws.close();
        reject(new TuttiError('timeout'));
      }, JOIN_TIMEOUT_MS);
      const refused = () => {
        clearTimeout(timer);
        reject(new TuttiError('socket_refused'));
      };
      ws.onerror = refused;
      ws.onclose = refused;
      let snapshot = null;
      ws.onmessage = (ev) => {
        const msg = parse(ev.data);
        if (msg && msg.type === 'moved' && msg.api_url) {
          clearTimeout(timer);
          ws.onerror = null;
          ws.onclose = null;
          // The person pressed Join: join there at once.
          followMoved(room, msg, { autojoin: '1' });
          return;
        }
        // A big room's snapshot is `room` and then `participants` messages
        // until `more` is 0: resolve with all of it.
        if (msg && msg.type === 'room' && !snapshot) {
          snapshot = msg;
          snapshot.participants = Array.isArray(msg.participants) ? msg.participants : [];
        } else if (msg && msg.type === 'participants' && snapshot && Array.isArray(msg.participants)) {
          snapshot.participants.push(...msg.participants);
          snapshot.more = msg.more;
        } else {
          return;
        }
        if (snapshot.more > 0) return;
        clearTimeout(timer);
        ws.onerror = null;
        ws.onclose = null;
        ws.onmessage = null;
        resolve({ ws, snapshot });
      };
    });
  }

  function parse(text) {
    try {
      return JSON.parse(text);
    } catch (_) {
      return null;
    }
  }

  // ---- Microphone and WebRTC -----------------------------------------------

  async function microphone(processing) {
    if (!window.isSecureContext || !navigator.mediaDevices || !navigator.mediaDevices.getUserMedia) {
      throw new TuttiError('insecure');
    }
    if (typeof RTCPeerConnection === 'undefined') throw new TuttiError('no_webrtc');
    const audio = {
      echoCancellation: processing,
      noiseSuppression: processing,
      autoGainControl: processing,
      channelCount: 1,
    };
    try {
      return await navigator.mediaDevices.getUserMedia({ audio, video: false });
    } catch (e) {
      const name = e && e.name;
      if (name === 'NotAllowedError' || name === 'SecurityError') throw new TuttiError('mic_denied');
      if (name === 'NotFoundError' || name === 'OverconstrainedError') throw new TuttiError('mic_missing');
      if (name === 'NotReadableError' || name === 'AbortError') throw new TuttiError('mic_busy');
      throw new TuttiError('mic_denied', e && e.message);
    }
  }

  /** Resolves when ICE gathering is complete (or after a bound: send what we have). */
  function gathered(pc) {
    if (pc.iceGatheringState === 'complete') return Promise.resolve();
    return new Promise((resolve) => {
      const done = () => {
        if (pc.iceGatheringState !== 'complete') return;
        pc.removeEventListener('icegatheringstatechange', done);
        clearTimeout(timer);
        resolve();
      };
      const timer = setTimeout(() => {
        pc.removeEventListener('icegatheringstatechange', done);
        resolve();
      }, GATHER_TIMEOUT_MS);
      pc.addEventListener('icegatheringstatechange', done);
    });
  }

  /**
   * Starts the AudioContext for the meters without waiting for it: if it
   * has not started within AUDIO_START_MS (no output device, a headless
   * browser) or cannot be made at all, the meters are off and a note says
   * so; the call itself never waits on it.
   */
  function startAudio(mine) {
    let ctx = null;
    try {
      ctx = new AudioContext();
    } catch (_) {
      metersUnavailable();
      return null;
    }
    state.meters = 'starting';
    const timer = setTimeout(() => {
      if (call === mine && ctx.state !== 'running') metersUnavailable();
    }, AUDIO_START_MS);
    ctx.resume().then(
      () => {
        if (call === mine && ctx.state === 'running') {
          clearTimeout(timer);
          state.meters = 'on';
        }
      },
      () => {
        clearTimeout(timer);
        if (call === mine) metersUnavailable();
      },
    );
    return ctx;
  }

  function metersUnavailable() {
    state.meters = 'unavailable';
    showNotice('The level meters are off: this browser could not start audio processing (no audio output device?). The call works without them.');
  }

  /** An analyser of `stream` on `ctx`, or null when there is no context or it refuses. */
  function analyser(ctx, stream) {
    if (!ctx) return null;
    try {
      return analyserNode(ctx, stream);
    } catch (_) {
      return null;
    }
  }

  function analyserNode(ctx, stream) {
    const node = ctx.createAnalyser();
    node.fftSize = 8192;
    node.smoothingTimeConstant = 0.5;
    ctx.createMediaStreamSource(stream).connect(node);
    return node;
  }

  function levelDb(node, buf) {
    if (!node) return -Infinity;
    node.getFloatTimeDomainData(buf);
    let sum = 0;
    for (let i = 0; i < buf.length; i++) sum += buf[i] * buf[i];
    const rms = Math.sqrt(sum / buf.length);
    return rms > 0 ? 20 * Math.log10(rms) : -Infinity;
  }

  function drawMeter(el, db) {
    const pct = Number.isFinite(db) ? Math.max(0, Math.min(100, ((db + 60) / 60) * 100)) : 0;
    // The level is the full colour scale, clipped at the current level.
    el.firstElementChild.style.clipPath = `inset(0 ${(100 - pct).toFixed(0)}% 0 0)`;
    el.setAttribute('aria-valuenow', pct.toFixed(0));
  }

  function startMeters() {
    const buf = new Float32Array(2048);
    const tick = () => {
      if (!call) return;
      state.micLevelDb = state.muted ? -Infinity : levelDb(debug.micAnalyser, buf);
      state.roomLevelDb = levelDb(debug.remoteAnalyser, buf);
      drawMeter($('mic-meter'), state.micLevelDb);
      drawMeter($('room-meter'), state.roomLevelDb);
    };
    call.meterTimer = setInterval(tick, 50);
  }

  // ---- The call ------------------------------------------------------------

  async function join(ev) {
    ev.preventDefault();
    if (call) return;
    clearMessages();
    const room = $('room').value.trim();
    const name = $('name').value.trim();
    const token = $('token').value.trim();
    state.room = room;
    state.name = name;
    if (!/^[A-Za-z0-9_-]{1,64}$/.test(room)) {
      showError(new TuttiError('bad_room_id'));
      $('room').focus();
      return;
    }
    remember(room, name);
    call = {
      ws: null,
      pc: null,
      stream: null,
      ctx: null,
      meterTimer: 0,
      connectTimer: 0,
      ended: false,
      token,
      disconnectedTimer: 0,
      restartTimer: 0,
      lostAt: 0,
      restarting: false,
    };
    const mine = call;
    setPhase('joining');
    $('join').disabled = true;
    try {
      $('join').textContent = 'Checking the room…';
      await ensureRoom(room, token);
      $('join').textContent = 'Waiting for the microphone…';
      mine.stream = await microphone($('processing').checked);
      if (mine.ended) return;
      debug.stream = mine.stream;

      mine.ctx = startAudio(mine);
      debug.audioContext = mine.ctx;
      debug.micAnalyser = analyser(mine.ctx, mine.stream);

      const servers = await iceServers(room, token);
      if (mine.ended) return;
      state.iceServers = servers.length;
      const pc = new RTCPeerConnection({ bundlePolicy: 'max-bundle', rtcpMuxPolicy: 'require', iceServers: servers });
      mine.pc = pc;
      debug.pc = pc;
      for (const track of mine.stream.getAudioTracks()) pc.addTrack(track, mine.stream);
      pc.ontrack = (e) => onTrack(mine, e);
      pc.onconnectionstatechange = () => onConnectionState(mine);
      pc.oniceconnectionstatechange = () => onIceState(mine);

      $('join').textContent = 'Connecting…';
      await pc.setLocalDescription(await pc.createOffer());
      await gathered(pc);
      state.offerSdp = pc.localDescription.sdp;

      const { ws, snapshot } = await openSocket(room, token);
      mine.ws = ws;
      if (mine.ended) {
        ws.close();
        return;
      }
      applySnapshot(snapshot);
      const answer = await exchange(mine, { type: 'join', sdp: state.offerSdp, name });
      state.me = answer.id;
      // A lost socket (a network change) is taken over by a new one with this key.
      mine.room = room;
      mine.resumeKey = answer.resume || '';
      state.answerSdp = answer.sdp;
      await pc.setRemoteDescription({ type: 'answer', sdp: answer.sdp });
      mine.connectTimer = setTimeout(() => {
        if (call === mine && pc.connectionState !== 'connected') end(new TuttiError('ice_failed'));
      }, CONNECT_TIMEOUT_MS);
      enterCall();
    } catch (e) {
      if (call === mine) {
        teardown();
        setPhase('error');
        showError(e);
      }
    } finally {
      $('join').disabled = false;
      $('join').textContent = 'Join with microphone';
    }
  }

  /** Sends the join message and waits for its answer (or error); then the socket carries events. */
  function exchange(mine, message) {
    return new Promise((resolve, reject) => {
      const ws = mine.ws;
      const timer = setTimeout(() => reject(new TuttiError('timeout')), JOIN_TIMEOUT_MS);
      mine.pending = {
        resolve: (v) => {
          clearTimeout(timer);
          resolve(v);
        },
        reject: (e) => {
          clearTimeout(timer);
          reject(e);
        },
      };
      ws.onmessage = (ev) => onMessage(mine, parse(ev.data));
      ws.onclose = (ev) => socketLost(mine, ev);
      ws.send(JSON.stringify(message));
    });
  }

  /**
   * The room's socket closed under a call (a network change, a reset). The
   * server keeps the participant for a while (`limits.ws_resume_seconds`,
   * 10 s by default): open a new socket and `resume` it with the answer's
   * key, retrying every second for RESUME_WINDOW_MS; the media restarts
   * ICE on its own (onIceState). Refused or out of time: the call ends.
   */
  function socketLost(mine, ev) {
    const reason = closeReason(ev);
    if (mine.pending) {
      mine.pending.reject(new TuttiError(reason || 'socket_lost'));
      return;
    }
    if (call !== mine || mine.ended) return;
    // Closed on purpose (token expired, joined elsewhere): no resume.
    if (reason) {
      end(new TuttiError(reason));
      return;
    }
    if (!mine.resumeKey || state.me == null) {
      end(new TuttiError('socket_lost'));
      return;
    }
    const since = Date.now();
    state.socketResumes = (state.socketResumes || 0) + 1;
    const attempt = async () => {
      if (call !== mine || mine.ended) return;
      if (Date.now() - since > RESUME_WINDOW_MS) {
        end(new TuttiError('socket_lost'));
        return;
      }
      let ws;
      let snapshot;
      try {
        ({ ws, snapshot } = await openSocket(mine.room, mine.token));
      } catch (_) {
        setTimeout(attempt, 1000);
        return;
      }
      if (call !== mine || mine.ended) {
        ws.close();
        return;
      }
      ws.onmessage = (ev) => {
        const msg = parse(ev.data);
        if (msg && msg.type === 'resumed') {
          mine.ws = ws;
          applySnapshot(snapshot);
          ws.onmessage = (e) => onMessage(mine, parse(e.data));
          ws.onclose = (e) => socketLost(mine, e);
        } else if (msg && msg.type === 'error') {
          ws.onclose = null;
          ws.close();
          end(new TuttiError('socket_lost'));
        }
      };
      ws.onclose = () => setTimeout(attempt, 1000);
      ws.send(JSON.stringify({ type: 'resume', id: state.me, key: mine.resumeKey }));
    };
    attempt();
  }

  function onMessage(mine, msg) {
    if (!msg || call !== mine) return;
    if (msg.type === 'events') {
      // One tick's room events, in order.
      for (const e of Array.isArray(msg.events) ? msg.events : []) {
        onMessage(mine, e);
        if (call !== mine) return;
      }
      return;
    }
    switch (msg.type) {
      case 'room':
        applySnapshot(msg);
        break;
      case 'participants':
        // The rest of a big room's snapshot, right after `room`.
        for (const p of Array.isArray(msg.participants) ? msg.participants : []) {
          if (!state.participants.some((x) => x.id === p.id)) state.participants.push(member(p));
        }
        renderParticipants();
        break;
      case 'answer':
        if (mine.pending) {
          const p = mine.pending;
          mine.pending = null;
          p.resolve(msg);
        }
        break;
      case 'error':
        if (mine.pending) {
          const p = mine.pending;
          mine.pending = null;
          p.reject(new TuttiError(msg.code, msg.message));
        } else {
          showError(new TuttiError(msg.code, msg.message));
        }
        break;
      case 'joined':
        if (!state.participants.some((p) => p.id === msg.id)) {
          state.participants.push(member({ id: msg.id, name: msg.name }));
        }
        break;
      case 'left':
        state.participants = state.participants.filter((p) => p.id !== msg.id);
        // Our own leave tears the call down before its event arrives: a
        // `left` about us means the server (or an operator) ended it.
        if (msg.id === state.me) end(new TuttiError(msg.reason === 'left' ? 'removed' : msg.reason));
        break;
      case 'talking':
        update(msg.id, { talking: !!msg.talking });
        break;
      case 'muted':
        update(msg.id, { muted: !!msg.muted });
        if (msg.id === state.me) applyMute(!!msg.muted);
        break;
      case 'hand':
        update(msg.id, { hand: !!msg.raised });
        break;
      case 'permissions':
        update(msg.id, { listenOnly: !msg.speak });
        break;
      case 'room_updated':
        state.locked = !!msg.locked;
        renderStage();
        break;
      case 'muted_all':
        if (!state.admin) showNotice('A moderator muted everyone.');
        break;
      case 'room_closed':
        end(new TuttiError('room_closed'));
        return;
      case 'shutdown':
        end(new TuttiError('shutdown'));
        return;
      case 'token_expiring':
        onTokenExpiring(msg);
        return;
      case 'draining':
        showNotice('The server is restarting. Your call goes on; it may move to another server.');
        return;
      case 'moved':
        onMoved(mine, msg);
        return;
      default:
        return;
    }
    renderParticipants();
  }

  function member(p) {
    return {
      id: p.id,
      name: p.name || `participant ${p.id}`,
      talking: !!p.talking,
      muted: !!p.muted,
      you: p.id === state.me,
      hand: !!p.hand,
      listenOnly: !!p.listen_only,
    };
  }

  function applySnapshot(msg) {
    state.participants = (msg.participants || []).map(member);
    state.admin = !!msg.admin;
    state.locked = !!msg.locked;
    renderParticipants();
  }

  function update(id, fields) {
    const p = state.participants.find((x) => x.id === id);
    if (p) Object.assign(p, fields);
  }

  function onTrack(mine, e) {
    if (call !== mine) return;
    const stream = e.streams && e.streams[0] ? e.streams[0] : new MediaStream([e.track]);
    // Chromium feeds a remote track into WebAudio only while a media
    // element plays it; the element is also what the person hears.
    const audio = $('remote');
    audio.srcObject = stream;
    audio.play().catch(() => {});
    debug.remoteAnalyser = analyser(mine.ctx, stream);
  }

  function onConnectionState(mine) {
    if (call !== mine) return;
    const s = mine.pc.connectionState;
    state.connection = s;
    if (s === 'connected') {
      clearTimeout(mine.connectTimer);
      clearTimeout(mine.restartTimer);
      mine.lostAt = 0;
      setStatus('Connected');
    } else if (s === 'connecting') {
      setStatus(mine.lostAt ? 'Reconnecting…' : 'Connecting…');
    } else if (s === 'disconnected') {
      setStatus('Connection interrupted, reconnecting…');
    } else if (s === 'failed') {
      onIceState(mine);
    }
  }

  /**
   * ICE `disconnected` for DISCONNECTED_WAIT_MS, or `failed`: restart ICE.
   * Before the first answer arrives there is nothing to restart (the
   * connect timeout covers that).
   */
  function onIceState(mine) {
    if (call !== mine || !mine.pc || state.me === null || state.phase !== 'in-call') return;
    const s = mine.pc.iceConnectionState;
    if (s === 'connected' || s === 'completed') {
      clearTimeout(mine.disconnectedTimer);
      mine.disconnectedTimer = 0;
      return;
    }
    if (s === 'disconnected' && !mine.disconnectedTimer) {
      mine.disconnectedTimer = setTimeout(() => {
        mine.disconnectedTimer = 0;
        const now = mine.pc && mine.pc.iceConnectionState;
        if (call === mine && (now === 'disconnected' || now === 'failed')) restartIce(mine);
      }, DISCONNECTED_WAIT_MS);
    } else if (s === 'failed') {
      clearTimeout(mine.disconnectedTimer);
      mine.disconnectedTimer = 0;
      restartIce(mine);
    }
  }

  /**
   * One ICE restart: a new offer (new ICE credentials) to the server for our
   * participant; its answer. Failed attempts are retried until
   * RESTART_GRACE_MS after the connection dropped; a refusal (the server
   * does not know us, or cannot restart) ends the call at once.
   */
  async function restartIce(mine) {
    if (call !== mine || mine.restarting) return;
    if (!mine.lostAt) mine.lostAt = Date.now();
    if (Date.now() - mine.lostAt > RESTART_GRACE_MS) {
      end(new TuttiError('ice_lost'));
      return;
    }
    mine.restarting = true;
    clearTimeout(mine.restartTimer);
    setStatus('Connection lost, reconnecting…');
    const attempt = { at: Date.now() - mine.lostAt, status: 0, code: '' };
    state.iceRestarts.push(attempt);
    let retry = true;
    try {
      const pc = mine.pc;
      await pc.setLocalDescription(await pc.createOffer({ iceRestart: true }));
      await gathered(pc);
      if (call !== mine) return;
      const url = apiUrl(`v1/rooms/${encodeURIComponent(state.room)}/participants/${state.me}`);
      const r = await send(url, {
        method: 'PATCH',
        headers: authHeaders(mine.token, { 'Content-Type': 'application/sdp' }),
        body: pc.localDescription.sdp,
      });
      attempt.status = r.status;
      if (call !== mine) return;
      if (r.status === 200) {
        const sdp = await r.text();
        await pc.setRemoteDescription({ type: 'answer', sdp });
        state.answerSdp = sdp;
        attempt.code = 'answered';
        retry = false;
      } else {
        const err = await errorOf(r);
        attempt.code = err.code;
        // The server no longer knows us, or will not let us: final. Anything
        // else (busy, briefly unavailable, not ready) is tried again.
        if (r.status === 401 || r.status === 403 || r.status === 404) {
          retry = false;
          end(new TuttiError('restart_refused', err.message || err.code, r.status));
          return;
        }
      }
    } catch (e) {
      attempt.code = (e && e.code) || 'error';
      // Our offer is still pending if the answer never came: roll back for the next try.
      try {
        if (call === mine && mine.pc.signalingState === 'have-local-offer') {
          await mine.pc.setLocalDescription({ type: 'rollback' });
        }
      } catch (_) {
        // nothing to roll back
      }
    } finally {
      mine.restarting = false;
    }
    if (call !== mine) return;
    // Until connected again (which clears the timer), keep trying within the grace period.
    const left = RESTART_GRACE_MS - (Date.now() - mine.lostAt);
    mine.restartTimer = setTimeout(
      () => {
        if (call !== mine) return;
        const s = mine.pc.iceConnectionState;
        if (s === 'connected' || s === 'completed') {
          mine.lostAt = 0;
          return;
        }
        if (Date.now() - mine.lostAt > RESTART_GRACE_MS) end(new TuttiError('ice_lost'));
        else restartIce(mine);
      },
      Math.max(0, retry ? Math.min(RESTART_RETRY_MS, left) : Math.min(RESTART_GRACE_MS, left)),
    );
  }

  function enterCall() {
    setPhase('in-call');
    $('room-title').textContent = state.room;
    resetInvite();
    state.participants.forEach((p) => {
      p.you = p.id === state.me;
    });
    applyMute(false);
    restoreAfterMove();
    setStatus(state.connection === 'connected' ? 'Connected' : 'Connecting…');
    startMeters();
    renderParticipants();
  }

  /** After a move (a drain): muted and hand as they were on the old node. */
  function restoreAfterMove() {
    const restore = state.restore;
    state.restore = null;
    if (!restore || !call || !call.ws || call.ws.readyState !== WebSocket.OPEN) return;
    if (restore.muted) toggleMute();
    if (restore.hand) call.ws.send(JSON.stringify({ type: 'hand', raised: true }));
  }

  function applyMute(muted) {
    state.muted = muted;
    if (call && call.stream) {
      for (const t of call.stream.getAudioTracks()) t.enabled = !muted;
    }
    const b = $('mute');
    b.textContent = muted ? 'Unmute' : 'Mute';
    b.setAttribute('aria-pressed', String(muted));
    b.classList.toggle('active', muted);
    $('mic-label').textContent = muted ? 'Your microphone (muted)' : 'Your microphone';
    document.body.classList.toggle('muted', muted);
  }

  function toggleMute() {
    if (!call || !call.ws || state.phase !== 'in-call') return;
    const muted = !state.muted;
    applyMute(muted);
    update(state.me, { muted });
    renderParticipants();
    if (call.ws.readyState === WebSocket.OPEN) call.ws.send(JSON.stringify({ type: 'mute', muted }));
  }

  // ---- The stage: hands, and the moderator's controls -----------------------

  function me() {
    return state.participants.find((p) => p.id === state.me);
  }

  function toggleHand() {
    const self = me();
    if (!call || !call.ws || !self || call.ws.readyState !== WebSocket.OPEN) return;
    call.ws.send(JSON.stringify({ type: 'hand', raised: !self.hand }));
  }

  /** A moderator's REST call on the room; a refusal is shown, the call goes on. */
  async function stageRequest(method, path, body) {
    if (!call) return;
    const headers = authHeaders(call.token, body ? { 'Content-Type': 'application/json' } : {});
    const options = { method, headers };
    if (body) options.body = JSON.stringify(body);
    try {
      const r = await send(apiUrl(`v1/rooms/${encodeURIComponent(state.room)}${path}`), options);
      if (!r.ok) showError(await errorOf(r));
    } catch (e) {
      showError(e);
    }
  }

  /** What a moderator's button on a participant does (`data-action`). */
  function onParticipantAction(ev) {
    const button = ev.target.closest('button[data-action]');
    if (!button || !state.admin) return;
    const id = Number(button.closest('li').dataset.id);
    const path = `/participants/${id}`;
    switch (button.dataset.action) {
      case 'grant':
        stageRequest('PATCH', path, { speak: true });
        break;
      case 'revoke':
        stageRequest('PATCH', path, { speak: false });
        break;
      case 'lower':
        if (call && call.ws && call.ws.readyState === WebSocket.OPEN) {
          call.ws.send(JSON.stringify({ type: 'hand', raised: false, id }));
        }
        break;
      case 'kick':
        stageRequest('DELETE', path);
        break;
      case 'ban':
        stageRequest('DELETE', `${path}?ban_seconds=3600`);
        break;
      default:
    }
  }

  function participantActions(p) {
    const box = document.createElement('span');
    box.className = 'pactions';
    const add = (action, text) => {
      const b = document.createElement('button');
      b.type = 'button';
      b.dataset.action = action;
      b.textContent = text;
      box.append(b);
    };
    if (p.listenOnly) add('grant', 'Let speak');
    else if (!p.you) add('revoke', 'Make listener');
    if (p.hand) add('lower', 'Lower hand');
    if (!p.you) {
      add('kick', 'Remove');
      add('ban', 'Ban 1 h');
    }
    return box;
  }

  /** The hand button, the listener's mute button and the moderator's bar. */
  function renderStage() {
    const self = me();
    const hand = !!(self && self.hand);
    $('hand').textContent = hand ? 'Lower hand' : 'Raise hand';
    $('hand').setAttribute('aria-pressed', String(hand));
    $('hand').classList.toggle('active', hand);
    const listenOnly = !!(self && self.listenOnly);
    $('mute').disabled = listenOnly;
    if (listenOnly) $('mute').textContent = 'Listening only';
    else $('mute').textContent = state.muted ? 'Unmute' : 'Mute';
    $('admin-bar').hidden = !state.admin;
    $('invite-box').hidden = !state.admin;
    $('lock').textContent = state.locked ? 'Unlock room' : 'Lock room';
    $('lock').setAttribute('aria-pressed', String(state.locked));
    $('lock').classList.toggle('active', state.locked);
  }

  // ---- Invites: a moderator copies a link with a guest's token --------------

  function resetInvite() {
    state.invite = null;
    $('invite-link').hidden = true;
    $('invite-link').value = '';
    $('invite-status').textContent = '';
  }

  /** The page's link for `room`, with `token` (if any) in the fragment. */
  function pageLink(room, token) {
    const url = new URL(document.baseURI);
    url.search = '';
    url.hash = '';
    url.searchParams.set('room', room);
    if (token) url.hash = new URLSearchParams({ token }).toString();
    return url.href;
  }

  /**
   * Asks the server for a guest token for this room (POST …/invites), shows
   * the link and copies it. The link is built on this page's own address
   * (right behind a proxy too); the server's `url` is for other clients.
   */
  async function invite() {
    if (!call || !state.admin) return;
    const permissions = $('invite-permissions').value === 'listen' ? 'listen' : 'speak';
    const ttl = Number($('invite-ttl').value) || 3600;
    $('invite').disabled = true;
    try {
      const r = await send(apiUrl(`v1/rooms/${encodeURIComponent(state.room)}/invites`), {
        method: 'POST',
        headers: authHeaders(call.token, { 'Content-Type': 'application/json' }),
        body: JSON.stringify({ permissions, ttl_seconds: ttl }),
      });
      if (!r.ok) throw await errorOf(r);
      const body = await r.json();
      const url = pageLink(state.room, body.token || '');
      state.invite = { url, permissions, expiresAt: body.expires_at || null, copied: false };
      const field = $('invite-link');
      field.value = url;
      field.hidden = false;
      state.invite.copied = await copyText(url, field);
      const until = body.expires_at
        ? ` The guest can join, and stay, until ${new Date(body.expires_at * 1000).toLocaleString([], { weekday: 'short', hour: '2-digit', minute: '2-digit' })}.`
        : '';
      const what = permissions === 'listen' ? 'listen' : 'speak and listen';
      // One link, one guest identity: a second person on the same link takes the first one's place.
      $('invite-status').textContent = `${state.invite.copied ? 'Link copied' : 'Copy this link'}: it lets one guest ${what} in “${state.room}” (make a new link for each guest).${until}`;
    } catch (e) {
      showError(e);
    } finally {
      $('invite').disabled = false;
    }
  }

  /** Copies `text` to the clipboard; where that is refused, selects it in `field` for the person to copy. */
  async function copyText(text, field) {
    try {
      if (navigator.clipboard && navigator.clipboard.writeText) {
        await navigator.clipboard.writeText(text);
        return true;
      }
    } catch (_) {
      // no clipboard permission (an unfocused or headless page): select it instead
    }
    field.focus();
    field.select();
    return false;
  }

  function leave() {
    if (!call) return;
    if (call.ws && call.ws.readyState === WebSocket.OPEN) call.ws.send(JSON.stringify({ type: 'leave' }));
    teardown();
    setPhase('left');
    showNotice(`You left “${state.room}”.`);
  }

  /** Ends the call for a reason the server or the network gave. */
  function end(err) {
    if (!call) return;
    teardown();
    setPhase('error');
    showError(err);
  }

  function teardown() {
    const c = call;
    call = null;
    if (!c) return;
    c.ended = true;
    clearInterval(c.meterTimer);
    clearTimeout(c.connectTimer);
    clearTimeout(c.disconnectedTimer);
    clearTimeout(c.restartTimer);
    if (c.pending) c.pending.reject(new TuttiError('socket_lost'));
    if (c.ws) {
      c.ws.onclose = null;
      c.ws.onmessage = null;
      c.ws.close(1000);
    }
    if (c.pc) c.pc.close();
    if (c.stream) c.stream.getTracks().forEach((t) => t.stop());
    if (c.ctx) c.ctx.close().catch(() => {});
    $('remote').srcObject = null;
    Object.assign(debug, { pc: null, audioContext: null, micAnalyser: null, remoteAnalyser: null, stream: null });
    state.me = null;
    state.muted = false;
    state.participants = [];
    state.admin = false;
    state.locked = false;
    state.connection = 'closed';
    state.micLevelDb = -Infinity;
    state.roomLevelDb = -Infinity;
    state.meters = 'off';
    document.body.classList.remove('muted');
  }

  function setPhase(phase) {
    state.phase = phase;
    const inCall = phase === 'in-call';
    $('join-view').hidden = inCall;
    $('call-view').hidden = !inCall;
    document.body.dataset.phase = phase;
  }

  // ---- Rendering -----------------------------------------------------------

  function renderParticipants() {
    const list = $('participants');
    const people = state.participants.slice().sort((a, b) => (b.you - a.you) || (a.id - b.id));
    list.replaceChildren(
      ...people.map((p) => {
        const li = document.createElement('li');
        li.className = 'participant';
        li.dataset.id = String(p.id);
        li.classList.toggle('you', p.you);
        li.classList.toggle('talking', p.talking && !p.muted);
        li.classList.toggle('muted', p.muted);
        const avatar = document.createElement('span');
        avatar.className = 'avatar';
        avatar.textContent = (p.name.trim()[0] || '?').toUpperCase();
        avatar.setAttribute('aria-hidden', 'true');
        const name = document.createElement('span');
        name.className = 'pname';
        name.textContent = p.name;
        li.append(avatar, name);
        if (p.you) li.append(tag('you', 'you'));
        if (p.hand) li.append(tag('hand', 'hand raised'));
        if (p.listenOnly) li.append(tag('listener', 'listener'));
        else if (p.muted) li.append(tag('muted', 'muted'));
        else if (p.talking) li.append(tag('talking', 'talking'));
        if (state.admin) li.append(participantActions(p));
        return li;
      }),
    );
    const n = state.participants.length;
    $('count').textContent = n === 1 ? 'In the room: just you' : `In the room: ${n} people`;
    renderStage();
  }

  function tag(cls, text) {
    const s = document.createElement('span');
    s.className = `tag ${cls}`;
    s.textContent = text;
    return s;
  }

  // ---- Start ---------------------------------------------------------------

  function remember(room, name) {
    try {
      localStorage.setItem('tutti.name', name);
    } catch (_) {
      // storage may be off; nothing to remember then
    }
    const url = new URL(location.href);
    url.searchParams.set('room', room);
    if (name) url.searchParams.set('name', name);
    // A token never goes in the query (the server would see it); one typed in stays out of the address bar.
    url.searchParams.delete('token');
    history.replaceState(null, '', url);
  }

  function init() {
    const params = new URLSearchParams(location.search);
    let savedName = '';
    try {
      savedName = localStorage.getItem('tutti.name') || '';
    } catch (_) {
      // storage may be off
    }
    $('room').value = params.get('room') || '';
    $('name').value = params.get('name') || savedName;
    const token = linkToken();
    if (token) $('token').value = token;
    if (params.get('processing') === '0') {
      $('processing').checked = false;
      $('more').open = true;
    }
    $('join-form').addEventListener('submit', join);
    $('mute').addEventListener('click', toggleMute);
    $('leave').addEventListener('click', leave);
    $('hand').addEventListener('click', toggleHand);
    $('participants').addEventListener('click', onParticipantAction);
    $('mute-all').addEventListener('click', () => stageRequest('PATCH', '', { mute_all: true }));
    $('lock').addEventListener('click', () => stageRequest('PATCH', '', { locked: !state.locked }));
    $('invite').addEventListener('click', invite);
    window.addEventListener('hashchange', onHashChange);
    window.addEventListener('pagehide', () => {
      if (call) leave();
    });
    if ($('room').value) $('name').focus();
    else $('room').focus();
    setPhase('idle');
    checkAccess($('room').value.trim(), token);
    if (params.get('autojoin') === '1' && $('room').value && token) {
      // Moved here by a drain: join at once, as the call was.
      state.restore = { muted: params.get('muted') === '1', hand: params.get('hand') === '1' };
      const url = new URL(location.href);
      for (const key of ['autojoin', 'muted', 'hand']) url.searchParams.delete(key);
      history.replaceState(null, '', url);
      $('join-form').requestSubmit();
    }
  }

  init();
})();
