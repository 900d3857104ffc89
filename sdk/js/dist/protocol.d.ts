/** The WebSocket protocol version this client speaks. */
export type ProtocolVersion = 1;
/** A participant as the room shows it (`$defs/member`). */
export interface Member {
    id: number;
    name: string;
    /** The identity (`sub`) of the token it joined with. */
    identity?: string;
    talking?: boolean;
    muted?: boolean;
    /** It may not speak (no `speak` permission, or revoked). */
    listen_only?: boolean;
    /** ICE and DTLS are up. */
    connected?: boolean;
    /** Its hand is raised. */
    hand?: boolean;
    /** It joined with an admin token for the room. */
    admin?: boolean;
    /** It hears no one. */
    deaf?: boolean;
    /** Its attributes: string keys and values (its token's, then as it or an admin changed them). */
    attributes?: Record<string, string>;
}
/** Why someone left (`left.reason`). */
export type LeftReason = 'left' | 'timed_out' | 'failed' | 'room_closed' | 'kicked' | 'moved' | 'moved_room' | 'replaced' | 'token_expired';
/** One room event, an element of `events`. */
export type RoomEventMessage = {
    type: 'joined';
    id: number;
    name: string;
    attributes?: Record<string, string>;
} | {
    type: 'left';
    id: number;
    reason: LeftReason | string;
} | {
    type: 'talking';
    id: number;
    talking: boolean;
} | {
    type: 'muted';
    id: number;
    muted: boolean;
} | {
    type: 'muted_all';
    count: number;
} | {
    type: 'permissions';
    id: number;
    speak: boolean;
} | {
    type: 'hand';
    id: number;
    raised: boolean;
} | {
    type: 'deaf';
    id: number;
    deaf: boolean;
} | {
    type: 'attributes_changed';
    id: number;
    attributes: Record<string, string>;
} | {
    type: 'room_updated';
    locked: boolean;
    max_participants?: number;
    max_speakers?: number;
} | {
    type: 'draining';
    deadline: number;
    message: string;
} | {
    type: 'waiting';
    waiting: boolean;
} | {
    type: 'room_closed';
} | {
    type: 'shutdown';
    message: string;
} | {
    type: 'recording_started';
    file: string;
} | {
    type: 'recording_stopped';
    file: string;
    reason: string;
    error?: string;
} | {
    type: 'recording_finished';
    file: string;
    bytes: number;
    duration_seconds: number;
    reason: string;
} | {
    type: 'playback_started';
    id: number;
    file: string;
    purpose: 'announcement' | 'hold' | string;
    loop: boolean;
} | {
    type: 'playback_stopped';
    id: number;
    file: string;
    reason: string;
} | {
    type: 'playback_finished';
    id: number;
    file: string;
} | {
    type: 'whisper_opened';
    id: number;
    speakers: number[];
    listeners: number[];
} | {
    type: 'whisper_changed';
    id: number;
    speakers: number[];
    listeners: number[];
} | {
    type: 'whisper_closed';
    id: number;
    reason: 'closed' | 'empty' | string;
}
/** A phone caller pressed a key (`0`-`9`, `*`, `#`, `A`-`D`). */
 | {
    type: 'keypad';
    id: number;
    digit: string;
};
/** The room's snapshot: the first message on the room's node. */
export interface RoomMessage {
    type: 'room';
    protocol: ProtocolVersion;
    room: string;
    /** The socket's token manages the room. */
    admin: boolean;
    locked: boolean;
    /** The room waits for its moderator: those who are not one are held muted, with the hold music. */
    waiting?: boolean;
    participants: Member[];
    speakers?: number[];
    /** Whisper channels open now: `speakers` are heard by the channel's members only. */
    whispers?: {
        id: number;
        speakers: number[];
        listeners: number[];
    }[];
    /** Participants still to come in `participants` messages. */
    more?: number;
    /** Cluster mode, rooms that spread over nodes: this node (a socket naming it stays here). */
    node?: string;
    /**
     * Cluster mode, rooms that spread over nodes: other nodes of the
     * cluster, where the room goes on if this node is lost.
     */
    nodes?: {
        node: string;
        api_url: string;
    }[];
}
/**
 * Cluster mode: the room is on another node, or went there (`reason:
 * drain`), or this client's node was lost and the room goes on there
 * (`reason: lost`, made by the client: no ticket, the client's token is
 * good there).
 */
export interface MovedMessage {
    type: 'moved';
    protocol: ProtocolVersion;
    room: string;
    node: string;
    api_url: string;
    /** Single-use, for `…/enter` (absent with auth disabled). */
    ticket?: string;
    reason?: 'drain' | 'lost';
}
/**
 * A breakout: an admin moved the socket's participant to another room of
 * the same node (same connection, same id). A `room` snapshot of the new
 * room follows; the socket carries its events from then on.
 */
export interface RoomChangedMessage {
    type: 'room_changed';
    /** The room it is in now. */
    room: string;
    /** The room it left. */
    from: string;
    id: number;
}
/** A message the server sends. */
export type ServerMessage = RoomMessage | {
    type: 'participants';
    participants: Member[];
    more: number;
} | {
    type: 'events';
    events: RoomEventMessage[];
} | {
    type: 'answer';
    id: number;
    sdp: string;
    resume?: string;
} | {
    type: 'resumed';
    id: number;
} | DataMessage | {
    type: 'error';
    code: string;
    message: string;
} | {
    type: 'token_expiring';
    expires_at: number;
} | {
    type: 'token_accepted';
    expires_at: number;
} | MovedMessage | RoomChangedMessage | RoomEventMessage;
/** A data message (`from` null: the room's backend). */
export interface DataMessage {
    type: 'data';
    from: number | null;
    topic: string;
    payload: unknown;
}
/** The event kinds a socket may subscribe to. */
export type EventKind = 'joined' | 'left' | 'talking' | 'muted' | 'permissions' | 'hand' | 'room_updated' | 'attributes_changed';
/** A message a client sends. */
export type ClientMessage = {
    type: 'join';
    sdp: string;
    name?: string;
} | {
    type: 'resume';
    id: number;
    key: string;
} | {
    type: 'mute';
    muted: boolean;
} | {
    type: 'hand';
    raised: boolean;
    id?: number | null;
} | {
    type: 'set_attributes';
    attributes: Record<string, string | null>;
    id?: number | null;
} | {
    type: 'data';
    topic: string;
    payload: unknown;
    to?: number[];
} | {
    type: 'leave';
} | {
    type: 'subscribe';
    events: EventKind[];
} | {
    type: 'token';
    token: string;
};
