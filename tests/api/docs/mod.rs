//! The documentation as a tested artefact: the README and the book (`docs/book/src`).
//!
//! - [`examples`]: every shell example runs as written against a real server.
//! - [`reference`]: the HTTP API chapter against the OpenAPI document, and the generated CLI
//!   reference and configuration table against the binary's clap definitions.
//! - Below: every relative link and anchor resolves, and every page says the version it
//!   describes.
//!
//! A generated part that is out of date is rewritten by running the tests with
//! `LEASEHOLD_BLESS_DOCS=1` (`LEASEHOLD_BLESS_DOCS=1 cargo nextest run -E 'test(/^docs::/)'`).

mod examples;
mod markdown;
mod reference;
mod shell;

use std::path::Path;

use markdown::{anchors, book_src, links, pages, root, shown};

/// Every page of the book, whether in SUMMARY.md or not (a page left out is still checked).
fn book_files() -> Vec<std::path::PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir)
            .expect("a dir")
            .map(|e| e.expect("entry").path())
        {
            if entry.is_dir() {
                walk(&entry, out);
            } else if entry.extension().is_some_and(|e| e == "md") {
                out.push(entry);
            }
        }
    }
    let mut files = Vec::new();
    walk(&book_src(), &mut files);
    files.sort();
    files
}

/// Whether `target` (a link of the page at `from`) resolves: the file exists and, for
/// `#anchor`, the page has that heading or id. Web links are not fetched (no network in CI).
fn broken(from: &Path, target: &str) -> Option<String> {
    if target.starts_with("http://")
        || target.starts_with("https://")
        || target.starts_with("mailto:")
    {
        return None;
    }
    let (path, anchor) = target.split_once('#').unwrap_or((target, ""));
    let file = if path.is_empty() {
        from.to_path_buf()
    } else {
        from.parent().expect("a dir").join(path)
    };
    if !file.exists() {
        return Some(format!("{target}: no such file"));
    }
    if anchor.is_empty() || file.extension().is_none_or(|e| e != "md") {
        return None;
    }
    let text = with_includes(&file);
    (!anchors(&text).iter().any(|a| a == anchor)).then(|| format!("{target}: no such anchor"))
}

/// The page at `file` with its `{{#include path}}` lines replaced by those files, as mdBook
/// renders it (FAULTS.md's headings are anchors of the page that includes it).
fn with_includes(file: &Path) -> String {
    let text = std::fs::read_to_string(file).expect("a page");
    text.lines()
        .map(|line| match line.trim().strip_prefix("{{#include ") {
            Some(rest) => {
                let included = file
                    .parent()
                    .expect("dir")
                    .join(rest.trim_end_matches("}}").trim());
                std::fs::read_to_string(included).unwrap_or_default()
            }
            None => line.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn every_link_and_anchor_of_the_readme_and_the_book_resolves() {
    let mut files = book_files();
    files.push(root().join("README.md"));
    let mut checked = 0;
    let mut failures = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("a page");
        for link in links(&text) {
            checked += 1;
            if let Some(why) = broken(file, &link.target) {
                failures.push(format!("{}:{}: {why}", shown(file), link.line));
            }
        }
        // `{{#include ...}}` brings a file of the repository into the page.
        for line in text.lines() {
            if let Some(rest) = line.trim().strip_prefix("{{#include ") {
                let included = rest.trim_end_matches("}}").trim();
                if !file.parent().expect("dir").join(included).exists() {
                    failures.push(format!(
                        "{}: includes {included}, which is missing",
                        shown(file)
                    ));
                }
            }
        }
    }
    eprintln!(
        "docs links: {checked} links in {} pages checked",
        files.len()
    );
    assert!(
        checked > 100,
        "only {checked} links found: is the link parser broken?"
    );
    assert!(
        failures.is_empty(),
        "broken links:\n{}",
        failures.join("\n")
    );
}

#[test]
fn every_page_of_the_book_is_in_its_summary_and_says_its_version() {
    let version = env!("CARGO_PKG_VERSION");
    let line = format!("*This page describes Leasehold {version}.*");
    let listed = pages();
    let mut failures = Vec::new();
    for file in book_files() {
        if file.ends_with("SUMMARY.md") {
            continue;
        }
        if !listed.contains(&file) {
            failures.push(format!("{} is not in SUMMARY.md", shown(&file)));
        }
        let text = std::fs::read_to_string(&file).expect("a page");
        if !text.contains(&line) {
            failures.push(format!("{} lacks the line `{line}`", shown(&file)));
        }
    }
    assert!(
        failures.is_empty(),
        "{}\n(after a version bump: sed -i 's/describes Leasehold [0-9.]*\\./describes Leasehold \
         {version}./' $(grep -rl 'describes Leasehold' docs/book/src))",
        failures.join("\n")
    );
}
