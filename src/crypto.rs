//! The build's one TLS crypto provider (ring), installed as the process's default: the
//! client crate's, so that the listener, `rediss://` clients and reqwest all use the same.

pub use leasehold_client::install_crypto_provider as install_provider;
