// tutti-client: a typed browser client for tutti rooms, with no runtime
// dependencies. tutti is an MCU: a client sends one Opus track and
// receives one, the mix of everyone else, whatever the room's size.
//
// Flow of `Room.join()`: the room is checked (or created) over REST → the
// microphone → the room's ICE servers (`GET …/ice-servers`) → an
// RTCPeerConnection offer with every ICE candidate in it (the server is
// ICE-lite and does not trickle) → the room's WebSocket: its snapshot
// (`room`, then `participants` while `more` > 0), then `join` → `answer` →
// audio. Room events arrive on the same socket and become the `Room`'s
// state and typed events. With `transport: 'rest'` the participant is made
// WHIP-style (`POST …/participants`) and the socket only watches.
//
// What keeps a call up: ICE `disconnected` for a moment, or `failed`,
// restarts ICE (a new offer to `PATCH …/participants/{id}`, the answer in
// the 200's body) for up to `restartGraceMs`; a socket lost without a close
// frame is taken over by a new one with the join's resume key (`resume`)
// within `resumeWindowMs`. A `moved` (cluster hand-over) is an event: the
// app follows it to `enterUrl(moved)`, which a browser page opens.
//
//     import { Room } from './tutti.js';
//     const room = new Room({ room: 'demo', token, name: 'alice' });
//     room.on('track', (stream) => { audio.srcObject = stream; });
//     room.on('change', () => render(room.participants));
//     await room.join();
/** The WebSocket protocol version this client speaks (asked for at the upgrade). */
export const PROTOCOL = 1;
// ---- Errors -----------------------------------------------------------------
/**
 * A failure, with the server's stable error code where it gave one
 * (docs/api/errors.md), or one of the client's own: `network`, `timeout`,
 * `socket_refused`, `socket_lost`, `ice_failed`, `ice_lost`,
 * `restart_refused`, `mic_denied`, `mic_missing`, `mic_busy`, `insecure`,
 * `no_webrtc`, `bad_room_id`, `room_full`, `moved`, and the reasons a
 * call ends (`kicked`, `removed`, `timed_out`, `replaced`, `token_expired`,
 * `room_closed`, `shutdown`, …).
 */
export class TuttiError extends Error {
    constructor(code, message, status, moved) {
        super(message || code);
        this.name = 'TuttiError';
        this.code = code;
        this.status = status || 0;
        this.moved = moved || null;
    }
}
export const DEFAULT_TIMINGS = {
    joinTimeoutMs: 15000,
    gatherTimeoutMs: 3000,
    connectTimeoutMs: 15000,
    disconnectedWaitMs: 2000,
    restartGraceMs: 15000,
    restartRetryMs: 2000,
    resumeWindowMs: 9000,
    resumeRetryMs: 1000,
    nodeLostMs: 3000,
};
/** A minimal typed event emitter. */
export class Emitter {
    constructor() {
        this.listeners = {};
    }
    /** Calls `fn` on every `event`; returns the function that stops it. */
    on(event, fn) {
        let set = this.listeners[event];
        if (!set) {
            set = new Set();
            this.listeners[event] = set;
        }
        set.add(fn);
        return () => this.off(event, fn);
    }
    off(event, fn) {
        this.listeners[event]?.delete(fn);
    }
    emit(event, value) {
        const set = this.listeners[event];
        if (!set)
            return;
        for (const fn of Array.from(set)) {
            try {
                fn(value);
            }
            catch (e) {
                // A listener's bug must not break the call.
                setTimeout(() => {
                    throw e;
                });
            }
        }
    }
}
// ---- REST -------------------------------------------------------------------
const ROOM_ID = /^[A-Za-z0-9_-]{1,64}$/;
/** Whether `room` is a valid room id. */
export function validRoomId(room) {
    return ROOM_ID.test(room);
}
/** The server's base URL (ending in `/`). */
function baseOf(url) {
    const base = new URL(url ? String(url) : document.baseURI);
    if (!base.pathname.endsWith('/'))
        base.pathname += '/';
    base.search = '';
    base.hash = '';
    return base;
}
function headers(token, extra) {
    const h = { ...(extra || {}) };
    if (token)
        h.Authorization = `Bearer ${token}`;
    return h;
}
/** The server's JSON error of a response, as a TuttiError. */
export async function errorOf(response) {
    let body = {};
    try {
        body = await response.json();
    }
    catch (_) {
        // not JSON: the status says enough
    }
    return new TuttiError(body.code || `http_${response.status}`, body.message || response.statusText, response.status);
}
async function send(url, init) {
    try {
        return await fetch(url, { cache: 'no-store', ...(init || {}) });
    }
    catch (_) {
        throw new TuttiError('network', unreachable(url));
    }
}
/**
 * Why `url` could not be fetched, in words: the browser does not tell a
 * server that is down from one whose CORS answer leaves this page's origin
 * out, so a page on another origin names the setting that allows it.
 */
