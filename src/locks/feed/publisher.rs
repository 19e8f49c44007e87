//! Live events, published by this process rather than by the Lua functions: a PUBLISH from
//! inside every function cost Redis more than some operations themselves, while the process
//! knows what happened from the function's reply (or the reply carries the event, `ev`). The
//! events of concurrent requests, and of the next few milliseconds, go out together, as one
//! JSON array per PUBLISH on the events channel, so their Redis cost per event shrinks as load
//! grows and stays small on a quiet lock. Pub/sub is at-most-once anyway: a
//! listener that must not miss anything re-reads the history on `Resync`. One publisher
//! serves every key space of the process (each tenant's events go to its own channel).

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::locks::feed::queue::Queue;
use crate::locks::types::LockEvent;

/// Events waiting to be published, at most; beyond that new events are dropped (and counted
/// in the log) rather than holding up lock operations.
const QUEUE_CAPACITY: usize = 16_384;
/// Events per PUBLISH at most.
const BATCH: usize = 512;
/// How long the first event of a batch waits for others. Each batch costs Redis a journal
/// append, a PUBLISH and a delivery to every instance's subscriber, whatever its size: a
/// short wait puts a quiet lock's acquire and release (and everyone else's events meanwhile)
/// into one batch. Live events arrive this much later, which no dashboard shows.
const LINGER: std::time::Duration = std::time::Duration::from_millis(5);

/// An event's channel and its JSON.
type Queued = (Arc<str>, String);

pub(in crate::locks) struct Publisher {
    queue: Queue<Queued>,
}

impl Default for Publisher {
    fn default() -> Self {
        Self {
            queue: Queue::new(QUEUE_CAPACITY),
        }
    }
}

impl Publisher {
    /// Queues one event for the next PUBLISH on `channel`.
    pub fn send(&self, channel: &Arc<str>, event: &LockEvent) {
        if let Ok(json) = serde_json::to_string(event) {
            self.send_json(channel, json);
        }
    }

    /// Queues one event, already written as a JSON object, for the next PUBLISH on `channel`.
    pub fn send_json(&self, channel: &Arc<str>, json: String) {
        if self.queue.try_send((channel.clone(), json)).is_err() {
            tracing::warn!(
                channel = %channel,
                "event queue full (or publisher stopped): a live event was dropped"
            );
        }
    }

    /// Publishes queued events until shutdown (then what is queued, once). Only the first call
    /// starts a publisher.
    pub fn spawn(
        &self,
        mut conn: crate::redis::Redis,
        shutdown: CancellationToken,
    ) -> tokio::task::JoinHandle<()> {
        let rx = self.queue.take_receiver();
        tokio::spawn(async move {
            let Some(mut rx) = rx else { return };
            let mut batch = Vec::with_capacity(BATCH);
            loop {
                let mut stopping = tokio::select! {
                    n = rx.recv_many(&mut batch, BATCH) => n == 0,
                    () = shutdown.cancelled() => true,
                };
                if !stopping && batch.len() < BATCH {
                    tokio::select! {
                        () = tokio::time::sleep(LINGER) => {}
                        () = shutdown.cancelled() => stopping = true,
                    }
                }
                while batch.len() < BATCH {
                    match rx.try_recv() {
                        Ok(e) => batch.push(e),
                        Err(_) => break,
                    }
                }
                // One journal append and PUBLISH per run of events on the same channel
                // (each tenant has its own channel and journal), so each channel's events
                // keep their order and carry their ids (see `journal`).
                let mut rest = &batch[..];
                while let Some(((channel, _), _)) = rest.split_first() {
                    let run = rest.iter().take_while(|(c, _)| c == channel).count();
                    let (now, later) = rest.split_at(run);
                    let jsons: Vec<&str> = now.iter().map(|(_, json)| json.as_str()).collect();
                    let journal = crate::locks::feed::journal::key_of_channel(channel);
                    let sent =
                        crate::locks::feed::journal::publish(&mut conn, &journal, channel, &jsons)
                            .await;
                    if let Err(e) = sent {
                        tracing::warn!(error = %e, "could not publish live events");
                    }
                    rest = later;
                }
                batch.clear();
                if stopping {
                    return;
                }
            }
        })
    }
}
