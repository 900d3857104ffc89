//! A room's lock and bans, as the room holds them (the rules are `stage`'s).

use std::collections::HashMap;
use std::time::Instant;

/// A room's lock and bans.
#[derive(Debug, Default)]
pub(crate) struct Stage {
    /// No new joins while set.
    pub(crate) locked: bool,
    /// Ban key (see `ban_key`) → banned until.
    pub(super) bans: HashMap<String, Instant>,
    /// Ban keys of participants moved here by a drain → until when they
    /// come back through the lock.
    pub(super) returning: HashMap<String, Instant>,
}

impl Stage {
    pub(super) fn prune(&mut self, now: Instant) {
        self.bans.retain(|_, until| *until > now);
        self.returning.retain(|_, until| *until > now);
    }
}
