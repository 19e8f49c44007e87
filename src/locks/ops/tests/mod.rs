//! The lock use cases' tests that need a real redis-server under the crate's private types.

mod replays;
