//! Domain types: parsed once at the edge, trusted everywhere inside.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use rand::Rng as _;
use sha2::{Digest as _, Sha256};
use uuid::Uuid;

use super::error::InvalidInput;
use super::kind::{HeldAs, LeaseKind};

/// A lock's name as clients write it in URLs.
///
/// ASCII letters, digits and `.` `_` `-` `:`, 1 to 200 characters. Braces are refused so a name
/// can never carry a Redis Cluster hash tag of its own: every key of a lock hashes on the whole
/// (prefixed) name, which keeps each script in one slot.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LockName(String);

impl LockName {
    pub const MAX_LEN: usize = 200;

    pub fn parse(raw: &str) -> Result<Self, InvalidInput> {
        if raw.is_empty() || raw.len() > Self::MAX_LEN {
            return Err(InvalidInput::LockName(format!(
                "a lock name has 1 to {} characters, this one has {}",
                Self::MAX_LEN,
                raw.chars().count()
            )));
        }
        if let Some(bad) = raw
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | ':')))
        {
            return Err(InvalidInput::LockName(format!(
                "a lock name may hold ASCII letters, digits and . _ - : only, not {bad:?}"
            )));
        }
        // A path segment URLs normalise away: its `Location` and its dashboard page would
        // point elsewhere.
        if raw == "." || raw == ".." {
            return Err(InvalidInput::LockName(
                "a lock name may not be . or .. (URLs normalise them away)".into(),
            ));
        }
        Ok(Self(raw.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for LockName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A lease's public identifier: a UUID (version 8) made of the first 122 bits of its token's
/// SHA-256 ([`LeaseToken::lease_id`]). Not a secret: knowing it does not give the token, while
/// the token proves it without any lookup, so Redis keeps no token index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct LeaseId(Uuid);

impl LeaseId {
    pub fn parse(raw: &str) -> Option<Self> {
        Uuid::try_parse(raw).ok().map(Self)
    }
}

impl From<LeaseId> for Uuid {
    fn from(id: LeaseId) -> Self {
        id.0
    }
}

impl fmt::Display for LeaseId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.hyphenated().fmt(f)
    }
}

/// The bearer secret that proves a lease: `lht_` + 256 random bits in base64url.
///
/// Redis never sees it: the lease id is made from its SHA-256 ([`Self::lease_id`]). The token is
/// shown once, in the 201 response.
#[derive(Clone, PartialEq, Eq)]
pub struct LeaseToken(String);

impl LeaseToken {
    pub const PREFIX: &'static str = "lht_";
    const RANDOM_BYTES: usize = 32;

    pub fn generate() -> Self {
        Self(random_secret(Self::PREFIX, Self::RANDOM_BYTES))
    }

    /// Accepts only the exact shape `generate` produces, so a typo is a clear 401, not a 403.
    pub fn parse(raw: &str) -> Result<Self, InvalidInput> {
        let body = raw
            .strip_prefix(Self::PREFIX)
            .ok_or(InvalidInput::TokenShape)?;
        match URL_SAFE_NO_PAD.decode(body) {
            Ok(bytes) if bytes.len() == Self::RANDOM_BYTES => Ok(Self(raw.to_owned())),
            _ => Err(InvalidInput::TokenShape),
        }
    }

    pub fn expose(&self) -> &str {
        &self.0
    }

    pub fn digest(&self) -> TokenDigest {
        TokenDigest::of(&self.0)
    }

    /// The id of the lease this token proves.
    pub fn lease_id(&self) -> LeaseId {
        let digest = self.digest();
        let mut bytes = [0u8; 16];
        bytes.copy_from_slice(&digest.as_bytes()[..16]);
        LeaseId(uuid::Builder::from_custom_bytes(bytes).into_uuid())
    }

    /// Whether this token proves lease `id`.
    pub fn proves(&self, id: LeaseId) -> bool {
        self.lease_id() == id
    }

    /// The token's random part.
    fn secret(&self) -> [u8; Self::RANDOM_BYTES] {
        let mut out = [0u8; Self::RANDOM_BYTES];
        if let Ok(bytes) = URL_SAFE_NO_PAD.decode(&self.0[Self::PREFIX.len()..]) {
            out.copy_from_slice(&bytes[..Self::RANDOM_BYTES.min(bytes.len())]);
        }
        out
    }

