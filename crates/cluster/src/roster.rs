//! The participants of a room spread over nodes, across its nodes: each
//! node hosting the room keeps its own participants' public summaries in
//! Redis, and any node of the span reads the others'.
//!
//! ```text
//! node A: its participants' changes ─► (the server coalesces) ─► Cluster::write_rosters
//!         ─► MULTI: [DEL] HSET/HDEL roster:<room>:<A> <id> <summary JSON>, PEXPIRE; EXEC
//!         Cluster::join_spans (every few seconds) ─► PEXPIRE roster:<room>:<A> with the span key
//! node B: Cluster::rosters(room, span members at the room's epoch) ─► one script:
//!         per member, HGETALL roster:<room>:<member> if it holds at most `cap` entries
//! ```
//!
//! Redis is not an authority: the reader names the nodes it reads (the
//! span's members at the room's epoch whose signed records exist: a roster
//! of a node outside the span is never read), and keeps an entry only if
//! it is signed by that node (below), its field is a participant id
//! carrying that node's number (from its signed record), its summary a
//! JSON object under [`MAX_ROSTER_ENTRY_BYTES`] naming the same id.
//!
//! Signed: each value is the summary with its signature as a last member
//! `"sig"` (base64url HMAC, key purpose `cluster-roster`, of the room, the
//! node, the id and the summary without it), so that a writer to Redis
//! can neither add a participant to a node's roster nor change one, nor
//! move an entry to another room or node (a node from before signed
//! rosters reads the same value as a summary with one more field). A roster of more than
//! `cap` entries (the room's `max_participants`: no node hosts more) is
//! not read at all. A node writes only its own roster, at most the room's
//! `max_participants` entries (the server's bound). The key lives as long
//! as the span key (three lease TTLs past its last refresh); a node that
//! leaves the span deletes it.

use std::collections::HashMap;

use redis::{Script, Value};

use crate::record::PartsKey;

/// Longest participant summary kept (bytes of JSON).
pub const MAX_ROSTER_ENTRY_BYTES: usize = 2048;

/// Reads several nodes' rosters of a room, each only if small enough.
///
/// KEYS: the rosters. ARGV: the most entries one may hold. Returns, per
/// key, its `HGETALL` (a flat field/value array) or `false` (nil) when it
/// holds more than ARGV\[1] entries: a read pins no more than that.
pub(crate) fn read_script() -> Script {
    Script::new(
        r"
local out = {}
for i, k in ipairs(KEYS) do
  if redis.call('HLEN', k) <= tonumber(ARGV[1]) then out[i] = redis.call('HGETALL', k) else out[i] = false end
end
return out
",
    )
}

/// A change to this node's roster of a room.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RosterWrite {
    /// The room.
    pub room: String,
    /// The whole roster is `upserts` (what Redis held is dropped first).
    pub full: bool,
    /// Participants added or changed: id and public summary (JSON object).
    pub upserts: Vec<(u64, String)>,
    /// Participants gone.
    pub removals: Vec<u64>,
}

/// A participant of another node of a room's span, as its roster holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct RosterEntry {
    /// The node hosting it.
    pub node_id: String,
    /// Its id (carrying that node's number).
    pub id: u64,
    /// Its public summary, as that node wrote it (a JSON object).
    pub summary: serde_json::Value,
}

/// What [`Cluster::rosters`](crate::Cluster::rosters) read: the entries, and
/// how many were refused (a field not an id of that node, a summary not
/// one, or a whole roster over the cap, counted as one).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Rosters {
    /// Every member's entries, by node, then id.
    pub entries: Vec<RosterEntry>,
    /// Entries (or whole rosters) ignored.
    pub refused: usize,
}

/// `"sig":"` + 43 base64url characters (an HMAC-SHA256) + `"}`: the tail
/// [`seal_summary`] puts in place of a summary's closing brace.
const SIG_TAIL: usize = 7 + 43 + 2;

/// Which roster an entry belongs to: the room and the node, and the key
/// that signs the entries.
pub(crate) struct RosterOf<'a> {
    pub key: &'a PartsKey,
    pub room: &'a str,
    pub node_id: &'a str,
}

