//! Size discipline as a test: no production file in `src/` or `crates/*/src` over 500 lines,
//! no function over 100, and no import circle between the files of one folder. Test modules
//! (a `tests` folder or a `tests.rs` of their room, `#[cfg(test)]` items) are not production
//! code and are not counted.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use syn::visit::Visit;

const MAX_FILE_LINES: usize = 500;
const MAX_FUNCTION_LINES: usize = 100;
/// Functions still over the limit, each at most as long as it is now: the waiting loop and
/// its attempt, whose future's layout is tuned for parked waiters' memory (BENCHMARKS.md,
/// W10), are split with a measurement of that memory, not blind (issue 54 stays open for
/// them). The list may only shrink.
const NOT_YET_SPLIT: [(&str, &str, usize); 0] = [];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every production source file: `src/` and each crate's `src/`, test modules aside.
fn production_files() -> Vec<PathBuf> {
    let mut dirs = vec![root().join("src")];
    for entry in std::fs::read_dir(root().join("crates"))
        .expect("crates/ is readable")
        .flatten()
    {
        dirs.push(entry.path().join("src"));
    }
    let mut files = Vec::new();
    for dir in dirs {
        walk(&dir, &mut files);
    }
    files.sort();
    files
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for path in entries.flatten().map(|e| e.path()) {
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if path.is_dir() {
            if name != "tests" {
                walk(&path, out);
            }
        } else if name.ends_with(".rs") && name != "tests.rs" {
            out.push(path);
        }
    }
}

fn relative(path: &Path) -> String {
    path.strip_prefix(root())
        .unwrap_or(path)
        .display()
        .to_string()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn no_production_file_is_over_500_lines() {
    let over: Vec<String> = production_files()
        .iter()
        .filter_map(|path| {
            let lines = read(path).lines().count();
            (lines > MAX_FILE_LINES).then(|| format!("{} ({lines} lines)", relative(path)))
        })
        .collect();
    assert!(
        over.is_empty(),
        "files over {MAX_FILE_LINES} lines (split them by what they own; tests go to a \
         `tests` folder of their room): {over:#?}"
    );
}

/// Collects each function's name and its span in lines, skipping `#[cfg(test)]` items.
#[derive(Default)]
struct Functions {
    found: Vec<(String, usize)>,
}

fn is_test_only(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|attr| {
        attr.path().is_ident("test")
            || (attr.path().is_ident("cfg")
                && attr.parse_args::<syn::Ident>().is_ok_and(|i| i == "test"))
    })
}

trait EndLine {
    fn output_end_line(&self) -> usize;
}

impl EndLine for syn::Signature {
    /// A bodiless trait function is one signature long.
    fn output_end_line(&self) -> usize {
        self.paren_token.span.close().end().line
    }
}

impl Functions {
    /// From `fn` to the closing brace: doc comments and attributes are not the body.
    fn note(&mut self, sig: &syn::Signature, body_end: Option<proc_macro2::Span>) {
        let end = body_end.map_or_else(|| sig.output_end_line(), |span| span.end().line);
        let lines = end.saturating_sub(sig.fn_token.span.start().line) + 1;
        self.found.push((sig.ident.to_string(), lines));
    }
}

impl<'ast> Visit<'ast> for Functions {
    fn visit_item_mod(&mut self, module: &'ast syn::ItemMod) {
        if !is_test_only(&module.attrs) {
            syn::visit::visit_item_mod(self, module);
        }
    }
    fn visit_item_fn(&mut self, item: &'ast syn::ItemFn) {
        if !is_test_only(&item.attrs) {
            self.note(&item.sig, Some(item.block.brace_token.span.close()));
            syn::visit::visit_item_fn(self, item);
        }
    }
    fn visit_item_impl(&mut self, item: &'ast syn::ItemImpl) {
        if !is_test_only(&item.attrs) {
            syn::visit::visit_item_impl(self, item);
        }
    }
    fn visit_impl_item_fn(&mut self, item: &'ast syn::ImplItemFn) {
        if !is_test_only(&item.attrs) {
            self.note(&item.sig, Some(item.block.brace_token.span.close()));
            syn::visit::visit_impl_item_fn(self, item);
        }
    }
    fn visit_trait_item_fn(&mut self, item: &'ast syn::TraitItemFn) {
        let body = item.default.as_ref().map(|b| b.brace_token.span.close());
        self.note(&item.sig, body);
        syn::visit::visit_trait_item_fn(self, item);
    }
}

