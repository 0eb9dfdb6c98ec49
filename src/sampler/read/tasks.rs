//! Where 3.14's `_asyncio` keeps its `AsyncioDebug` section in the target.

use crate::target::TargetSource;

/// Where the target may carry `_asyncio`'s `AsyncioDebug` section: the
/// `_asyncio` extension module, or the interpreter's binary when the module
/// is built in; each as (file, section's address in the target).
pub(super) fn asyncio_debug_sections(
    source: &dyn TargetSource,
) -> Vec<(String, crate::elf::Range)> {
    let Ok(maps) = source.maps() else {
        return Vec::new();
    };
    let mut paths: Vec<&str> = Vec::new();
    for m in &maps {
        let name = m.path.rsplit('/').next().unwrap_or("");
        let candidate = name.starts_with("_asyncio")
            || name.starts_with("libpython3")
            || name.starts_with("python3");
        if m.is_file() && candidate && !paths.contains(&m.path.as_str()) {
            paths.push(&m.path);
        }
    }
    let mut out = Vec::new();
    for p in paths {
        let file_maps: Vec<&crate::mapping::MapEntry> =
            maps.iter().filter(|m| m.path == p).collect();
        let Some(first) = file_maps.iter().min_by_key(|m| m.offset) else {
            continue;
        };
        let Some(file) = source.mapped_file(first) else {
            continue;
        };
        if let Some(sec) = crate::elf::load(&file, &file_maps, &[])
            .ok()
            .and_then(|i| i.asyncio_debug)
        {
            out.push((p.to_string(), sec));
        }
    }
    out
}
