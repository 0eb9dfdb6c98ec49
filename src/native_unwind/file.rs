//! A module's file as naming reads it: its bytes, whether it carries its
//! own `.symtab` and DWARF, and its separate debug file: where that may be
//! (found at load) and the file itself (opened on first use, once).

use std::sync::Arc;

use object::Object;

use super::backing::Backing;

pub(super) struct ModuleFile {
    pub(super) bytes: Arc<Backing>,
    pub(super) has_symtab: bool,
    pub(super) has_dwarf: bool,
    /// Paths tried for a separate debug file, with the build id it must have.
    debug_candidates: Vec<(String, Option<Vec<u8>>)>,
    /// The separate debug file, once looked for.
    debug: Option<Option<Arc<Backing>>>,
}

impl ModuleFile {
    /// The file `obj` was parsed from (`bytes`), at `file_dir` under the
    /// target's `root`. A separate debug file is only looked for when the
    /// file lacks `.symtab` or DWARF.
    pub(super) fn new(
        bytes: Arc<Backing>,
        obj: &object::File,
        root: &str,
        file_dir: &str,
    ) -> ModuleFile {
        let has_symtab = obj.section_by_name(".symtab").is_some();
        let has_dwarf = obj.section_by_name(".debug_info").is_some();
        let debug_candidates = if has_symtab && has_dwarf {
            Vec::new()
        } else {
            debug_candidates(obj, root, file_dir)
        };
        ModuleFile {
            bytes,
            has_symtab,
            has_dwarf,
            debug_candidates,
            debug: None,
        }
    }

    /// Whether a separate debug file may exist (not opened here).
    pub(super) fn may_have_debug_file(&self) -> bool {
        !self.debug_candidates.is_empty()
    }

    /// The separate debug file: the first candidate that opens, parses and
    /// has the wanted build id; looked for on first use only.
    pub(super) fn debug_file(&mut self) -> Option<Arc<Backing>> {
        if let Some(d) = &self.debug {
            return d.clone();
        }
        let found = self.debug_candidates.iter().find_map(|(path, want_id)| {
            let b = Backing::open(std::path::Path::new(path)).ok()?;
            let obj = object::File::parse(&*b).ok()?;
            if let Some(want) = want_id {
                if obj.build_id().ok().flatten() != Some(want.as_slice()) {
                    return None;
                }
            }
            Some(Arc::new(b))
        });
        self.debug = Some(found.clone());
        found
    }
}

/// Where a separate debug file for `obj` may be, with the build id it must
/// have: by build id under `/usr/lib/debug` (in `root`, then here) and in
/// the debuginfod clients' caches, and by `.gnu_debuglink` beside the file.
fn debug_candidates(
    obj: &object::File,
    root: &str,
    file_dir: &str,
) -> Vec<(String, Option<Vec<u8>>)> {
    let mut debug_candidates = Vec::new();
    let build_id = obj.build_id().ok().flatten().map(|b| b.to_vec());
    if let Some(id) = &build_id {
        if id.len() >= 2 {
            let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
            for r in [root, ""] {
                debug_candidates.push((
                    format!(
                        "{r}/usr/lib/debug/.build-id/{}/{}.debug",
                        &hex[..2],
                        &hex[2..]
                    ),
                    build_id.clone(),
                ));
            }
            // What debuginfod clients (gdb, elfutils) have fetched.
            let caches = [
                std::env::var("DEBUGINFOD_CACHE_PATH").ok(),
                std::env::var("HOME")
                    .ok()
                    .map(|h| format!("{h}/.cache/debuginfod_client")),
            ];
            for c in caches.into_iter().flatten().filter(|c| !c.is_empty()) {
                debug_candidates.push((format!("{c}/{hex}/debuginfo"), build_id.clone()));
            }
        }
    }
    if let Ok(Some((link, _crc))) = obj.gnu_debuglink() {
        if let Ok(link) = std::str::from_utf8(link) {
            if !link.contains('/') {
                for r in [root, ""] {
                    for d in [
                        format!("{r}{file_dir}"),
                        format!("{r}{file_dir}/.debug"),
                        format!("{r}/usr/lib/debug{file_dir}"),
                    ] {
                        debug_candidates.push((format!("{d}/{link}"), build_id.clone()));
                    }
                }
            }
        }
    }
    debug_candidates
}
