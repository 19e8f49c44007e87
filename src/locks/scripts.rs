//! The Lua scripts in `lua/`, each built once and called by EVALSHA (redis-rs loads a script
//! and retries when Redis answers NOSCRIPT, e.g. after a restart). `lua/prelude.lua` goes in
//! front of every script: Lua scripts cannot import each other.

use std::sync::LazyLock;

use redis::Script;

macro_rules! script {
    ($file:literal) => {
        LazyLock::new(|| {
            Script::new(concat!(
                include_str!("../../lua/prelude.lua"),
                "\n",
                include_str!(concat!("../../lua/", $file))
            ))
        })
    };
}

pub(crate) static ACQUIRE: LazyLock<Script> = script!("acquire.lua");
pub(crate) static RENEW: LazyLock<Script> = script!("renew.lua");
pub(crate) static RELEASE: LazyLock<Script> = script!("release.lua");
pub(crate) static FORCE_RELEASE: LazyLock<Script> = script!("force_release.lua");
pub(crate) static INSPECT_LOCK: LazyLock<Script> = script!("inspect_lock.lua");
pub(crate) static INSPECT_LEASE: LazyLock<Script> = script!("inspect_lease.lua");
