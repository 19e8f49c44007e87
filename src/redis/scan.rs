//! Walking the keyspace: one `SCAN` page at a time, so a walk is bounded per call and goes on
//! where the last one stopped. On one server a cursor is Redis's own; a mode with several
//! nodes makes it name the node too.

use super::Redis;

/// Where a walk goes on (0: from the start; a page that returns 0 ended the walk).
pub type ScanCursor = u64;

impl Redis {
    /// One page of the keys matching `pattern`, walking about `count` buckets from `cursor`:
    /// the keys found and where the next page starts.
    pub async fn scan_page(
        &self,
        cursor: ScanCursor,
        pattern: &str,
        count: usize,
    ) -> ::redis::RedisResult<(ScanCursor, Vec<String>)> {
        ::redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(count)
            .query_async(&mut self.clone())
            .await
    }
}
