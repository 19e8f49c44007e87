//! What the lock domain tells about itself, beside the answers to its callers: each lock's
//! history in Redis ([`history`]), the live events every instance publishes and their journal
//! ([`publisher`], [`journal`]), who waits ([`waitlist`]), the names that may be live
//! ([`index`]), and the expiries recorded when they happen ([`sweeper`]).

mod contention;
pub mod history;
pub mod hold_times;
pub mod index;
pub mod journal;
pub mod publisher;
pub(in crate::locks) mod queue;
mod reply;
pub mod sweeper;
pub mod terms;
pub mod waitlist;