impl RosterOf<'_> {
    fn sign(&self, id: &str, summary: &str) -> String {
        self.key.sign(&[self.room.as_bytes(), self.node_id.as_bytes(), id.as_bytes(), summary.as_bytes()])
    }

    /// `summary` (a JSON object) with its signature as a last member.
    pub fn seal_summary(&self, id: u64, summary: &str) -> String {
        let Some(body) = summary.trim_end().strip_suffix('}') else { return summary.to_owned() };
        let sep = if body.trim_end().ends_with('{') { "" } else { "," };
        let sig = self.sign(&id.to_string(), &format!("{body}}}"));
        format!("{body}{sep}\"sig\":\"{sig}\"}}")
    }

    /// The summary of a [`seal_summary`](Self::seal_summary) value whose
    /// signature checks out for field `id`.
    fn open_summary(&self, id: &str, value: &str) -> Option<String> {
        let cut = value.len().checked_sub(SIG_TAIL)?;
        let (body, tail) = (value.get(..cut)?, value.get(cut..)?);
        let sig = tail.strip_prefix("\"sig\":\"")?.strip_suffix("\"}")?;
        let summary = format!("{}}}", body.strip_suffix(',').unwrap_or(body));
        let signed =
            self.key.verify(&[self.room.as_bytes(), self.node_id.as_bytes(), id.as_bytes(), summary.as_bytes()], sig);
        signed.then_some(summary)
    }
}

/// The entries of a node's roster as Redis holds it (`fields`: its
/// `HGETALL`), those that pass the checks above (`of_node`: whether an id
/// carries that node's number), by id; and how many did not.
pub(crate) fn parse_roster(
    of: &RosterOf<'_>,
    of_node: impl Fn(u64) -> bool,
    fields: HashMap<String, String>,
) -> (Vec<RosterEntry>, usize) {
    let mut refused = 0;
    let mut entries: Vec<RosterEntry> = fields
        .into_iter()
        .filter_map(|(field, value)| {
            let entry = of.open_summary(&field, &value).and_then(|s| parse_entry(of.node_id, &of_node, &field, &s));
            if entry.is_none() {
                refused += 1;
            }
            entry
        })
        .collect();
    entries.sort_by_key(|e| e.id);
    (entries, refused)
}

fn parse_entry(node_id: &str, of_node: impl Fn(u64) -> bool, field: &str, summary: &str) -> Option<RosterEntry> {
    let id: u64 = field.parse().ok()?;
    if !of_node(id) || summary.len() > MAX_ROSTER_ENTRY_BYTES {
        return None;
    }
    let summary: serde_json::Value = serde_json::from_str(summary).ok()?;
    if summary.get("id").and_then(serde_json::Value::as_u64) != Some(id) {
        return None;
    }
    Some(RosterEntry { node_id: node_id.to_owned(), id, summary })
}

