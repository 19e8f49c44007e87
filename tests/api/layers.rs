//! The crate's modules import each other one way only (the map at the top of `src/lib.rs`):
//! read from the sources, so a `use` that turns an arrow around fails here instead of
//! quietly growing a cycle.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Each top-level module, and the only ones it may import.
const ALLOWED: &[(&str, &[&str])] = &[
    // The Redis seam knows nothing above it; the lock domain nothing of HTTP or metrics. It
    // speaks the wire crate's vocabulary where a concept is the same on both sides (the
    // read/write policy and mode: one enum each) and maps the rest (`From` impls in
    // `locks::types::kind`); it never names a request or response body.
    ("redis", &["parent_death"]),
    ("locks", &["redis", "wire"]),
    ("shutdown", &[]),
    ("parent_death", &[]),
    ("crypto", &[]),
    ("problem", &["leases", "locks"]),
    ("tenant", &["locks"]),
    ("own_keys", &["locks", "redis"]),
    ("limits", &["redis"]),
    ("audit", &["locks", "redis", "tenant"]),
    ("auth", &["limits", "locks", "problem", "redis", "tenant"]),
    ("event_feed", &["locks", "redis", "tenant"]),
    ("metrics", &["locks"]),
    // Where a lease lives: the main Redis's lock domain, the RedLock nodes (one lock domain
    // per node, over the seam's standalone handles), multilease records. Nothing above it
    // (no transport) is named.
    ("leases", &["locks", "redis"]),
    // One owner per admin use case; both transports adapt it.
    ("operator", &["audit", "auth", "leases", "locks", "problem"]),
    (
        "state",
        &[
            "audit",
            "auth",
            "event_feed",
            "leases",
            "limits",
            "locks",
            "metrics",
            "operator",
            "problem",
            "redis",
            "tenant",
        ],
    ),
    // The two transports share auth and problem, never each other.
    (
        "api",
        &[
            "audit",
            "auth",
            "event_feed",
            "leases",
            "limits",
            "locks",
            "metrics",
            "operator",
            "problem",
            "state",
            "tenant",
            "wire",
        ],
    ),
    (
        "dashboard",
        &[
            "audit",
            "auth",
            "event_feed",
            "leases",
            "limits",
            "locks",
            "operator",
            "problem",
            "state",
        ],
    ),
    (
        "server",
        &[
            "api",
            "audit",
            "auth",
            "config",
            "crypto",
            "dashboard",
            "event_feed",
            "leases",
            "limits",
            "locks",
            "metrics",
            "own_keys",
            "problem",
            "redis",
            "state",
        ],
    ),
    // The wire format and the client are crates of their own (`crates/`), re-exported as
    // `crate::wire` and `crate::client`: they can name nothing of the server.
    ("wire", &[]),
    ("client", &[]),
    // Flags parse straight into the seam's own small types (the replica-ack rule).
    ("config", &["client", "redis", "wire"]),
    ("cli", &["client", "config", "parent_death", "wire"]),
    ("telemetry", &["config"]),
];

