//! The reference parts of the book are generated from, or checked against, what the code
//! declares: the HTTP API chapter against the OpenAPI document (every route and status in a
//! generated index, every field named in the prose), the CLI reference from each
//! subcommand's `--help`, and the configuration table from `serve`'s clap arguments. A
//! generated part that differs fails with the difference; `LEASEHOLD_BLESS_DOCS=1` rewrites it.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use clap::CommandFactory as _;
use serde_json::Value;

use super::markdown::{book_src, shown};
use crate::helpers::cli::BIN;
use crate::helpers::default_limits;

const BLESS: &str = "LEASEHOLD_BLESS_DOCS";

/// Compares the part of `file` between the lines `<!-- begin generated: {what} -->` and
/// `<!-- end generated: {what} -->` with `generated`; rewrites it under `LEASEHOLD_BLESS_DOCS`.
fn check_generated(file: &Path, what: &str, generated: &str) {
    let text = std::fs::read_to_string(file).expect("the page");
    let begin = format!("<!-- begin generated: {what} -->\n");
    let end = format!("<!-- end generated: {what} -->");
    let start = text.find(&begin).expect("the begin marker") + begin.len();
    let stop = text.find(&end).expect("the end marker");
    let committed = &text[start..stop];
    if committed == generated {
        return;
    }
    if std::env::var_os(BLESS).is_some() {
        let updated = format!("{}{generated}{}", &text[..start], &text[stop..]);
        std::fs::write(file, updated).expect("rewrite the page");
        return;
    }
    let old: Vec<&str> = committed.lines().collect();
    let new: Vec<&str> = generated.lines().collect();
    let mut diff = String::new();
    for line in old.iter().filter(|l| !new.contains(l)).take(20) {
        diff.push_str(&format!("- {line}\n"));
    }
    for line in new.iter().filter(|l| !old.contains(l)).take(20) {
        diff.push_str(&format!("+ {line}\n"));
    }
    panic!(
        "{} ({what}) is out of date:\n{diff}\nregenerate it with \
         `{BLESS}=1 cargo nextest run --locked -E 'test(/^docs::reference/)'` and commit it",
        shown(file)
    );
}

fn openapi() -> Value {
    serde_json::to_value(leasehold::api::openapi(&default_limits())).expect("the document")
}

const METHODS: [&str; 5] = ["get", "post", "put", "patch", "delete"];

/// One row per operation: method and path, operationId, every status it answers.
fn route_index(doc: &Value) -> String {
    let mut out = String::from("| route | operation | statuses |\n|---|---|---|\n");
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for method in METHODS {
            let Some(op) = item.get(method) else { continue };
            let statuses: Vec<&String> = op["responses"]
                .as_object()
                .expect("responses")
                .keys()
                .collect();
            let statuses: Vec<&str> = statuses.iter().map(|s| s.as_str()).collect();
            out.push_str(&format!(
                "| `{} {path}` | `{}` | {} |\n",
                method.to_ascii_uppercase(),
                op["operationId"].as_str().expect("an operationId"),
                statuses.join(", ")
            ));
        }
    }
    out
}

/// Every property name of every schema in the document (request and response bodies,
/// problems, events), and every parameter's name.
fn field_names(value: &Value, names: &mut BTreeSet<String>) {
    match value {
        Value::Object(map) => {
            if let Some(Value::Object(props)) = map.get("properties") {
                names.extend(props.keys().cloned());
            }
            if let (Some(Value::String(_)), Some(Value::String(name))) =
                (map.get("in"), map.get("name"))
            {
                names.insert(name.clone());
            }
            map.values().for_each(|v| field_names(v, names));
        }
        Value::Array(items) => items.iter().for_each(|v| field_names(v, names)),
        _ => {}
    }
}

#[test]
fn the_api_chapter_has_every_route_status_and_field_of_the_openapi_document() {
    let doc = openapi();
    let dir = book_src().join("api");
    check_generated(&dir.join("README.md"), "routes", &route_index(&doc));
    let mut chapter = String::new();
    for entry in std::fs::read_dir(&dir).expect("the api dir") {
        chapter.push_str(&std::fs::read_to_string(entry.expect("entry").path()).expect("a page"));
    }
    let words: BTreeSet<&str> = chapter
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-'))
        .collect();
    let mut fields = BTreeSet::new();
    field_names(&doc, &mut fields);
    let missing: Vec<&String> = fields
        .iter()
        .filter(|f| !words.contains(f.as_str()))
        .collect();
    assert!(
        fields.len() > 100,
        "only {} fields: is the walk broken?",
        fields.len()
    );
    assert!(
        missing.is_empty(),
        "fields of the OpenAPI document that docs/book/src/api/ never names: {missing:?}"
    );
}

