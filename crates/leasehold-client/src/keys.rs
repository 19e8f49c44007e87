//! API keys through the admin API: create, list, rotate, revoke, and what a key holds.

use std::time::Duration;

use crate::connection::millis;
use crate::{
    Client, ClientError, KeyBody, KeyCreateBody, KeyLeasesBody, KeyListBody, KeyRotateBody,
    KeySecretBody, Reply,
};

impl Client {
    /// `POST /v1/admin/keys`: a new key and its secret (shown only here).
    pub async fn create_key(
        &self,
        body: &KeyCreateBody,
    ) -> Result<Reply<KeySecretBody>, ClientError> {
        let url = self.endpoint(&["v1", "admin", "keys"])?;
        Self::send(
            self.request(reqwest::Method::POST, url)
                .json(body)
                .timeout(self.timeout),
        )
        .await
    }

    /// `GET /v1/admin/keys`: every key the caller may see.
    pub async fn list_keys(&self) -> Result<Reply<KeyListBody>, ClientError> {
        let url = self.endpoint(&["v1", "admin", "keys"])?;
        Self::send(
            self.request(reqwest::Method::GET, url)
                .timeout(self.timeout),
        )
        .await
    }

    /// `POST /v1/admin/keys/{id}/rotate`: a new secret; the old one works for `grace`.
    pub async fn rotate_key(
        &self,
        id: &str,
        grace: Duration,
    ) -> Result<Reply<KeySecretBody>, ClientError> {
        let url = self.endpoint(&["v1", "admin", "keys", id, "rotate"])?;
        let body = KeyRotateBody {
            grace_ms: Some(millis(grace)),
        };
        Self::send(
            self.request(reqwest::Method::POST, url)
                .json(&body)
                .timeout(self.timeout),
        )
        .await
    }

    /// `GET /v1/admin/keys/{id}/leases`: the key's live leases and fair tickets (what its
    /// revocation would end).
    pub async fn list_key_leases(&self, id: &str) -> Result<Reply<KeyLeasesBody>, ClientError> {
        let url = self.endpoint(&["v1", "admin", "keys", id, "leases"])?;
        Self::send(
            self.request(reqwest::Method::GET, url)
                .timeout(self.timeout),
        )
        .await
    }

    /// `DELETE /v1/admin/keys/{id}`: the key stops working everywhere, and its live leases
    /// end (their count is the answer's `ended_leases`).
    pub async fn revoke_key(&self, id: &str) -> Result<Reply<KeyBody>, ClientError> {
        let url = self.endpoint(&["v1", "admin", "keys", id])?;
        Self::send(
            self.request(reqwest::Method::DELETE, url)
                .timeout(self.timeout),
        )
        .await
    }
}
