//! One bash process per page, so that what a block sets (`ID=...`, `export ...`) is there for
//! the blocks after it, as in a reader's terminal. Each command's output (stdout and stderr
//! together) is read up to a marker line carrying its exit status.

use std::io::{BufRead as _, BufReader, Write as _};
use std::path::Path;
use std::process::{Child, ChildStdin, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

/// A line no example prints; the exit status follows it.
const MARKER: &str = "\u{1e}leasehold-docs-done\u{1e}";

/// The longest one example may take: the longest wait an example asks for is 10 s.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);

pub struct Shell {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
}

/// What one command printed, and its exit status.
pub struct Ran {
    pub output: String,
    pub status: i32,
}

impl Shell {
    /// bash in `dir` with `env` (and PATH, HOME) only: nothing of the test's environment.
    pub fn start(dir: &Path, env: &[(&str, String)]) -> Self {
        let mut command = crate::helpers::children::guarded("bash");
        command
            .args(["--noprofile", "--norc"])
            .current_dir(dir)
            .env_clear()
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut child = crate::helpers::children::spawn(command).expect("start bash");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut shell = Self {
            child,
            stdin,
            lines,
        };
        shell.run("exec 2>&1");
        shell
    }

    /// Runs `script` in this shell, with stdin from /dev/null (a command reading its input
    /// would otherwise eat the lines sent after it), and returns what it printed. (The `:`
    /// keeps a script of comments only from being an empty `{ }`, a syntax error.)
    pub fn run(&mut self, script: &str) -> Ran {
        let text = format!(
            "{{\n:\n{script}\n}} < /dev/null\nprintf '\\n{MARKER}%s\\n' \"$?\"\n",
            MARKER = MARKER
        );
        self.stdin
            .write_all(text.as_bytes())
            .and_then(|()| self.stdin.flush())
            .expect("write to bash");
        let deadline = Instant::now() + COMMAND_TIMEOUT;
        let mut output = String::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    if let Some(status) = line.strip_prefix(MARKER) {
                        // The newline printed before the marker ends a last line without one.
                        let output = output.strip_suffix('\n').unwrap_or(&output);
                        return Ran {
                            output: output.trim_end_matches('\n').to_owned(),
                            status: status.trim().parse().expect("exit status"),
                        };
                    }
                    output.push_str(&line);
                    output.push('\n');
                }
                Err(RecvTimeoutError::Timeout) => {
                    panic!(
                        "`{script}` did not finish within {COMMAND_TIMEOUT:?}; it printed:\n{output}"
                    )
                }
                Err(RecvTimeoutError::Disconnected) => {
                    panic!("bash exited running `{script}`; it printed:\n{output}")
                }
            }
        }
    }
}

impl Drop for Shell {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether `actual` is what `expected` claims: line by line, where `[..]` in an expected line
/// matches any text within the line and a line `...` any number of lines. Values that differ
/// on every run (lease ids, tokens, times, fencing tokens) are replaced by placeholders on
/// both sides first, so the book can show real output.
pub fn matches(expected: &str, actual: &str) -> bool {
    let expected: Vec<String> = expected.lines().map(normalize).collect();
    let actual: Vec<String> = actual.lines().map(normalize).collect();
    lines_match(&expected, &actual)
}

fn lines_match(expected: &[String], actual: &[String]) -> bool {
    match expected.split_first() {
        None => actual.is_empty(),
        Some((first, rest)) if first.trim() == "..." => {
            (0..=actual.len()).any(|skip| lines_match(rest, &actual[skip..]))
        }
        Some((first, rest)) => actual
            .split_first()
            .is_some_and(|(line, more)| line_matches(first, line) && lines_match(rest, more)),
    }
}

fn line_matches(pattern: &str, line: &str) -> bool {
    let parts: Vec<&str> = pattern.split("[..]").collect();
    if parts.len() == 1 {
        return pattern.trim_end() == line.trim_end();
    }
    let Some(mut rest) = line.strip_prefix(parts[0]) else {
        return false;
    };
    for (i, part) in parts.iter().enumerate().skip(1) {
        if i == parts.len() - 1 {
            return rest.trim_end().ends_with(part.trim_end());
        }
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    true
}

/// `line` with every UUID, lease token or API key secret, RFC 3339 time and fencing-token-sized
/// number (13 digits or more) replaced by a placeholder.
pub fn normalize(line: &str) -> String {
    let bytes = line.as_bytes();
    let mut out = String::new();
    let mut i = 0;
    while i < bytes.len() {
        let rest = &line[i..];
        if let Some(len) = uuid_at(rest) {
            out.push_str("<uuid>");
            i += len;
        } else if let Some(len) = secret_at(rest) {
            out.push_str("<secret>");
            i += len;
        } else if let Some(len) = time_at(rest) {
            out.push_str("<time>");
            i += len;
        } else if bytes[i].is_ascii_digit() && (i == 0 || !bytes[i - 1].is_ascii_alphanumeric()) {
            let len = rest.bytes().take_while(u8::is_ascii_digit).count();
            if len >= 13 {
                out.push_str("<number>");
            } else {
                out.push_str(&rest[..len]);
            }
            i += len;
        } else {
            let c = rest.chars().next().expect("a char");
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

fn uuid_at(s: &str) -> Option<usize> {
    let shape = [8, 4, 4, 4, 12];
    let b = s.as_bytes();
    let mut at = 0;
    for (n, len) in shape.iter().enumerate() {
        if b.len() < at + len || !b[at..at + len].iter().all(u8::is_ascii_hexdigit) {
            return None;
        }
        at += len;
        if n < 4 {
            if b.get(at) != Some(&b'-') {
                return None;
            }
            at += 1;
        }
    }
    Some(at)
}

fn secret_at(s: &str) -> Option<usize> {
    if !["lht_", "lhk_", "lha_"].iter().any(|p| s.starts_with(p)) {
        return None;
    }
    let len = s[4..]
        .bytes()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == b'-' || *c == b'_')
        .count();
    (len >= 20).then_some(4 + len)
}

fn time_at(s: &str) -> Option<usize> {
    let b = s.as_bytes();
    let digits =
        |r: std::ops::Range<usize>| b.get(r).is_some_and(|d| d.iter().all(u8::is_ascii_digit));
    let ok = digits(0..4)
        && b.get(4) == Some(&b'-')
        && digits(5..7)
        && b.get(7) == Some(&b'-')
        && digits(8..10)
        && b.get(10) == Some(&b'T')
        && digits(11..13)
        && b.get(13) == Some(&b':');
    if !ok {
        return None;
    }
    let len = s
        .bytes()
        .take_while(|c| c.is_ascii_digit() || b"-:T.Z+".contains(c))
        .count();
    Some(len)
}
