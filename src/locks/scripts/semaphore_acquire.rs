//! Twin of `lua/semaphore_acquire.lua`: permits of a semaphore for a new lease.

use super::Script;
use super::acquire::AcquireReply;
use crate::locks::types::{
    HolderLabel, IdempotencyKey, LeaseId, LeaseToken, Metadata, PermitRequest, fingerprint,
};

pub(in crate::locks) struct SemaphoreAcquire<'a> {
    pub request: &'a PermitRequest,
    pub id: LeaseId,
    pub token: &'a LeaseToken,
    pub nonce: &'a str,
}

impl Script for SemaphoreAcquire<'_> {
    const FILE: &'static str = "semaphore_acquire";
    const ARGS: &'static [&'static str] = &["ttl_ms", "lease_id", "limit", "permits", "nonce", "holder", "metadata", "key_digest", "fingerprint", "sealed_token"];
    const NOTES_NAME: bool = true;
    const REPLICATED: bool = true;
    type Reply = AcquireReply;

    fn changes_lease(reply: &AcquireReply) -> bool {
        matches!(reply, AcquireReply::Acquired(_) | AcquireReply::Reentered(_))
    }

    fn parse(raw: &str) -> Result<AcquireReply, crate::locks::error::LockError> {
        AcquireReply::read(raw)
    }

    fn args(&self, cmd: &mut redis::Cmd) {
        let r = self.request;
        let holder = r.holder.as_ref().map_or("", HolderLabel::as_str);
        let metadata = r
            .metadata
            .as_ref()
            .map(Metadata::to_json)
            .unwrap_or_default();
        let key = r.idempotency.as_ref();
        let fp = fingerprint(
            key,
            &[
                "acquire_permits",
                &r.ttl.as_millis().to_string(),
                holder,
                &metadata,
                &r.limit.to_string(),
                &r.permits.to_string(),
            ],
        );
        cmd.arg(r.ttl.as_millis())
            .arg(self.id.to_string())
            .arg(r.limit)
            .arg(r.permits)
            .arg(self.nonce);
        let digest = key.map(IdempotencyKey::digest_hex).unwrap_or_default();
        let sealed = key.map(|k| k.seal(self.token)).unwrap_or_default();
        super::args_trimmed(cmd, &[holder, &metadata, &digest, &fp, &sealed]);
    }
}
