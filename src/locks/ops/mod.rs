//! What callers do with locks and semaphores: one file per family of use cases, each an
//! `impl Locks` block over the scripts it calls.

pub mod acquire;
pub mod admin;
mod answer;
pub mod attempt;
#[cfg(test)]
mod budgets;
pub mod census;
pub mod estimate;
pub mod eviction;
pub mod inspect;
pub mod lease;
pub mod listing;
pub mod proclaim;
pub mod records;
pub mod redlock;
pub mod revoke;
pub mod rollback;
pub mod signals;
pub mod tenure;
#[cfg(test)]
mod tests;
pub mod watch;