    fn from_secret(secret: [u8; Self::RANDOM_BYTES]) -> Self {
        Self(format!(
            "{}{}",
            Self::PREFIX,
            URL_SAFE_NO_PAD.encode(secret)
        ))
    }
}

/// A client's `Idempotency-Key`: a retry that carries the same key (for the same request)
/// gets the first answer instead of acting twice. Redis keeps only its SHA-256; a new lease's
/// token is kept sealed under the key itself (XOR with a key-derived pad), so a replay can
/// hand the token back while Redis never holds a usable one. The key's record is bound to the
/// caller that sent it first ([`Self::bound_to`]): another caller sending the same key and
/// request is refused, never handed the first caller's answer or token.
#[derive(Clone, PartialEq, Eq)]
pub struct IdempotencyKey {
    key: String,
    /// Who sent it (the API's caller identity); part of the request's fingerprint.
    caller: String,
}

impl IdempotencyKey {
    pub const MAX_LEN: usize = 255;

    /// 1 to 255 printable ASCII characters (a UUID is a good choice: anyone who knows a key
    /// can replay its answer while it is kept).
    pub fn parse(raw: &str) -> Result<Self, InvalidInput> {
        if raw.is_empty()
            || raw.len() > Self::MAX_LEN
            || !raw.bytes().all(|b| (0x20..0x7f).contains(&b))
        {
            return Err(InvalidInput::IdempotencyKey);
        }
        Ok(Self {
            key: raw.to_owned(),
            caller: String::new(),
        })
    }

    /// The key as sent by `caller` (an opaque identity: the same for every request of one
    /// caller, different for any two callers).
    #[must_use]
    pub fn bound_to(self, caller: &str) -> Self {
        Self {
            caller: caller.to_owned(),
            ..self
        }
    }

    /// SHA-256 of the key, hex: how Redis names the key's record.
    pub(crate) fn digest_hex(&self) -> String {
        TokenDigest::of(&self.key).hex()
    }

    fn pad(&self) -> [u8; 32] {
        Sha256::new()
            .chain_update(b"leasehold idempotency seal\0")
            .chain_update(self.key.as_bytes())
            .finalize()
            .into()
    }

    /// `token`'s random part sealed under this key, hex.
    pub(crate) fn seal(&self, token: &LeaseToken) -> String {
        let pad = self.pad();
        let secret = token.secret();
        let sealed: Vec<u8> = secret.iter().zip(pad).map(|(s, p)| s ^ p).collect();
        hex::encode(sealed)
    }

    /// The token [`Self::seal`] sealed; `None` for anything else.
    pub(crate) fn unseal(&self, sealed: &str) -> Option<LeaseToken> {
        if sealed.len() != 64 {
            return None;
        }
        let pad = self.pad();
        let mut secret = [0u8; 32];
        for (i, out) in secret.iter_mut().enumerate() {
            let byte = u8::from_str_radix(sealed.get(2 * i..2 * i + 2)?, 16).ok()?;
            *out = byte ^ pad[i];
        }
        Some(LeaseToken::from_secret(secret))
    }
}

impl fmt::Debug for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("IdempotencyKey(<redacted>)")
    }
}

/// SHA-256 (hex) of what a request asks, so a key reused for another request is refused; ""
/// for a request without a key (the scripts read it only with one, and every byte of an
/// argument costs Redis's Lua a hash).
pub(crate) fn fingerprint(key: Option<&IdempotencyKey>, parts: &[&str]) -> String {
    let Some(key) = key else {
        return String::new();
    };
    let mut hash = Sha256::new();
    hash.update(key.caller.as_bytes());
    hash.update([0u8]);
    for part in parts {
        hash.update(part.as_bytes());
        hash.update([0u8]);
    }
    hex::encode(hash.finalize())
}

/// A random id for one request: a grant it makes can be rolled back only by it.
pub(crate) fn request_nonce() -> String {
    let mut buf = [0u8; 16];
    rand::rng().fill_bytes(&mut buf);
    hex::encode(buf)
}

