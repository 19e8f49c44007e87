//! The pieces of a Markdown page the docs tests read: its fenced code blocks (with the HTML
//! comment right above each, which marks a block illustrative or gives it hidden set-up
//! lines) and its links.

use std::path::{Path, PathBuf};

/// The repository's root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The book's sources.
pub fn book_src() -> PathBuf {
    root().join("docs/book/src")
}

/// The README and every page of the book, in the book's reading order (SUMMARY.md).
pub fn pages() -> Vec<PathBuf> {
    let summary = std::fs::read_to_string(book_src().join("SUMMARY.md")).expect("SUMMARY.md");
    let mut pages = vec![root().join("README.md")];
    for link in links(&summary) {
        pages.push(book_src().join(link.target));
    }
    pages
}

/// A path relative to the repository's root, for messages.
pub fn shown(path: &Path) -> String {
    path.strip_prefix(root())
        .unwrap_or(path)
        .display()
        .to_string()
}

/// A fenced code block.
#[derive(Debug, Clone)]
pub struct Block {
    /// The info string's first word (`sh`, `console`, ...).
    pub lang: String,
    /// The line of its opening fence (1-based).
    pub line: usize,
    /// Its lines, without the block's indentation.
    pub body: Vec<String>,
    /// The HTML comment right above the fence, if any (without `<!--` and `-->`).
    pub comment: Option<String>,
}

impl Block {
    /// Marked `<!-- illustrative: why -->`: shown, never run (it needs what a test does not
    /// have: Docker, several Redis masters, a release build, the whole test suite).
    pub fn illustrative(&self) -> bool {
        self.comment
            .as_deref()
            .is_some_and(|c| c.trim_start().starts_with("illustrative"))
    }

    /// The hidden set-up lines of `<!-- docs-test: setup ... -->`: run before the block, not
    /// shown (a stand-in for the reader's own script, say).
    pub fn setup(&self) -> Option<&str> {
        self.comment
            .as_deref()
            .and_then(|c| c.trim_start().strip_prefix("docs-test: setup"))
    }
}

/// Every fenced block of `text`.
pub fn blocks(text: &str) -> Vec<Block> {
    let lines: Vec<&str> = text.lines().collect();
    let mut blocks = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let trimmed = lines[i].trim_start();
        let Some(info) = trimmed.strip_prefix("```") else {
            i += 1;
            continue;
        };
        let indent = lines[i].len() - trimmed.len();
        let lang = info.split([',', ' ']).next().unwrap_or("").to_owned();
        let opened = i;
        let mut body = Vec::new();
        i += 1;
        while i < lines.len() && !lines[i].trim_start().starts_with("```") {
            let line = lines[i];
            body.push(line.get(indent..).unwrap_or(line.trim_start()).to_owned());
            i += 1;
        }
        blocks.push(Block {
            lang,
            line: opened + 1,
            body,
            comment: comment_above(&lines, opened),
        });
        i += 1;
    }
    blocks
}

/// The HTML comment that ends on the line right above line `at`.
fn comment_above(lines: &[&str], at: usize) -> Option<String> {
    let end = at.checked_sub(1)?;
    if !lines[end].trim_end().ends_with("-->") {
        return None;
    }
    let start = (0..=end).rev().find(|&j| lines[j].contains("<!--"))?;
    let text = lines[start..=end].join("\n");
    let inner = text.split_once("<!--")?.1;
    Some(inner.rsplit_once("-->")?.0.to_owned())
}

/// A Markdown link or image (`[text](target)`) outside code.
#[derive(Debug, Clone)]
pub struct Link {
    pub target: String,
    pub line: usize,
}

/// The links of `text`, leaving out code blocks and inline code; `src="..."` of HTML images
/// too.
pub fn links(text: &str) -> Vec<Link> {
    let mut found = Vec::new();
    let mut in_code = false;
    for (n, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code {
            continue;
        }
        let line_no_code = strip_inline_code(line);
        let mut rest = line_no_code.as_str();
        while let Some(at) = rest.find("](") {
            let tail = &rest[at + 2..];
            let Some(end) = tail.find(')') else { break };
            found.push(Link {
                target: tail[..end].to_owned(),
                line: n + 1,
            });
            rest = &tail[end..];
        }
        let mut rest = line_no_code.as_str();
        while let Some(at) = rest.find("src=\"") {
            let tail = &rest[at + 5..];
            let Some(end) = tail.find('"') else { break };
            found.push(Link {
                target: tail[..end].to_owned(),
                line: n + 1,
            });
            rest = &tail[end..];
        }
    }
    found
}

fn strip_inline_code(line: &str) -> String {
    let mut out = String::new();
    for (i, part) in line.split('`').enumerate() {
        if i % 2 == 0 {
            out.push_str(part);
        }
    }
    out
}

/// The anchors a page offers: its headings' ids as mdBook makes them (lower case, spaces to
/// `-`, only letters, digits, `-` and `_` kept; a repeated heading gets `-1`, `-2`, ...) and
/// explicit `id="..."` attributes.
pub fn anchors(text: &str) -> Vec<String> {
    let mut ids: Vec<String> = Vec::new();
    let mut in_code = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code {
            continue;
        }
        if let Some(heading) = line.strip_prefix('#') {
            let title = heading.trim_start_matches('#').trim();
            let base = heading_id(title);
            let mut id = base.clone();
            let mut n = 0;
            while ids.contains(&id) {
                n += 1;
                id = format!("{base}-{n}");
            }
            ids.push(id);
        }
        let mut rest = line;
        while let Some(at) = rest.find("id=\"") {
            let tail = &rest[at + 4..];
            let Some(end) = tail.find('"') else { break };
            ids.push(tail[..end].to_owned());
            rest = &tail[end..];
        }
    }
    ids
}

fn heading_id(title: &str) -> String {
    title
        .chars()
        .filter_map(|c| {
            if c.is_alphanumeric() || c == '_' || c == '-' {
                Some(c.to_lowercase().next().unwrap_or(c))
            } else if c.is_whitespace() {
                Some('-')
            } else {
                None
            }
        })
        .collect()
}
