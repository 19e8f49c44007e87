//! The Redis Function library every script call runs in: `lua/prelude.lua`, `lua/locklib.lua`
//! and `lua/semlib.lua` (helpers, defined once when the library loads), then one function per
//! operation file. Defining the helpers on every EVALSHA cost more Redis time than most
//! operations themselves; a library defines them once (BENCHMARKS.md, W1).
//!
//! The library's name carries a hash of its text (`leasehold_<hash>`, functions
//! `lh_<hash>_<op>`), so two Leasehold versions sharing one Redis (a rolling upgrade) each run
//! their own functions instead of replacing each other's. A library is loaded with
//! `FUNCTION LOAD REPLACE` at start-up and again whenever Redis answers that a function does
//! not exist (a restart without persistence, `FUNCTION FLUSH`, a failover to a replica that
//! never had it); loading is atomic and idempotent, so every instance may do it.

use std::collections::HashMap;
use std::sync::LazyLock;

use sha2::{Digest, Sha256};

use super::OPERATIONS;

/// The helpers, by file name in `lua/`, in the order they are defined.
pub(super) const HELPERS: [(&str, &str); 3] = [
    ("prelude", include_str!("../../../lua/prelude.lua")),
    ("locklib", include_str!("../../../lua/locklib.lua")),
    ("semlib", include_str!("../../../lua/semlib.lua")),
];

/// Parts of a helper's or an operation's text kept in files of their own (so that no file of
/// `lua/` is over 500 lines), by file name: the library puts each part's text, its first
/// paragraph (the part's own header) aside, where the line `-- @part <name>` stands, so the
/// library is the same text as with the part written in place.
pub(super) const PARTS: [(&str, &str); 2] = [
    ("records", include_str!("../../../lua/records.lua")),
    (
        "acquire_free",
        include_str!("../../../lua/acquire_free.lua"),
    ),
];

/// `source` with each of its `-- @part <name>` lines replaced by that part's text.
fn with_parts(source: &str) -> String {
    PARTS.iter().fold(source.to_owned(), |text, (name, part)| {
        let body = part.split_once("\n\n").map_or(*part, |(_, body)| body);
        text.replace(&format!("-- @part {name}\n"), body)
    })
}

/// The assembled library.
pub(in crate::locks) struct Library {
    /// `leasehold_<hash>`.
    pub name: String,
    /// The text `FUNCTION LOAD` takes.
    pub text: String,
    functions: HashMap<&'static str, String>,
}

impl Library {
    /// The library's function for operation `op` (a file name of `lua/`).
    pub fn function(&self, op: &str) -> &str {
        self.functions.get(op).map_or("", String::as_str)
    }
}

pub(in crate::locks) static LIBRARY: LazyLock<Library> = LazyLock::new(|| build(false));

/// The library for a Redis Cluster: the same functions, publishing their wake-ups sharded
/// (`SPUBLISH`: the message stays in the lock's shard, where Redisson on a Redis 7 cluster
/// publishes and listens too; a classic `PUBLISH` is copied to every node of the cluster).
/// Every channel a function publishes on carries its lock's hash tag, which a sharded
/// publish from a function needs.
pub(in crate::locks) static SHARDED_LIBRARY: LazyLock<Library> = LazyLock::new(|| build(true));

/// The library for `redis`'s mode.
pub(in crate::locks) fn for_redis(redis: &crate::redis::Redis) -> &'static Library {
    if redis.capabilities().sharded_pubsub {
        &SHARDED_LIBRARY
    } else {
        &LIBRARY
    }
}

fn build(sharded: bool) -> Library {
    // Every operation is a function of its own, made once when the library loads (a closure
    // made on every call costs Redis instructions on every cycle: BENCHMARKS.md, W1), so that
    // its `return` ends only it: what it queued for STATE is then written
    // (flush_state), whichever way it returned.
    //
    // An operation's file may start with what its function shares between calls (the values
    // of the call being served, and helpers that use them), made once too: that part ends at
    // the line `-- @per-call`. Each operation is a `do` block, so those names are its own.
    // The library's header names the publish command every function wakes waiters with
    // (`redis.call(PUBLISH, channel, message)`): sharded on a cluster, classic elsewhere.
    let publish = if sharded { "SPUBLISH" } else { "PUBLISH" };
    let mut body = format!("local PUBLISH = '{publish}'\n");
    body.push_str(&HELPERS.map(|(_, source)| with_parts(source)).join("\n"));
    for operation in OPERATIONS {
        let (op, source) = (operation.file, with_parts(operation.source));
        let (once, per_call) = split_once_part(&source);
        // The operations that only take Redis memory: every other one frees or keeps what a
        // lease already holds (release, heartbeat, inspection, sweeping, admin removals) and
        // is registered `allow-oom`, so that under `maxmemory` with `noeviction` (Redis full)
        // leases can still be released and kept alive while new ones are refused. (A function
        // without the flag is refused whole by a full Redis, even one that would only have
        // freed memory.)
        let flags = if operation.grows {
            ""
        } else {
            ", flags = {'allow-oom'}"
        };
        body.push_str(&format!(
            "\ndo\n{once}\nlocal function op_{op}(KEYS, ARGV)\n{per_call}\nend\n\
             redis.register_function{{function_name = 'lh_{{V}}_{op}', callback = function(KEYS, ARGV)\n\
             local reply = op_{op}(KEYS, ARGV)\nif WN > 0 then flush_state() end\nreturn reply\nend{flags}}}\nend\n"
        ));
    }
    let hash = hex::encode(&Sha256::digest(body.as_bytes())[..6]);
    let name = format!("leasehold_{hash}");
    let text = format!(
        "#!lua name={name}\n{}",
        body.replace("lh_{V}_", &format!("lh_{hash}_"))
    );
    let functions = OPERATIONS
        .iter()
        .map(|op| (op.file, format!("lh_{hash}_{}", op.file)))
        .collect();
    Library {
        name,
        text,
        functions,
    }
}

