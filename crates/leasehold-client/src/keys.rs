//! API keys through the admin API: create, list, rotate, revoke.

use std::time::Duration;

use crate::connection::millis;
use crate::{
    Client, ClientError, KeyBody, KeyCreateBody, KeyListBody, KeyRotateBody, KeySecretBody, Reply,
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

    /// `DELETE /v1/admin/keys/{id}`: the key stops working everywhere.
    pub async fn revoke_key(&self, id: &str) -> Result<Reply<KeyBody>, ClientError> {
        let url = self.endpoint(&["v1", "admin", "keys", id])?;
        Self::send(
            self.request(reqwest::Method::DELETE, url)
                .timeout(self.timeout),
        )
        .await
    }
}
