//! The Lua scripts in `lua/`, each built once and called by EVALSHA (redis-rs loads a script
//! and retries when Redis answers NOSCRIPT, e.g. after a restart). Lua scripts cannot import
//! each other, so the shared helpers go in front of each script's text: `prelude.lua` for all,
//! then `locklib.lua` for lock scripts or `semlib.lua` for semaphore scripts.

use std::sync::LazyLock;

use redis::Script;

macro_rules! script {
    ($lib:literal, $file:literal) => {
        LazyLock::new(|| {
            Script::new(concat!(
                include_str!("../../lua/prelude.lua"),
                "\n",
                include_str!(concat!("../../lua/", $lib)),
                "\n",
                include_str!(concat!("../../lua/", $file))
            ))
        })
    };
}

pub(crate) static ACQUIRE: LazyLock<Script> = script!("locklib.lua", "acquire.lua");
pub(crate) static RENEW: LazyLock<Script> = script!("locklib.lua", "renew.lua");
pub(crate) static RELEASE: LazyLock<Script> = script!("locklib.lua", "release.lua");
pub(crate) static LEAVE: LazyLock<Script> = script!("locklib.lua", "leave.lua");
pub(crate) static FORCE_RELEASE: LazyLock<Script> = script!("locklib.lua", "force_release.lua");
pub(crate) static INSPECT_LOCK: LazyLock<Script> = script!("locklib.lua", "inspect_lock.lua");
pub(crate) static INSPECT_LEASE: LazyLock<Script> = script!("locklib.lua", "inspect_lease.lua");

pub(crate) static SEMAPHORE_ACQUIRE: LazyLock<Script> =
    script!("semlib.lua", "semaphore_acquire.lua");
pub(crate) static SEMAPHORE_RENEW: LazyLock<Script> = script!("semlib.lua", "semaphore_renew.lua");
pub(crate) static SEMAPHORE_RELEASE: LazyLock<Script> =
    script!("semlib.lua", "semaphore_release.lua");
pub(crate) static SEMAPHORE_INSPECT: LazyLock<Script> =
    script!("semlib.lua", "semaphore_inspect.lua");
pub(crate) static SEMAPHORE_FORCE_RELEASE: LazyLock<Script> =
    script!("semlib.lua", "semaphore_force_release.lua");
pub(crate) static SEMAPHORE_LIMIT: LazyLock<Script> = script!("semlib.lua", "semaphore_limit.lua");