impl fmt::Debug for LeaseToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("LeaseToken(<redacted>)")
    }
}

/// `prefix` + `bytes` random bytes from the OS generator, base64url without padding.
pub fn random_secret(prefix: &str, bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    rand::rng().fill_bytes(&mut buf);
    format!("{prefix}{}", URL_SAFE_NO_PAD.encode(&buf))
}

/// SHA-256 of a secret, the only form in which secrets are stored or compared.
#[derive(Clone, PartialEq, Eq)]
pub struct TokenDigest([u8; 32]);

impl TokenDigest {
    pub fn of(secret: &str) -> Self {
        Self(Sha256::digest(secret.as_bytes()).into())
    }

    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    pub fn hex(&self) -> String {
        hex::encode(self.0)
    }
}

/// A lease time to live, within the configured bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Ttl(Duration);

impl Ttl {
    pub fn as_millis(self) -> u64 {
        u64::try_from(self.0.as_millis()).unwrap_or(u64::MAX)
    }

    pub fn as_duration(self) -> Duration {
        self.0
    }
}

/// The TTLs a deployment accepts, and the one it gives when a client names none.
#[derive(Debug, Clone, Copy)]
pub struct TtlPolicy {
    pub default_ms: u64,
    pub min_ms: u64,
    pub max_ms: u64,
}

impl TtlPolicy {
    pub fn default_ttl(&self) -> Ttl {
        Ttl(Duration::from_millis(self.default_ms))
    }

    pub fn parse(&self, ttl_ms: u64) -> Result<Ttl, InvalidInput> {
        if ttl_ms < self.min_ms || ttl_ms > self.max_ms {
            return Err(InvalidInput::Ttl {
                ttl_ms,
                min_ms: self.min_ms,
                max_ms: self.max_ms,
            });
        }
        Ok(Ttl(Duration::from_millis(ttl_ms)))
    }
}

/// A per-lock number that grows with every new acquisition and never goes back, not even
/// after a release, an expiry, or Redis losing data: each is one more than the last and at
/// least Redis's clock in microseconds (so about 1.8e15 today: still exact as a JSON number,
/// below 2^53). The protected resource rejects writes carrying a smaller one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(transparent)]
pub struct FencingToken(pub u64);

/// A free-text label naming who holds a lease ("worker-3", "deploy cron"), for people.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HolderLabel(String);

impl HolderLabel {
    pub const MAX_LEN: usize = 200;

