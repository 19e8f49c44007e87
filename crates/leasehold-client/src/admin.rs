//! What an admin does to a lock held by others: force release. The client sends the admin
//! token or an admin API key as its key ([`crate::ClientOptions::api_key`]).

use crate::{Client, ClientError, ForceReleaseBody, Reply, RevokeBody, RevokedBody};

impl Client {
    /// `DELETE /v1/admin/locks/{lock}[?reason=..]`: removes every holder of the lock (each
    /// holder's watch says `force_released`, its next heartbeat 410), or, when nobody holds
    /// it, lifts its lock-delay (`delay_lifted`). `reason` goes to the audit log. Sent once,
    /// never retried: a retry could remove the next holder (`clients/PROTOCOL.md`).
    pub async fn force_release(
        &self,
        lock: &str,
        reason: Option<&str>,
    ) -> Result<Reply<ForceReleaseBody>, ClientError> {
        let mut url = self.endpoint(&["v1", "admin", "locks", lock])?;
        if let Some(reason) = reason {
            url.query_pairs_mut().append_pair("reason", reason);
        }
        Self::send(
            self.request(reqwest::Method::DELETE, url)
                .timeout(self.timeout),
        )
        .await
    }

    /// `POST /v1/admin/locks/{name}/revoke`: asks the holders of `lock` (or the one lease in
    /// `body.lease_id`) to release within `body.grace_ms`; at the deadline the server
    /// force-releases what is still held (their holders are told `lost`, reason `revoked`).
    pub async fn revoke(
        &self,
        lock: &str,
        body: &RevokeBody,
    ) -> Result<Reply<RevokedBody>, ClientError> {
        let url = self.endpoint(&["v1", "admin", "locks", lock, "revoke"])?;
        Self::send(
            self.request(reqwest::Method::POST, url)
                .json(body)
                .timeout(self.timeout),
        )
        .await
    }
}
