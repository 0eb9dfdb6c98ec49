//! The one way pyinspect writes an output file.
//!
//! - `-` is standard output.
//! - A character device or a FIFO (`/dev/stdout`, `/dev/null`, a pipe) is
//!   written directly: no truncation, no rename.
//! - A regular file is written to a new temporary file in the same directory
//!   (created exclusively, never through a symlink, mode 0644 less the
//!   umask) and renamed into place once complete: a crash or a full disk
//!   never leaves half a profile under the name asked for.
//! - A symlink at the path is followed only when its owner is the invoking
//!   user or root (each hop); one planted by another user, say in a
//!   world-writable directory, is replaced by the rename, never followed.
//!
//! Every error names the path and the cause, once.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Longest chain of trusted symlinks followed.
const MAX_HOPS: usize = 40;

#[derive(Debug)]
pub(crate) struct SinkError {
    pub(crate) path: String,
    pub(crate) cause: io::Error,
}

impl std::fmt::Display for SinkError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cannot write {}: {}", self.path, self.cause)
    }
}

impl std::error::Error for SinkError {}

enum Dest {
    Stdout(io::Stdout),
    Direct(File),
    /// Written to `tmp`, renamed to `path` on commit.
    Atomic {
        file: File,
        tmp: PathBuf,
    },
}

pub(crate) struct OutputFile {
    /// As the user gave it (for messages).
    shown: String,
    /// Where the data ends up.
    path: PathBuf,
    dest: Dest,
}

fn err(path: &Path, cause: io::Error) -> SinkError {
    SinkError {
        path: path.display().to_string(),
        cause,
    }
}

/// Follow the symlinks at `path` whose owner is the invoking user or root.
/// Returns the path to write: a non-symlink (or nothing), or an untrusted
/// symlink, which the rename will replace.
fn resolve(path: &Path) -> io::Result<PathBuf> {
    // SAFETY: plain id getter.
    let uid = unsafe { libc::getuid() };
    let mut p = path.to_path_buf();
    for _ in 0..MAX_HOPS {
        let md = match std::fs::symlink_metadata(&p) {
            Ok(md) => md,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(p),
            Err(e) => return Err(e),
        };
        if !md.file_type().is_symlink() || (md.uid() != uid && md.uid() != 0) {
            return Ok(p);
        }
        let target = std::fs::read_link(&p)?;
        p = match p.parent() {
            Some(dir) if target.is_relative() => dir.join(target),
            _ => target,
        };
    }
    Err(io::Error::from_raw_os_error(libc::ELOOP))
}