    pub fn parse(raw: &str) -> Result<Self, InvalidInput> {
        if raw.is_empty() || raw.chars().count() > Self::MAX_LEN {
            return Err(InvalidInput::Holder(format!(
                "a holder label has 1 to {} characters",
                Self::MAX_LEN
            )));
        }
        if raw.chars().any(char::is_control) {
            return Err(InvalidInput::Holder(
                "a holder label may not hold control characters".into(),
            ));
        }
        if let Some(bad) = raw.chars().find(|&c| invisible(c)) {
            return Err(InvalidInput::Holder(format!(
                "a holder label may not hold invisible or direction-changing characters \
                 (U+{:04X}): it would show as another label",
                u32::from(bad)
            )));
        }
        Ok(Self(raw.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Characters that change how text around them shows without showing themselves: bidi
/// embeddings, overrides, isolates and marks, and zero-width characters (Unicode's format
/// characters that matter for spoofing). A label holding one could pass for another on the
/// dashboard and in a 409's `holder`.
fn invisible(c: char) -> bool {
    matches!(
        c,
        '\u{00AD}'
            | '\u{061C}'
            | '\u{180E}'
            | '\u{200B}'..='\u{200F}'
            | '\u{202A}'..='\u{202E}'
            | '\u{2060}'..='\u{2064}'
            | '\u{2066}'..='\u{2069}'
            | '\u{FEFF}'
    )
}

/// A small JSON object a client attaches to its lease (job id, host, ...).
#[derive(Debug, Clone, PartialEq)]
pub struct Metadata(serde_json::Map<String, serde_json::Value>);

impl Metadata {
    pub const MAX_BYTES: usize = 4096;

    pub fn parse(value: serde_json::Value) -> Result<Self, InvalidInput> {
        let serde_json::Value::Object(map) = value else {
            return Err(InvalidInput::Metadata(
                "metadata must be a JSON object".into(),
            ));
        };
        let size = serde_json::to_string(&map)
            .map(|s| s.len())
            .unwrap_or(usize::MAX);
        if size > Self::MAX_BYTES {
            return Err(InvalidInput::Metadata(format!(
                "metadata may take {} bytes as JSON, this takes {size}",
                Self::MAX_BYTES
            )));
        }
        Ok(Self(map))
    }

    pub fn to_json(&self) -> String {
        serde_json::Value::Object(self.0.clone()).to_string()
    }

    pub fn into_value(self) -> serde_json::Value {
        serde_json::Value::Object(self.0)
    }

    /// Reads what `to_json` stored; anything else (or nothing) is no metadata.
    pub(crate) fn from_stored(raw: Option<&str>) -> Option<Self> {
        match serde_json::from_str(raw?) {
            Ok(serde_json::Value::Object(map)) => Some(Self(map)),
            _ => None,
        }
    }
}

/// A point in time as Redis's clock gave it, in milliseconds since the Unix epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Timestamp(pub u64);

impl Timestamp {
    pub fn plus(self, ms: u64) -> Self {
        Self(self.0.saturating_add(ms))
    }

    pub fn as_system_time(self) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(self.0)
    }

    /// RFC 3339 with milliseconds, UTC.
    pub fn rfc3339(self) -> String {
        humantime::format_rfc3339_millis(self.as_system_time()).to_string()
    }
}

/// Who goes first on a read/write lock when a writer waits.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum RwPolicy {
    /// Redisson's behaviour: a reader joins readers already holding, even past a waiting
    /// writer (writers can starve under a steady stream of readers).
    #[default]
    ReadersFirst,
    /// Curator's InterProcessReadWriteLock order: a reader arriving after a waiting writer
    /// waits behind it, so writers cannot starve.
    Fifo,
}

impl RwPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ReadersFirst => "readers_first",
            Self::Fifo => "fifo",
        }
    }
}

/// Which hold of a read/write lease a release gives back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RwMode {
    Read,
    Write,
}

impl RwMode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Write => "write",
        }
    }

    pub fn parse(raw: &str) -> Option<Self> {
        match raw {
            "read" => Some(Self::Read),
            "write" => Some(Self::Write),
            _ => None,
        }
    }
}

/// What a client asks for when it acquires.
#[derive(Debug, Clone)]
pub struct AcquireRequest {
    pub ttl: Option<Ttl>,
    pub holder: Option<HolderLabel>,
    pub metadata: Option<Metadata>,
    /// Present when the client re-enters a lease it holds.
    pub token: Option<LeaseToken>,
    /// A lock kind (never `Semaphore`); `None`: reentrant for a new lease, the lease's own
    /// kind on reentry.
    pub kind: Option<LeaseKind>,
    pub policy: RwPolicy,
    /// A retry with the same key gets the first answer.
    pub idempotency: Option<IdempotencyKey>,
}

/// What a client asks of a semaphore.
#[derive(Debug, Clone)]
pub struct PermitRequest {
    pub ttl: Ttl,
    pub holder: Option<HolderLabel>,
    pub metadata: Option<Metadata>,
    /// The semaphore's size; every party must name the same.
    pub limit: u32,
    pub permits: u32,
    /// A retry with the same key gets the first answer.
    pub idempotency: Option<IdempotencyKey>,
}

/// The outcome of an acquisition that did not fail: a grant, or a place in a fair queue.
#[derive(Debug, Clone)]
pub enum Acquired {
    Granted(Grant),
    Queued(Ticket),
}

