//! Looking at locks and semaphores without holding them: status, the live names, fence
//! checks.

use crate::{
    Client, ClientError, FenceCheckBody, FenceCheckReply, LeaseId, ListBody, LockBody,
    MultiLeaseBody, Reply, Resource, SemaphoreBody,
};

impl Client {
    /// `GET /v1/locks/{lock}`: who holds the lock (404 when free and never taken).
    pub async fn lock_status(&self, lock: &str) -> Result<Reply<LockBody>, ClientError> {
        let url = self.endpoint(&["v1", "locks", lock])?;
        Self::send(
            self.request(reqwest::Method::GET, url)
                .timeout(self.timeout),
        )
        .await
    }

    /// `GET /v1/semaphores/{name}`: its limit, permits in use and holders.
    pub async fn semaphore_status(&self, name: &str) -> Result<Reply<SemaphoreBody>, ClientError> {
        let url = self.endpoint(&["v1", "semaphores", name])?;
        Self::send(
            self.request(reqwest::Method::GET, url)
                .timeout(self.timeout),
        )
        .await
    }

    /// `GET /v1/multileases/{id}`: a multilease's locks and state (never its token), and the
    /// member whose end ended it, once one has.
    pub async fn multilease_status(
        &self,
        id: LeaseId,
    ) -> Result<Reply<MultiLeaseBody>, ClientError> {
        let id = id.to_string();
        let url = self.endpoint(&Resource::Multilease.lease_path("", &id))?;
        Self::send(
            self.request(reqwest::Method::GET, url)
                .timeout(self.timeout),
        )
        .await
    }

    /// `GET /v1/locks?prefix=..&cursor=..`: one page of the live locks and semaphores.
    pub async fn list(
        &self,
        prefix: &str,
        cursor: Option<&str>,
    ) -> Result<Reply<ListBody>, ClientError> {
        let mut url = self.endpoint(&["v1", "locks"])?;
        url.query_pairs_mut().append_pair("prefix", prefix);
        if let Some(cursor) = cursor {
            url.query_pairs_mut().append_pair("cursor", cursor);
        }
        Self::send(
            self.request(reqwest::Method::GET, url)
                .timeout(self.timeout),
        )
        .await
    }

    /// `POST /v1/locks/{lock}/fence/check`: whether `fencing_token` is the token of a lease
    /// that holds the lock now (stale as soon as it is answered).
    pub async fn check_fence(
        &self,
        lock: &str,
        fencing_token: u64,
    ) -> Result<Reply<FenceCheckReply>, ClientError> {
        let url = self.endpoint(&["v1", "locks", lock, "fence", "check"])?;
        let body = FenceCheckBody {
            fencing_token: Some(fencing_token),
        };
        Self::send(
            self.request(reqwest::Method::POST, url)
                .json(&body)
                .timeout(self.timeout),
        )
        .await
    }
}
