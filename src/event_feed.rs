//! The in-process event feed: every instance publishes its lock events in batches (JSON
//! arrays) on its key space's events channel, and the process's one Redis subscriber
//! ([`crate::redis::subscriber`]) hands those it hears to [`EventFeed`], which fans each event
//! out through a broadcast channel tagged with its tenant, so any number of dashboard tabs and
//! `GET /v1/events` clients cost no extra Redis subscription. The subscriber holds the events
//! channels only while an event stream is open in this process (and for a while after the last
//! one closes): the default tenant's channel (`<prefix>leasehold:events`) with SUBSCRIBE, every
//! named tenant's (`<prefix>*/leasehold:events`, see [`crate::tenant`]) with PSUBSCRIBE. Held
//! all the time, every batch of every instance would come back to every instance, most with no
//! one to show it to.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::broadcast;
use tokio::time::Instant;

use crate::locks::{KeySpace, LockEvent};
use crate::redis::subscriber::{Gated, Route};
use crate::redis::{Claim, SubscriptionGate};
use crate::tenant::Tenant;

/// How many events a slow listener may fall behind before it is told to resync.
const FEED_CAPACITY: usize = 1024;
/// How long a new listener of a named tenant waits at most for the tenants' pattern to be
/// subscribed before its stream starts anyway (the subscriber is reconnecting: its reconnect
/// then tells every listener to resync).
const LISTEN_TIMEOUT: Duration = Duration::from_secs(2);

/// What listeners of the in-process event feed receive.
#[derive(Debug, Clone)]
pub enum FeedMessage {
    /// An event of one of `tenant`'s locks (its `lock` is the name within the tenant).
    Event {
        tenant: Tenant,
        event: Arc<LockEvent>,
    },
    /// Events may have been missed (the subscription was re-established, or this listener
    /// fell behind): re-read whatever state is shown.
    Resync,
}

/// The in-process fan-out of the events channels: one Redis subscription, many listeners.
#[derive(Debug, Clone)]
pub struct EventFeed {
    tx: broadcast::Sender<FeedMessage>,
    /// Whether the subscriber holds the default tenant's events channel. Every instance
    /// publishes every event there; held all the time, each batch would come back to every
    /// instance whether or not anyone there watches, a cost on every cycle (BENCHMARKS.md,
    /// W8), and each instance added receives every batch again.
    default: Arc<SubscriptionGate>,
    /// Whether the subscriber holds the tenants' events pattern (`<prefix>*/leasehold:events`).
    /// Redis matches every PUBLISH on the server against every pattern subscribed, and a
    /// pattern that starts with `*` is tried at every position of the channel's name, for each
    /// unlock message of every release, Redisson clients' too, per instance holding it: a
    /// twentieth of Redisson's whole lock + unlock pair (BENCHMARKS.md, W8).
    tenants: Arc<SubscriptionGate>,
}

impl Default for EventFeed {
    fn default() -> Self {
        Self {
            tx: broadcast::channel(FEED_CAPACITY).0,
            default: Arc::default(),
            tenants: Arc::default(),
        }
    }
}

/// A listener of the feed (see [`EventFeed::listen`]).
#[derive(Debug)]
pub struct Listener {
    rx: broadcast::Receiver<FeedMessage>,
    _claim: Claim,
}

impl Listener {
    pub async fn recv(&mut self) -> Result<FeedMessage, broadcast::error::RecvError> {
        self.rx.recv().await
    }
}

impl EventFeed {
    /// A listener for `tenant`'s events, from now on: read anything older (the journal) after
    /// this returns, and nothing falls between. A tenant's events reach this process only
    /// while one of its streams is open here (the default tenant's channel, or the named
    /// tenants' pattern): the first one waits until they do, for [`LISTEN_TIMEOUT`] at most
    /// (the subscriber is reconnecting then, and its reconnect sends [`FeedMessage::Resync`]).
    pub async fn listen(&self, tenant: &Tenant) -> Listener {
        let rx = self.tx.subscribe();
        let gate = if tenant.is_default() {
            &self.default
        } else {
            &self.tenants
        };
        let claim = gate.claim();
        gate.arm(Instant::now() + LISTEN_TIMEOUT).await;
        Listener { rx, _claim: claim }
    }

    /// Listeners right now (open SSE streams).
    pub fn listeners(&self) -> usize {
        self.tx.receiver_count()
    }

    fn send(&self, message: FeedMessage) {
        // No listener is fine: nobody is watching.
        let _ = self.tx.send(message);
    }
}

/// The feed as the subscriber sees it: the events channels under the deployment's prefix.
pub struct FeedRoute {
    pub feed: EventFeed,
    pub base: String,
}

impl FeedRoute {
    /// The subscriptions it needs, each held while a stream of its kind is open here.
    pub fn subscriptions(&self) -> Vec<Gated> {
        vec![
            Gated {
                gate: self.feed.default.clone(),
                topics: vec![KeySpace::new(self.base.as_str()).events_channel()],
                pattern: false,
                what: "the default tenant's events",
            },
            Gated {
                gate: self.feed.tenants.clone(),
                topics: vec![Tenant::events_pattern(&self.base)],
                pattern: true,
                what: "named tenants' events",
            },
        ]
    }
}

impl Route for FeedRoute {
    fn route(&self, channel: &str, payload: &[u8]) -> bool {
        let Some(tenant) = Tenant::of_events_channel(&self.base, channel) else {
            return false;
        };
        if self.feed.listeners() > 0
            && let Ok(json) = std::str::from_utf8(payload)
        {
            for event in LockEvent::parse_batch(json) {
                self.feed.send(FeedMessage::Event {
                    tenant: tenant.clone(),
                    event: Arc::new(event),
                });
            }
        }
        true
    }

    fn connected(&self) {
        // Anything published while the subscription was away is lost: listeners re-read.
        self.feed.send(FeedMessage::Resync);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    /// The subscriber's side of a first listener: asked, it subscribes and says so; until
    /// then the listener waits.
    async fn first_listener_waits_for(feed: &EventFeed, gate: &SubscriptionGate, tenant: Tenant) {
        let first = tokio::spawn({
            let feed = feed.clone();
            async move { feed.listen(&tenant).await }
        });
        tokio::time::timeout(SECOND, gate.requested())
            .await
            .expect("the listener asked for the subscription");
        assert!(gate.is_wanted());
        assert!(
            !first.is_finished(),
            "it waits until the subscription is held"
        );
        gate.set_armed();
        let first = tokio::time::timeout(SECOND, first)
            .await
            .expect("armed: the listener goes on")
            .expect("listener task");
        drop(first);
    }

    #[tokio::test]
    async fn a_tenants_first_listener_waits_until_the_subscriber_listens() {
        let feed = EventFeed::default();
        assert!(
            !feed.default.is_wanted() && !feed.tenants.is_wanted(),
            "no listener: no events subscription"
        );
        first_listener_waits_for(&feed, &feed.default, Tenant::default()).await;
        assert!(
            !feed.tenants.is_wanted(),
            "the default tenant needs no pattern"
        );
        let team_a = Tenant::parse("team-a").expect("a tenant name");
        first_listener_waits_for(&feed, &feed.tenants, team_a).await;
        // Later listeners find them subscribed.
        for tenant in [
            Tenant::default(),
            Tenant::parse("team-b").expect("a tenant name"),
        ] {
            tokio::time::timeout(SECOND, feed.listen(&tenant))
                .await
                .expect("already subscribed: no wait");
        }
    }
}