/// A place in a fair lock's queue, kept by polling before `poll_by`.
#[derive(Debug, Clone)]
pub struct Ticket {
    /// Also the id of the lease the ticket turns into.
    pub lease_id: LeaseId,
    /// Proves the ticket (and later its lease); shown when the ticket is first issued.
    pub token: Option<LeaseToken>,
    /// 1 = next in line.
    pub position: u64,
    /// The ticket expires unless polled before this.
    pub poll_by: Timestamp,
    /// The first answer to a retried Idempotency-Key: the ticket its first request got.
    pub replayed: bool,
}

/// A granted acquisition: a new lease or one more level of an existing one.
#[derive(Debug, Clone)]
pub struct Grant {
    pub lease_id: LeaseId,
    /// The new lease's token; `None` on reentry (the client already has it).
    pub token: Option<LeaseToken>,
    /// Whether this grant started a lease (201) rather than re-entered one (200).
    pub new_lease: bool,
    /// An answer given before, given again: a ticket polled after its grant, or a retry
    /// with the same Idempotency-Key.
    pub replayed: bool,
    pub kind: LeaseKind,
    pub holder: Option<String>,
    pub fencing_token: FencingToken,
    pub reentry_count: u64,
    pub ttl_ms: u64,
    pub acquired_at: Timestamp,
    pub expires_at: Timestamp,
}

/// Who holds a lock right now, as far as a refused acquirer may know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Contention {
    /// The holder's label; `None` for unlabelled leases and Redisson clients.
    pub holder: Option<String>,
    pub lease_id: Option<LeaseId>,
    /// The raw Redis field (`<lease-id>:1`, or Redisson's `<client-uuid>:<thread-id>`).
    pub holder_id: Option<String>,
    /// When the holder's TTL runs out, if it has one.
    pub retry_after: Option<Duration>,
}

/// A successful heartbeat.
#[derive(Debug, Clone)]
pub struct Renewal {
    pub lease_id: LeaseId,
    pub reentry_count: u64,
    pub fencing_token: FencingToken,
    pub ttl_ms: u64,
    pub expires_at: Timestamp,
    /// How much of the previous TTL was left when the heartbeat arrived.
    pub slack_ms: i64,
}

/// A successful release.
#[derive(Debug, Clone)]
pub struct Release {
    pub lease_id: LeaseId,
    /// Levels still held; 0 when the lock was let go.
    pub reentry_count: u64,
    pub released: bool,
    /// The first answer to a retried Idempotency-Key (nothing happened now).
    pub replayed: bool,
}

/// How a lease ended, or that it still holds its lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LeaseState {
    Held,
    /// A fair-queue ticket still waiting.
    Queued,
    Released,
    Expired,
    ForceReleased,
    /// A fair-queue ticket whose waiter gave up.
    Left,
}

impl LeaseState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Held => "held",
            Self::Queued => "queued",
            Self::Released => "released",
            Self::Expired => "expired",
            Self::ForceReleased => "force_released",
            Self::Left => "left",
        }
    }
}

/// A lease as anyone may see it (never with its token).
#[derive(Debug, Clone)]
pub struct LeaseView {
    pub lease_id: LeaseId,
    pub lock: LockName,
    pub state: LeaseState,
    pub kind: LeaseKind,
    /// Read/write leases: holds per mode.
    pub read_count: Option<u64>,
    pub write_count: Option<u64>,
    /// Fair tickets: place in the queue (1 = next).
    pub position: Option<u64>,
    /// Semaphore leases: permits held.
    pub permits: Option<u64>,
    pub holder: Option<String>,
    pub metadata: Option<Metadata>,
    pub fencing_token: FencingToken,
    pub reentry_count: u64,
    pub ttl_ms: u64,
    pub acquired_at: Timestamp,
    pub expires_at: Timestamp,
    pub ended_at: Option<Timestamp>,
    /// Time left while held.
    pub remaining_ms: Option<u64>,
}

/// One holder of a lock.
#[derive(Debug, Clone)]
pub struct HolderView {
    /// The raw Redis field (`<lease-id>:1`, or Redisson's `<client-uuid>:<thread-id>`).
    pub holder_id: String,
    /// `None` when the holder is not a Leasehold lease (a Redisson client on the same key).
    pub lease_id: Option<LeaseId>,
    pub holder: Option<String>,
    pub metadata: Option<Metadata>,
    pub reentry_count: u64,
    /// Read/write locks: holds per mode.
    pub read_count: Option<u64>,
    pub write_count: Option<u64>,
    pub kind: Option<LeaseKind>,
    pub fencing_token: Option<FencingToken>,
    pub acquired_at: Option<Timestamp>,
}

