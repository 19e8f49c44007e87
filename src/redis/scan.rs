//! Walking the keyspace: one `SCAN` page at a time, so a walk is bounded per call and goes on
//! where the last one stopped. On one server a cursor is Redis's own. In a cluster each
//! primary has its own keyspace and cursors (redis-rs would send a bare `SCAN` to one random
//! node): a walk goes through the primaries one after the other, in the topology's order,
//! and its cursor names the primary in its top bits. (A walk that spans a failover or a slot
//! move may miss or repeat what moved, as Redis's own SCAN may across a rehash.)

use super::Redis;

/// Where a walk goes on (0: from the start; a page that returns 0 ended the walk).
pub type ScanCursor = u64;

/// The bits below the primary's index: a node's own cursor never reaches them (it counts
/// hash-table buckets, a handful of bits past the table's size).
const NODE_SHIFT: u32 = 48;

impl Redis {
    /// One page of the keys matching `pattern`, walking about `count` buckets from `cursor`:
    /// the keys found and where the next page starts.
    pub async fn scan_page(
        &self,
        cursor: ScanCursor,
        pattern: &str,
        count: usize,
    ) -> ::redis::RedisResult<(ScanCursor, Vec<String>)> {
        let nodes = self.nodes();
        let index = usize::try_from(cursor >> NODE_SHIFT).unwrap_or(usize::MAX);
        let Some(node) = nodes.get(index) else {
            // A cursor from a bigger topology than now: the walk is over.
            return Ok((0, Vec::new()));
        };
        let mut cmd = ::redis::cmd("SCAN");
        cmd.arg(cursor & ((1 << NODE_SHIFT) - 1))
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(count);
        let (next, keys): (u64, Vec<String>) = self.on_node(node.as_deref(), cmd).await?;
        if next >> NODE_SHIFT != 0 {
            return Err(::redis::RedisError::from((
                ::redis::ErrorKind::Parse,
                "a SCAN cursor too large to page across nodes",
            )));
        }
        let next = match (next, index + 1 < nodes.len()) {
            (0, true) => ((index + 1) as u64) << NODE_SHIFT,
            (0, false) => 0,
            (next, _) => ((index as u64) << NODE_SHIFT) | next,
        };
        Ok((next, keys))
    }
}
