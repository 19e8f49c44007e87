//! Observing an election (`GET /v1/elections/{name}/observe`) as a [`Stream`] of its changes:
//! the current state first, then every new term and value, in order. A stream that breaks
//! (the server restarted, a proxy cut it, it stayed silent past [`crate::WATCH_SILENCE`]) is
//! opened again with `Last-Event-ID`, so the server sends every term it missed first.

use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use eventsource_stream::Eventsource as _;
use futures_util::{Stream, StreamExt as _};
use reqwest::StatusCode;

use crate::error::excerpt;
use crate::upkeep::backoff;
use crate::watch::until_silent;
use crate::{Client, ClientError, ObservedBody, Problem};

/// A change of an election.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// Someone leads: a new term, or a new value in the same term (`event: leader`).
    Leader(ObservedBody),
    /// Nobody leads; `term` was the last (`event: vacant`).
    Vacant { term: u64 },
    /// Terms may have been missed: the server's log of terms no longer reaches back to where
    /// the stream broke (`event: resync`). Read the election ([`Client::election`]).
    Resync,
}

/// One message of an observe stream: the change, and its id (what a resumed stream starts
/// after).
#[derive(Debug, Clone, PartialEq)]
pub struct Observation {
    pub change: Change,
    pub id: Option<String>,
}

impl Observation {
    /// The SSE event name: `leader`, `vacant` or `resync`.
    pub fn event(&self) -> &'static str {
        match self.change {
            Change::Leader(_) => "leader",
            Change::Vacant { .. } => "vacant",
            Change::Resync => "resync",
        }
    }
}

type Events = Pin<
    Box<
        dyn Stream<
                Item = Result<
                    eventsource_stream::Event,
                    eventsource_stream::EventStreamError<reqwest::Error>,
                >,
            > + Send,
    >,
>;

/// The changes of one election ([`Client::observe`]); ends only after an error that a
/// reconnection cannot mend (401, 403, 404, 422), which it yields first.
pub struct Observations {
    inner: Pin<Box<dyn Stream<Item = Result<Observation, ClientError>> + Send>>,
}

impl fmt::Debug for Observations {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Observations(..)")
    }
}

impl Stream for Observations {
    type Item = Result<Observation, ClientError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner.as_mut().poll_next(cx)
    }
}

impl Client {
    /// `GET /v1/elections/{name}/observe`, kept open: the current state, then each change
    /// in order, across dropped connections (resumed with `Last-Event-ID`; a change told
    /// again after a reconnection without an id is not yielded twice). Holds no timeout.
    pub fn observe(&self, name: &str) -> Observations {
        let observer = Observer {
            client: self.clone(),
            name: name.to_owned(),
            last_id: None,
            last: None,
            events: None,
            attempt: 0,
            done: false,
        };
        let stream = futures_util::stream::unfold(observer, |mut observer| async move {
            let item = observer.next().await?;
            Some((item, observer))
        });
        Observations {
            inner: Box::pin(stream),
        }
    }

    /// Opens the observe stream, after `last_id` when given.
    async fn open_observe(&self, name: &str, last_id: Option<&str>) -> Result<Events, ClientError> {
        let url = self.endpoint(&["v1", "elections", name, "observe"])?;
        let mut request = self
            .request(reqwest::Method::GET, url)
            .header(reqwest::header::ACCEPT, "text/event-stream");
        if let Some(id) = last_id {
            request = request.header("last-event-id", id);
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
        Ok(Box::pin(
            until_silent(response.bytes_stream()).eventsource(),
        ))
    }
}

struct Observer {
    client: Client,
    name: String,
    /// The id of the last message read: a reconnection resumes after it.
    last_id: Option<String>,
    /// The last change yielded, so that one told again (a reconnection without an id, which
    /// starts from the current state) is not yielded twice.
    last: Option<Change>,
    events: Option<Events>,
    attempt: u32,
    done: bool,
}

impl Observer {
    async fn next(&mut self) -> Option<Result<Observation, ClientError>> {
        if self.done {
            return None;
        }
        loop {
            let Some(events) = self.events.as_mut() else {
                match self
                    .client
                    .open_observe(&self.name, self.last_id.as_deref())
                    .await
                {
                    Ok(events) => self.events = Some(events),
                    Err(e) => {
                        if let Some(pause) = later(&e) {
                            self.pause(pause).await;
                            continue;
                        }
                        self.done = true;
                        return Some(Err(e));
                    }
                }
                continue;
            };
            let Some(Ok(event)) = events.next().await else {
                // Broken, ended or silent: opened again, after the last message read.
                self.events = None;
                self.pause(Duration::ZERO).await;
                continue;
            };
            self.attempt = 0;
            if !event.id.is_empty() {
                self.last_id = Some(event.id.clone());
            }
            let change = match event.event.as_str() {
                "leader" => match serde_json::from_str(&event.data) {
                    Ok(body) => Change::Leader(body),
                    Err(_) => return Some(Err(unreadable(&event.data))),
                },
                "vacant" => match serde_json::from_str::<ObservedBody>(&event.data) {
                    Ok(body) => Change::Vacant { term: body.term },
                    Err(_) => return Some(Err(unreadable(&event.data))),
                },
                "resync" => Change::Resync,
                _ => continue,
            };
            if self.last.as_ref() == Some(&change) && change != Change::Resync {
                continue;
            }
            self.last = Some(change.clone());
            let id = (!event.id.is_empty()).then_some(event.id);
            return Some(Ok(Observation { change, id }));
        }
    }

    async fn pause(&mut self, at_least: Duration) {
        tokio::time::sleep(backoff(self.attempt).max(at_least)).await;
        self.attempt += 1;
    }
}

/// How long to wait before opening the stream again after `error`; `None` when trying again
/// cannot help (401, 403, 404, 422: the caller's key or the name).
fn later(error: &ClientError) -> Option<Duration> {
    match error {
        ClientError::Problem(p) if matches!(p.status, 429 | 502..=504) => Some(
            p.retry_after_ms
                .map_or(Duration::ZERO, Duration::from_millis),
        ),
        ClientError::Problem(_) | ClientError::BadBase(_) => None,
        _ => Some(Duration::ZERO),
    }
}

fn unreadable(data: &str) -> ClientError {
    ClientError::Unexpected {
        status: StatusCode::OK,
        excerpt: excerpt(data.as_bytes()),
    }
}
