//! The bounds this server holds requests to, written into its OpenAPI document (its flags:
//! `--min-ttl-ms`, `--max-ttl-ms`, `--max-permits`, `--max-lock-delay-ms`,
//! `--max-reason-chars`), so that a client generated from it, or a fuzzer, asks for what is
//! accepted rather than learn it from 422s.

use utoipa::Number;
use utoipa::openapi::{OpenApi, RefOr, Schema};

use crate::operator::Reason;
use crate::state::ApiLimits;

/// Writes `limits` into the schemas of the bodies they bound.
pub(super) fn write(doc: &mut OpenApi, limits: &ApiLimits) {
    let ttl = (limits.ttl.min_ms, limits.ttl.max_ms);
    let permits = (1, u64::from(limits.max_permits));
    let fields = [
        ("AcquireBody", "ttl_ms", ttl),
        ("MultiAcquireBody", "ttl_ms", ttl),
        (
            "AcquireBody",
            "lock_delay_ms",
            (0, limits.max_lock_delay_ms),
        ),
        (
            "MultiAcquireBody",
            "lock_delay_ms",
            (0, limits.max_lock_delay_ms),
        ),
        ("PermitBody", "ttl_ms", ttl),
        ("HeartbeatBody", "ttl_ms", ttl),
        ("KeyQuotasBody", "max_ttl_ms", ttl),
        ("PermitBody", "limit", permits),
        ("PermitBody", "permits", permits),
        ("LimitBody", "limit", permits),
    ];
    let Some(components) = doc.components.as_mut() else {
        return;
    };
    let number = |n: u64| Number::UInt(usize::try_from(n).unwrap_or(usize::MAX));
    for (schema, field, (min, max)) in fields {
        if let Some(RefOr::T(Schema::Object(object))) = components.schemas.get_mut(schema)
            && let Some(RefOr::T(Schema::Object(property))) = object.properties.get_mut(field)
        {
            property.minimum = Some(number(min));
            property.maximum = Some(number(max));
        }
    }
    // An operator's reason in a body: what `Reason::parse` takes, at most
    // `--max-reason-chars` characters.
    if let Some(RefOr::T(Schema::Object(object))) = components.schemas.get_mut("RevokeBody")
        && let Some(RefOr::T(Schema::Object(property))) = object.properties.get_mut("reason")
    {
        property.pattern = Some(Reason::PATTERN.to_owned());
        property.max_length = Some(limits.per_lock.reason_chars);
    }
}
