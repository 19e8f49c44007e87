//! The admin token `serve` runs with: `--admin-token`, else read from `--admin-token-file`,
//! else (with the embedded Redis) kept in the data dir, made there once. Only the token's path
//! is ever printed, never the token.

use std::io::{self, Write as _};
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use crate::config::{MIN_ADMIN_TOKEN_CHARS, ServeArgs};

/// The file a generated token is kept in, inside the data dir.
const FILE_NAME: &str = "admin-token";

/// An admin token that cannot be read, or one not safe to use.
#[derive(Debug, thiserror::Error)]
pub enum AdminTokenError {
    #[error("cannot read the admin token file {}", .path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(
        "the admin token in {} is shorter than {MIN_ADMIN_TOKEN_CHARS} characters",
        .path.display()
    )]
    Short { path: PathBuf },
    #[error(
        "{} is readable by other users (mode {mode:o}); run `chmod 600 {}` or delete it",
        .path.display(),
        .path.display()
    )]
    OpenToOthers { path: PathBuf, mode: u32 },
    #[error("cannot write {}", .path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The kept token's file cannot be inspected, or the new one not written out.
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// The admin token of `serve`, `None` when there is none (with `--redis-url` and no token,
/// only admin API keys reach admin routes). `fresh` makes a new one for the data dir: the
/// secret's maker is the lock domain's (`locks::random_secret`), which `cli` may not import.
pub fn choose(
    args: &ServeArgs,
    embedded_redis: bool,
    fresh: impl FnOnce() -> String,
) -> Result<Option<String>, AdminTokenError> {
    Ok(match (&args.admin_token, &args.admin_token_file) {
        (Some(token), _) => Some(token.clone()),
        (None, Some(path)) => Some(read(path)?),
        (None, None) if embedded_redis => Some(kept_in(&args.data_dir, fresh)?),
        (None, None) => None,
    })
}

/// The admin token kept in `data_dir`: reused when it is there (0600, ours), else made once
/// with `fresh` (and its path printed on stderr).
fn kept_in(data_dir: &Path, fresh: impl FnOnce() -> String) -> Result<String, AdminTokenError> {
    let path = data_dir.join(FILE_NAME);
    if path.exists() {
        let mode = std::fs::metadata(&path)?.permissions().mode();
        if mode & 0o077 != 0 {
            return Err(AdminTokenError::OpenToOthers {
                path,
                mode: mode & 0o777,
            });
        }
        let token = read(&path)?;
        eprintln!("admin token: in {}", path.display());
        return Ok(token);
    }
    let token = fresh();
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .map_err(|source| AdminTokenError::Write {
            path: path.clone(),
            source,
        })?;
    writeln!(file, "{token}")?;
    eprintln!("admin token: generated into {} (0600)", path.display());
    Ok(token)
}

/// The first line of `path`, at least [`MIN_ADMIN_TOKEN_CHARS`] characters.
fn read(path: &Path) -> Result<String, AdminTokenError> {
    let text = std::fs::read_to_string(path).map_err(|source| AdminTokenError::Read {
        path: path.to_owned(),
        source,
    })?;
    let token = text.lines().next().unwrap_or("").trim().to_owned();
    if token.len() < MIN_ADMIN_TOKEN_CHARS {
        return Err(AdminTokenError::Short {
            path: path.to_owned(),
        });
    }
    Ok(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    const FRESH: &str = "lha_0123456789abcdef";

    #[test]
    fn the_kept_token_is_made_once_for_this_user_alone_then_reused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let made = kept_in(dir.path(), || FRESH.to_owned()).expect("made");
        assert_eq!(made, FRESH);
        let meta = std::fs::metadata(dir.path().join(FILE_NAME)).expect("its file");
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        let reused = kept_in(dir.path(), || unreachable!("made only once")).expect("reused");
        assert_eq!(reused, made);
    }

    #[test]
    fn a_kept_token_others_may_read_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(FILE_NAME);
        std::fs::write(&path, format!("{FRESH}\n")).expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        assert!(matches!(
            kept_in(dir.path(), || unreachable!("there is one")),
            Err(AdminTokenError::OpenToOthers { mode: 0o644, .. })
        ));
    }

    #[test]
    fn a_token_file_is_read_to_its_first_line_and_a_short_token_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("token");
        std::fs::write(&path, "  0123456789abcdef  \nsecond line\n").expect("write");
        assert_eq!(read(&path).expect("read"), "0123456789abcdef");
        std::fs::write(&path, "short\n").expect("write");
        let short = read(&path).expect_err("too short");
        assert_eq!(
            short.to_string(),
            format!(
                "the admin token in {} is shorter than 16 characters",
                path.display()
            )
        );
    }
}