/// The line that ends the part of an operation's file made once (see `build`).
const PER_CALL_MARKER: &str = "\n-- @per-call\n";

/// An operation's file as (made once, run on every call); without the marker, all of it runs
/// on every call.
fn split_once_part(source: &str) -> (&str, &str) {
    source.split_once(PER_CALL_MARKER).unwrap_or(("", source))
}

/// Loads the library into Redis (or replaces a library of the same name, which has the same
/// text).
pub(in crate::locks) async fn load(redis: &crate::redis::Redis) -> redis::RedisResult<()> {
    let library = for_redis(redis);
    redis.load_functions(&library.text).await?;
    tracing::debug!(library = %library.name, "loaded the Lua function library");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cluster_library_publishes_every_wake_up_sharded_under_its_own_name() {
        let (classic, sharded) = (&*LIBRARY, &*SHARDED_LIBRARY);
        assert_ne!(classic.name, sharded.name);
        let header = |text: &str| text.lines().nth(1).unwrap_or_default().to_owned();
        assert_eq!(header(&classic.text), "local PUBLISH = 'PUBLISH'");
        assert_eq!(header(&sharded.text), "local PUBLISH = 'SPUBLISH'");
        assert!(
            classic.text.matches("redis.call(PUBLISH, ").count() > 10,
            "every wake-up publishes with the header's command"
        );
        for library in [classic, sharded] {
            let text = library.text.to_ascii_uppercase();
            assert!(
                !text.contains("'PUBLISH',")
                    && !text.contains("'SPUBLISH',")
                    && !text.contains("\"PUBLISH\""),
                "no function names a publish command of its own"
            );
        }
    }

    #[test]
    fn every_operation_has_a_versioned_function() {
        let lib = &*LIBRARY;
        assert!(lib.name.starts_with("leasehold_"));
        assert!(lib.text.starts_with(&format!("#!lua name={}\n", lib.name)));
        let hash = lib.name.trim_start_matches("leasehold_");
        for op in OPERATIONS {
            let (op, f) = (op.file, lib.function(op.file));
            assert_eq!(f, format!("lh_{hash}_{op}"));
            assert!(lib.text.contains(&format!("function_name = '{f}'")));
        }
        assert!(!lib.text.contains("{V}"));
    }

    #[test]
    fn each_part_stands_in_one_file_and_leaves_no_marker() {
        for (name, _) in PARTS {
            let marker = format!("-- @part {name}\n");
            let sources = HELPERS
                .iter()
                .map(|(_, source)| *source)
                .chain(OPERATIONS.iter().map(|op| op.source));
            assert_eq!(
                sources.filter(|s| s.contains(&marker)).count(),
                1,
                "lua/{name}.lua stands in exactly one file"
            );
        }
        for library in [&*LIBRARY, &*SHARDED_LIBRARY] {
            assert!(!library.text.contains("-- @part "));
            assert!(
                !library.text.contains("-- Part of "),
                "a part's header stays out"
            );
        }
    }

    #[test]
    fn the_part_before_the_marker_is_made_once_outside_the_function() {
        let (once, per_call) = split_once_part("local x\n-- @per-call\nx = 1\n");
        assert_eq!((once, per_call), ("local x", "x = 1\n"));
        assert_eq!(split_once_part("return 1\n"), ("", "return 1\n"));
        let lib = build(false);
        let acquire = lib
            .text
            .find("local function op_acquire(")
            .expect("acquire");
        let shared = lib.text.find("local function grant(").expect("grant");
        assert!(
            shared < acquire,
            "acquire's helpers are made once, before its function"
        );
        assert!(!lib.text.contains(PER_CALL_MARKER));
    }
}
