//! Revocation of what is open: an event stream or a waiting request outlives the moment its
//! credential was checked, so each one opened with an API key or a dashboard session is
//! registered here, and one task per process checks every registered credential again every
//! [`CHECK_EVERY`] (the key store's cache time: a revocation is seen by every instance within
//! it anyway). A revoked key, a rotated-out secret's key gone, a signed-out session or one
//! whose key went: everything open with it ends (an event stream closes, a waiting request is
//! answered 401 and what it may have been granted is rolled back).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::Access;
use super::principal::{Principal, Who};

/// How often the registered credentials are checked again.
pub const CHECK_EVERY: Duration = super::keys::CACHE_TTL;

/// A credential something stays open with.
#[derive(Clone, PartialEq, Eq, Hash)]
enum Credential {
    Key(String),
    Session(String),
}

/// The credentials of what is open in this process, each with the token that ends it.
#[derive(Default)]
pub struct Revocations {
    open: Mutex<HashMap<Credential, Entry>>,
}

struct Entry {
    revoked: CancellationToken,
    /// How many open things use it.
    users: usize,
}

/// One open thing's hold on its credential's registration: [`Self::revoked`] completes when
/// the credential is revoked. Dropped, it deregisters.
pub struct Watched {
    credential: Credential,
    revoked: CancellationToken,
    registry: Arc<Revocations>,
}

impl Watched {
    /// Completes once the credential has been revoked.
    pub async fn revoked(&self) {
        self.revoked.cancelled().await;
    }

    pub fn is_revoked(&self) -> bool {
        self.revoked.is_cancelled()
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        let mut open = self
            .registry
            .open
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(entry) = open.get_mut(&self.credential) {
            entry.users = entry.users.saturating_sub(1);
            if entry.users == 0 {
                open.remove(&self.credential);
            }
        }
    }
}

impl Revocations {
    /// Registers what `principal` opens; `None` for a credential that cannot be revoked (the
    /// admin token, which changes only with a restart; anonymous callers).
    pub fn watch(self: &Arc<Self>, principal: &Principal) -> Option<Watched> {
        let credential = match (&principal.session, &principal.who) {
            (Some(session), _) => Credential::Session(session.clone()),
            (None, Who::Key { id, .. }) => Credential::Key(id.clone()),
            (None, Who::AdminToken | Who::Anonymous(_)) => return None,
        };
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = open.entry(credential.clone()).or_insert_with(|| Entry {
            revoked: CancellationToken::new(),
            users: 0,
        });
        entry.users += 1;
        Some(Watched {
            credential,
            revoked: entry.revoked.clone(),
            registry: self.clone(),
        })
    }

    fn registered(&self) -> Vec<Credential> {
        self.open
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .keys()
            .cloned()
            .collect()
    }

    fn revoke(&self, credential: &Credential) {
        let open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(entry) = open.get(credential) {
            entry.revoked.cancel();
        }
    }
}

impl Access {
    /// Checks every registered credential again every [`CHECK_EVERY`] until `shutdown`,
    /// ending what a revoked one keeps open.
    pub fn spawn_revocation_checks(self: Arc<Self>, shutdown: CancellationToken) -> JoinHandle<()> {
        tokio::spawn(async move {
            let mut every = tokio::time::interval(CHECK_EVERY);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = every.tick() => {}
                    () = shutdown.cancelled() => return,
                }
                for credential in self.revocations.registered() {
                    if self.revoked(&credential).await {
                        // (A session's id is a secret: only a key's is named.)
                        match &credential {
                            Credential::Key(id) => {
                                tracing::info!(key = %id, "API key revoked: ending what it keeps open")
                            }
                            Credential::Session(_) => {
                                tracing::info!("dashboard session ended: ending what it keeps open")
                            }
                        }
                        self.revocations.revoke(&credential);
                    }
                }
            }
        })
    }

    /// Whether `credential` no longer lets its caller in (Redis failing says nothing).
    async fn revoked(&self, credential: &Credential) -> bool {
        match credential {
            Credential::Key(id) => matches!(self.keys.by_id(id).await, Ok(None)),
            Credential::Session(id) => match self.sessions.signed_in(id).await {
                Ok(Some(session)) => self.of_session(&session).await.is_none(),
                Ok(None) => true,
                Err(_) => false,
            },
        }
    }
}
