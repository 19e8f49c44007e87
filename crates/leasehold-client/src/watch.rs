//! Lease watches: a server-sent event stream that tells a lease's holder what to act on while
//! it holds (`expiring`, `degraded`, `contended`, `revocation_requested`, ...) and the moment
//! it is lost.

use std::fmt;
use std::pin::Pin;
use std::time::Duration;

use eventsource_stream::Eventsource as _;
use futures_util::{Stream, StreamExt as _};
use reqwest::StatusCode;

use crate::error::excerpt;
use crate::{Client, ClientError, LeaseId, LeaseToken, LostEvent, Problem, Resource, WatchSignal};

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
        self.watch_after(resource, lock, id, token, None).await
    }

    /// [`Self::watch`], opened again after the event `last_event_id` (the `id:` last read):
    /// the server goes on counting and first tells again what still stands.
    pub async fn watch_after(
        &self,
        resource: Resource,
        lock: &str,
        id: LeaseId,
        token: &LeaseToken,
        last_event_id: Option<&str>,
    ) -> Result<Watch, ClientError> {
        self.watch_from(resource, (lock, id, token), last_event_id, None)
            .await
    }

    /// [`Self::watch_after`] with the slack at which it tells `expiring` (`None`: the
    /// server's default, a third of the lease's TTL).
    pub async fn watch_from(
        &self,
        resource: Resource,
        (lock, id, token): (&str, LeaseId, &LeaseToken),
        last_event_id: Option<&str>,
        expiring_slack: Option<Duration>,
    ) -> Result<Watch, ClientError> {
        let id = id.to_string();
        let mut path = resource.lease_path(lock, &id);
        path.push("watch");
        let mut url = self.endpoint(&path)?;
        if let Some(slack) = expiring_slack {
            let ms = u64::try_from(slack.as_millis()).unwrap_or(u64::MAX);
            url.query_pairs_mut()
                .append_pair("expiring_slack_ms", &ms.to_string());
        }
        let mut request = self
            .request(reqwest::Method::GET, url)
            .bearer_auth(token.expose())
            .header(reqwest::header::ACCEPT, "text/event-stream");
        if let Some(last) = last_event_id {
            request = request.header("Last-Event-ID", last);
        }
        let response = request.send().await?;
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
            last_id: last_event_id.map(str::to_owned),
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
    /// The `id:` of the last event read (to open it again after).
    last_id: Option<String>,
}

/// What a watch tells.
#[derive(Debug, Clone)]
pub enum WatchEvent {
    /// Something to act on while the lease holds: `kind` is the event's name (`expiring`,
    /// `renewed`, `degraded`, `recovered`, `contended`, `revocation_requested`; later servers
    /// may add others), its data the fields of that event.
    Signal { kind: String, signal: WatchSignal },
    /// The lease is gone.
    Lost(LostEvent),
}

type WatchError = eventsource_stream::EventStreamError<reqwest::Error>;

impl fmt::Debug for Watch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Watch(..)")
    }
}

impl Watch {
    /// The next event: a signal, or the loss. [`ClientError::WatchEnded`] when the stream
    /// ends first, or stays silent for [`WATCH_SILENCE`] (the lease may still hold).
    pub async fn next(&mut self) -> Result<WatchEvent, ClientError> {
        while let Some(event) = self.events.next().await {
            let Ok(event) = event else {
                return Err(ClientError::WatchEnded);
            };
            if !event.id.is_empty() {
                self.last_id = Some(event.id.clone());
            }
            let unexpected = |data: &str| ClientError::Unexpected {
                status: StatusCode::OK,
                excerpt: excerpt(data.as_bytes()),
            };
            match event.event.as_str() {
                "lost" => {
                    let lost =
                        serde_json::from_str(&event.data).map_err(|_| unexpected(&event.data))?;
                    return Ok(WatchEvent::Lost(lost));
                }
                // (A comment or a nameless message is no event.)
                "" | "message" => {}
                kind => {
                    let signal =
                        serde_json::from_str(&event.data).map_err(|_| unexpected(&event.data))?;
                    return Ok(WatchEvent::Signal {
                        kind: kind.to_owned(),
                        signal,
                    });
                }
            }
        }
        Err(ClientError::WatchEnded)
    }

    /// The `id:` of the last event read, to open the watch again after it
    /// ([`Client::watch_after`]).
    pub fn last_event_id(&self) -> Option<&str> {
        self.last_id.as_deref()
    }

    /// Waits for the server to say the lease is lost. [`ClientError::WatchEnded`] when the
    /// stream ends first, or stays silent for [`WATCH_SILENCE`] (the lease may still hold).
    pub async fn lost(&mut self) -> Result<LostEvent, ClientError> {
        loop {
            if let WatchEvent::Lost(lost) = self.next().await? {
                return Ok(lost);
            }
        }
    }
}