#[test]
fn no_production_function_is_over_100_lines() {
    let mut over = Vec::new();
    for path in production_files() {
        let file = syn::parse_file(&read(&path))
            .unwrap_or_else(|e| panic!("{} does not parse: {e}", path.display()));
        let mut functions = Functions::default();
        functions.visit_file(&file);
        let file = relative(&path);
        for (name, lines) in functions.found {
            let allowed = NOT_YET_SPLIT
                .iter()
                .find(|(f, n, _)| *f == file && *n == name)
                .map_or(MAX_FUNCTION_LINES, |(_, _, now)| *now);
            if lines > allowed {
                over.push(format!("{file}: fn {name} ({lines} lines)"));
            }
        }
    }
    assert!(
        over.is_empty(),
        "functions over {MAX_FUNCTION_LINES} lines: {over:#?}"
    );
}

/// Folder → (module → the sibling modules it names). A module is a file of the folder or a
/// subfolder; the folder's own `mod.rs`/`lib.rs` is its face (it declares and re-exports its
/// children) and is no node. A sibling is named as `super::x` (from a file of the folder),
/// `self::x`/`x::` declared beside it, or the full `crate::<folder>::x` path.
fn sibling_imports() -> BTreeMap<String, BTreeMap<String, BTreeSet<String>>> {
    let mut folders: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for path in production_files() {
        let Some((folder, module, crate_path)) = place(&path) else {
            continue;
        };
        let siblings = siblings_of(path.parent().expect("a file has a folder"), &path);
        let text = strip_comments(&read(&path));
        let named = folders
            .entry(folder)
            .or_default()
            .entry(module.clone())
            .or_default();
        for sibling in &siblings {
            if sibling == &module {
                continue;
            }
            let super_path = format!("super::{sibling}");
            let full_path = format!("{crate_path}::{sibling}");
            let mentions = |needle: &str| {
                text.match_indices(needle).any(|(at, _)| {
                    let after = text[at + needle.len()..].chars().next().unwrap_or(' ');
                    !(after.is_alphanumeric() || after == '_')
                })
            };
            if mentions(&super_path) || mentions(&full_path) {
                named.insert(sibling.clone());
            }
        }
    }
    folders
}

/// (folder shown as a path, this file's module name, `crate::a::b` for the folder), or None
/// for a folder's face.
fn place(path: &Path) -> Option<(String, String, String)> {
    let stem = path.file_stem()?.to_str()?.to_owned();
    if stem == "mod" || stem == "lib" || stem == "main" {
        return None;
    }
    let folder = path.parent()?;
    let rel = relative(folder);
    let inside_src = rel
        .split_once("src")
        .map(|(_, rest)| rest.trim_start_matches('/'))?;
    let mut crate_path = String::from("crate");
    for part in inside_src.split('/').filter(|p| !p.is_empty()) {
        crate_path.push_str("::");
        crate_path.push_str(part);
    }
    Some((rel, stem, crate_path))
}

/// The folder's modules (files and subfolders), so a file in a subfolder counts as its folder.
fn siblings_of(folder: &Path, _file: &Path) -> Vec<String> {
    let mut names = Vec::new();
    for path in std::fs::read_dir(folder)
        .expect("a folder is readable")
        .flatten()
        .map(|e| e.path())
    {
        let Some(stem) = path.file_stem().and_then(|s| s.to_str()) else {
            continue;
        };
        if path.is_dir() || (path.extension().is_some_and(|e| e == "rs") && stem != "mod") {
            names.push(stem.to_owned());
        }
    }
    names
}

/// Line comments removed, so a doc comment that names a sibling is no import.
fn strip_comments(text: &str) -> String {
    text.lines()
        .map(|line| line.split_once("//").map_or(line, |(code, _)| code))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A cycle in one folder's graph, if any (depth-first search, the path that closed it).
fn cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut found = path[at..].to_vec();
            found.push(node.to_owned());
            return Some(found);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_owned());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(found) = visit(next, graph, path, done) {
                return Some(found);
            }
        }
        path.pop();
        done.insert(node.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|node| visit(node, graph, &mut Vec::new(), &mut done))
}

#[test]
fn no_two_files_of_a_folder_import_each_other_round_a_circle() {
    let circles: Vec<String> = sibling_imports()
        .iter()
        .filter_map(|(folder, graph)| cycle(graph).map(|c| format!("{folder}: {}", c.join(" -> "))))
        .collect();
    assert!(circles.is_empty(), "import circles: {circles:#?}");
}
