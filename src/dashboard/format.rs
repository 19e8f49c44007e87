//! Times, durations and holders as the pages write them: "12 min ago", "4 min 10 s",
//! "lease 7c9e...", one way everywhere.

use crate::locks::{HolderView, Metadata, PermitHolderView, Timestamp, wall_ms};

/// "12 min ago", beside absolute times.
pub(super) fn ago(at: Timestamp, now_ms: u64) -> String {
    let ms = now_ms.saturating_sub(at.0);
    let s = ms / 1000;
    match s {
        0 => "just now".into(),
        1..60 => format!("{s} s ago"),
        60..3600 => format!("{} min ago", s / 60),
        3600..86_400 => format!("{} h {} min ago", s / 3600, (s % 3600) / 60),
        _ => format!("{} d ago", s / 86_400),
    }
}

/// A length of time: "350 ms", "4.2 s", "3 min 10 s".
pub(super) fn span(d: std::time::Duration) -> String {
    let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    match ms {
        0..1000 => format!("{ms} ms"),
        1000..60_000 => format!("{:.1} s", d.as_secs_f64()),
        _ => format!("{} min {} s", ms / 60_000, (ms % 60_000) / 1000),
    }
}

/// An absolute time with the relative one beside it.
pub(super) fn when(at: Option<Timestamp>, now_ms: u64) -> String {
    at.map_or_else(
        || "—".into(),
        |t| format!("{} ({})", t.rfc3339(), ago(t, now_ms)),
    )
}

pub(super) fn holder_label(h: &HolderView) -> String {
    match (&h.holder, &h.lease_id) {
        (Some(label), _) => label.clone(),
        (None, Some(id)) => format!("lease {id}"),
        (None, None) => format!("Redisson client {}", h.holder_id),
    }
}

/// A holder's label, and for a multilease's member the other locks it holds with this one
/// (`alice (multilease, with stock, ledger)`), for the overview.
pub(super) fn holder_in_overview(h: &HolderView, lock: &str) -> String {
    let label = holder_label(h);
    let Some((Some(membership), _)) = h.metadata.clone().map(Metadata::split_membership) else {
        return label;
    };
    let mut others: Vec<String> = membership
        .locks
        .iter()
        .filter(|name| *name != lock)
        .cloned()
        .collect();
    if membership.hidden_locks > 0 {
        others.push(format!("{} you may not see", membership.hidden_locks));
    }
    format!("{label} (multilease, with {})", others.join(", "))
}

pub(super) fn permit_holder_label(h: &PermitHolderView) -> String {
    match (&h.holder, &h.lease_id) {
        (Some(label), _) => label.clone(),
        (None, Some(id)) => format!("lease {id}"),
        (None, None) => "unknown".into(),
    }
}

pub(super) fn lease_text(h: &HolderView) -> String {
    h.lease_id
        .map_or_else(|| h.holder_id.clone(), |id| id.to_string())
}

pub(super) fn metadata_text(metadata: Option<&Metadata>) -> String {
    metadata.map(Metadata::to_json).unwrap_or_default()
}

pub(super) fn join_or_dash(items: impl Iterator<Item = String>) -> String {
    let joined = items.collect::<Vec<_>>().join(", ");
    if joined.is_empty() {
        "—".into()
    } else {
        joined
    }
}

pub(super) fn time_text(at: Option<Timestamp>) -> String {
    at.map_or_else(|| "—".into(), Timestamp::rfc3339)
}

/// Milliseconds left as people read them: "850 ms", "12.3 s", "4 min 10 s", "2 h 5 min".
pub(super) fn ttl_text(ms: Option<u64>) -> String {
    let Some(ms) = ms else {
        return "—".into();
    };
    let s = ms / 1000;
    match ms {
        0..1_000 => format!("{ms} ms"),
        1_000..60_000 => format!("{}.{} s", s, (ms % 1000) / 100),
        60_000..3_600_000 => format!("{} min {} s", s / 60, s % 60),
        _ => format!("{} h {} min", s / 3600, (s % 3600) / 60),
    }
}

pub(super) fn remaining_until(at: Timestamp) -> u64 {
    at.0.saturating_sub(wall_ms())
}

/// What stays as it is in a query value: RFC 3986's unreserved characters, and `/` (the
/// `next=` paths read better with it, and a query may carry it).
const QUERY_VALUE: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~')
    .remove(b'/');

/// Percent-encodes a query parameter value.
pub(super) fn encode_component(raw: &str) -> String {
    percent_encoding::utf8_percent_encode(raw, QUERY_VALUE).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_times_read_like_people_say_them() {
        let now = 10_000_000;
        assert_eq!(ago(Timestamp(now - 400), now), "just now");
        assert_eq!(ago(Timestamp(now - 12_000), now), "12 s ago");
        assert_eq!(ago(Timestamp(now - 720_000), now), "12 min ago");
        assert_eq!(ago(Timestamp(now - 3_900_000), now), "1 h 5 min ago");
    }

    #[test]
    fn ttls_read_like_people_write_them() {
        assert_eq!(ttl_text(None), "—");
        assert_eq!(ttl_text(Some(850)), "850 ms");
        assert_eq!(ttl_text(Some(12_345)), "12.3 s");
        assert_eq!(ttl_text(Some(250_000)), "4 min 10 s");
        assert_eq!(ttl_text(Some(7_500_000)), "2 h 5 min");
    }
}
