//! The crate's modules import each other one way only (the map at the top of `src/lib.rs`):
//! read from the sources, so a `use` that turns an arrow around fails here instead of
//! quietly growing a cycle.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Each top-level module, and the only ones it may import.
const ALLOWED: &[(&str, &[&str])] = &[
    // The lock domain knows nothing of HTTP, metrics or the wire format.
    ("locks", &[]),
    ("wire", &[]),
    ("durability", &[]),
    ("shutdown", &[]),
    ("parent_death", &[]),
    ("embedded_redis", &["parent_death"]),
    ("crypto", &[]),
    ("problem", &["locks"]),
    ("tenant", &["locks"]),
    ("own_keys", &["locks"]),
    ("limits", &[]),
    ("audit", &["locks", "tenant"]),
    ("auth", &["limits", "locks", "problem", "tenant"]),
    ("events", &["locks", "tenant"]),
    ("metrics", &["locks"]),
    (
        "state",
        &["audit", "auth", "events", "limits", "locks", "metrics"],
    ),
    // The two transports share auth and problem, never each other.
    (
        "api",
        &[
            "audit", "auth", "events", "limits", "locks", "metrics", "problem", "state", "tenant",
            "wire",
        ],
    ),
    (
        "dashboard",
        &[
            "audit", "auth", "events", "limits", "locks", "problem", "state",
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
            "durability",
            "events",
            "limits",
            "locks",
            "metrics",
            "own_keys",
            "problem",
            "state",
        ],
    ),
    // The client speaks the wire format only (over TLS from the one provider).
    ("client", &["crypto", "wire"]),
    ("config", &["client", "wire"]),
    ("cli", &["client", "config", "parent_death", "wire"]),
    ("telemetry", &["config"]),
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
    // Kahn's algorithm over the allowed edges: everything must come off.
    let mut remaining: BTreeMap<&str, BTreeSet<&str>> = ALLOWED
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
    assert!(remaining.is_empty(), "a cycle among {remaining:?}");
}