/// The script's reply, per key: the roster's fields, or `None` (over the cap).
pub(crate) fn script_reply(reply: Value, keys: usize) -> Option<Vec<Option<HashMap<String, String>>>> {
    let Value::Array(items) = reply else { return None };
    if items.len() > keys {
        return None;
    }
    let mut out: Vec<Option<HashMap<String, String>>> =
        items.into_iter().map(|v| if v == Value::Nil { None } else { redis::from_redis_value(v).ok() }).collect();
    // A trailing nil is left out of a Lua array.
    out.resize(keys, None);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const B: u32 = 2;
    fn id(n: u64) -> u64 {
        (u64::from(B) << 32) | n
    }

    #[test]
    fn entries_of_the_node_are_kept_and_forged_ones_refused() {
        let key = PartsKey::new(b"0123456789abcdef0123456789abcdef", crate::record::ROSTER_PURPOSE);
        let of = RosterOf { key: &key, room: "r", node_id: "node-b" };
        let sealed = |n: u64, summary: String| (n.to_string(), of.seal_summary(n, &summary));
        let other_room = RosterOf { room: "s", ..of };
        let other_node = RosterOf { node_id: "node-c", ..of };
        let tampered = of.seal_summary(id(10), &format!(r#"{{"id":{},"name":"dan"}}"#, id(10)));
        let fields: HashMap<String, String> = [
            sealed(id(1), format!(r#"{{"id":{},"name":"ann","muted":false}}"#, id(1))),
            sealed(id(2), format!(r#"{{"id":{},"name":"bob"}}"#, id(2))),
            // Another node's number, a field that is no id, an id that is not the field's,
            // a summary that is no object, one that is too long.
            sealed((3u64 << 32) | 1, format!(r#"{{"id":{}}}"#, (3u64 << 32) | 1)),
            ("bob".into(), of.seal_summary(1, r#"{"id":1}"#)),
            sealed(id(3), format!(r#"{{"id":{}}}"#, id(4))),
            sealed(id(5), "[1,2]".into()),
            sealed(id(6), format!(r#"{{"id":{},"name":"{}"}}"#, id(6), "x".repeat(MAX_ROSTER_ENTRY_BYTES))),
            // An id of no node at all (a single node's numbering).
            sealed(7, r#"{"id":7}"#.into()),
            // Not signed; signed for another room, for another node; changed after signing.
            (id(7).to_string(), format!(r#"{{"id":{},"name":"eve","admin":true}}"#, id(7))),
            (id(8).to_string(), other_room.seal_summary(id(8), &format!(r#"{{"id":{}}}"#, id(8)))),
            (id(9).to_string(), other_node.seal_summary(id(9), &format!(r#"{{"id":{}}}"#, id(9)))),
            (id(10).to_string(), tampered.replace(r#""name":"dan""#, r#""name":"dan","admin":true"#)),
        ]
        .into_iter()
        .collect();
        let (entries, refused) = parse_roster(&of, |id| id >> 32 == u64::from(B), fields);
        assert_eq!(entries.iter().map(|e| e.id).collect::<Vec<_>>(), vec![id(1), id(2)]);
        assert!(entries.iter().all(|e| e.node_id == "node-b"));
        assert_eq!(entries[0].summary["name"], "ann");
        assert_eq!(entries[0].summary.get("sig"), None, "the signature is not part of the summary");
        assert_eq!(refused, 10);
    }

    #[test]
    fn a_sealed_summary_is_json_and_opens_to_itself() {
        let key = PartsKey::new(b"0123456789abcdef0123456789abcdef", crate::record::ROSTER_PURPOSE);
        let of = RosterOf { key: &key, room: "r", node_id: "node-b" };
        for summary in [r#"{"id":1,"name":"ann"}"#, "{}", r#"{ "id" : 1 }"#] {
            let sealed = of.seal_summary(1, summary);
            let json: serde_json::Value = serde_json::from_str(&sealed).expect("still JSON");
            assert!(json["sig"].is_string(), "{sealed}");
            assert_eq!(of.open_summary("1", &sealed).as_deref(), Some(summary), "{sealed}");
            assert_eq!(of.open_summary("2", &sealed), None, "under another id");
        }
        assert_eq!(of.open_summary("1", r#"{"id":1}"#), None, "unsigned");
        assert_eq!(of.open_summary("1", ""), None);
    }

    #[test]
    fn the_scripts_reply_is_read_per_key() {
        let roster = Value::Array(vec![
            Value::BulkString(b"4294967297".to_vec()),
            Value::BulkString(br#"{"id":4294967297}"#.to_vec()),
        ]);
        let reply = script_reply(Value::Array(vec![roster, Value::Nil, Value::Array(vec![])]), 4).expect("reply");
        assert_eq!(reply.len(), 4);
        assert_eq!(reply[0].as_ref().map(HashMap::len), Some(1));
        assert_eq!(reply[1], None, "over the cap");
        assert_eq!(reply[2].as_ref().map(HashMap::len), Some(0), "no roster");
        assert_eq!(reply[3], None, "a trailing nil Lua left out");
        assert_eq!(script_reply(Value::Nil, 1), None);
        assert_eq!(script_reply(Value::Array(vec![Value::Nil, Value::Nil]), 1), None, "more replies than keys");
    }
}
