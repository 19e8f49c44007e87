//! Lease watches: a server-sent event stream that says the moment a lease is lost.

use std::fmt;
use std::pin::Pin;
use std::time::Duration;

use eventsource_stream::Eventsource as _;
use futures_util::{Stream, StreamExt as _};
use reqwest::StatusCode;

use crate::error::excerpt;
use crate::{Client, ClientError, LeaseId, LeaseToken, LostEvent, Problem, Resource};

impl Client {
    /// `GET /v1/{locks|semaphores}/{name}/leases/{id}/watch`: a stream that says when the
    /// lease ends ([`Watch::lost`]). It has no timeout: it lasts as long as the lease.
    pub async fn watch(
        &self,
        resource: Resource,
        lock: &str,
        id: LeaseId,
        token: &LeaseToken,
    ) -> Result<Watch, ClientError> {
        let id = id.to_string();
        let mut path = resource.lease_path(lock, &id);
        path.push("watch");
        let url = self.endpoint(&path)?;
        let response = self
            .request(reqwest::Method::GET, url)
            .bearer_auth(token.expose())
            .header(reqwest::header::ACCEPT, "text/event-stream")
            .send()
            .await?;
        let status = response.status();
        if !status.is_success() {
            let bytes = response.bytes().await?;
            return Err(match serde_json::from_slice::<Problem>(&bytes) {
                Ok(problem) => problem.into(),
                Err(_) => ClientError::Unexpected {
                    status,
                    excerpt: excerpt(&bytes),
                },
            });
        }
        Ok(Watch {
            events: Box::pin(until_silent(response.bytes_stream()).eventsource()),
        })
    }
}

/// How long a watch may stay silent before it counts as broken: the server sends a
/// keep-alive comment every 15 s, so three missed ones mean a dead connection (a proxy that
/// dropped it without a word, a frozen peer), not a quiet lease (`clients/PROTOCOL.md`).
pub const WATCH_SILENCE: Duration = Duration::from_secs(45);

/// The stream's bytes until it ends, or until nothing came for [`WATCH_SILENCE`].
pub(crate) fn until_silent<S>(bytes: S) -> impl Stream<Item = S::Item> + Send
where
    S: Stream + Send + 'static,
    S::Item: Send,
{
    futures_util::stream::unfold(Box::pin(bytes), |mut bytes| async move {
        let next = tokio::time::timeout(WATCH_SILENCE, bytes.next()).await;
        next.ok().flatten().map(|chunk| (chunk, bytes))
    })
}

/// An open lease watch.
pub struct Watch {
    events: Pin<Box<dyn Stream<Item = Result<eventsource_stream::Event, WatchError>> + Send>>,
}

type WatchError = eventsource_stream::EventStreamError<reqwest::Error>;

impl fmt::Debug for Watch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Watch(..)")
    }
}

impl Watch {
    /// Waits for the server to say the lease is lost. [`ClientError::WatchEnded`] when the
    /// stream ends first, or stays silent for [`WATCH_SILENCE`] (the lease may still hold).
    pub async fn lost(&mut self) -> Result<LostEvent, ClientError> {
        while let Some(event) = self.events.next().await {
            let Ok(event) = event else {
                return Err(ClientError::WatchEnded);
            };
            if event.event == "lost" {
                return serde_json::from_str(&event.data).map_err(|_| ClientError::Unexpected {
                    status: StatusCode::OK,
                    excerpt: excerpt(event.data.as_bytes()),
                });
            }
        }
        Err(ClientError::WatchEnded)
    }
}