impl OutputFile {
    /// Open `path` for writing (before the work, so a bad path fails at once).
    pub(crate) fn create(path: &Path) -> Result<OutputFile, SinkError> {
        let shown = path.display().to_string();
        if path.as_os_str() == "-" {
            return Ok(OutputFile {
                shown: "standard output".into(),
                path: path.to_path_buf(),
                dest: Dest::Stdout(io::stdout()),
            });
        }
        // SAFETY: plain id getter.
        let uid = unsafe { libc::getuid() };
        let planted = std::fs::symlink_metadata(path)
            .is_ok_and(|md| md.file_type().is_symlink() && md.uid() != uid && md.uid() != 0);
        if !planted {
            // A device or FIFO, maybe through trusted links (/dev/stdout is
            // root's link to a /proc magic link): opened as named.
            if let Ok(md) = std::fs::metadata(path) {
                let ft = md.file_type();
                if ft.is_char_device() || ft.is_fifo() {
                    let file = OpenOptions::new()
                        .write(true)
                        .custom_flags(libc::O_NOCTTY)
                        .open(path)
                        .map_err(|e| err(path, e))?;
                    return Ok(OutputFile {
                        shown,
                        path: path.to_path_buf(),
                        dest: Dest::Direct(file),
                    });
                }
            }
        }
        let real = resolve(path).map_err(|e| err(path, e))?;
        match std::fs::symlink_metadata(&real) {
            Ok(md) => {
                let ft = md.file_type();
                if ft.is_dir() {
                    return Err(err(path, io::Error::other("it is a directory")));
                }
                if ft.is_char_device() || ft.is_fifo() {
                    let file = OpenOptions::new()
                        .write(true)
                        .custom_flags(libc::O_NOFOLLOW | libc::O_NOCTTY)
                        .open(&real)
                        .map_err(|e| err(path, e))?;
                    return Ok(OutputFile {
                        shown,
                        path: real,
                        dest: Dest::Direct(file),
                    });
                }
                if !ft.is_file() && !ft.is_symlink() {
                    return Err(err(
                        path,
                        io::Error::other("not a regular file, character device or FIFO"),
                    ));
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(err(path, e)),
        }
        let (file, tmp) = create_temp(&real).map_err(|e| err(path, e))?;
        Ok(OutputFile {
            shown,
            path: real,
            dest: Dest::Atomic { file, tmp },
        })
    }

    /// The path as given, or "standard output".
    pub(crate) fn shown(&self) -> &str {
        &self.shown
    }

    pub(crate) fn writer(&mut self) -> &mut dyn Write {
        match &mut self.dest {
            Dest::Stdout(s) => s,
            Dest::Direct(f) => f,
            Dest::Atomic { file, .. } => file,
        }
    }

    /// Write `f`'s output and put it in place.
    pub(crate) fn write_with<E: std::fmt::Display>(
        mut self,
        f: impl FnOnce(&mut dyn Write) -> Result<(), E>,
    ) -> Result<(), String> {
        let shown = self.shown.clone();
        if let Err(e) = f(self.writer()) {
            self.abandon();
            return Err(format!("cannot write {shown}: {e}"));
        }
        self.commit().map_err(|e| e.to_string())
    }

    /// Flush and, for a regular file, rename it into place.
    pub(crate) fn commit(mut self) -> Result<(), SinkError> {
        let path = self.path.clone();
        let shown = PathBuf::from(&self.shown);
        if let Err(e) = self.writer().flush() {
            self.abandon();
            return Err(err(&shown, e));
        }
        match std::mem::replace(&mut self.dest, Dest::Stdout(io::stdout())) {
            Dest::Stdout(_) | Dest::Direct(_) => Ok(()),
            Dest::Atomic { file, tmp } => {
                let done = file.sync_all().and_then(|()| std::fs::rename(&tmp, &path));
                if let Err(e) = done {
                    let _ = std::fs::remove_file(&tmp);
                    return Err(err(&shown, e));
                }
                Ok(())
            }
        }
    }

    /// Nothing to write after all: remove the temporary file.
    pub(crate) fn abandon(self) {
        if let Dest::Atomic { tmp, .. } = &self.dest {
            let _ = std::fs::remove_file(tmp);
        }
    }
}

/// A new file next to `path`, created exclusively (never through a link).
fn create_temp(path: &Path) -> io::Result<(File, PathBuf)> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let base = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "output".into());
    let mut last = None;
    for n in 0..100u32 {
        let tmp = dir.join(format!(".{base}.{}.{n}.tmp", std::process::id()));
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&tmp)
        {
            Ok(f) => return Ok((f, tmp)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::other("no free temporary name")))
}

/// A new private file at `path` for a log we write to as we go (no rename):
/// created exclusively, so a file or link already there is never used.
pub(crate) fn create_new_private(path: &Path) -> Result<File, SinkError> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| err(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_atomically_and_replaces_existing() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("out.txt");
        std::fs::write(&p, "old").unwrap();
        let o = OutputFile::create(&p).unwrap();
        // The old content stays until the commit.
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "old");
        o.write_with(|w| w.write_all(b"new")).unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "new");
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 1);
    }

    #[test]
    fn own_symlink_is_followed() {
        let d = tempfile::tempdir().unwrap();
        let real = d.path().join("real.txt");
        let link = d.path().join("link.txt");
        std::os::unix::fs::symlink("real.txt", &link).unwrap();
        OutputFile::create(&link)
            .unwrap()
            .write_with(|w| w.write_all(b"x"))
            .unwrap();
        assert_eq!(std::fs::read_to_string(&real).unwrap(), "x");
        assert!(std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
    }

    #[test]
    fn abandon_leaves_nothing() {
        let d = tempfile::tempdir().unwrap();
        OutputFile::create(&d.path().join("o")).unwrap().abandon();
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0);
    }

    #[test]
    fn directory_is_refused_with_its_name() {
        let d = tempfile::tempdir().unwrap();
        let e = OutputFile::create(d.path()).err().unwrap().to_string();
        assert!(e.contains("directory") && e.contains(&d.path().display().to_string()));
    }
}