function unreachable(url) {
    const page = typeof location === 'undefined' ? '' : location.origin;
    if (!page || page === 'null' || page === url.origin)
        return `cannot reach the server at ${url.origin}`;
    return `cannot reach the server at ${url.origin} from this page (${page}): it is down, or it does not allow `
        + `calls from ${page}: add that origin to the server's cors.allowed_origins `
        + `(e.g. tutti serve --set cors.allowed_origins=${page}, or TUTTI_CORS_ALLOWED_ORIGINS=${page})`;
}
/** REST calls on one server with one token. */
export class Api {
    constructor(url, token) {
        this.base = baseOf(url);
        this.token = token || '';
    }
    url(path) {
        return new URL(path, this.base);
    }
    roomPath(room, rest = '') {
        return `v1/rooms/${encodeURIComponent(room)}${rest}`;
    }
    /** A request; `body` objects go as JSON, strings as SDP. */
    request(method, path, body) {
        const init = { method };
        if (typeof body === 'string') {
            init.headers = headers(this.token, { 'Content-Type': 'application/sdp' });
            init.body = body;
        }
        else if (body !== undefined) {
            init.headers = headers(this.token, { 'Content-Type': 'application/json' });
            init.body = JSON.stringify(body);
        }
        else {
            init.headers = headers(this.token);
        }
        return send(this.url(path), init);
    }
    /** A request whose JSON answer is returned; a refusal throws its TuttiError. */
    async json(method, path, body) {
        const r = await this.request(method, path, body);
        if (!r.ok)
            throw await errorOf(r);
        if (r.status === 204)
            return undefined;
        return (await r.json());
    }
    /**
     * Makes sure the room exists (creating it when `create` and it is
     * missing) and has space: `room_full`, `room_not_found` (a guest's
     * token may join a room, not create it), or the server's refusal.
     */
    async ensureRoom(room, create = true) {
        let r = await this.request('GET', this.roomPath(room));
        if (r.status === 404) {
            const err = await errorOf(r);
            if (err.code !== 'room_not_found' || !create)
                throw err;
            r = await this.request('POST', 'v1/rooms', { id: room });
            if (r.status === 403) {
                const refused = await errorOf(r);
                throw refused.code === 'forbidden' ? new TuttiError('room_not_found', undefined, 404) : refused;
            }
            if (r.status !== 201 && r.status !== 409)
                throw await errorOf(r);
            return;
        }
        if (!r.ok)
            throw await errorOf(r);
        const info = (await r.json());
        const summary = info && info.room;
        if (summary && summary.participants >= summary.max_participants)
            throw new TuttiError('room_full');
    }
    /** The STUN/TURN servers the server wants this client to use; none when it gives none. */
    async iceServers(room) {
        try {
            const r = await this.request('GET', this.roomPath(room, '/ice-servers'));
            if (!r.ok)
                return [];
            const body = (await r.json());
            return Array.isArray(body.ice_servers) ? body.ice_servers : [];
        }
        catch (_) {
            return [];
        }
    }
    /**
     * What the server says of this token for `room` before anyone joins:
     * `ok` (or auth off), or the token's problem. Without a valid room id
     * the room list stands in. Unreachable servers count as `ok` (the join
     * will tell).
     */
    async checkAccess(room) {
        const listing = !validRoomId(room);
        let r;
        try {
            // A room's ICE servers: checked against the token as a join is, and
            // answered for a room not made yet too (a 404 would be a console error).
            r = await this.request('GET', listing ? 'v1/rooms' : this.roomPath(room, '/ice-servers'));
        }
        catch (_) {
            return { access: 'ok', error: null };
        }
        if (r.status !== 401 && r.status !== 403)
            return { access: 'ok', error: null };
        const err = await errorOf(r);
        // A room admin's token cannot list every room: that says nothing about the token.
        if (listing && err.code === 'forbidden')
            return { access: 'ok', error: null };
        const known = ['token_missing', 'token_invalid', 'token_expired', 'wrong_room'];
        return known.includes(err.code) ? { access: err.code, error: err } : { access: 'ok', error: null };
    }
    /** A guest token for `room` (moderators only): `POST …/invites`. */
    async invite(room, permissions = 'speak', ttlSeconds = 3600) {
        const body = await this.json('POST', this.roomPath(room, '/invites'), { permissions, ttl_seconds: ttlSeconds });
        return { token: body.token || '', permissions, expiresAt: body.expires_at ?? null, url: body.url ?? null };
    }
    /** The room's WebSocket URL (the token in the query: browsers cannot set headers on it). */
    socketUrl(room, events, node) {
        const url = this.url(this.roomPath(room, '/ws'));
        url.protocol = url.protocol === 'https:' ? 'wss:' : 'ws:';
        url.searchParams.set('protocol', String(PROTOCOL));
        if (events)
            url.searchParams.set('events', events.join(','));
        if (node)
            url.searchParams.set('node', node);
        if (this.token)
            url.searchParams.set('token', this.token);
        return url;
    }
}
/**
 * The address that follows a `moved` hand-over: `<api_url>/v1/rooms/{room}/enter?ticket=…`
 * (the node burns the ticket and answers with its page and a token for
 * the room), or the page at `api_url` with auth off. `params` go along
 * (the page's `name`, `processing`, `autojoin`, `muted`, `hand`).
 */
export function enterUrl(moved, params, pagePath = '/') {
    const there = moved.ticket
        ? new URL(`/v1/rooms/${encodeURIComponent(moved.room)}/enter`, moved.api_url)
        : new URL(pagePath, moved.api_url);
    for (const [key, value] of Object.entries(params || {}))
        there.searchParams.set(key, value);
    there.searchParams.set('room', moved.room);
    if (moved.ticket)
        there.searchParams.set('ticket', moved.ticket);
    return there;
}
// ---- Microphone and WebRTC --------------------------------------------------
/**
 * The microphone, with the browser's voice processing on or off; refusals
 * as codes: `insecure` (not https or localhost), `no_webrtc`,
 * `mic_denied`, `mic_missing`, `mic_busy`.
 */
