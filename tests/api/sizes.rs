//! Size discipline as a test: no source file over 500 lines and no function over 100, in every
//! language of the repository (the server, its unit and integration tests, the crates, the
//! benches and the safety harness, the clients, the scripts, `lua/`, the templates), and no
//! import circle between the files of one folder of production Rust (`src/`, `crates/*/src`;
//! test modules aside).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use syn::visit::Visit;

const MAX_FILE_LINES: usize = 500;
const MAX_FUNCTION_LINES: usize = 100;

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

/// The source files: every file git tracks (or would: untracked and not ignored) whose
/// extension is a language's, generated code (`_sync/`, from `_async/`) included.
fn source_files() -> Vec<PathBuf> {
    const SOURCE: [&str; 10] = [
        "rs", "py", "go", "ts", "js", "sh", "lua", "html", "css", "mjs",
    ];
    let listed = std::process::Command::new("git")
        .args([
            "ls-files",
            "-z",
            "--cached",
            "--others",
            "--exclude-standard",
        ])
        .current_dir(root())
        .output()
        .expect("git ls-files runs");
    assert!(listed.status.success(), "git ls-files failed");
    let mut files: Vec<PathBuf> = String::from_utf8_lossy(&listed.stdout)
        .split('\0')
        .filter(|name| {
            Path::new(name)
                .extension()
                .and_then(|e| e.to_str())
                .is_some_and(|e| SOURCE.contains(&e))
        })
        .map(|name| root().join(name))
        .filter(|path| path.is_file())
        .collect();
    files.sort();
    files.dedup();
    files
}

fn has_extension(path: &Path, extension: &str) -> bool {
    path.extension().is_some_and(|e| e == extension)
}

#[test]
fn no_source_file_is_over_500_lines() {
    let over: Vec<String> = source_files()
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

/// Collects each function's name and its span in lines (test functions too).
#[derive(Default)]
struct Functions {
    found: Vec<(String, usize)>,
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
    fn visit_item_fn(&mut self, item: &'ast syn::ItemFn) {
        self.note(&item.sig, Some(item.block.brace_token.span.close()));
        syn::visit::visit_item_fn(self, item);
    }
    fn visit_impl_item_fn(&mut self, item: &'ast syn::ImplItemFn) {
        self.note(&item.sig, Some(item.block.brace_token.span.close()));
        syn::visit::visit_impl_item_fn(self, item);
    }
    fn visit_trait_item_fn(&mut self, item: &'ast syn::TraitItemFn) {
        let body = item.default.as_ref().map(|b| b.brace_token.span.close());
        self.note(&item.sig, body);
        syn::visit::visit_trait_item_fn(self, item);
    }
}

/// Every Rust function's (file, name, lines).
fn rust_functions(files: &[PathBuf]) -> Vec<(String, String, usize)> {
    let mut found = Vec::new();
    for path in files.iter().filter(|p| has_extension(p, "rs")) {
        let file = syn::parse_file(&read(path))
            .unwrap_or_else(|e| panic!("{} does not parse: {e}", path.display()));
        let mut functions = Functions::default();
        functions.visit_file(&file);
        let file = relative(path);
        found.extend(
            functions
                .found
                .into_iter()
                .map(|(n, l)| (file.clone(), n, l)),
        );
    }
    found
}

/// Every Python function's (file, name, lines), by Python's own parser (`end_lineno`).
fn python_functions(files: &[PathBuf]) -> Vec<(String, String, usize)> {
    const LIST: &str = "import ast, sys\n\
        for path in sys.argv[1:]:\n\
        \x20   for n in ast.walk(ast.parse(open(path).read(), path)):\n\
        \x20       if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):\n\
        \x20           print(path, n.name, n.end_lineno - n.lineno + 1, sep='\\t')\n";
    let python: Vec<&PathBuf> = files.iter().filter(|p| has_extension(p, "py")).collect();
    let listed = std::process::Command::new("python3")
        .arg("-c")
        .arg(LIST)
        .args(&python)
        .output()
        .expect("python3 runs");
    assert!(
        listed.status.success(),
        "python3 could not parse the Python files: {}",
        String::from_utf8_lossy(&listed.stderr)
    );
    String::from_utf8_lossy(&listed.stdout)
        .lines()
        .filter_map(|line| {
            let mut parts = line.split('\t');
            let (path, name, lines) = (parts.next()?, parts.next()?, parts.next()?);
            Some((
                relative(Path::new(path)),
                name.to_owned(),
                lines.parse().ok()?,
            ))
        })
        .collect()
}

/// Every Go function's and shell function's (file, name, lines): gofmt and our scripts put a
/// function's closing brace alone at the start of a line.
fn braced_functions(files: &[PathBuf]) -> Vec<(String, String, usize)> {
    let mut found = Vec::new();
    for path in files
        .iter()
        .filter(|p| has_extension(p, "go") || has_extension(p, "sh"))
    {
        let mut open: Option<(String, usize)> = None;
        for (i, line) in read(path).lines().enumerate() {
            let starts = if has_extension(path, "go") {
                line.starts_with("func ")
            } else {
                line.ends_with("() {") && !line.starts_with(char::is_whitespace)
            };
            if starts && open.is_none() {
                open = Some((line.trim_end_matches(" {").to_owned(), i));
            } else if line == "}"
                && let Some((name, from)) = open.take()
            {
                found.push((relative(path), name, i - from + 1));
            }
        }
    }
    found
}

/// Every TypeScript function's (file, name, lines), the compiled `dist/` aside: a line that
/// opens a function (a `function`, an arrow function, a method or a test's body) and ends in
/// `{`, to the first line after it that starts with the same indentation and `}` (the code is
/// formatted, so the closing brace lines up with its head).
fn typescript_functions(files: &[PathBuf]) -> Vec<(String, String, usize)> {
    let head = regex::Regex::new(concat!(
        r"^(\s*)(.*(?:\bfunction\b|=>).*|(?:(?:export|public|private|protected|static|async",
        r"|get|set|override)\s+)*[A-Za-z_$#][\w$]*\s*(?:<.*>)?\(.*\)\s*(?::.*)?)\{$"
    ))
    .expect("a valid pattern");
    let control = regex::Regex::new(r"^(if|for|while|switch|catch|else|try|do|finally|return)\b")
        .expect("a valid pattern");
    let mut found = Vec::new();
    for path in files.iter().filter(|p| {
        (has_extension(p, "ts") || has_extension(p, "mjs"))
            && !relative(p).contains("/dist/")
            && !relative(p).ends_with(".d.ts")
    }) {
        let text = read(path);
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let Some(opened) = head.captures(line) else {
                continue;
            };
            let signature = opened[2].trim();
            if control.is_match(signature) || signature.starts_with('}') {
                continue;
            }
            let close = format!("{}}}", &opened[1]);
            if let Some(end) = lines[i + 1..].iter().position(|l| l.starts_with(&close)) {
                found.push((relative(path), signature.to_owned(), end + 2));
            }
        }
    }
    found
}

#[test]
fn no_function_is_over_100_lines() {
    let files = source_files();
    let mut functions = rust_functions(&files);
    functions.extend(python_functions(&files));
    functions.extend(braced_functions(&files));
    let typescript = typescript_functions(&files);
    assert!(
        typescript.len() > 100,
        "the TypeScript client's functions not found: {typescript:?}"
    );
    functions.extend(typescript);
    let over: Vec<String> = functions
        .into_iter()
        .filter(|(_, _, lines)| *lines > MAX_FUNCTION_LINES)
        .map(|(file, name, lines)| format!("{file}: fn {name} ({lines} lines)"))
        .collect();
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
