// tutti's browser client: join a room with one audio track, hear the
// room's mix, see who is there and who is talking, and, as its moderator,
// run it. The connection (REST, the room's WebSocket, WebRTC, ICE restart,
// socket resume, `moved` hand-overs) is the client SDK's, `tutti.js`
// (sdk/js in the repository, served at `/tutti.js`); this script is the
// page around it: the form, the sentences, the meters, the controls.
//
// The level meters (WebAudio) never hold up the call: when the browser
// cannot start an AudioContext (no audio output device, a headless
// browser), the call goes on without meters and the page says so.
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
// (plain data) and its WebRTC and WebAudio objects in `window.tuttiDebug`
// (`room` is the SDK's Room of the call).
import { Api, DEFAULT_TIMINGS, Room, TuttiError, enterUrl, validRoomId } from './tutti.js';

const $ = (id) => document.getElementById(id);

/** Everything the page shows, as plain data. */
const state = {
  phase: 'idle', // idle | joining | in-call | left | error
  room: '',
  name: '',
  me: null, // our participant id
  muted: false,
  participants: [], // [{id, name, talking, muted, you, hand, listenOnly, …}]
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
  socketResumes: 0, // how many times the room's socket was lost and taken over
  access: 'unknown', // unknown | ok | token_missing | token_invalid | token_expired | wrong_room: the pre-join check
  invite: null, // {url, permissions, expiresAt, copied}: the last invite link made
  restore: null, // {muted, hand}: after a move, as the call was
  chat: [], // [{from, name, text} | {from, name, emoji}]: the chat and reactions seen in this call, last CHAT_KEPT
  waiting: false, // the room waits for its moderator: held muted, with the hold music
};
window.tuttiState = state;
const debug = { room: null, pc: null, audioContext: null, micAnalyser: null, remoteAnalyser: null, stream: null };
window.tuttiDebug = debug;

/** The current call: the SDK's Room and the page's own resources, or null. */
let call = null;

/** Chat lines (and reactions) the page keeps. */
const CHAT_KEPT = 100;

/** How long the AudioContext may take to start before the meters are given up. */
const AUDIO_START_MS = 2000;
/** How long after the connection dropped the SDK keeps trying to restore it. */
const RESTART_GRACE_MS = DEFAULT_TIMINGS.restartGraceMs;

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

