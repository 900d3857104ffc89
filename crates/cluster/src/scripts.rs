//! The Lua scripts that make claims, renewals and releases atomic.
//!
//! Each runs as one command inside Redis ([`redis::Script`] sends EVALSHA and
//! falls back to EVAL when Redis has not seen the script yet, e.g. after a
//! restart). Node keys are built inside the scripts from a prefix passed as
//! an argument: fine on one Redis (or a primary with replicas); Redis
//! Cluster's slot checks would need hash tags, which this crate does not use.

use redis::Script;

/// Claim a room for a node (itself, or the node a placer chose).
///
/// KEYS: room hash, lease, rooms set. ARGV: node id, lease TTL (ms), node
/// key prefix, room name, config JSON ('' = keep the stored one), its
/// signature (`config_sig`).
///
/// If a lease exists and its owner's node key exists, the owner stands
/// (its lease is extended when it is the claimant). Otherwise, if the
/// claimant's own node key exists, the epoch goes up, the claimant becomes
/// owner, the lease is set, and the claimant's `placements` counter goes up
/// (so other placers see the pending room before its next heartbeat).
///
/// Returns `{status, owner, epoch, field, value, …}` (the owner's whole
/// registry record, so that the caller can check its signature: Redis is
/// not trusted with where clients go) with status `owner` (someone live
/// holds it, maybe the claimant), `claimed`, or `dead` (the claimant's node
/// key is gone; no fields).
const CLAIM: &str = r#"
local nodes = ARGV[3]
local lease = redis.call('GET', KEYS[2])
if lease then
  local owner, epoch = string.match(lease, '^(.+):(%d+)$')
  if owner and redis.call('EXISTS', nodes .. owner) == 1 then
    if owner == ARGV[1] then redis.call('PEXPIRE', KEYS[2], ARGV[2]) end
    local out = {'owner', owner, epoch}
    for _, v in ipairs(redis.call('HGETALL', nodes .. owner)) do out[#out + 1] = v end
    return out
  end
end
if redis.call('EXISTS', nodes .. ARGV[1]) == 0 then
  return {'dead', ARGV[1], '0'}
end
local epoch = redis.call('HINCRBY', KEYS[1], 'epoch', 1)
redis.call('HSET', KEYS[1], 'owner', ARGV[1])
if ARGV[5] ~= '' then redis.call('HSET', KEYS[1], 'config', ARGV[5], 'config_sig', ARGV[6]) end
redis.call('PERSIST', KEYS[1])
redis.call('SET', KEYS[2], ARGV[1] .. ':' .. epoch, 'PX', ARGV[2])
redis.call('SADD', KEYS[3], ARGV[4])
redis.call('HINCRBY', nodes .. ARGV[1], 'placements', 1)
local out = {'claimed', ARGV[1], tostring(epoch)}
for _, v in ipairs(redis.call('HGETALL', nodes .. ARGV[1])) do out[#out + 1] = v end
return out
"#;

/// Renew a node's leases (compare-and-extend), many rooms in one call.
///
/// KEYS: rooms set, then per room its hash and its lease. ARGV: node id,
/// lease TTL (ms), then per room its name and the epoch the node holds.
///
/// Per room: `ok` (extended); `restored` (the lease had lapsed, e.g. Redis
/// was unreachable or restarted empty, and nobody else took the room: set
/// again at the same epoch); or `lost:<holder>` (another node or epoch
/// holds it, or the room was closed elsewhere: the node must close its copy).
const RENEW: &str = r#"
local out = {}
local n = (#KEYS - 1) / 2
for i = 1, n do
  local room, lease = KEYS[2 * i], KEYS[2 * i + 1]
  local name, epoch = ARGV[1 + 2 * i], ARGV[2 + 2 * i]
  local want = ARGV[1] .. ':' .. epoch
  local cur = redis.call('GET', lease)
  if cur == want then
    redis.call('PEXPIRE', lease, ARGV[2])
    out[i] = 'ok'
  elseif not cur then
    local h = redis.call('HMGET', room, 'owner', 'epoch')
    if (not h[2]) or (h[1] == ARGV[1] and h[2] == epoch) then
      redis.call('HSET', room, 'owner', ARGV[1], 'epoch', epoch)
      redis.call('PERSIST', room)
      redis.call('SET', lease, want, 'PX', ARGV[2])
      redis.call('SADD', KEYS[1], name)
      out[i] = 'restored'
    else
      out[i] = 'lost:' .. (h[1] or '') .. ':' .. (h[2] or '')
    end
  else
    out[i] = 'lost:' .. cur
  end
end
return out
"#;

/// Release a room the node holds (compare-and-delete): the lease goes, the
/// room leaves the directory, its hash keeps only the epoch (so the next
/// claim's epoch is higher) and expires after the retention.
///
/// KEYS: room hash, lease, rooms set. ARGV: node id, epoch, room name,
/// retention (s). Returns 1 when released, 0 when someone else holds it.
const RELEASE: &str = r#"
local want = ARGV[1] .. ':' .. ARGV[2]
local cur = redis.call('GET', KEYS[2])
local h = redis.call('HMGET', KEYS[1], 'owner', 'epoch')
if cur == want or ((not cur) and h[1] == ARGV[1] and h[2] == ARGV[2]) then
  redis.call('DEL', KEYS[2])
  redis.call('HDEL', KEYS[1], 'owner', 'config', 'config_sig')
  redis.call('EXPIRE', KEYS[1], ARGV[4])
  redis.call('SREM', KEYS[3], ARGV[3])
  return 1
end
return 0
"#;

/// The scripts, hashed once.
pub(crate) struct Scripts {
    pub claim: Script,
    pub renew: Script,
    pub release: Script,
}

impl Scripts {
    pub fn new() -> Self {
        Self { claim: Script::new(CLAIM), renew: Script::new(RENEW), release: Script::new(RELEASE) }
    }
}
