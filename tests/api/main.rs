//! The integration suite: one binary (linked once), real redis-server processes and real HTTP.

mod access;
mod admin;
mod binary;
mod browser;
mod cli;
mod dashboard;
mod errors;
mod fair;
mod fencing;
mod guard;
mod helpers;
mod layers;
mod leases;
mod limits;
mod matrix;
mod metrics;
mod openapi;
mod outages;
mod redisson;
mod regressions;
mod rwlock;
mod semaphores;
mod tls;
mod waiting;
