//! An election leader's new value (`lua/proclaim.lua`): its lease's metadata, logged as a
//! proclamation in the election's terms log.

use crate::locks::calls::On;
use crate::locks::scripts::proclaim::{Proclaim, ProclaimReply};
use crate::locks::{
    FencingToken, LeaseId, LeaseToken, LockError, LockName, Locks, Metadata, Timestamp,
};

/// A proclamation's answer: the term it was made in, and until when the term holds.
#[derive(Debug, Clone)]
pub struct Proclaimed {
    pub fencing_token: FencingToken,
    pub expires_at: Timestamp,
    pub holder: Option<String>,
}

impl Locks {
    /// Sets the metadata of lease `id`, which must hold lock `name` (a leader's new value).
    pub async fn proclaim(
        &self,
        name: &LockName,
        id: LeaseId,
        token: &LeaseToken,
        metadata: &Metadata,
    ) -> Result<Proclaimed, LockError> {
        let text = serde_json::to_string(&metadata.clone().into_value())
            .map_err(|e| LockError::BadReply(e.to_string()))?;
        let script = Proclaim {
            lease: id,
            token,
            metadata: &text,
        };
        let (reply, acked) = self.call_with(On::Lock(name), &script, None).await?;
        match reply {
            ProclaimReply::Proclaimed {
                fencing_token,
                expires_ms,
                holder,
            } => {
                let degraded = acked.and_then(crate::redis::Acked::degraded);
                self.inner.conn.acks().answered(degraded);
                Ok(Proclaimed {
                    fencing_token: FencingToken(fencing_token),
                    expires_at: Timestamp(expires_ms),
                    holder,
                })
            }
            ProclaimReply::Refused(r) => Err(r.into()),
        }
    }
}