export async function microphone(processing = true) {
    if (!window.isSecureContext || !navigator.mediaDevices || !navigator.mediaDevices.getUserMedia) {
        throw new TuttiError('insecure');
    }
    if (typeof RTCPeerConnection === 'undefined')
        throw new TuttiError('no_webrtc');
    const audio = {
        echoCancellation: processing,
        noiseSuppression: processing,
        autoGainControl: processing,
        channelCount: 1,
    };
    try {
        return await navigator.mediaDevices.getUserMedia({ audio, video: false });
    }
    catch (e) {
        const name = e instanceof Error || e instanceof DOMException ? e.name : '';
        if (name === 'NotAllowedError' || name === 'SecurityError')
            throw new TuttiError('mic_denied');
        if (name === 'NotFoundError' || name === 'OverconstrainedError')
            throw new TuttiError('mic_missing');
        if (name === 'NotReadableError' || name === 'AbortError')
            throw new TuttiError('mic_busy');
        throw new TuttiError('mic_denied', e instanceof Error ? e.message : undefined);
    }
}
/** Resolves when ICE gathering is complete, or after `ms` (then what was gathered goes). */
/**
 * `sdp` asking for stereo Opus: `stereo=1` on each Opus payload type's
 * `a=fmtp` line (RFC 7587), added once.
 */
export function withStereoOpus(sdp) {
    const opus = new Set();
    for (const m of sdp.matchAll(/^a=rtpmap:(\d+) opus\/48000/gim))
        opus.add(m[1]);
    return sdp.replace(/^a=fmtp:(\d+) (.*?)(\r?)$/gm, (line, pt, params, cr) => opus.has(pt) && !/(^|;)\s*stereo=/.test(params) ? `a=fmtp:${pt} ${params};stereo=1${cr}` : line);
}
function gathered(pc, ms) {
    if (pc.iceGatheringState === 'complete')
        return Promise.resolve();
    return new Promise((resolve) => {
        const done = () => {
            if (pc.iceGatheringState !== 'complete')
                return;
            pc.removeEventListener('icegatheringstatechange', done);
            clearTimeout(timer);
            resolve();
        };
        const timer = setTimeout(() => {
            pc.removeEventListener('icegatheringstatechange', done);
            resolve();
        }, ms);
        pc.addEventListener('icegatheringstatechange', done);
    });
}
/** The origin of an absolute URL; '' when it is not one. */
function originOf(url) {
    try {
        return typeof url === 'string' ? new URL(url).origin : '';
    }
    catch (_) {
        return '';
    }
}
function parse(text) {
    if (typeof text !== 'string')
        return null;
    try {
        const msg = JSON.parse(text);
        return msg && typeof msg === 'object' && typeof msg.type === 'string' ? msg : null;
    }
    catch (_) {
        return null;
    }
}
/** Why a room socket closed, when the server said: 4001 token expired, 4409 replaced. */
function closeReason(ev) {
    if (ev && ev.code === 4001)
        return 'token_expired';
    if (ev && ev.code === 4409)
        return 'replaced';
    return '';
}
/**
 * Opens the room's WebSocket; resolves with it once its whole snapshot
 * arrived. A `moved` first (the room is on another node) rejects with
 * code `moved`.
 */
function openSocket(api, room, timeoutMs, node, events) {
    return new Promise((resolve, reject) => {
        let ws;
        try {
            ws = new WebSocket(api.socketUrl(room, events, node));
        }
        catch (_) {
            reject(new TuttiError('socket_refused'));
            return;
        }
        const timer = setTimeout(() => {
            ws.close();
            reject(new TuttiError('timeout'));
        }, timeoutMs);
        const stop = () => {
            clearTimeout(timer);
            ws.onerror = null;
            ws.onclose = null;
            ws.onmessage = null;
        };
        const refused = () => {
            stop();
            reject(new TuttiError('socket_refused'));
        };
        ws.onerror = refused;
        ws.onclose = refused;
        let snapshot = null;
        ws.onmessage = (ev) => {
            const msg = parse(ev.data);
            if (!msg)
                return;
            if (msg.type === 'moved' && msg.api_url) {
                stop();
                ws.close(1000);
                reject(new TuttiError('moved', `the room is on ${msg.node || msg.api_url}`, 0, msg));
                return;
            }
            if (msg.type === 'room' && !snapshot) {
                snapshot = { ...msg, participants: Array.isArray(msg.participants) ? msg.participants.slice() : [] };
            }
            else if (msg.type === 'participants' && snapshot && Array.isArray(msg.participants)) {
                snapshot.participants.push(...msg.participants);
                snapshot.more = msg.more;
            }
            else {
                return;
            }
            if ((snapshot.more || 0) > 0)
                return;
            stop();
            resolve({ ws, snapshot });
        };
    });
}
// ---- The room ---------------------------------------------------------------
/**
 * One client in one room: `join()`, then its state (`participants`,
 * `muted`, `admin`, `locked`, `connectionState`) and events, and the
 * controls (`setMuted`, `setHand`, the moderator's). A `Room` joins once;
 * after `ended`, make a new one.
 */
