//! Routing to a node: the node number in a participant id
//! ([`node_number_of`]) and the `Location` of a redirect to another node
//! ([`redirect_location`]).

/// Bits of a participant id below the node number: a node hands out ids
/// `number << 32 | 1, 2, …` ([`Cluster::node_number`](crate::Cluster::node_number)).
pub const NODE_NUMBER_SHIFT: u32 = 32;

/// The highest node number: ids stay below 2^51 (`MAX_NODE_NUMBER << 32`
/// plus 2^32 joins), under the server's remote participants (from 2^51) and
/// exact as JavaScript numbers (below 2^53). Numbers wrap past it (see
/// [`Cluster::node_number`](crate::Cluster::node_number)).
pub const MAX_NODE_NUMBER: u32 = (1 << 19) - 1;

/// The node number in a participant id (`None`: an id of a single node, or
/// of a node from before node numbers).
pub fn node_number_of(participant: u64) -> Option<u32> {
    u32::try_from(participant >> NODE_NUMBER_SHIFT).ok().filter(|n| (1..=MAX_NODE_NUMBER).contains(n))
}

/// The `Location` of a redirect to `owner_api_url` for `path_and_query`
/// (as received, e.g. `/v1/rooms/r1/whip?x=1`), carrying `ticket` as the
/// `ticket` query parameter (tickets are base64url and `.`: no escaping).
pub fn redirect_location(owner_api_url: &str, path_and_query: &str, ticket: &str) -> String {
    let base = owner_api_url.trim_end_matches('/');
    let sep = if path_and_query.contains('?') { '&' } else { '?' };
    format!("{base}{path_and_query}{sep}ticket={ticket}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_numbers_map_ids_back_and_keep_them_below_2_pow_51() {
        assert_eq!(node_number_of(1), None, "a single node's ids");
        assert_eq!(node_number_of((7 << NODE_NUMBER_SHIFT) + 1), Some(7));
        assert_eq!(node_number_of((7 << NODE_NUMBER_SHIFT) + u64::from(u32::MAX)), Some(7));
        let last = (u64::from(MAX_NODE_NUMBER) << NODE_NUMBER_SHIFT) + u64::from(u32::MAX);
        assert_eq!(node_number_of(last), Some(MAX_NODE_NUMBER));
        assert!(last < 1 << 51, "under the mixer's remote participants");
        assert_eq!(node_number_of(1 << 51), None, "a remote participant's id names no node");
    }

    #[test]
    fn redirect_locations_append_the_ticket() {
        assert_eq!(
            redirect_location("http://b:8080/", "/v1/rooms/r/whip", "t.s"),
            "http://b:8080/v1/rooms/r/whip?ticket=t.s"
        );
        assert_eq!(redirect_location("http://b", "/r?x=1", "t.s"), "http://b/r?x=1&ticket=t.s");
    }
}
