//! Every `sh` and `console` block of the README and the book, run in order against a fresh
//! `leasehold serve` (the real binary, with its embedded redis-server) per page, as a reader
//! would paste them: a changed route, status or body breaks the build, not the reader.
//!
//! - A `console` block is commands after `$ ` (continued by a trailing `\`) and, under each,
//!   what it prints: compared line by line (see [`shell::matches`]: `[..]` and `...` are
//!   wildcards; ids, tokens, times and fencing tokens are compared by shape).
//! - An `sh` block runs as a whole under `set -e` (in a subshell: what it sets stays there)
//!   and must succeed. A block that starts with `#!` is a script: it is written to a file
//!   and run with `sh`.
//! - `<!-- illustrative: why -->` right above a block leaves it out (it needs Docker, several
//!   Redis masters, a release build, ...); `<!-- docs-test: setup ... -->` gives it hidden
//!   set-up lines (the reader's own `./report.sh`, say).
//!
//! The examples name the server as `127.0.0.1:8080` or `localhost:8080` (where `.ci/serve`
//! listens); the test puts its server's address there, and `LEASEHOLD_SERVER` and `API` are
//! set to it. The shell starts in a directory holding the server's `leasehold-data`, as
//! `.ci/serve`'s does.

use std::path::Path;

use super::markdown::{Block, blocks, pages, shown};
use super::shell::{Shell, matches};
use crate::helpers::cli::BIN;
use crate::helpers::serve::Serve;

/// What running the blocks of one page found wrong, and how many blocks ran.
struct Outcome {
    ran: usize,
    skipped: usize,
    failures: Vec<String>,
}

/// Runs the runnable blocks of `text` (the page `name`) against a fresh server.
fn run_page(name: &str, text: &str) -> Outcome {
    let runnable: Vec<Block> = blocks(text)
        .into_iter()
        .filter(|b| b.lang == "sh" || b.lang == "console")
        .collect();
    let mut outcome = Outcome {
        ran: 0,
        skipped: 0,
        failures: Vec::new(),
    };
    if runnable.iter().all(Block::illustrative) {
        outcome.skipped = runnable.len();
        return outcome;
    }
    let dir = tempfile::tempdir().expect("a working dir");
    let data = dir.path().join("leasehold-data");
    std::fs::create_dir(&data).expect("data dir");
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o700)).expect("0700");
    }
    std::fs::create_dir(dir.path().join("home")).expect("home");
    let serve = Serve::start(&data);
    let url = serve.url("");
    let bin_dir = Path::new(BIN).parent().expect("the binary's dir");
    let env = [
        (
            "PATH",
            format!("{}:/usr/local/bin:/usr/bin:/bin", bin_dir.display()),
        ),
        ("HOME", dir.path().join("home").display().to_string()),
        ("LEASEHOLD_SERVER", url.clone()),
        ("API", url.clone()),
        ("LANG", "C.UTF-8".to_owned()),
    ];
    let mut shell = Shell::start(dir.path(), &env);
    for block in runnable {
        if block.illustrative() {
            outcome.skipped += 1;
            continue;
        }
        let at = format!("{name}:{}", block.line);
        let local = |s: &str| {
            s.replace("http://127.0.0.1:8080", &url)
                .replace("127.0.0.1:8080", &serve.addr)
                .replace("localhost:8080", &serve.addr)
        };
        if let Some(setup) = block.setup() {
            let ran = shell.run(&local(setup));
            if ran.status != 0 {
                outcome.failures.push(format!(
                    "{at}: the set-up exited {}:\n{}",
                    ran.status, ran.output
                ));
                continue;
            }
        }
        outcome.ran += 1;
        let failures = if block.lang == "console" {
            run_console(&mut shell, &block, &local)
        } else {
            run_sh(&mut shell, &block, &local)
        };
        outcome
            .failures
            .extend(failures.into_iter().map(|f| format!("{at}: {f}")));
    }
    outcome
}

/// The (command, expected output) pairs of a `console` block.
fn console_steps(block: &Block) -> Vec<(String, String)> {
    let mut steps: Vec<(String, String)> = Vec::new();
    let mut continuing = false;
    for line in &block.body {
        if continuing {
            let (command, _) = steps.last_mut().expect("a command");
            command.push('\n');
            command.push_str(line);
            continuing = line.ends_with('\\');
        } else if let Some(command) = line.strip_prefix("$ ") {
            steps.push((command.to_owned(), String::new()));
            continuing = command.ends_with('\\');
        } else if let Some((_, expected)) = steps.last_mut() {
            expected.push_str(line);
            expected.push('\n');
        }
    }
    steps
}

fn run_console(shell: &mut Shell, block: &Block, local: &dyn Fn(&str) -> String) -> Vec<String> {
    let mut failures = Vec::new();
    for (command, expected) in console_steps(block) {
        let ran = shell.run(&local(&command));
        if !matches(expected.trim_end_matches('\n'), &ran.output) {
            failures.push(format!(
                "`$ {command}` printed\n{}\n-- but the page says --\n{}",
                ran.output,
                expected.trim_end()
            ));
        }
    }
    failures
}

fn run_sh(shell: &mut Shell, block: &Block, local: &dyn Fn(&str) -> String) -> Vec<String> {
    let body = local(&block.body.join("\n"));
    let script = if body.starts_with("#!") {
        format!(
            "cat > ./example.sh <<'LEASEHOLD_DOCS_EOF'\n{body}\nLEASEHOLD_DOCS_EOF\nsh ./example.sh"
        )
    } else {
        format!("(\nset -e\n{body}\n)")
    };
    let ran = shell.run(&script);
    if ran.status == 0 {
        Vec::new()
    } else {
        vec![format!(
            "the block exited {}; it printed:\n{}",
            ran.status, ran.output
        )]
    }
}

#[test]
fn every_shell_example_of_the_readme_and_the_book_runs_as_written() {
    let (mut ran, mut skipped, mut failures) = (0, 0, Vec::new());
    for page in pages() {
        let text = std::fs::read_to_string(&page).expect("a page");
        let outcome = run_page(&shown(&page), &text);
        ran += outcome.ran;
        skipped += outcome.skipped;
        failures.extend(outcome.failures);
    }
    eprintln!("docs examples: {ran} blocks run, {skipped} illustrative blocks skipped");
    assert!(
        ran >= 10,
        "only {ran} blocks ran: is the block parser broken?"
    );
    assert!(
        failures.is_empty(),
        "{} examples do not do what the page says:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

/// The check itself catches a wrong claim: the README's session with one status changed.
#[test]
fn a_planted_wrong_status_fails_the_examples() {
    let readme =
        std::fs::read_to_string(super::markdown::root().join("README.md")).expect("README");
    let planted = readme.replacen("\"status\":409", "\"status\":404", 1);
    assert_ne!(planted, readme, "the README's session shows a 409");
    let outcome = run_page("README.md (planted)", &planted);
    assert_eq!(outcome.failures.len(), 1, "{:#?}", outcome.failures);
    eprintln!(
        "the planted status fails as it should:\n{}",
        outcome.failures[0]
    );
    assert!(outcome.failures[0].contains("\"status\":404"));
}
