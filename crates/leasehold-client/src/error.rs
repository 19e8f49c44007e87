//! What a call can fail with: the server's problem document ([`Problem`], with its stable
//! `code`), no answer at all, or an answer the client cannot read.

use std::path::PathBuf;

use reqwest::StatusCode;
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::codes::ProblemCode;

use crate::server_url::ServerUrl;

/// An `application/problem+json` answer.
#[derive(Debug, Clone, Deserialize, thiserror::Error)]
#[error("{detail} ({status} {code})")]
pub struct Problem {
    pub status: u16,
    /// The stable machine code, e.g. `lock_held`, `lease_lost`.
    pub code: String,
    pub detail: String,
    /// On 409 `lock_held`: when the holder's lease runs out unless renewed.
    #[serde(default)]
    pub retry_after_ms: Option<u64>,
    /// On 410 `lease_lost`: `expired`, `released` or `force_released`.
    #[serde(default)]
    pub reason: Option<String>,
    /// Every other member it carried (`type`, `title`, `holder`, `held_as`, `member`,
    /// `members`, `delayed_until`, `replicas_acked`, ...), as sent.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Problem {
    /// The code as a type; `None` for a code this client does not know (a newer server's).
    pub fn kind(&self) -> Option<ProblemCode> {
        ProblemCode::parse(&self.code)
    }

    /// One extension member (`held_as`, `member`, `delayed_until`, ...).
    pub fn member(&self, name: &str) -> Option<&Value> {
        self.extra.get(name)
    }

    /// On 409 `lock_held`: when the holding lease was granted (RFC 3339; absent for a
    /// Redisson client).
    pub fn held_since(&self) -> Option<&str> {
        self.extra.get("held_since").and_then(Value::as_str)
    }

    /// On 409 `lock_held`: how long the holding lease has held, in ms.
    pub fn held_for_ms(&self) -> Option<u64> {
        self.extra.get("held_for_ms").and_then(Value::as_u64)
    }

    /// On 409 `lock_held`: how long until the holder lets go, in ms, estimated by the server
    /// from the name's recent holds (absent with fewer than 3 to go by).
    pub fn estimated_wait_ms(&self) -> Option<u64> {
        self.extra.get("estimated_wait_ms").and_then(Value::as_u64)
    }

    /// Someone else holds the lock (409).
    pub fn is_lock_held(&self) -> bool {
        self.status == StatusCode::CONFLICT.as_u16()
    }

    /// The server no longer knows this lease as a holder: lost (410), long gone (404), or
    /// the token does not prove it (403). Retrying cannot bring it back.
    pub fn is_lease_gone(&self) -> bool {
        matches!(self.status, 403 | 404 | 410)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The server refused the request and said why.
    #[error(transparent)]
    Problem(#[from] Problem),
    /// No answer: connection refused or reset, timeout, DNS.
    #[error("no answer from the server")]
    Transport(#[from] reqwest::Error),
    /// An answer that is neither the expected JSON nor a problem document (a proxy's error
    /// page, say).
    #[error("unexpected answer {status}: {excerpt}")]
    Unexpected { status: StatusCode, excerpt: String },
    /// The base URL cannot take a path (checked when parsing, so only a bug gets here).
    #[error("the server URL cannot take a path: {0}")]
    BadBase(ServerUrl),
    /// The CA file cannot be read or holds no certificate.
    #[error("cannot use the CA file {path}: {reason}")]
    CaFile { path: PathBuf, reason: String },
    /// A lease watch ended without saying the lease was lost (the server stopped, or the
    /// connection broke): the lease may well still hold; watch again.
    #[error("the lease watch ended without news")]
    WatchEnded,
    /// A campaign's wait ran out while someone else led ([`crate::Client::campaign`]): it
    /// left the line.
    #[error("still in line for election {election} when the wait ran out")]
    NotElected {
        election: String,
        /// Who led then, as the last answer said.
        leader: Option<Box<crate::LeaderBody>>,
    },
    /// The release of a kept lease that had been lost before ([`crate::KeptLease::release`]):
    /// the work under it ran, at least in part, without the lock.
    #[error(transparent)]
    Lost(#[from] crate::LeaseLost),
}

impl ClientError {
    pub fn problem(&self) -> Option<&Problem> {
        match self {
            Self::Problem(p) => Some(p),
            _ => None,
        }
    }
}

/// The start of a body that is not what we expected, for an error message.
pub(crate) fn excerpt(bytes: &[u8]) -> String {
    const MAX: usize = 200;
    let text = String::from_utf8_lossy(bytes);
    let text = text.trim();
    match text.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None if text.is_empty() => "(empty body)".to_owned(),
        None => text.to_owned(),
    }
}
