//! Leases' ids and tokens, the secrets made for them, and `Idempotency-Key`s: what proves a
//! lease, and what Redis keeps of it (digests only).

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use rand::Rng as _;
use sha2::{Digest as _, Sha256};
use uuid::Uuid;

use super::InvalidInput;

/// A lease's public identifier: a UUID made of the first 122 bits of its token's SHA-256
/// ([`LeaseToken::lease_id`]), whose version nibble is the lease's *family*: 8 for a lease of
/// the main Redis (every id before families existed), others for leases that live elsewhere
/// (`crate::leases::Placement` names them). Not a secret: knowing it does not give the
/// token, while the token proves it without any lookup, so Redis keeps no token index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct LeaseId(Uuid);

impl LeaseId {
    /// The family of the ids [`LeaseToken::lease_id`] makes: leases of the main Redis.
    pub const MAIN_FAMILY: u8 = 8;

    pub fn parse(raw: &str) -> Option<Self> {
        Uuid::try_parse(raw).ok().map(Self)
    }

    /// The id's family: its UUID version nibble (see [`LeaseToken::lease_id_in`]).
    pub fn family(self) -> u8 {
        self.0.as_bytes()[6] >> 4
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

    /// The id of the main Redis's lease this token proves.
    pub fn lease_id(&self) -> LeaseId {
        self.lease_id_in(LeaseId::MAIN_FAMILY)
    }

    /// The id of the lease of `family` (a version nibble, 8 to 15) this token proves: the
    /// digest's first bytes with the family in the version nibble and RFC 9562's variant, so
    /// the family reads back from the id alone ([`LeaseId::family`]).
    pub fn lease_id_in(&self, family: u8) -> LeaseId {
        let digest = self.digest();
        let mut bytes = [0u8; 16];
        bytes.copy_from_slice(&digest.as_bytes()[..16]);
        bytes[6] = (bytes[6] & 0x0f) | ((family & 0x0f) << 4);
        bytes[8] = (bytes[8] & 0x3f) | 0x80;
        LeaseId(Uuid::from_bytes(bytes))
    }

    /// Whether this token proves lease `id` (of whatever family the id says).
    pub fn proves(&self, id: LeaseId) -> bool {
        self.lease_id_in(id.family()) == id
    }

    /// The token's random part.
    fn secret(&self) -> [u8; Self::RANDOM_BYTES] {
        let mut out = [0u8; Self::RANDOM_BYTES];
        if let Ok(bytes) = URL_SAFE_NO_PAD.decode(&self.0[Self::PREFIX.len()..]) {
            out.copy_from_slice(&bytes[..Self::RANDOM_BYTES.min(bytes.len())]);
        }
        out
    }

    /// Another token made from this one's secret, `purpose` and `part`: as secret as this
    /// one, and unlike any token `generate` makes or any other `derive` (SHA-256).
    pub(super) fn derive(&self, purpose: &[u8], part: &[u8]) -> Self {
        let secret: [u8; Self::RANDOM_BYTES] = Sha256::new()
            .chain_update(purpose)
            .chain_update(self.secret())
            .chain_update(part)
            .finalize()
            .into();
        Self::from_secret(secret)
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

#[cfg(test)]
mod tests {
    use super::*;

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
    fn an_id_says_its_family_and_the_token_proves_it_in_that_family_only() {
        let token = LeaseToken::generate();
        let main = token.lease_id();
        // The ids made before families existed: `uuid::Builder::from_custom_bytes`.
        let mut bytes = [0u8; 16];
        bytes.copy_from_slice(&token.digest().as_bytes()[..16]);
        assert_eq!(
            main,
            LeaseId(uuid::Builder::from_custom_bytes(bytes).into_uuid())
        );
        assert_eq!(main.family(), LeaseId::MAIN_FAMILY);
        for family in 8..=15 {
            let id = token.lease_id_in(family);
            assert_eq!(id.family(), family);
            assert!(token.proves(id));
            assert!(!LeaseToken::generate().proves(id));
            assert_eq!(LeaseId::parse(&id.to_string()), Some(id));
        }
        assert_ne!(token.lease_id_in(9), main);
    }
}
