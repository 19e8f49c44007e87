//! Abuse limits, each with the answer a client gets and how fast it comes (the figures are
//! printed, so a run shows them): slow headers and bodies, idle and surplus connections,
//! HTTP/2 streams, request rates, quotas per caller across instances, waiters per lock, fair
//! queue length, reentry depth, event streams, admin reasons, a key's TTL and permits.

mod callers;
mod connections;
mod locks;