export class Room extends Emitter {
    constructor(options) {
        super();
        this._state = 'idle';
        this._id = null;
        this._muted = false;
        this._admin = false;
        this._locked = false;
        this._waiting = false;
        this._connectionState = 'new';
        this._pc = null;
        this._stream = null;
        this._remoteStream = null;
        this._iceServers = [];
        this._offerSdp = '';
        this._answerSdp = '';
        this._socketResumes = 0;
        /** Every ICE restart attempt of this call (each updated with its outcome). */
        this.iceRestarts = [];
        this.members = new Map();
        this.ws = null;
        this.resumeKey = '';
        this.ownStream = false;
        this.pending = null;
        this.lostAt = 0;
        this.restarting = false;
        /** Other nodes of the cluster, from the snapshot: where to go if this one is lost. */
        this.nodes = [];
        this.options = options;
        this.room = options.room;
        this.name = options.name || '';
        this.transport = options.transport || 'websocket';
        this.api = new Api(options.url, options.token);
        this.timings = { ...DEFAULT_TIMINGS, ...(options.timings || {}) };
        this.node = options.node || undefined;
    }
    /** Where the client is: `idle`, `joining`, `joined`, `ended`. */
    get state() {
        return this._state;
    }
    /** This client's participant id, once joined. */
    get id() {
        return this._id;
    }
    /** This client is muted (by itself, or by a moderator). */
    get muted() {
        return this._muted;
    }
    /** The token manages the room: the moderator's controls work. */
    get admin() {
        return this._admin;
    }
    /** The room takes no new joins. */
    get locked() {
        return this._locked;
    }
    /** The room waits for its moderator: this client is held muted (with the hold music) until one joins. */
    get waiting() {
        return this._waiting;
    }
    /** The peer connection's state. */
    get connectionState() {
        return this._connectionState;
    }
    /** The peer connection (for its stats). */
    get pc() {
        return this._pc;
    }
    /** The microphone stream sent. */
    get stream() {
        return this._stream;
    }
    /** The room's mix, once its track arrived. */
    get remoteStream() {
        return this._remoteStream;
    }
    /** The ICE servers the server gave. */
    get iceServers() {
        return this._iceServers;
    }
    /** The offer sent. */
    get offerSdp() {
        return this._offerSdp;
    }
    /** The server's answer (the last one, after an ICE restart). */
    get answerSdp() {
        return this._answerSdp;
    }
    /** How many times the socket was lost and resumed (or tried). */
    get socketResumes() {
        return this._socketResumes;
    }
    /** The participants, this client's own first, then by id. */
    get participants() {
        return Array.from(this.members.values()).sort((a, b) => Number(b.you) - Number(a.you) || a.id - b.id);
    }
    /** This client's own participant, once joined. */
    get me() {
        return this._id === null ? null : this.members.get(this._id) || null;
    }
    participant(id) {
        return this.members.get(id) || null;
    }
    get live() {
        return this._state === 'joining' || this._state === 'joined';
    }
    /**
     * Joins: resolves once the answer is applied (the media may still be
     * connecting: `connection` tells); rejects with a TuttiError, and then
     * the room is `ended` (code `moved`: the room is on another node, see
     * `error.moved` and `enterUrl`).
     */
    async join() {
        if (this._state !== 'idle')
            throw new TuttiError('already_joined', 'a Room joins once; make a new one');
        if (!validRoomId(this.room))
            throw new TuttiError('bad_room_id');
        this._state = 'joining';
        try {
            await this.connect();
        }
        catch (e) {
            const err = e instanceof TuttiError ? e : new TuttiError('error', e instanceof Error ? e.message : String(e));
            if (this._state === 'joining')
                this.teardown();
            if (err.moved)
                this.emit('moved', err.moved);
            throw err;
        }
    }
    async connect() {
        const t = this.timings;
        this.emit('progress', 'room');
        await this.api.ensureRoom(this.room, this.options.create !== false);
        this.check();
        this.emit('progress', 'microphone');
        if (this.options.stream) {
            this._stream = this.options.stream;
        }
        else {
            this._stream = await microphone(this.options.processing !== false);
            this.ownStream = true;
            if (this._state !== 'joining') {
                this._stream.getTracks().forEach((track) => track.stop());
            }
            this.check();
        }
        this.emit('stream', this._stream);
        this._iceServers = await this.api.iceServers(this.room);
        this.check();
        const pc = new RTCPeerConnection({
            bundlePolicy: 'max-bundle',
            rtcpMuxPolicy: 'require',
            ...(this.options.rtcConfiguration || {}),
            iceServers: [...(this.options.rtcConfiguration?.iceServers || []), ...this._iceServers],
        });
        this._pc = pc;
        for (const track of this._stream.getAudioTracks())
            pc.addTrack(track, this._stream);
        pc.ontrack = (e) => this.onTrack(e);
        pc.onconnectionstatechange = () => this.onConnectionState();
        pc.oniceconnectionstatechange = () => this.onIceState();
        this.emit('progress', 'connecting');
        await pc.setLocalDescription(this.withStereo(await pc.createOffer()));
        await gathered(pc, t.gatherTimeoutMs);
        this.check();
        this._offerSdp = pc.localDescription ? pc.localDescription.sdp : '';
        // Subscribe to everything (the default) so the state stays whole.
        const { ws, snapshot } = await openSocket(this.api, this.room, t.joinTimeoutMs, this.node);
        if (this._state !== 'joining') {
            ws.close(1000);
            throw new TuttiError('left');
        }
        this.ws = ws;
        this.applySnapshot(snapshot);
        let answer;
        if (this.transport === 'rest') {
            ws.onmessage = (ev) => this.onMessage(parse(ev.data));
            ws.onclose = (ev) => this.socketLost(ev);
            const r = await this.api.request('POST', this.api.roomPath(this.room, '/participants'), {
                sdp: this._offerSdp,
                ...(this.name ? { name: this.name } : {}),
            });
            if (!r.ok)
                throw await errorOf(r);
            answer = (await r.json());
        }
        else {
            answer = await this.exchange({ type: 'join', sdp: this._offerSdp, ...(this.name ? { name: this.name } : {}) });
        }
        this.check();
        this._id = answer.id;
        this.resumeKey = answer.resume || '';
        this._answerSdp = answer.sdp;
        for (const p of this.members.values())
            p.you = p.id === this._id;
        await pc.setRemoteDescription({ type: 'answer', sdp: answer.sdp });
        this.check();
        this.connectTimer = setTimeout(() => {
            if (this.live && pc.connectionState !== 'connected')
                this.end(new TuttiError('ice_failed'));
        }, t.connectTimeoutMs);
        this._state = 'joined';
        this.applyMute(false);
        // Restore what a hand-over carried: muted, the hand.
        if (this.options.muted)
            this.setMuted(true);
        if (this.options.hand)
            this.setHand(true);
        this.emit('change', undefined);
    }
    /** Throws when the call ended while `join()` waited. */
    check() {
        if (this._state !== 'joining')
            throw new TuttiError('left', 'the call ended while joining');
    }
    /** Sends the join message; resolves with its answer (or rejects with its error). */
    exchange(message) {
        return new Promise((resolve, reject) => {
            const ws = this.ws;
            const timer = setTimeout(() => {
                this.pending = null;
                reject(new TuttiError('timeout'));
            }, this.timings.joinTimeoutMs);
            this.pending = {
                resolve: (v) => {
                    clearTimeout(timer);
                    resolve(v);
                },
                reject: (e) => {
                    clearTimeout(timer);
                    reject(e);
                },
            };
            ws.onmessage = (ev) => this.onMessage(parse(ev.data));
            ws.onclose = (ev) => this.socketLost(ev);
            ws.send(JSON.stringify(message));
        });
    }
    sendMessage(message) {
        if (!this.ws || this.ws.readyState !== WebSocket.OPEN)
            return false;
        this.ws.send(JSON.stringify(message));
        return true;
    }
    /** Leaves the room (the socket's close leaves it too); `ended` with null. */
    leave() {
        if (!this.live)
            return;
        if (this.transport === 'rest' && this._id !== null) {
            // Fire and forget: the page may be going away.
            this.api.request('DELETE', this.api.roomPath(this.room, `/participants/${this._id}`)).catch(() => { });
        }
        else {
            this.sendMessage({ type: 'leave' });
        }
        this.teardown();
        this.emit('ended', null);
        this.emit('change', undefined);
    }
    /** Ends the call for a reason the server or the network gave. */
    end(err) {
        if (!this.live)
            return;
        this.teardown();
        this.emit('ended', err);
        this.emit('change', undefined);
    }
    teardown() {
        this._state = 'ended';
        clearTimeout(this.connectTimer);
        clearTimeout(this.disconnectedTimer);
        clearTimeout(this.restartTimer);
        clearTimeout(this.resumeTimer);
        if (this.pending) {
            const p = this.pending;
            this.pending = null;
            p.reject(new TuttiError('socket_lost'));
        }
        if (this.ws) {
            this.ws.onclose = null;
            this.ws.onmessage = null;
            this.ws.close(1000);
            this.ws = null;
        }
        if (this._pc)
            this._pc.close();
        if (this._stream && this.ownStream)
            this._stream.getTracks().forEach((t) => t.stop());
        this.members.clear();
        this._id = null;
        this._muted = false;
        this._admin = false;
        this._locked = false;
        this._waiting = false;
        this._connectionState = 'closed';
    }
    // ---- Controls -------------------------------------------------------------
    /** Mutes or unmutes this client: the track stops sending, and the room is told. */
    setMuted(muted) {
        if (this._state !== 'joined' || this._id === null)
            return;
        this.applyMute(muted);
        const self = this.members.get(this._id);
        if (self)
            self.muted = muted;
        if (this.transport === 'rest') {
            this.api.request('PATCH', this.api.roomPath(this.room, `/participants/${this._id}`), { muted }).then(async (r) => {
                if (!r.ok)
                    this.emit('serverError', await errorOf(r));
            }, (e) => this.emit('serverError', e));
        }
        else {
            this.sendMessage({ type: 'mute', muted });
        }
        this.emit('change', undefined);
    }
    applyMute(muted) {
        this._muted = muted;
        if (this._stream)
            for (const t of this._stream.getAudioTracks())
                t.enabled = !muted;
    }
    /** Raises or lowers this client's hand, or (`id`, a moderator) someone else's. */
    setHand(raised, id) {
        if (this._state !== 'joined')
            return;
        const target = id === undefined ? this._id : id;
        if (target === null)
            return;
        if (this.transport === 'rest') {
            this.moderate('PATCH', `/participants/${target}`, { hand: raised });
        }
        else {
            this.sendMessage(id === undefined ? { type: 'hand', raised } : { type: 'hand', raised, id });
        }
    }
    /**
     * Sets (a string) or removes (`null`) attributes of this client's
     * participant, or (`id`, a moderator) someone else's; the others stay.
     * Keys under the server's `limits.reserved_attributes` (`sip.`, `tutti.`)
     * are a moderator's only. Bounds: 16 keys, a key of 64 bytes, a value of
     * 1,024, 4,096 bytes in all. Over REST, resolves with the server's refusal
     * or null; over the socket, a refusal comes as `serverError`.
     */
    async setAttributes(attributes, id) {
        if (this._state !== 'joined')
            return new TuttiError('not_joined', 'join first');
        const target = id === undefined ? this._id : id;
        if (target === null)
            return new TuttiError('not_joined', 'join first');
        if (this.transport === 'rest')
            return this.moderate('PATCH', `/participants/${target}`, { attributes });
        this.sendMessage({ type: 'set_attributes', attributes, id: target });
        return null;
    }
    /**
     * Sends a data message over the room socket to everyone (or only to the
     * participants `to` names): a topic and any JSON payload, at most the
     * server's `limits.data_max_bytes` (16 KiB by default), at most
     * `limits.data_messages_per_second` (10) per sender. Best effort: it
     * reaches the sockets connected now, in the order sent, and is not
     * stored; a refusal comes as `serverError`. Needs the WebSocket transport
     * (returns false otherwise, or before joining).
     */
    sendData(topic, payload, to) {
        if (this._state !== 'joined' || this.transport !== 'websocket')
            return false;
        return this.sendMessage(to === undefined ? { type: 'data', topic, payload } : { type: 'data', topic, payload, to });
    }
    /** A moderator's REST call on the room; resolves with the server's refusal (also `serverError`), or null. */
    async moderate(method, path, body) {
        try {
            const r = await this.api.request(method, this.api.roomPath(this.room, path), body);
            if (r.ok)
                return null;
            const err = await errorOf(r);
            this.emit('serverError', err);
            return err;
        }
        catch (e) {
            const err = e instanceof TuttiError ? e : new TuttiError('network');
            this.emit('serverError', err);
            return err;
        }
    }
    /** Grants or revokes someone's right to speak (moderators). */
    setSpeak(id, speak) {
        return this.moderate('PATCH', `/participants/${id}`, { speak });
    }
    /** Removes someone; with `banSeconds`, they cannot rejoin for that long (moderators). */
    kick(id, banSeconds) {
        const query = banSeconds ? `?ban_seconds=${Math.floor(banSeconds)}` : '';
        return this.moderate('DELETE', `/participants/${id}${query}`);
    }
    /** Mutes everyone but the moderators. */
    muteAll() {
        return this.moderate('PATCH', '', { mute_all: true });
    }
    /** Locks or unlocks the room (a locked room takes no new joins). */
    setLocked(locked) {
        return this.moderate('PATCH', '', { locked });
    }
    /** A guest token for this room (moderators). */
    invite(permissions = 'speak', ttlSeconds = 3600) {
        return this.api.invite(this.room, permissions, ttlSeconds);
    }
    /** A fresh token for the same identity before the socket's expires (`tokenExpiring`). */
    refreshToken(token) {
        this.api.token = token;
        this.sendMessage({ type: 'token', token });
    }
    // ---- Messages -------------------------------------------------------------
    member(p) {
        return {
            id: p.id,
            name: p.name || `participant ${p.id}`,
            identity: p.identity || '',
            talking: !!p.talking,
            muted: !!p.muted,
            listenOnly: !!p.listen_only,
            hand: !!p.hand,
            admin: !!p.admin,
            deaf: !!p.deaf,
            attributes: { ...(p.attributes || {}) },
            you: p.id === this._id,
        };
    }
    applySnapshot(msg) {
        this.members.clear();
        for (const p of msg.participants || [])
            this.members.set(p.id, this.member(p));
        this._admin = !!msg.admin;
        this._locked = !!msg.locked;
        this._waiting = !!msg.waiting;
        if (typeof msg.node === 'string' && msg.node)
            this.node = msg.node;
        if (Array.isArray(msg.nodes)) {
            this.nodes = msg.nodes.filter((n) => n && typeof n.api_url === 'string' && /^https?:\/\//.test(n.api_url));
        }
        this.emit('change', undefined);
    }
    /**
     * This client's node is lost (its socket gone and the node unreachable
     * for `nodeLostMs`): asks the other nodes the snapshot named, in turn,
     * for the room. The first that answers gives the `moved` to follow: its
     * own (`reason: 'lost'`, no ticket: the client's token is good on every
     * node), or the one it sends (another node, with a ticket). Null when
     * none answers.
     */
    async findNode() {
        const lost = this.api.base.origin;
        for (const n of this.nodes) {
            const origin = originOf(n.api_url);
            if (!origin || origin === lost || !this.live)
                continue;
            try {
                const { ws } = await openSocket(new Api(n.api_url, this.api.token), this.room, this.timings.nodeLostMs, n.node);
                ws.close(1000);
                return { type: 'moved', protocol: PROTOCOL, room: this.room, node: n.node, api_url: n.api_url, reason: 'lost' };
            }
            catch (e) {
                const there = e instanceof TuttiError ? e.moved : null;
                const elsewhere = there ? originOf(there.api_url) : '';
                if (there && elsewhere && elsewhere !== lost)
                    return { ...there, reason: 'lost' };
            }
        }
        return null;
    }
    onMessage(msg) {
        if (!msg || !this.live)
            return;
        switch (msg.type) {
            case 'events':
                // One batch's room events, in order; one `change` after them.
                for (const e of Array.isArray(msg.events) ? msg.events : []) {
                    this.onEvent(e);
                    if (!this.live)
                        return;
                }
                break;
            case 'room':
                this.applySnapshot(msg);
                return;
            case 'participants':
                // The rest of a big room's snapshot, right after `room`.
                for (const p of Array.isArray(msg.participants) ? msg.participants : []) {
                    if (!this.members.has(p.id))
                        this.members.set(p.id, this.member(p));
                }
                break;
            case 'answer':
                if (this.pending) {
                    const p = this.pending;
                    this.pending = null;
                    p.resolve(msg);
                }
                return;
            case 'error': {
                const err = new TuttiError(msg.code, msg.message);
                if (this.pending) {
                    const p = this.pending;
                    this.pending = null;
                    p.reject(err);
                }
                else {
                    this.emit('serverError', err);
                }
                return;
            }
            case 'data':
                this.emit('data', {
                    from: msg.from === null ? null : this.members.get(msg.from) || null,
                    topic: String(msg.topic),
                    payload: msg.payload,
                });
                return;
            case 'token_expiring':
                this.emit('tokenExpiring', { expiresAt: Number(msg.expires_at) });
                return;
            case 'token_accepted':
                this.emit('tokenAccepted', { expiresAt: Number(msg.expires_at) });
                return;
            case 'moved':
                if (msg.api_url && msg.room)
                    this.emit('moved', msg);
                return;
            case 'room_changed':
                // A breakout: same connection; the new room's snapshot comes next.
                if (typeof msg.room === 'string' && msg.room && msg.id === this._id) {
                    const from = this.room;
                    this.room = msg.room;
                    this.emit('roomChanged', { room: msg.room, from });
                }
                return;
            default:
                // A bare event (older servers), or one this client does not know.
                this.onEvent(msg);
        }
        if (this.live)
            this.emit('change', undefined);
    }
    onEvent(e) {
        const find = (id) => this.members.get(id);
        switch (e.type) {
            case 'joined': {
                if (!this.members.has(e.id)) {
                    const p = this.member({ id: e.id, name: e.name, attributes: e.attributes });
                    this.members.set(e.id, p);
                    this.emit('joined', p);
                }
                break;
            }
            case 'left': {
                const p = find(e.id) || this.member({ id: e.id, name: '' });
                this.members.delete(e.id);
                this.emit('left', { participant: p, reason: e.reason });
                // Our own leave tears the call down before its event arrives: a
                // `left` about us means the server (or a moderator) ended it.
                // Moved to another room (a breakout): the call goes on there (`room_changed` follows).
                if (e.id === this._id && e.reason !== 'moved_room') {
                    this.end(new TuttiError(e.reason === 'left' ? 'removed' : e.reason));
                }
                break;
            }
            case 'talking': {
                const p = find(e.id);
                if (p) {
                    p.talking = !!e.talking;
                    this.emit('talking', { participant: p, talking: p.talking });
                }
                break;
            }
            case 'muted': {
                const p = find(e.id);
                if (p)
                    p.muted = !!e.muted;
                if (e.id === this._id)
                    this.applyMute(!!e.muted);
                if (p)
                    this.emit('muted', { participant: p, muted: !!e.muted });
                break;
            }
            case 'hand': {
                const p = find(e.id);
                if (p) {
                    p.hand = !!e.raised;
                    this.emit('hand', { participant: p, raised: p.hand });
                }
                break;
            }
            case 'attributes_changed': {
                const p = find(e.id);
                if (p) {
                    p.attributes = { ...(e.attributes || {}) };
                    this.emit('attributesChanged', { participant: p, attributes: p.attributes });
                }
                break;
            }
            case 'permissions': {
                const p = find(e.id);
                if (p) {
                    p.listenOnly = !e.speak;
                    this.emit('permissions', { participant: p, speak: !!e.speak });
                }
                break;
            }
            case 'deaf': {
                const p = find(e.id);
                if (p)
                    p.deaf = !!e.deaf;
                break;
            }
            case 'room_updated':
                this._locked = !!e.locked;
                this.emit('roomUpdated', { locked: this._locked, maxParticipants: e.max_participants, maxSpeakers: e.max_speakers });
                break;
            case 'muted_all':
                this.emit('mutedAll', { count: Number(e.count) || 0 });
                break;
            case 'waiting':
                this._waiting = !!e.waiting;
                this.emit('waiting', { waiting: this._waiting });
                break;
            case 'draining':
                this.emit('draining', { deadline: Number(e.deadline) || 0, message: e.message || '' });
                break;
            case 'room_closed':
                this.end(new TuttiError('room_closed'));
                break;
            case 'shutdown':
                this.end(new TuttiError('shutdown', e.message));
                break;
            case 'recording_started':
            case 'recording_stopped':
            case 'recording_finished':
                this.emit('recording', e);
                break;
            case 'playback_started':
            case 'playback_stopped':
            case 'playback_finished':
                this.emit('playback', e);
                break;
            case 'whisper_opened':
            case 'whisper_changed':
            case 'whisper_closed':
                this.emit('whisper', e);
                break;
            case 'keypad':
                this.emit('keypad', { id: e.id, digit: e.digit });
                break;
            default:
            // unknown within the version: skipped
        }
    }
    // ---- The socket: lost and resumed -----------------------------------------
    /**
     * The room's socket closed under a call (a network change, a reset). The
     * server keeps the participant for `limits.ws_resume_seconds`: open a new
     * socket and `resume` with the answer's key, every `resumeRetryMs` for
     * `resumeWindowMs`; the media restarts ICE on its own. Refused or out of
     * time: the call ends (`socket_lost`). With `transport: 'rest'` the
     * socket only watches: a new one is opened the same way.
     */
    socketLost(ev) {
        const reason = closeReason(ev);
        if (this.pending) {
            const p = this.pending;
            this.pending = null;
            p.reject(new TuttiError(reason || 'socket_lost'));
            return;
        }
        if (!this.live)
            return;
        this.ws = null;
        // Closed on purpose (token expired, joined elsewhere): no resume.
        if (reason) {
            this.end(new TuttiError(reason));
            return;
        }
        const rest = this.transport === 'rest';
        if (this._id === null || (!rest && !this.resumeKey)) {
            this.end(new TuttiError('socket_lost'));
            return;
        }
        const since = Date.now();
        this._socketResumes += 1;
        this.emit('socketLost', undefined);
        const retry = () => {
            this.resumeTimer = setTimeout(attempt, this.timings.resumeRetryMs);
        };
        const attempt = async () => {
            if (!this.live)
                return;
            if (Date.now() - since > this.timings.resumeWindowMs) {
                this.end(new TuttiError('socket_lost'));
                return;
            }
            let ws;
            let snapshot;
            try {
                // Bounded by `nodeLostMs` too: a node gone without a reset would hold one attempt for long.
                const wait = Math.min(this.timings.joinTimeoutMs, Math.max(this.timings.nodeLostMs, this.timings.resumeRetryMs));
                ({ ws, snapshot } = await openSocket(this.api, this.room, wait, this.node));
            }
            catch (e) {
                if (e instanceof TuttiError && e.moved) {
                    this.emit('moved', e.moved);
                    return;
                }
                if (this.nodes.length > 0 && Date.now() - since >= this.timings.nodeLostMs) {
                    const moved = await this.findNode();
                    if (moved && this.live) {
                        // The call cannot go on here: the app follows, as after a drain.
                        this.emit('moved', moved);
                        return;
                    }
                }
                retry();
                return;
            }
            if (!this.live) {
                ws.close(1000);
                return;
            }
            const adopt = () => {
                this.ws = ws;
                this.applySnapshot(snapshot);
                ws.onmessage = (e) => this.onMessage(parse(e.data));
                ws.onclose = (e) => this.socketLost(e);
                this.emit('resumed', undefined);
            };
            if (rest) {
                adopt();
                return;
            }
            ws.onmessage = (e) => {
                const msg = parse(e.data);
                if (msg && msg.type === 'resumed') {
                    adopt();
                }
                else if (msg && msg.type === 'error') {
                    ws.onclose = null;
                    ws.close(1000);
                    this.end(new TuttiError('socket_lost', msg.message));
                }
            };
            ws.onclose = () => retry();
            ws.send(JSON.stringify({ type: 'resume', id: this._id ?? 0, key: this.resumeKey }));
        };
        attempt();
    }
    // ---- The media: connection and ICE restart ---------------------------------
    /** The offer, asking for stereo unless `stereo: false`. */
    withStereo(offer) {
        if (this.options.stereo === false || !offer.sdp)
            return offer;
        return { type: offer.type, sdp: withStereoOpus(offer.sdp) };
    }
    onTrack(e) {
        if (!this.live)
            return;
        const stream = e.streams && e.streams[0] ? e.streams[0] : new MediaStream([e.track]);
        this._remoteStream = stream;
        this.emit('track', stream);
    }
    onConnectionState() {
        if (!this.live || !this._pc)
            return;
        const s = this._pc.connectionState;
        this._connectionState = s;
        if (s === 'connected') {
            clearTimeout(this.connectTimer);
            clearTimeout(this.restartTimer);
            this.lostAt = 0;
        }
        this.emit('connection', s);
        this.emit('change', undefined);
        if (s === 'failed')
            this.onIceState();
    }
    /** Whether the connection dropped and is being restored. */
    get reconnecting() {
        return this.lostAt !== 0;
    }
    /**
     * ICE `disconnected` for `disconnectedWaitMs`, or `failed`: restart ICE.
     * Before the answer there is nothing to restart (the connect timeout
     * covers that).
     */
    onIceState() {
        const pc = this._pc;
        if (this._state !== 'joined' || !pc || this._id === null)
            return;
        const s = pc.iceConnectionState;
        if (s === 'connected' || s === 'completed') {
            clearTimeout(this.disconnectedTimer);
            this.disconnectedTimer = undefined;
            return;
        }
        if (s === 'disconnected' && this.disconnectedTimer === undefined) {
            this.disconnectedTimer = setTimeout(() => {
                this.disconnectedTimer = undefined;
                const now = this._pc && this._pc.iceConnectionState;
                if (this._state === 'joined' && (now === 'disconnected' || now === 'failed'))
                    this.restartIce();
            }, this.timings.disconnectedWaitMs);
        }
        else if (s === 'failed') {
            clearTimeout(this.disconnectedTimer);
            this.disconnectedTimer = undefined;
            this.restartIce();
        }
    }
    /**
     * One ICE restart: a new offer (new ICE credentials) for our participant,
     * `PATCH …/participants/{id}` (application/sdp), its answer. Failed
     * attempts are retried until `restartGraceMs` after the connection
     * dropped (then `ice_lost`); a refusal (401, 403, 404, 410: the server does
     * not know us, or will not) ends the call at once (`restart_refused`).
     * Called by the client itself; an app may call it too.
     */
    async restartIce() {
        const pc = this._pc;
        if (this._state !== 'joined' || !pc || this.restarting)
            return;
        const t = this.timings;
        if (!this.lostAt)
            this.lostAt = Date.now();
        if (Date.now() - this.lostAt > t.restartGraceMs) {
            this.end(new TuttiError('ice_lost'));
            return;
        }
        this.restarting = true;
        clearTimeout(this.restartTimer);
        const attempt = { at: Date.now() - this.lostAt, status: 0, code: '' };
        this.iceRestarts.push(attempt);
        this.emit('iceRestart', attempt);
        let retry = true;
        try {
            await pc.setLocalDescription(this.withStereo(await pc.createOffer({ iceRestart: true })));
            await gathered(pc, t.gatherTimeoutMs);
            if (this._state !== 'joined')
                return;
            const r = await this.api.request('PATCH', this.api.roomPath(this.room, `/participants/${this._id}`), pc.localDescription ? pc.localDescription.sdp : '');
            attempt.status = r.status;
            if (this._state !== 'joined')
                return;
            if (r.status === 200) {
                const sdp = await r.text();
                await pc.setRemoteDescription({ type: 'answer', sdp });
                this._answerSdp = sdp;
                attempt.code = 'answered';
                retry = false;
            }
            else {
                const err = await errorOf(r);
                attempt.code = err.code;
                // The server no longer knows us, or will not let us: final. Anything
                // else (busy, briefly unavailable, not ready) is tried again.
                if (r.status === 401 || r.status === 403 || r.status === 404 || r.status === 410) {
                    retry = false;
                    this.emit('iceRestart', attempt);
                    this.end(new TuttiError('restart_refused', err.message || err.code, r.status));
                    return;
                }
            }
        }
        catch (e) {
            attempt.code = (e instanceof TuttiError && e.code) || 'error';
            // Our offer is still pending if the answer never came: roll back for the next try.
            try {
                if (this._state === 'joined' && pc.signalingState === 'have-local-offer') {
                    await pc.setLocalDescription({ type: 'rollback' });
                }
            }
            catch (_) {
                // nothing to roll back
            }
        }
        finally {
            this.restarting = false;
        }
        if (this._state !== 'joined')
            return;
        this.emit('iceRestart', attempt);
        // Until connected again (which clears the timer), keep trying within the grace period.
        const left = t.restartGraceMs - (Date.now() - this.lostAt);
        this.restartTimer = setTimeout(() => {
            if (this._state !== 'joined' || !this._pc)
                return;
            const s = this._pc.iceConnectionState;
            if (s === 'connected' || s === 'completed') {
                this.lostAt = 0;
                return;
            }
            if (Date.now() - this.lostAt > t.restartGraceMs)
                this.end(new TuttiError('ice_lost'));
            else
                this.restartIce();
        }, Math.max(0, retry ? Math.min(t.restartRetryMs, left) : Math.min(t.restartGraceMs, left)));
    }
}
