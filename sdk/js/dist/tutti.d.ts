import type { EventKind, MovedMessage, RoomEventMessage } from './protocol.js';
export type { ClientMessage, EventKind, LeftReason, Member, MovedMessage, ProtocolVersion, RoomEventMessage, RoomMessage, ServerMessage, } from './protocol.js';
/** The WebSocket protocol version this client speaks (asked for at the upgrade). */
export declare const PROTOCOL = 1;
/**
 * A failure, with the server's stable error code where it gave one
 * (docs/api/errors.md), or one of the client's own: `network`, `timeout`,
 * `socket_refused`, `socket_lost`, `ice_failed`, `ice_lost`,
 * `restart_refused`, `mic_denied`, `mic_missing`, `mic_busy`, `insecure`,
 * `no_webrtc`, `bad_room_id`, `room_full`, `moved`, and the reasons a
 * call ends (`kicked`, `removed`, `timed_out`, `replaced`, `token_expired`,
 * `room_closed`, `shutdown`, …).
 */
export declare class TuttiError extends Error {
    /** The stable code. */
    readonly code: string;
    /** The HTTP status, when the error came from one (else 0). */
    readonly status: number;
    /** With code `moved`: where the room went. */
    readonly moved: MovedMessage | null;
    constructor(code: string, message?: string, status?: number, moved?: MovedMessage);
}
/** How the participant is made: over the room WebSocket, or WHIP-style over REST. */
export type Transport = 'websocket' | 'rest';
/** A participant, as the client keeps it. */
export interface Participant {
    id: number;
    name: string;
    identity: string;
    talking: boolean;
    muted: boolean;
    /** May not speak (no `speak` permission, or revoked). */
    listenOnly: boolean;
    hand: boolean;
    admin: boolean;
    deaf: boolean;
    /** Its attributes: string keys and values (its token's, then as it or an admin changed them). */
    attributes: Record<string, string>;
    /** This client's own participant. */
    you: boolean;
}
/** Where `Room.join()` is. */
export type JoinStep = 'room' | 'microphone' | 'connecting';
/** The client's state. */
export type RoomState = 'idle' | 'joining' | 'joined' | 'ended';
/** One ICE restart attempt: when (ms after the connection dropped), the HTTP status, the outcome. */
export interface IceRestartAttempt {
    at: number;
    status: number;
    code: string;
}
/** The guest link a moderator asked for (`POST …/invites`). */
export interface Invite {
    token: string;
    permissions: 'speak' | 'listen';
    /** Unix seconds, when the server said. */
    expiresAt: number | null;
    /** The server's own link for it, when it gave one. */
    url: string | null;
}
/** What the pre-join check found out about a token. */
export type Access = 'ok' | 'token_missing' | 'token_invalid' | 'token_expired' | 'wrong_room';
/** Timeouts and windows, all in milliseconds. */
export interface Timings {
    /** The socket's snapshot and the join's answer. */
    joinTimeoutMs: number;
    /** ICE gathering before the offer is sent as it is. */
    gatherTimeoutMs: number;
    /** From the answer to `connected`, else `ice_failed`. */
    connectTimeoutMs: number;
    /** ICE `disconnected` for this long restarts ICE. */
    disconnectedWaitMs: number;
    /** How long after the connection dropped ICE restarts are tried. */
    restartGraceMs: number;
    /** Between ICE restart attempts that failed. */
    restartRetryMs: number;
    /** How long a lost socket is resumed (within the server's `limits.ws_resume_seconds`, 10 s). */
    resumeWindowMs: number;
    /**
     * A lost socket whose node stays unreachable this long, in a cluster
     * whose rooms spread: the node is taken for lost and the room is looked
     * for on the other nodes the snapshot named (`moved`, `reason: 'lost'`).
     */
    nodeLostMs: number;
    /** Between socket resume attempts. */
    resumeRetryMs: number;
}
export declare const DEFAULT_TIMINGS: Timings;
export interface RoomOptions {
    /** The room's id: 1 to 64 letters, digits, `-` or `_`. */
    room: string;
    /** The server's address (`https://tutti.example.org`); default: the page's own (document.baseURI). */
    url?: string | URL | null;
    /** An access token (the server's JWT); none when auth is off. */
    token?: string | null;
    /** The name others see. */
    name?: string;
    /** Default `websocket`. */
    transport?: Transport;
    /** The microphone to send; default: asked for with `microphone(processing)`, stopped on leave. */
    stream?: MediaStream;
    /** Echo cancellation, noise suppression and gain control on the microphone asked for (default on). */
    processing?: boolean;
    /**
     * Ask for stereo (Opus `stereo=1`): in a spatial room each speaker is then
     * heard from their seat (docs/features/spatial.md). Default on; off, the
     * same room is heard in mono.
     */
    stereo?: boolean;
    /** Create the room when it does not exist (needs a token that may; default true). */
    create?: boolean;
    /** Join muted, and with a raised hand (after a hand-over: as the call was). */
    muted?: boolean;
    hand?: boolean;
    /** Passed to RTCPeerConnection besides the room's ICE servers. */
    rtcConfiguration?: RTCConfiguration;
    timings?: Partial<Timings>;
    /**
     * Cluster mode, rooms that spread over nodes: the node the client was
     * sent to (a `moved`'s `node`, the page's `?node=` after `…/enter`). Its
     * sockets name it, so that the node keeps them rather than placing them
     * again; the room's snapshot then says which node the client is on.
     */
    node?: string;
}
/** The `Room`'s events and what each carries. */
export interface RoomEvents {
    /** Anything in the room's state changed (participants, mute, admin, lock, connection): re-render. */
    change: void;
    /** `join()` reached a step. */
    progress: JoinStep;
    /** The microphone stream, once there (before the call is). */
    stream: MediaStream;
    /** The room's mix, to play. */
    track: MediaStream;
    /** The peer connection's state (`connected`, `disconnected`, …). */
    connection: RTCPeerConnectionState;
    /** Someone joined. */
    joined: Participant;
    /** Someone left (`participant` is gone from `participants` by then). */
    left: {
        participant: Participant;
        reason: string;
    };
    talking: {
        participant: Participant;
        talking: boolean;
    };
    muted: {
        participant: Participant;
        muted: boolean;
    };
    hand: {
        participant: Participant;
        raised: boolean;
    };
    /** Someone's attributes changed (`participant.attributes` is the whole set now). */
    attributesChanged: {
        participant: Participant;
        attributes: Record<string, string>;
    };
    permissions: {
        participant: Participant;
        speak: boolean;
    };
    /** An admin muted everyone but the admins. */
    mutedAll: {
        count: number;
    };
    /** The room waits for its moderator (`true`: held muted, with the hold music), or a moderator opened it. */
    waiting: {
        waiting: boolean;
    };
    /** The room's lock (or limits) changed. */
    roomUpdated: {
        locked: boolean;
        maxParticipants?: number;
        maxSpeakers?: number;
    };
    /** The token expires at `expiresAt` (Unix s): `refreshToken()` before then, or the call ends. */
    tokenExpiring: {
        expiresAt: number;
    };
    /** The server is stopping; the call goes on, and may move (`moved`). */
    draining: {
        deadline: number;
        message: string;
    };
    /** Cluster hand-over: the room is now at `moved.api_url`; open `enterUrl(moved)`. */
    moved: MovedMessage;
    /**
     * A breakout: an admin moved this participant to room `room` of the same
     * server, on the same connection (`room.room` is the new room's id; the
     * participants are the new room's by the next `change`).
     */
    roomChanged: {
        room: string;
        from: string;
    };
    /** A recording started, stopped or finished (`recording_*`). */
    recording: RoomEventMessage;
    /** A sound file started, stopped or finished playing into the room (`playback_*`). */
    playback: RoomEventMessage;
    /** A whisper channel opened, changed or closed (`whisper_*`): who hears whom changed. */
    whisper: RoomEventMessage;
    /** A phone caller pressed a key (`keypad`): `id`, `digit` (`0`-`9`, `*`, `#`, `A`-`D`). */
    keypad: {
        id: number;
        digit: string;
    };
    /** The server took the token of `refreshToken()`; it now expires at `expiresAt` (Unix s). */
    tokenAccepted: {
        expiresAt: number;
    };
    /** An ICE restart attempt was made, or answered (the same object, updated). */
    iceRestart: IceRestartAttempt;
    /** The socket was lost; resuming it. */
    socketLost: void;
    /** A new socket took the participant over. */
    resumed: void;
    /** The server refused a message (the call goes on). */
    serverError: TuttiError;
    /**
     * A data message (best effort, never stored): `from` is the sender
     * (`null`: the room's backend, or a participant this client does not list yet).
     */
    data: {
        from: Participant | null;
        topic: string;
        payload: unknown;
    };
    /** The call ended: `null` after `leave()`, else why. */
    ended: TuttiError | null;
}
type Listener<T> = (value: T) => void;
/** A minimal typed event emitter. */
export declare class Emitter<E> {
    private listeners;
    /** Calls `fn` on every `event`; returns the function that stops it. */
    on<K extends keyof E>(event: K, fn: Listener<E[K]>): () => void;
    off<K extends keyof E>(event: K, fn: Listener<E[K]>): void;
    protected emit<K extends keyof E>(event: K, value: E[K]): void;
}
/** Whether `room` is a valid room id. */
export declare function validRoomId(room: string): boolean;
/** The server's JSON error of a response, as a TuttiError. */
export declare function errorOf(response: Response): Promise<TuttiError>;
/** REST calls on one server with one token. */
export declare class Api {
    readonly base: URL;
    token: string;
    constructor(url?: string | URL | null, token?: string | null);
    url(path: string): URL;
    roomPath(room: string, rest?: string): string;
    /** A request; `body` objects go as JSON, strings as SDP. */
    request(method: string, path: string, body?: unknown): Promise<Response>;
    /** A request whose JSON answer is returned; a refusal throws its TuttiError. */
    json<T>(method: string, path: string, body?: unknown): Promise<T>;
    /**
     * Makes sure the room exists (creating it when `create` and it is
     * missing) and has space: `room_full`, `room_not_found` (a guest's
     * token may join a room, not create it), or the server's refusal.
     */
    ensureRoom(room: string, create?: boolean): Promise<void>;
    /** The STUN/TURN servers the server wants this client to use; none when it gives none. */
    iceServers(room: string): Promise<RTCIceServer[]>;
    /**
     * What the server says of this token for `room` before anyone joins:
     * `ok` (or auth off), or the token's problem. Without a valid room id
     * the room list stands in. Unreachable servers count as `ok` (the join
     * will tell).
     */
    checkAccess(room: string): Promise<{
        access: Access;
        error: TuttiError | null;
    }>;
    /** A guest token for `room` (moderators only): `POST …/invites`. */
    invite(room: string, permissions?: 'speak' | 'listen', ttlSeconds?: number): Promise<Invite>;
    /** The room's WebSocket URL (the token in the query: browsers cannot set headers on it). */
    socketUrl(room: string, events?: EventKind[], node?: string): URL;
}
/**
 * The address that follows a `moved` hand-over: `<api_url>/v1/rooms/{room}/enter?ticket=…`
 * (the node burns the ticket and answers with its page and a token for
 * the room), or the page at `api_url` with auth off. `params` go along
 * (the page's `name`, `processing`, `autojoin`, `muted`, `hand`).
 */
