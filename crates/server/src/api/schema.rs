//! What the API's answers and the room WebSocket look like, for the
//! OpenAPI description ([`super::openapi`]): the error body, the
//! WebSocket's protocol version, and the shapes handlers build with
//! `serde_json::json!` (described here; the code that builds them stays as
//! it is, and `tests/openapi.rs` checks real answers against them). A leaf:
//! handlers use it, it uses none of them.

use utoipa::ToSchema;

/// The version of the room WebSocket's protocol (`?protocol=`, and the
/// `protocol` field of its first message). Raised when a message changes
/// in a way an existing client would misread.
pub(crate) const WS_PROTOCOL: u32 = 1;

/// Every API error: an HTTP status with this JSON body. `code` is stable
/// (clients branch on it; see docs/api/errors.md), `message` is a sentence
/// for people.
#[derive(ToSchema)]
#[schema(example = json!({"code": "room_not_found", "message": "no room 'demo'"}))]
pub(crate) struct ErrorBody {
    /// The stable, machine-readable code (`token_missing`, `room_not_found`, …).
    #[allow(dead_code)] // described, never built: Refusal renders this shape
    code: String,
    /// What went wrong, for a person.
    #[allow(dead_code)]
    message: String,
}

/// Shapes the handlers build with `serde_json::json!`, described here (the
/// handlers' code stays as it is; the test checks real answers against them).
#[allow(dead_code)] // described, never built
pub(crate) mod shapes {
    use utoipa::ToSchema;

    /// A participant as the room shows it.
    #[derive(ToSchema)]
    pub(crate) struct Member {
        id: u64,
        name: String,
        /// The identity (`sub`) of the token it joined with.
        identity: String,
        talking: bool,
        muted: bool,
        /// It may not speak (its token lacks `speak`, or an admin revoked it).
        listen_only: bool,
        /// Whether ICE and DTLS are up.
        connected: bool,
        /// Its hand is raised.
        hand: bool,
        /// It is sent nothing: it hears no one.
        deaf: bool,
        /// It joined with an admin token for the room.
        admin: bool,
        /// Its attributes (string keys and values: its token's, then as it
        /// or an admin changed them).
        attributes: std::collections::BTreeMap<String, String>,
        /// The node hosting it (cluster mode; a room spread over nodes
        /// lists every node's participants).
        node: Option<String>,
    }

    /// Where a room held by another node of the cluster is.
    #[derive(ToSchema)]
    pub(crate) struct RoomElsewhere {
        /// The room's id and its node.
        room: RoomRef,
        /// The node holding it.
        node: String,
        /// That node's API URL.
        api_url: String,
    }

    /// A room's id and node.
    #[derive(ToSchema)]
    pub(crate) struct RoomRef {
        id: String,
        node: String,
    }

    /// A room of the cluster's directory held by another node (`GET /v1/rooms`, cluster mode).
    #[derive(ToSchema)]
    pub(crate) struct RemoteRoom {
        id: String,
        /// The node holding it (null: none holds it now).
        node: Option<String>,
        /// That node's API URL.
        api_url: Option<String>,
    }

    /// A room's voice processing.
    #[derive(ToSchema)]
    pub(crate) struct RoomVoice {
        /// `auto`, `on` or `off`.
        noise_suppression: String,
        /// Loudness normalisation on for the room.
        loudness: bool,
    }

    /// A participant's voice processing.
    #[derive(ToSchema)]
    pub(crate) struct ParticipantVoice {
        /// Noise suppressed while they speak (their setting, else the room's).
        noise_suppression: bool,
        /// Loudness normalised while they speak (their setting, else the room's).
        loudness: bool,
        /// The normaliser's current gain, dB.
        loudness_gain_db: f32,
    }

