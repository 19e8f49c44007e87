//! The lock page's history rows: what each event says, with an admin action's who, why and
//! whom written out.

use super::format::when;
use crate::locks::{EventKind, LockEvent, wall_ms};

pub struct HistoryRow {
    pub at: String,
    pub kind: String,
    pub lease_id: String,
    pub holder: String,
    pub details: String,
}

impl HistoryRow {
    pub fn from_event(event: &LockEvent) -> Self {
        let mut details: Vec<String> = Vec::new();
        if event.kind == EventKind::ForceReleased {
            details.push(format!("by {}", event.detail_str("by").unwrap_or("?")));
            match event.detail_str("reason") {
                Some(reason) if !reason.is_empty() => details.push(format!("reason: {reason}")),
                _ => details.push("no reason given".into()),
            }
            let removed = removed_holders(event);
            details.push(if removed.is_empty() {
                "removed nobody".into()
            } else {
                format!("removed {}", removed.join(", "))
            });
        }
        for (key, value) in &event.details {
            if matches!(
                key.as_str(),
                "by" | "reason" | "lease_ids" | "holders" | "holder_ids"
            ) && event.kind == EventKind::ForceReleased
            {
                continue;
            }
            let text = value
                .as_str()
                .map_or_else(|| value.to_string(), str::to_owned);
            details.push(format!("{key}={text}"));
        }
        Self {
            at: when(Some(event.at()), wall_ms()),
            kind: event.kind.to_string(),
            lease_id: event.lease_id.clone().unwrap_or_default(),
            holder: event.holder.clone().unwrap_or_default(),
            details: details.join("; "),
        }
    }
}

/// The holders an admin action's entry names (`holders`): "label (lease id)", a lease, or a
/// Redisson client's holder id.
fn removed_holders(event: &LockEvent) -> Vec<String> {
    let Some(serde_json::Value::Array(holders)) = event.details.get("holders") else {
        return event
            .removed_lease_ids()
            .into_iter()
            .map(|id| format!("lease {id}"))
            .collect();
    };
    let text = |h: &serde_json::Value, key: &str| {
        h.get(key)
            .and_then(serde_json::Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
    };
    holders
        .iter()
        .filter_map(|h| {
            Some(match (text(h, "holder"), text(h, "lease_id")) {
                (Some(label), Some(id)) => format!("{label} (lease {id})"),
                (None, Some(id)) => format!("lease {id}"),
                (label, None) => format!(
                    "{} ({})",
                    label.unwrap_or_else(|| "Redisson client".into()),
                    text(h, "holder_id")?
                ),
            })
        })
        .collect()
}