/// A waiter in a fair lock's queue.
#[derive(Debug, Clone)]
pub struct QueuedView {
    pub position: u64,
    pub holder_id: String,
    pub lease_id: Option<LeaseId>,
    pub holder: Option<String>,
    pub queued_at: Option<Timestamp>,
    /// The waiter leaves the queue unless it tries again before this.
    pub deadline: Option<Timestamp>,
}

/// A lock as anyone may see it.
#[derive(Debug, Clone)]
pub struct LockView {
    pub lock: LockName,
    /// What the name is used as now; `None` when free.
    pub kind: Option<HeldAs>,
    /// Read/write locks: the mode held.
    pub mode: Option<RwMode>,
    pub holders: Vec<HolderView>,
    /// Fair locks: the first waiters in order.
    pub queue: Vec<QueuedView>,
    pub queue_length: u64,
    /// The highest fencing token handed out so far (0 if none).
    pub fencing_counter: FencingToken,
    /// Time left on the lock while held (`None` when free or held without a TTL).
    pub remaining_ms: Option<u64>,
    pub expires_at: Option<Timestamp>,
}

/// A semaphore as anyone may see it.
#[derive(Debug, Clone)]
pub struct SemaphoreView {
    pub name: LockName,
    pub limit: u32,
    pub used: u64,
    pub holders: Vec<PermitHolderView>,
    pub fencing_counter: FencingToken,
}

/// One lease holding permits of a semaphore.
#[derive(Debug, Clone)]
pub struct PermitHolderView {
    pub lease_id: Option<LeaseId>,
    pub holder: Option<String>,
    pub metadata: Option<Metadata>,
    pub permits: u64,
    pub fencing_token: Option<FencingToken>,
    pub acquired_at: Option<Timestamp>,
    pub expires_at: Option<Timestamp>,
}

/// A semaphore's limit, changed by an admin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitChange {
    pub limit: u32,
    pub previous: u32,
    /// Permits free now; below zero while more permits are out than the new limit.
    pub available: i64,
}

/// What an admin force release removed.
#[derive(Debug, Clone)]
pub struct ForcedRelease {
    pub lock: LockName,
    pub removed: Vec<HolderView>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_names_refuse_braces_slashes_and_length() {
        assert!(LockName::parse("orders:42.v2_x-y").is_ok());
        for bad in ["", "a{b}", "a}b", "a/b", "a b", "é", &"x".repeat(201)] {
            assert!(LockName::parse(bad).is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn tokens_round_trip_and_reject_other_shapes() {
        let token = LeaseToken::generate();
        assert!(token.expose().starts_with("lht_"));
        assert_eq!(token.expose().len(), 4 + 43);
        assert_eq!(LeaseToken::parse(token.expose()), Ok(token.clone()));
        assert_ne!(LeaseToken::generate(), token);
        for bad in ["", "lht_", "abc", "lht_tooshort", &token.expose()[4..]] {
            assert!(LeaseToken::parse(bad).is_err(), "{bad:?} was accepted");
        }
        assert!(!format!("{token:?}").contains(&token.expose()[4..]));
    }

    #[test]
    fn ttl_policy_enforces_bounds() {
        let policy = TtlPolicy {
            default_ms: 30_000,
            min_ms: 1_000,
            max_ms: 60_000,
        };
        assert_eq!(policy.parse(1_000).map(Ttl::as_millis), Ok(1_000));
        assert!(policy.parse(999).is_err());
        assert!(policy.parse(60_001).is_err());
    }

    #[test]
    fn metadata_must_be_a_small_object() {
        assert!(Metadata::parse(serde_json::json!({"job": 7})).is_ok());
        assert!(Metadata::parse(serde_json::json!([1])).is_err());
        assert!(Metadata::parse(serde_json::json!({"x": "y".repeat(5000)})).is_err());
    }
}
