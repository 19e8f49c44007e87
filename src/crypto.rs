//! The build's one TLS crypto provider (ring), installed as the process's default. reqwest is
//! built here without a provider of its own (its default would bring aws-lc-rs, a long C
//! build), so it panics on `build()` until one is installed; the listener and `rediss://`
//! clients ask rustls for the same default.

/// Makes ring the process's crypto provider; later calls do nothing.
pub fn install_provider() {
    // Err means another call (or another crate) installed it first: fine.
    let _ = rustls::crypto::ring::default_provider().install_default();
}