function showError(err) {
  state.error = { code: (err && err.code) || 'error', text: explain(err) };
  const el = $('error');
  el.textContent = state.error.text;
  el.hidden = false;
  // One message at a time: a notice from before (e.g. "your call goes on")
  // must not contradict the error.
  state.notice = '';
  $('notice').hidden = true;
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


// ---- Access: the pre-join check ---------------------------------------------

/**
 * Before anyone clicks: asks the server about the room with the page's
 * token (or none), so a token problem is told at once. With auth off, or a
 * good token, nothing is shown.
 */
async function checkAccess(room, token) {
  const { access, error } = await new Api(document.baseURI, token).checkAccess(room);
  state.access = access;
  if (access !== 'ok' && state.phase === 'idle') {
    state.room = room;
    showError(error);
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

/** `token_expiring`: the server will close the socket when the token expires. */
function onTokenExpiring(expiresAt) {
  const at = Number(expiresAt) * 1000;
  const when = Number.isFinite(at) ? new Date(at).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' }) : 'soon';
  showNotice(`Your access token expires at ${when}: the call will end then. Ask the room’s host for a new link.`);
}

// ---- Moving with the room (a cluster) --------------------------------------

/**
 * Cluster mode: the room is on another node (a socket opened on the wrong
 * node), or went there (a drain), or our node was lost and the room goes
 * on there (the SDK found it). Goes there with the message's single-use
 * ticket, never with our token: that node burns it and sends us to its
 * page with a token for this room. Without a ticket, our token goes in
 * the fragment (never sent to a server). `extra`: more of the page's
 * query to carry (`autojoin`, `muted`, `hand` after a drain).
 */
function followMoved(moved, extra) {
  const here = new URLSearchParams(location.search);
  const params = {};
  for (const key of ['name', 'processing', 'stereo']) if (here.get(key)) params[key] = here.get(key);
  if (!here.get('name') && state.name) params.name = state.name;
  Object.assign(params, extra);
  // Without a ticket the page goes straight to the node's page: its socket names the node.
  if (!moved.ticket && moved.node) params.node = moved.node;
  const there = enterUrl(moved, params, location.pathname);
  // No ticket (our node was lost, or auth is off): our token is good on every node of the cluster.
  const token = $('token').value.trim();
  if (!moved.ticket && token) there.hash = new URLSearchParams({ token }).toString();
  location.assign(there.href);
}

/**
 * A drain in a cluster: the room went to another node mid-call. The page
 * leaves here and joins there at once, as it was (muted or not, its hand).
 */
function onMoved(moved) {
  if (!call || state.phase !== 'in-call') return;
  const self = call.room.me;
  const extra = { autojoin: '1' };
  if (state.muted) extra.muted = '1';
  if (self && self.hand) extra.hand = '1';
  showNotice(moved.reason === 'lost'
    ? 'Your server stopped answering: moving your call to another server…'
    : 'The server is restarting: moving your call to another server…');
  leave();
  followMoved(moved, extra);
}

/**
 * A breakout: a moderator moved us to another room of this server. The
 * call goes on (same connection); the page shows the new room, and its
 * address names it, so a reload lands there.
 */
function onRoomChanged(to, from) {
  state.room = to;
  $('room').value = to;
  const url = new URL(location.href);
  url.searchParams.set('room', to);
  history.replaceState(null, '', url);
  $('room-title').textContent = to;
  resetInvite();
  showNotice(`A moderator moved you from “${from}” to “${to}”.`);
  if (call) sync(call.room);
}

// ---- Meters -----------------------------------------------------------------

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
    const node = ctx.createAnalyser();
    node.fftSize = 8192;
    node.smoothingTimeConstant = 0.5;
    ctx.createMediaStreamSource(stream).connect(node);
    return node;
  } catch (_) {
    return null;
  }
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

// ---- The call ----------------------------------------------------------------

const JOIN_STEPS = { room: 'Checking the room…', microphone: 'Waiting for the microphone…', connecting: 'Connecting…' };

async function join(ev) {
  ev.preventDefault();
  if (call) return;
  clearMessages();
  const roomId = $('room').value.trim();
  const name = $('name').value.trim();
  const token = $('token').value.trim();
  state.room = roomId;
  state.name = name;
  if (!validRoomId(roomId)) {
    showError(new TuttiError('bad_room_id'));
    $('room').focus();
    return;
  }
  remember(roomId, name);
  const restore = state.restore || {};
  state.restore = null;
  const room = new Room({
    room: roomId,
    name,
    token,
    processing: $('processing').checked,
    stereo: $('stereo').checked,
    muted: !!restore.muted,
    hand: !!restore.hand,
    // In a cluster: the node a hand-over sent this page to (its socket names it).
    node: new URLSearchParams(location.search).get('node') || undefined,
  });
  const mine = { room, ctx: null, meterTimer: 0 };
  call = mine;
  debug.room = room;
  state.iceRestarts = room.iceRestarts;
  state.socketResumes = 0;
  room.on('progress', (step) => {
    $('join').textContent = JOIN_STEPS[step] || 'Connecting…';
    if (step === 'connecting') {
      debug.pc = room.pc;
      state.iceServers = room.iceServers.length;
    }
  });
  room.on('stream', (stream) => {
    debug.stream = stream;
    mine.ctx = startAudio(mine);
    debug.audioContext = mine.ctx;
    debug.micAnalyser = analyser(mine.ctx, stream);
  });
  room.on('track', (stream) => {
    if (call !== mine) return;
    // Chromium feeds a remote track into WebAudio only while a media
    // element plays it; the element is also what the person hears.
    const audio = $('remote');
    audio.srcObject = stream;
    audio.play().catch(() => {});
    debug.remoteAnalyser = analyser(mine.ctx, stream);
  });
  room.on('change', () => {
    if (call === mine) sync(room);
  });
  room.on('connection', (s) => {
    if (call !== mine) return;
    if (s === 'connected') setStatus('Connected');
    else if (s === 'connecting') setStatus(room.reconnecting ? 'Reconnecting…' : 'Connecting…');
    else if (s === 'disconnected') setStatus('Connection interrupted, reconnecting…');
  });
  room.on('iceRestart', (attempt) => {
    if (call === mine && attempt.status === 0) setStatus('Connection lost, reconnecting…');
  });
  room.on('socketLost', () => {
    state.socketResumes = room.socketResumes;
  });
  room.on('serverError', (err) => {
    if (call === mine) showError(err);
  });
  room.on('data', ({ from, topic, payload }) => {
    if (call !== mine) return;
    const name = from ? from.name : 'the room';
    if (topic === 'chat' && typeof payload === 'string') addChat({ from: from && from.id, name, text: payload });
    else if (topic === 'reaction' && payload && typeof payload.emoji === 'string') {
      addChat({ from: from && from.id, name, emoji: payload.emoji.slice(0, 8) });
    }
  });
  room.on('waiting', ({ waiting }) => {
    if (call !== mine) return;
    state.waiting = waiting;
    if (waiting && !state.admin) showNotice('Waiting for the moderator: you are muted until they join.');
    else if (!waiting && !state.admin) showNotice('The moderator is here.');
  });
  room.on('mutedAll', () => {
    state.mutedAllAt = Date.now();
    if (!state.admin) showNotice('A moderator muted everyone.');
  });
  room.on('tokenExpiring', ({ expiresAt }) => onTokenExpiring(expiresAt));
  room.on('draining', () => {
    if (call === mine) showNotice('The server is restarting. Your call goes on; it may move to another server.');
  });
  room.on('moved', (moved) => onMoved(moved));
  room.on('roomChanged', ({ room: to, from }) => {
    if (call === mine) onRoomChanged(to, from);
  });
  room.on('ended', (err) => {
    if (call !== mine || !err) return;
    teardown();
    setPhase('error');
    showError(err);
  });

  setPhase('joining');
  $('join').disabled = true;
  try {
    await room.join();
    if (call !== mine) return;
    state.offerSdp = room.offerSdp;
    state.answerSdp = room.answerSdp;
    enterCall();
  } catch (e) {
    if (e && e.code === 'moved' && e.moved) {
      // The room is on another node: the person pressed Join, join there at once.
      teardown();
      followMoved(e.moved, { autojoin: '1' });
      return;
    }
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

/** The SDK's state into the page's. */
function sync(room) {
  // Muted by someone else (a moderator), not by this page's button nor by a
  // mute-all (told on its own): say so, or the person talks to nobody.
  const mutedByOther = state.phase === 'in-call' && !state.muted && room.muted
    && Date.now() - (state.selfMuteAt || 0) > 2000 && Date.now() - (state.mutedAllAt || 0) > 2000;
  state.me = room.id;
  state.muted = room.muted;
  state.admin = room.admin;
  state.locked = room.locked;
  const nowWaiting = room.waiting && !room.admin;
  const startsWaiting = nowWaiting && !state.waiting && state.phase === 'in-call';
  state.waiting = room.waiting;
  state.connection = room.connectionState;
  state.answerSdp = room.answerSdp;
  state.socketResumes = room.socketResumes;
  state.participants = room.participants.map((p) => Object.assign({}, p));
  if (state.phase === 'in-call') {
    applyMute(room.muted);
    renderParticipants();
  }
  if (startsWaiting) showNotice('Waiting for the moderator: you are muted until they join.');
  else if (mutedByOther && !nowWaiting) showNotice('A moderator muted you. Unmute when you want to speak.');
}

function enterCall() {
  setPhase('in-call');
  $('room-title').textContent = state.room;
  resetInvite();
  sync(call.room);
  setStatus(state.connection === 'connected' ? 'Connected' : 'Connecting…');
  startMeters();
}

function applyMute(muted) {
  state.muted = muted;
  const b = $('mute');
  b.textContent = muted ? 'Unmute' : 'Mute';
  b.setAttribute('aria-pressed', String(muted));
  b.classList.toggle('active', muted);
  $('mic-label').textContent = muted ? 'Your microphone (muted)' : 'Your microphone';
  document.body.classList.toggle('muted', muted);
}

function toggleMute() {
  if (!call || state.phase !== 'in-call') return;
  state.selfMuteAt = Date.now();
  call.room.setMuted(!call.room.muted);
}

// ---- The stage: hands, and the moderator's controls -----------------------

function me() {
  return state.participants.find((p) => p.id === state.me);
}

function toggleHand() {
  const self = me();
  if (!call || !self) return;
  call.room.setHand(!self.hand);
}

/** What a moderator's button on a participant does (`data-action`). */
function onParticipantAction(ev) {
  const button = ev.target.closest('button[data-action]');
  if (!button || !state.admin || !call) return;
  const id = Number(button.closest('li').dataset.id);
  const room = call.room;
  switch (button.dataset.action) {
    case 'grant':
      room.setSpeak(id, true);
      break;
    case 'revoke':
      room.setSpeak(id, false);
      break;
    case 'lower':
      room.setHand(false, id);
      break;
    case 'kick':
      room.kick(id);
      break;
    case 'ban':
      room.kick(id, 3600);
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
 * Asks the server for a guest token for this room (the SDK's `invite`:
 * POST …/invites), shows the link and copies it. The link is built on
 * this page's own address (right behind a proxy too); the server's `url`
 * is for other clients.
 */
async function invite() {
  if (!call || !state.admin) return;
  const permissions = $('invite-permissions').value === 'listen' ? 'listen' : 'speak';
  const ttl = Number($('invite-ttl').value) || 3600;
  $('invite').disabled = true;
  try {
    const made = await call.room.invite(permissions, ttl);
    const url = pageLink(state.room, made.token);
    state.invite = { url, permissions, expiresAt: made.expiresAt, copied: false };
    const field = $('invite-link');
    field.value = url;
    field.hidden = false;
    state.invite.copied = await copyText(url, field);
    const until = made.expiresAt
      ? ` The guest can join, and stay, until ${new Date(made.expiresAt * 1000).toLocaleString([], { weekday: 'short', hour: '2-digit', minute: '2-digit' })}.`
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
  const room = call.room;
  teardown();
  room.leave();
  setPhase('left');
  showNotice(`You left “${state.room}”.`);
}

/** The page's side of the end of a call (the SDK's Room has ended, or is told to). */
function teardown() {
  const c = call;
  call = null;
  if (!c) return;
  clearInterval(c.meterTimer);
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
  state.chat = [];
  $('chat-log').replaceChildren();
  document.body.classList.remove('muted');
}

// ---- Chat and reactions (data messages: best effort, never stored) --------

/** Shows a chat line or a reaction, the newest last. */
function addChat(entry) {
  state.chat.push(entry);
  if (state.chat.length > CHAT_KEPT) state.chat.shift();
  const li = document.createElement('li');
  li.className = entry.emoji ? 'chat-line reaction-line' : 'chat-line';
  const who = document.createElement('span');
  who.className = 'chat-name';
  who.textContent = entry.name;
  li.append(who, document.createTextNode(entry.emoji ? ` ${entry.emoji}` : `: ${entry.text}`));
  const log = $('chat-log');
  log.append(li);
  while (log.children.length > CHAT_KEPT) log.firstElementChild.remove();
  log.scrollTop = log.scrollHeight;
}

function sendChat(ev) {
  ev.preventDefault();
  const input = $('chat-input');
  const text = input.value.trim();
  if (!call || !text) return;
  if (call.room.sendData('chat', text)) {
    addChat({ from: state.me, name: 'You', text });
    input.value = '';
  }
}

function sendReaction(ev) {
  const button = ev.target.closest('button[data-emoji]');
  if (!call || !button) return;
  if (call.room.sendData('reaction', { emoji: button.dataset.emoji })) {
    addChat({ from: state.me, name: 'You', emoji: button.dataset.emoji });
  }
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
  list.replaceChildren(
    ...state.participants.map((p) => {
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
      const seat = seatName(p);
      if (seat && p.talking && !p.muted) li.append(tag('seat', seat));
      if (state.admin) li.append(participantActions(p));
      return li;
    }),
  );
  const n = state.participants.length;
  $('count').textContent = n === 1 ? 'In the room: just you' : `In the room: ${n} people`;
  renderStage();
}

// Where a speaker sits in a spatial room (its `tutti.seat` attribute, -4 to 4).
function seatName(p) {
  const raw = p.attributes && p.attributes['tutti.seat'];
  if (raw === undefined || raw === null || raw === '') return '';
  const seat = Number(raw);
  if (!Number.isInteger(seat)) return '';
  if (seat === 0) return 'in the middle';
  const side = seat < 0 ? 'left' : 'right';
  return Math.abs(seat) >= 3 ? `far ${side}` : `on the ${side}`;
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
  if (params.get('stereo') === '0') {
    $('stereo').checked = false;
    $('more').open = true;
  }
  $('join-form').addEventListener('submit', join);
  $('mute').addEventListener('click', toggleMute);
  $('leave').addEventListener('click', leave);
  $('hand').addEventListener('click', toggleHand);
  $('participants').addEventListener('click', onParticipantAction);
  $('mute-all').addEventListener('click', () => call && call.room.muteAll());
  $('lock').addEventListener('click', () => call && call.room.setLocked(!state.locked));
  $('invite').addEventListener('click', invite);
  $('chat-form').addEventListener('submit', sendChat);
  document.querySelector('.reactions').addEventListener('click', sendReaction);
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
