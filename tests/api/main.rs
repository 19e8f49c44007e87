//! The integration suite: one binary (linked once), real redis-server processes and real HTTP.

mod admin;
mod binary;
mod browser;
mod cli;
mod cli_tools;
mod deploy;
mod dashboard;
mod errors;
mod expiry;
mod fair;
mod fencing;
mod helpers;
mod layers;
mod leases;
mod metrics;
mod operator;
mod openapi;
mod outages;
mod redisson;
mod regressions;
mod rwlock;
mod semaphores;
mod surprises;
mod waiting;
mod waitlist;
mod watch;