/// One level into the lock domain: each room of `src/locks/` and the rooms it may name
/// (`crate::locks::<room>`, or `super::<room>` from a file directly in `locks/`). Names
/// re-exported at `crate::locks` are the domain's public face and count as no room.
const LOCK_ROOMS: &[(&str, &[&str])] = &[
    // The vocabulary depends on nothing else of the domain.
    ("types", &[]),
    ("layout", &["types"]),
    ("error", &["types"]),
    ("observer", &["types"]),
    ("scripts", &["error", "types"]),
    ("wakeups", &["layout", "types"]),
    // The Redis behind the domain, for probes and the Redis page: readings, no use case.
    ("backend", &["error", "scripts"]),
    (
        "feed",
        &["error", "layout", "observer", "scripts", "types", "wakeups"],
    ),
    // The handle every use case shares, and the one way a Lua function is called.
    (
        "handle",
        &["error", "feed", "layout", "observer", "types", "wakeups"],
    ),
    ("calls", &["error", "handle", "scripts", "types"]),
    // The use cases sit on everything else; nothing sits on them.
    (
        "ops",
        &[
            "calls", "error", "feed", "handle", "layout", "observer", "scripts", "types", "wakeups",
        ],
    ),
];

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("src is readable").flatten() {
        let path = entry.path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Top-level module → the top-level modules its files name as `crate::<module>`.
fn imports() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let relative = file.strip_prefix(&src).expect("under src");
        let first = relative.components().next().expect("a path");
        let module = first
            .as_os_str()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_owned();
        if matches!(module.as_str(), "lib" | "main") {
            continue;
        }
        // Code only: a doc comment may point anywhere.
        let text: String = std::fs::read_to_string(&file)
            .expect("readable source")
            .lines()
            .filter(|line| !line.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        let edges = graph.entry(module.clone()).or_default();
        for (i, _) in text.match_indices("crate::") {
            let rest = &text[i + "crate::".len()..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() && name != module {
                edges.insert(name);
            }
        }
        // `use crate::{a, b}` names several at once.
        for (i, _) in text.match_indices("use crate::{") {
            let rest = &text[i + "use crate::{".len()..];
            let group = &rest[..rest.find('}').unwrap_or(rest.len())];
            for part in group.split(',') {
                let name = part.trim().split("::").next().unwrap_or("").trim();
                if !name.is_empty() && name != module && name != "self" {
                    edges.insert(name.to_owned());
                }
            }
        }
    }
    graph
}

/// Room of `src/locks/` → the rooms its files name (tests aside).
fn lock_room_imports() -> BTreeMap<String, BTreeSet<String>> {
    let locks = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/locks");
    let rooms: BTreeSet<&str> = LOCK_ROOMS.iter().map(|(r, _)| *r).collect();
    let mut files = Vec::new();
    sources(&locks, &mut files);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let relative = file.strip_prefix(&locks).expect("under src/locks");
        let top_level = relative.components().count() == 1;
        let room = relative
            .components()
            .next()
            .expect("a path")
            .as_os_str()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_owned();
        if room == "mod" {
            continue;
        }
        let source = std::fs::read_to_string(&file).expect("readable source");
        let code = source.split("#[cfg(test)]").next().unwrap_or("");
        let text: String = code
            .lines()
            .filter(|line| !line.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        let edges = graph.entry(room.clone()).or_default();
        let mut name_after = |marker: &str| {
            for (i, _) in text.match_indices(marker) {
                let name: String = text[i + marker.len()..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if rooms.contains(name.as_str()) && name != room {
                    edges.insert(name);
                }
            }
        };
        name_after("crate::locks::");
        if top_level {
            name_after("super::");
        }
    }
    graph
}

#[test]
fn the_lock_domains_rooms_import_only_what_their_map_allows() {
    let allowed: BTreeMap<&str, BTreeSet<&str>> = LOCK_ROOMS
        .iter()
        .map(|(m, deps)| (*m, deps.iter().copied().collect()))
        .collect();
    let mut wrong = Vec::new();
    for (room, deps) in lock_room_imports() {
        let Some(ok) = allowed.get(room.as_str()) else {
            wrong.push(format!(
                "locks::{room} is not in the map (tests/api/layers.rs)"
            ));
            continue;
        };
        for dep in deps {
            if !ok.contains(dep.as_str()) {
                wrong.push(format!("locks::{room} imports locks::{dep}"));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports against the rooms' map: {wrong:#?}"
    );
    assert!(
        no_cycle(LOCK_ROOMS),
        "a cycle among the lock domain's rooms"
    );
}

#[test]
fn modules_import_only_what_the_map_allows() {
    let allowed: BTreeMap<&str, BTreeSet<&str>> = ALLOWED
        .iter()
        .map(|(m, deps)| (*m, deps.iter().copied().collect()))
        .collect();
    let mut wrong = Vec::new();
    for (module, deps) in imports() {
        let Some(ok) = allowed.get(module.as_str()) else {
            wrong.push(format!("{module} is not in the map (tests/api/layers.rs)"));
            continue;
        };
        for dep in deps {
            if !ok.contains(dep.as_str()) {
                wrong.push(format!("{module} imports {dep}"));
            }
        }
    }
    assert!(wrong.is_empty(), "imports against the map: {wrong:#?}");
}

#[test]
fn the_map_itself_has_no_cycle() {
    assert!(no_cycle(ALLOWED), "a cycle among the top-level modules");
}

/// Kahn's algorithm over the allowed edges: everything must come off.
fn no_cycle(map: &[(&str, &[&str])]) -> bool {
    let mut remaining: BTreeMap<&str, BTreeSet<&str>> = map
        .iter()
        .map(|(m, deps)| (*m, deps.iter().copied().collect()))
        .collect();
    while let Some(free) = remaining
        .iter()
        .find(|(_, deps)| deps.is_empty())
        .map(|(m, _)| *m)
    {
        remaining.remove(free);
        for deps in remaining.values_mut() {
            deps.remove(free);
        }
    }
    remaining.is_empty()
}

/// The API never asks where a lease lives: no handler names the RedLock nodes, a lease's
/// placement, or tries one store after another (`leases` decides; see `src/leases/`).
#[test]
fn the_api_never_asks_where_a_lease_lives() {
    let api = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/api");
    let mut files = Vec::new();
    sources(&api, &mut files);
    let mut found = Vec::new();
    for file in files {
        let code: String = std::fs::read_to_string(&file)
            .expect("readable source")
            .lines()
            .filter(|line| !line.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        for needle in [
            "leases::redlock",
            "Placement",
            ".redlock()",
            "may_be_redlock",
            "redlock_for",
        ] {
            if code.contains(needle) {
                found.push(format!("{} names {needle}", file.display()));
            }
        }
    }
    assert!(found.is_empty(), "{found:#?}");
}
