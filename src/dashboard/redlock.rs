//! The lock page's RedLock section: what each RedLock node says of the name (who holds it
//! there, free, or unreachable), for a server started with `--redlock-nodes`.

use super::format::{holder_label, join_or_dash, ttl_text};
use crate::leases::Redlock;
use crate::leases::redlock::inspect::NodeState;
use crate::locks::LockName;

/// One RedLock node's row.
pub struct NodeRow {
    /// The node's URL, as given (credentials cut off).
    pub node: String,
    /// `held`, `free` or `unreachable`.
    pub state: &'static str,
    /// Who holds it there (lease id or Redisson field), its TTL left, or why unreachable.
    pub detail: String,
    pub fence: String,
}

impl NodeRow {
    fn of(state: NodeState) -> Self {
        let node = state.url.to_string();
        match state.view {
            Err(why) => Self {
                node,
                state: "unreachable",
                detail: why,
                fence: "—".to_owned(),
            },
            Ok(Some(view)) if !view.holders.is_empty() => Self {
                node,
                state: "held",
                detail: format!(
                    "{} (TTL left {})",
                    join_or_dash(view.holders.iter().map(holder_label)),
                    ttl_text(view.remaining_ms)
                ),
                fence: view.fencing_counter.0.to_string(),
            },
            Ok(view) => Self {
                node,
                state: "free",
                detail: String::new(),
                fence: view.map_or_else(|| "0".to_owned(), |v| v.fencing_counter.0.to_string()),
            },
        }
    }
}

/// Each node's row for `name`, when RedLock is configured.
pub(super) async fn rows(redlock: Option<Redlock>, name: &LockName) -> Vec<NodeRow> {
    let Some(redlock) = redlock else {
        return Vec::new();
    };
    redlock
        .lock_states(name)
        .await
        .into_iter()
        .map(NodeRow::of)
        .collect()
}
