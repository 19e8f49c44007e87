//! The data dir of `serve` with the embedded Redis: it holds Redis's AOF and socket and the
//! generated admin token, so it must be this user's alone. Created 0700 when missing; refused
//! when another user owns it or anyone else may enter it.
//! [`super::EmbeddedRedis::start`] checks it before anything is started there.

use std::io;
use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

/// A data dir `serve` cannot use.
#[derive(Debug, thiserror::Error)]
pub enum DataDirError {
    #[error("cannot create the data dir {}", .dir.display())]
    Create {
        dir: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot read the data dir {}", .dir.display())]
    Read {
        dir: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(
        "the data dir {} belongs to uid {owner}, not to this user (uid {me}): it holds the \
         admin token and every lock, so it must be this user's own",
        .dir.display()
    )]
    NotOurs { dir: PathBuf, owner: u32, me: u32 },
    #[error(
        "the data dir {} is open to other users (mode {mode:o}); run `chmod 700 {}`",
        .dir.display(),
        .dir.display()
    )]
    OpenToOthers { dir: PathBuf, mode: u32 },
}

/// Creates `dir` (0700) when missing, then checks that it is ours and closed to others.
pub fn make_private(dir: &Path) -> Result<(), DataDirError> {
    if !dir.exists() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|source| DataDirError::Create {
                dir: dir.to_owned(),
                source,
            })?;
    }
    let meta = std::fs::metadata(dir).map_err(|source| DataDirError::Read {
        dir: dir.to_owned(),
        source,
    })?;
    let me = nix::unistd::geteuid().as_raw();
    if meta.uid() != me {
        return Err(DataDirError::NotOurs {
            dir: dir.to_owned(),
            owner: meta.uid(),
            me,
        });
    }
    if meta.permissions().mode() & 0o077 != 0 {
        return Err(DataDirError::OpenToOthers {
            dir: dir.to_owned(),
            mode: meta.permissions().mode() & 0o777,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path)
            .expect("metadata")
            .permissions()
            .mode()
            & 0o777
    }

    #[test]
    fn a_missing_data_dir_is_made_for_this_user_alone() {
        let parent = tempfile::tempdir().expect("tempdir");
        let dir = parent.path().join("a/b");
        make_private(&dir).expect("created");
        assert_eq!(mode(&dir), 0o700);
        make_private(&dir).expect("and then accepted as it is");
    }

    #[test]
    fn a_data_dir_others_may_enter_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o750))
            .expect("chmod");
        let refused = make_private(dir.path()).expect_err("open to the group");
        assert!(matches!(
            refused,
            DataDirError::OpenToOthers { mode: 0o750, .. }
        ));
        assert!(refused.to_string().ends_with(&format!(
            "is open to other users (mode 750); run `chmod 700 {}`",
            dir.path().display()
        )));
    }
}