/// The subcommands of `leasehold`, as the words that name them (`["keys", "create"]`).
fn subcommands(command: &clap::Command, prefix: &[String], out: &mut Vec<Vec<String>>) {
    for sub in command.get_subcommands().filter(|s| !s.is_hide_set()) {
        let mut path = prefix.to_vec();
        path.push(sub.get_name().to_owned());
        out.push(path.clone());
        subcommands(sub, &path, out);
    }
}

/// `leasehold <path> --help` as the binary prints it, blind to the environment (clap shows a
/// set variable's value in the help).
fn help(path: &[String]) -> String {
    let out = Command::new(BIN)
        .args(path)
        .arg("--help")
        .env_clear()
        .output()
        .expect("run leasehold --help");
    assert!(out.status.success(), "leasehold {path:?} --help failed");
    String::from_utf8(out.stdout).expect("UTF-8")
}

/// The help of `leasehold` and of each subcommand under it, as a page's generated part.
fn help_section(paths: &[Vec<String>]) -> String {
    let mut generated = String::new();
    for path in paths {
        let name = std::iter::once("leasehold".to_owned())
            .chain(path.iter().cloned())
            .collect::<Vec<_>>()
            .join(" ");
        generated.push_str(&format!("\n## `{name}`\n\n```text\n{}```\n", help(path)));
    }
    generated
}

/// One page per top-level subcommand (`cli/reference/<name>.md`, with its own subcommands),
/// and `leasehold --help` on the chapter's first page: no page grows past a few hundred lines.
/// Under `LEASEHOLD_BLESS_DOCS` a new subcommand's page is created (add it to SUMMARY.md).
#[test]
fn the_cli_reference_is_every_subcommands_help() {
    let cli = leasehold::config::Cli::command();
    let dir = book_src().join("cli/reference");
    check_generated(&dir.join("README.md"), "help", &help_section(&[Vec::new()]));
    for sub in cli.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name = sub.get_name().to_owned();
        if name == "help" {
            continue;
        }
        let mut paths = vec![vec![name.clone()]];
        subcommands(sub, std::slice::from_ref(&name), &mut paths);
        let page = dir.join(format!("{name}.md"));
        if !page.exists() && std::env::var_os(BLESS).is_some() {
            let version = env!("CARGO_PKG_VERSION");
            std::fs::write(
                &page,
                format!(
                    "# `leasehold {name}`\n\n*This page describes Leasehold {version}.*\n\n\
                     <!-- begin generated: help -->\n<!-- end generated: help -->\n"
                ),
            )
            .expect("a new page");
        }
        assert!(
            page.exists(),
            "no page {} for `leasehold {name}`",
            shown(&page)
        );
        check_generated(&page, "help", &help_section(&paths));
    }
}

/// A table cell: one line, pipes escaped, and `<` `>` as entities (`<data-dir>` is no tag).
fn cell(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[test]
fn the_configuration_table_is_serves_flags() {
    let cli = leasehold::config::Cli::command();
    let serve = cli.find_subcommand("serve").expect("serve");
    let mut table = String::from("| flag | environment | default | what |\n|---|---|---|---|\n");
    for arg in serve.get_arguments() {
        let Some(long) = arg.get_long() else { continue };
        if arg.is_hide_set() || long == "help" {
            continue;
        }
        let env = arg
            .get_env()
            .map(|e| format!("`{}`", e.to_string_lossy()))
            .unwrap_or_default();
        let defaults: Vec<String> = arg
            .get_default_values()
            .iter()
            .map(|v| v.to_string_lossy().into_owned())
            .collect();
        let default = match defaults.join(",") {
            d if d.is_empty() => String::new(),
            d => format!("`{d}`"),
        };
        let mut what = arg
            .get_long_help()
            .or(arg.get_help())
            .map(|h| cell(&h.to_string()))
            .unwrap_or_default();
        let values: Vec<String> = arg
            .get_possible_values()
            .iter()
            .filter(|_| arg.get_action().takes_values())
            .map(|v| format!("`{}`", v.get_name()))
            .collect();
        if !values.is_empty() {
            what.push_str(&format!(" (one of {})", values.join(", ")));
        }
        table.push_str(&format!("| `--{long}` | {env} | {default} | {what} |\n"));
    }
    check_generated(
        &book_src().join("operating/configuration.md"),
        "serve flags",
        &table,
    );
}
