//! Shorten a module's file name to what a reader recognises: the path from
//! the topmost package down (`requests/sessions.py`), the way py-spy shows it.
//!
//! Cheap rules on the string come first (everything under `site-packages`,
//! `dist-packages` or the standard library directory `lib/pythonX.Y`), since
//! they need no file system and also handle namespace packages there. Other
//! absolute paths are walked up through the target's root
//! (`/proc/<pid>/root`, so containers work) while the parent holds an
//! `__init__.py`. The caller caches the result per distinct file name, so
//! each file costs a few `stat` calls once per recording.

use std::path::Path;

pub(crate) fn shorten(file: &str, pid: i32) -> String {
    // `<frozen importlib._bootstrap>`, `<string>`, relative names: nothing
    // to strip.
    if !file.starts_with('/') {
        return file.to_string();
    }
    if let Some(short) = after_library_dir(file) {
        return short.to_string();
    }
    if let Some(short) = package_relative(&crate::procfs::root(pid), file) {
        return short;
    }
    package_relative(Path::new("/"), file).unwrap_or_else(|| basename(file).to_string())
}

/// The part after the last `site-packages/`, `dist-packages/` or
/// `lib/pythonX.Y[t]/` directory, if the path has one.
fn after_library_dir(file: &str) -> Option<&str> {
    let mut best: Option<usize> = None;
    for marker in ["/site-packages/", "/dist-packages/"] {
        if let Some(i) = file.rfind(marker) {
            best = best.max(Some(i + marker.len()));
        }
    }
    if best.is_none() {
        // The standard library: `/usr/lib/python3.11/json/decoder.py`.
        let mut start = 0;
        while let Some(i) = file[start..].find("/lib/python") {
            let rest = &file[start + i + "/lib/python".len()..];
            let version_len = rest.find('/').filter(|&n| {
                n > 0
                    && rest[..n]
                        .trim_end_matches('t')
                        .chars()
                        .all(|c| c.is_ascii_digit() || c == '.')
            });
            if let Some(n) = version_len {
                best = Some(start + i + "/lib/python".len() + n + 1);
            }
            start += i + 1;
        }
    }
    best.map(|i| &file[i..]).filter(|s| !s.is_empty())
}

/// `file` relative to the directory above its topmost package, looked up
/// under `root`; `None` when the file is not there.
fn package_relative(root: &Path, file: &str) -> Option<String> {
    let relative = file.trim_start_matches('/');
    let full = root.join(relative);
    if !full.is_file() {
        return None;
    }
    let mut dir = Path::new(relative).parent();
    while let Some(d) = dir {
        if d.as_os_str().is_empty() || !root.join(d).join("__init__.py").is_file() {
            break;
        }
        dir = d.parent();
    }
    let strip = dir.unwrap_or(Path::new(""));
    Path::new(relative)
        .strip_prefix(strip)
        .ok()
        .map(|p| p.to_string_lossy().into_owned())
}

fn basename(file: &str) -> &str {
    file.rsplit('/')
        .next()
        .filter(|s| !s.is_empty())
        .unwrap_or(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn library_dirs() {
        let pid = std::process::id() as i32;
        assert_eq!(
            shorten("/usr/lib/python3/dist-packages/requests/sessions.py", pid),
            "requests/sessions.py"
        );
        assert_eq!(
            shorten("/v/lib/python3.12/site-packages/numpy/core/x.py", pid),
            "numpy/core/x.py"
        );
        assert_eq!(
            shorten(
                "/root/.pyenv/versions/3.13.0/lib/python3.13t/json/decoder.py",
                pid
            ),
            "json/decoder.py"
        );
        assert_eq!(
            shorten("/usr/lib/python3.11/threading.py", pid),
            "threading.py"
        );
        assert_eq!(
            shorten("<frozen importlib._bootstrap>", pid),
            "<frozen importlib._bootstrap>"
        );
        assert_eq!(shorten("rel/app.py", pid), "rel/app.py");
        // Not on this machine and no library dir: the base name.
        assert_eq!(shorten("/nonexistent/dir/app.py", pid), "app.py");
        // `/lib/pythonista/` is not a version directory.
        assert_eq!(shorten("/x/lib/pythonista/app.py", pid), "app.py");
    }

    #[test]
    fn package_walk() {
        let tmp = tempfile::tempdir().unwrap();
        let pkg = tmp.path().join("proj/pkg/sub");
        std::fs::create_dir_all(&pkg).unwrap();
        std::fs::write(tmp.path().join("proj/pkg/__init__.py"), "").unwrap();
        std::fs::write(pkg.join("__init__.py"), "").unwrap();
        std::fs::write(pkg.join("mod.py"), "").unwrap();
        std::fs::write(tmp.path().join("proj/app.py"), "").unwrap();
        let pid = std::process::id() as i32;
        let m = pkg.join("mod.py");
        assert_eq!(shorten(m.to_str().unwrap(), pid), "pkg/sub/mod.py");
        let a = tmp.path().join("proj/app.py");
        assert_eq!(shorten(a.to_str().unwrap(), pid), "app.py");
    }
}
