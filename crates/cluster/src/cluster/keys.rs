//! The Redis keys of the directory, under the cluster's `key_prefix` (the
//! crate docs list them with what each holds).

pub(super) struct Keys {
    pub(super) prefix: String,
}

impl Keys {
    pub(super) fn nodes(&self) -> String {
        format!("{}nodes", self.prefix)
    }
    pub(super) fn node_prefix(&self) -> String {
        format!("{}node:", self.prefix)
    }
    pub(super) fn node(&self, id: &str) -> String {
        format!("{}node:{id}", self.prefix)
    }
    pub(super) fn rooms(&self) -> String {
        format!("{}rooms", self.prefix)
    }
    pub(super) fn room(&self, room: &str) -> String {
        format!("{}room:{room}", self.prefix)
    }
    // `lease:<r>`, not `room:<r>:lease`: a room named `x:lease` must not collide.
    pub(super) fn lease(&self, room: &str) -> String {
        format!("{}lease:{room}", self.prefix)
    }
    pub(super) fn ticket(&self, nonce: &str) -> String {
        format!("{}ticket:{nonce}", self.prefix)
    }
    pub(super) fn span(&self, room: &str) -> String {
        format!("{}span:{room}", self.prefix)
    }
    // Node ids hold no ':', so the last one splits room and node.
    pub(super) fn roster(&self, room: &str, node: &str) -> String {
        format!("{}roster:{room}:{node}", self.prefix)
    }
    pub(super) fn node_numbers(&self) -> String {
        format!("{}node_numbers", self.prefix)
    }
    pub(super) fn number(&self, n: u32) -> String {
        format!("{}number:{n}", self.prefix)
    }
}
