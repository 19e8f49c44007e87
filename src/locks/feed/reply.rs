//! The events a function's reply carries (`"ev": [...]`: what it recorded in the history,
//! and expiries it noticed), published on the live events channel with the lock's name.
//!
//! Each event is read as a [`ReplyEvent`]: its members in the order the script wrote them,
//! each value kept as the script's JSON text (borrowed from the reply, not rebuilt), so that
//! publishing it costs a copy, not a parse into a [`LockEvent`] and a write back (which cost
//! about 5 % of the server's time per lock operation). Only a grant rolled back because its
//! client went away is read whole, to publish its beginning first.

use std::fmt;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::locks::Locks;
use crate::locks::types::{LockEvent, LockName};

/// One event of a reply: its members as the script wrote them.
pub(in crate::locks) struct ReplyEvent<'a> {
    members: Vec<(&'a str, &'a RawValue)>,
}

/// The reply's part that carries its events; the rest of the reply is skipped unread.
#[derive(Deserialize)]
struct Carried<'a> {
    #[serde(borrow, default)]
    ev: Vec<ReplyEvent<'a>>,
}

impl<'a> ReplyEvent<'a> {
    /// The member `key`'s JSON text, if the event has it.
    fn member(&self, key: &str) -> Option<&'a str> {
        self.members
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.get())
    }

    /// Whether it ends a grant its client never received (`"reason": "client_gone"`).
    fn rolls_back(&self) -> bool {
        self.member("reason") == Some("\"client_gone\"")
    }

    /// The event as published: `lock` first, then the script's members.
    fn published(&self, lock: &'a LockName) -> Published<'_, 'a> {
        Published { lock, event: self }
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for ReplyEvent<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Members;
        impl<'de> Visitor<'de> for Members {
            type Value = ReplyEvent<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an event object")
            }
            fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Self::Value, M::Error> {
                let mut members = Vec::with_capacity(map.size_hint().unwrap_or(8));
                while let Some(entry) = map.next_entry::<&'de str, &'de RawValue>()? {
                    members.push(entry);
                }
                if members.is_empty() {
                    return Err(de::Error::custom("an event has at least its type"));
                }
                Ok(ReplyEvent { members })
            }
        }
        deserializer.deserialize_map(Members)
    }
}

struct Published<'e, 'a> {
    lock: &'a LockName,
    event: &'e ReplyEvent<'a>,
}

impl Serialize for Published<'_, '_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.event.members.len() + 1))?;
        map.serialize_entry("lock", self.lock.as_str())?;
        for (key, value) in &self.event.members {
            if *key != "lock" {
                map.serialize_entry(key, value)?;
            }
        }
        map.end()
    }
}

impl Locks {
    /// Queues a live event for the events channel.
    pub(in crate::locks) fn publish(&self, event: &LockEvent) {
        self.inner.publisher.send(&self.inner.events_channel, event);
    }

    /// Publishes the events `raw` (a function's reply) carries, each with the lock's name.
    /// A reply that carries none, or is no JSON object, publishes nothing.
    pub(in crate::locks) fn publish_reply_events(&self, name: &LockName, raw: &str) {
        // Most replies carry no event: no parse for them.
        if !raw.contains("\"ev\":[") {
            return;
        }
        let Ok(carried) = serde_json::from_str::<Carried<'_>>(raw) else {
            return;
        };
        for event in &carried.ev {
            // A grant rolled back because its client went away was never answered, so its
            // `acquired` event was never published: it goes out now, before its end.
            if event.rolls_back() {
                self.publish_rolled_back(name, event);
                continue;
            }
            if let Ok(json) = serde_json::to_string(&event.published(name)) {
                self.inner
                    .publisher
                    .send_json(&self.inner.events_channel, json);
            }
        }
    }

    /// Publishes an event that ends a grant its client never received: the grant's own
    /// beginning first.
    fn publish_rolled_back(&self, name: &LockName, event: &ReplyEvent<'_>) {
        let Ok(json) = serde_json::to_string(&event.published(name)) else {
            return;
        };
        let Some(event) = LockEvent::parse(&json) else {
            return;
        };
        if let Some(begun) = event.beginning() {
            self.publish(&begun);
        }
        self.publish(&event);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_goes_out_as_the_script_wrote_it_with_its_lock_first() {
        let raw = r#"{"g":1,"ev":[{"type":"acquired","at_ms":5,"lease_id":"a\"b","d":{"x":[1,2]}},{"type":"expired","reason":"client_gone"}],"t":"x"}"#;
        let carried: Carried<'_> = serde_json::from_str(raw).expect("parses");
        let name = LockName::parse("n-0").expect("a name");
        let first = serde_json::to_string(&carried.ev[0].published(&name)).expect("writes");
        assert_eq!(
            first,
            r#"{"lock":"n-0","type":"acquired","at_ms":5,"lease_id":"a\"b","d":{"x":[1,2]}}"#
        );
        assert!(!carried.ev[0].rolls_back());
        assert!(carried.ev[1].rolls_back());
    }
}