export declare function enterUrl(moved: MovedMessage, params?: Record<string, string>, pagePath?: string): URL;
/**
 * The microphone, with the browser's voice processing on or off; refusals
 * as codes: `insecure` (not https or localhost), `no_webrtc`,
 * `mic_denied`, `mic_missing`, `mic_busy`.
 */
export declare function microphone(processing?: boolean): Promise<MediaStream>;
/** Resolves when ICE gathering is complete, or after `ms` (then what was gathered goes). */
/**
 * `sdp` asking for stereo Opus: `stereo=1` on each Opus payload type's
 * `a=fmtp` line (RFC 7587), added once.
 */
export declare function withStereoOpus(sdp: string): string;
/**
 * One client in one room: `join()`, then its state (`participants`,
 * `muted`, `admin`, `locked`, `connectionState`) and events, and the
 * controls (`setMuted`, `setHand`, the moderator's). A `Room` joins once;
 * after `ended`, make a new one.
 */
export declare class Room extends Emitter<RoomEvents> {
    /** The room's id (it changes when an admin moves the participant: `roomChanged`). */
    room: string;
    readonly name: string;
    readonly transport: Transport;
    readonly api: Api;
    readonly timings: Timings;
    private _state;
    private _id;
    private _muted;
    private _admin;
    private _locked;
    private _waiting;
    private _connectionState;
    private _pc;
    private _stream;
    private _remoteStream;
    private _iceServers;
    private _offerSdp;
    private _answerSdp;
    private _socketResumes;
    /** Every ICE restart attempt of this call (each updated with its outcome). */
    readonly iceRestarts: IceRestartAttempt[];
    private readonly options;
    private readonly members;
    private ws;
    private resumeKey;
    private ownStream;
    private pending;
    private connectTimer;
    private disconnectedTimer;
    private restartTimer;
    private resumeTimer;
    private lostAt;
    private restarting;
    /** Other nodes of the cluster, from the snapshot: where to go if this one is lost. */
    private nodes;
    /** The node this client is on (cluster mode, rooms that spread): its sockets name it. */
    private node;
    constructor(options: RoomOptions);
    /** Where the client is: `idle`, `joining`, `joined`, `ended`. */
    get state(): RoomState;
    /** This client's participant id, once joined. */
    get id(): number | null;
    /** This client is muted (by itself, or by a moderator). */
    get muted(): boolean;
    /** The token manages the room: the moderator's controls work. */
    get admin(): boolean;
    /** The room takes no new joins. */
    get locked(): boolean;
    /** The room waits for its moderator: this client is held muted (with the hold music) until one joins. */
    get waiting(): boolean;
    /** The peer connection's state. */
    get connectionState(): RTCPeerConnectionState;
    /** The peer connection (for its stats). */
    get pc(): RTCPeerConnection | null;
    /** The microphone stream sent. */
    get stream(): MediaStream | null;
    /** The room's mix, once its track arrived. */
    get remoteStream(): MediaStream | null;
    /** The ICE servers the server gave. */
    get iceServers(): RTCIceServer[];
    /** The offer sent. */
    get offerSdp(): string;
    /** The server's answer (the last one, after an ICE restart). */
    get answerSdp(): string;
    /** How many times the socket was lost and resumed (or tried). */
    get socketResumes(): number;
    /** The participants, this client's own first, then by id. */
    get participants(): Participant[];
    /** This client's own participant, once joined. */
    get me(): Participant | null;
    participant(id: number): Participant | null;
    private get live();
    /**
     * Joins: resolves once the answer is applied (the media may still be
     * connecting: `connection` tells); rejects with a TuttiError, and then
     * the room is `ended` (code `moved`: the room is on another node, see
     * `error.moved` and `enterUrl`).
     */
    join(): Promise<void>;
    private connect;
    /** Throws when the call ended while `join()` waited. */
    private check;
    /** Sends the join message; resolves with its answer (or rejects with its error). */
    private exchange;
    private sendMessage;
    /** Leaves the room (the socket's close leaves it too); `ended` with null. */
    leave(): void;
    /** Ends the call for a reason the server or the network gave. */
    private end;
    private teardown;
    /** Mutes or unmutes this client: the track stops sending, and the room is told. */
    setMuted(muted: boolean): void;
    private applyMute;
    /** Raises or lowers this client's hand, or (`id`, a moderator) someone else's. */
    setHand(raised: boolean, id?: number): void;
    /**
     * Sets (a string) or removes (`null`) attributes of this client's
     * participant, or (`id`, a moderator) someone else's; the others stay.
     * Keys under the server's `limits.reserved_attributes` (`sip.`, `tutti.`)
     * are a moderator's only. Bounds: 16 keys, a key of 64 bytes, a value of
     * 1,024, 4,096 bytes in all. Over REST, resolves with the server's refusal
     * or null; over the socket, a refusal comes as `serverError`.
     */
    setAttributes(attributes: Record<string, string | null>, id?: number): Promise<TuttiError | null>;
    /**
     * Sends a data message over the room socket to everyone (or only to the
     * participants `to` names): a topic and any JSON payload, at most the
     * server's `limits.data_max_bytes` (16 KiB by default), at most
     * `limits.data_messages_per_second` (10) per sender. Best effort: it
     * reaches the sockets connected now, in the order sent, and is not
     * stored; a refusal comes as `serverError`. Needs the WebSocket transport
     * (returns false otherwise, or before joining).
     */
    sendData(topic: string, payload: unknown, to?: number[]): boolean;
    /** A moderator's REST call on the room; resolves with the server's refusal (also `serverError`), or null. */
    moderate(method: string, path: string, body?: unknown): Promise<TuttiError | null>;
    /** Grants or revokes someone's right to speak (moderators). */
    setSpeak(id: number, speak: boolean): Promise<TuttiError | null>;
    /** Removes someone; with `banSeconds`, they cannot rejoin for that long (moderators). */
    kick(id: number, banSeconds?: number): Promise<TuttiError | null>;
    /** Mutes everyone but the moderators. */
    muteAll(): Promise<TuttiError | null>;
    /** Locks or unlocks the room (a locked room takes no new joins). */
    setLocked(locked: boolean): Promise<TuttiError | null>;
    /** A guest token for this room (moderators). */
    invite(permissions?: 'speak' | 'listen', ttlSeconds?: number): Promise<Invite>;
    /** A fresh token for the same identity before the socket's expires (`tokenExpiring`). */
    refreshToken(token: string): void;
    private member;
    private applySnapshot;
    /**
     * This client's node is lost (its socket gone and the node unreachable
     * for `nodeLostMs`): asks the other nodes the snapshot named, in turn,
     * for the room. The first that answers gives the `moved` to follow: its
     * own (`reason: 'lost'`, no ticket: the client's token is good on every
     * node), or the one it sends (another node, with a ticket). Null when
     * none answers.
     */
    private findNode;
    private onMessage;
    private onEvent;
    /**
     * The room's socket closed under a call (a network change, a reset). The
     * server keeps the participant for `limits.ws_resume_seconds`: open a new
     * socket and `resume` with the answer's key, every `resumeRetryMs` for
     * `resumeWindowMs`; the media restarts ICE on its own. Refused or out of
     * time: the call ends (`socket_lost`). With `transport: 'rest'` the
     * socket only watches: a new one is opened the same way.
     */
    private socketLost;
    /** The offer, asking for stereo unless `stereo: false`. */
    private withStereo;
    private onTrack;
    private onConnectionState;
    /** Whether the connection dropped and is being restored. */
    get reconnecting(): boolean;
    /**
     * ICE `disconnected` for `disconnectedWaitMs`, or `failed`: restart ICE.
     * Before the answer there is nothing to restart (the connect timeout
     * covers that).
     */
    private onIceState;
    /**
     * One ICE restart: a new offer (new ICE credentials) for our participant,
     * `PATCH …/participants/{id}` (application/sdp), its answer. Failed
     * attempts are retried until `restartGraceMs` after the connection
     * dropped (then `ice_lost`); a refusal (401, 403, 404, 410: the server does
     * not know us, or will not) ends the call at once (`restart_refused`).
     * Called by the client itself; an app may call it too.
     */
    restartIce(): Promise<void>;
}