    /// `PATCH /v1/rooms/{room}/participants/{id}` (JSON): the participant now.
    #[derive(ToSchema)]
    pub(crate) struct ParticipantChanged {
        id: u64,
        muted: bool,
        /// The gain set by this request (null: unchanged).
        gain: Option<f32>,
        /// It may speak.
        speak: bool,
        hand: bool,
        /// It is sent nothing: it hears no one.
        deaf: bool,
        /// Its attributes now.
        attributes: std::collections::BTreeMap<String, String>,
        voice: ParticipantVoice,
    }

    /// `GET /v1/rooms/{room}/ice-servers`.
    #[derive(ToSchema)]
    pub(crate) struct IceServers {
        ice_servers: Vec<IceServer>,
    }

    /// One entry of `RTCPeerConnection({iceServers})`.
    #[derive(ToSchema)]
    pub(crate) struct IceServer {
        urls: Vec<String>,
        /// TURN only: the REST username (`expiry:user`).
        username: Option<String>,
        /// TURN only: the credential for `username`.
        credential: Option<String>,
    }

    /// `GET /v1/node` and `POST /v1/node/drain`.
    #[derive(ToSchema)]
    pub(crate) struct NodeSummary {
        /// The node's id (cluster mode; null on a single node).
        node: Option<String>,
        draining: bool,
        /// When the drain ends at the latest, Unix seconds (null: not draining).
        drain_deadline: Option<u64>,
        rooms: usize,
        participants: usize,
    }

    /// A recording as `GET …/recording` shows it (`{"active": false}` alone when none ran).
    #[derive(ToSchema)]
    pub(crate) struct Recording {
        /// Whether it is still writing.
        active: bool,
        /// The file's name in the recordings directory.
        file: Option<String>,
        /// Unix seconds.
        started_at: Option<u64>,
        bytes: Option<u64>,
        frames: Option<u64>,
        /// Ticks nobody was heard in, written as silence.
        gap_frames: Option<u64>,
        /// Frames the writer could not keep up with.
        dropped_frames: Option<u64>,
        /// `DELETE` only: the writer is still closing the file.
        finishing: Option<bool>,
        /// With `per_speaker`: each speaker's file so far (`{participant, node, file, bytes}`).
        tracks: Option<Vec<TrackState>>,
        /// A node recording its speakers for a spread room's recording started on another node (no `file`: no mix here).
        node: Option<String>,
        /// 2: a spatial room's stereo render; 1: mono.
        channels: Option<u8>,
    }

    /// A speaker's file of a per-speaker recording.
    #[derive(ToSchema)]
    pub(crate) struct TrackState {
        participant: u64,
        /// In a cluster, the node whose recordings directory holds the file.
        node: Option<String>,
        file: String,
        bytes: u64,
    }

    /// `DELETE …/recording`: the finished file.
    #[derive(ToSchema)]
    pub(crate) struct RecordingFinished {
        file: String,
        bytes: u64,
        duration_seconds: f64,
        /// `stopped`, `limit`, `quota` or `error`.
        reason: String,
        /// What failed, for `error`.
        error: Option<String>,
        /// With `per_speaker`: each speaker's file, and the sidecar (JSON) that places them on the room's timeline.
        tracks: Option<Vec<TrackState>>,
        sidecar: Option<String>,
    }

    /// `DELETE …/recording`: finished, or still closing after 5 s.
    #[derive(ToSchema)]
    #[serde(untagged)]
    pub(crate) enum RecordingStopped {
        Finished(RecordingFinished),
        Finishing(Recording),
    }

    /// A room's RTP out.
    #[derive(ToSchema)]
    pub(crate) struct RtpOut {
        /// The receiver, `ip:port`.
        address: String,
        ssrc: u32,
        /// Always 111 (Opus).
        payload_type: u8,
        /// The SDP a receiver (ffmpeg, a broadcast encoder) opens.
        sdp: String,
        packets: u64,
        bytes: u64,
        /// Sends that failed.
        failed: u64,
        /// 2: a spatial room's stereo render as stereo Opus; 1: mono.
        channels: u8,
    }
}
