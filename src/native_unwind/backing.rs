//! A module's file bytes: read sparsely (headers, notes, symbol-table
//! streaming, the unwind header), with DWARF and other sections read from
//! the file when first asked for, and decompressed where they are stored
//! compressed.

use crate::zeroed::Zeroed;
use std::borrow::Cow;
use std::ops::{Deref, Range};

use object::ObjectSection;

/// The bytes of a module or debug file: a copy read from the file (never a
/// mapping: a file truncated under a mapping faults with SIGBUS), or from the
/// target's memory (the vdso).
pub(crate) enum Backing {
    Owned(Vec<u8>),
    /// A file of which only what unwinding and naming use was read: headers,
    /// CFI, symbol and string tables, PLT, relocations, notes. Code and data
    /// (most of a big library) are never read; the buffer is allocated zeroed,
    /// so its unread pages are never touched and cost no memory. DWARF
    /// (`.debug_*` but `.debug_frame`) is read from `file` when first asked
    /// for (see [`Backing::range`]).
    Sparse {
        data: Zeroed,
        file: std::fs::File,
        /// File ranges present in `data`, sorted.
        filled: Vec<Range<u64>>,
    },
}

impl Deref for Backing {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Backing::Owned(v) => v,
            Backing::Sparse { data, .. } => data,
        }
    }
}

/// Files smaller than this are read whole: one read costs less than the
/// header reads that would pick their parts.
const SPARSE_MIN: u64 = 1 << 20;
/// Bound on one section read from a file (real DWARF sections are well under).
const MAX_SECTION: u64 = 1 << 30;

impl Backing {
    pub(crate) fn open(path: &std::path::Path) -> std::io::Result<Backing> {
        let file = std::fs::File::open(path)?;
        match Backing::sparse(file)? {
            Some(b) => Ok(b),
            None => Ok(Backing::Owned(crate::elf::read_file(path)?)),
        }
    }

    /// The parts of an ELF64 file we use (see [`Backing::Sparse`]); None
    /// when the file is small or does not say what is where.
    fn sparse(file: std::fs::File) -> std::io::Result<Option<Backing>> {
        Ok(
            crate::elf::read_sections(&file, SPARSE_MIN, wanted_eagerly)?
                .map(|(data, filled)| Backing::Sparse { data, file, filled }),
        )
    }

    /// Whether the file bytes at `off..off + len` were read with the file.
    pub(super) fn has(&self, off: u64, len: u64) -> bool {
        match self {
            Backing::Owned(v) => off.checked_add(len).is_some_and(|e| e <= v.len() as u64),
            Backing::Sparse { filled, .. } => off
                .checked_add(len)
                .is_some_and(|end| filled.iter().any(|r| r.start <= off && end <= r.end)),
        }
    }

    /// The file bytes at `off..off + len`: borrowed when present, else read
    /// from the file (a lazily read section); None when out of bounds.
    pub(super) fn range(&self, off: u64, len: u64) -> Option<Cow<'_, [u8]>> {
        let end = off.checked_add(len)?;
        let present = |r: &Range<u64>| r.start <= off && end <= r.end;
        match self {
            Backing::Sparse { filled, file, data } if !filled.iter().any(present) => {
                use std::os::unix::fs::FileExt;
                if end > data.len() as u64 || len > MAX_SECTION {
                    return None;
                }
                let mut v = vec![0u8; len as usize];
                file.read_exact_at(&mut v, off).ok()?;
                Some(Cow::Owned(v))
            }
            _ => self.get(off as usize..end as usize).map(Cow::Borrowed),
        }
    }
}

impl Backing {
    /// Fill `buf` with the file bytes at `off..off + buf.len()`: copied
    /// when present, else read from the file into `buf` itself (no copy).
    pub(super) fn read_into(&self, off: u64, buf: &mut [u8]) -> Option<()> {
        let len = buf.len() as u64;
        let end = off.checked_add(len)?;
        match self {
            Backing::Sparse { filled, file, data }
                if !filled.iter().any(|r| r.start <= off && end <= r.end) =>
            {
                use std::os::unix::fs::FileExt;
                if end > data.len() as u64 || len > MAX_SECTION {
                    return None;
                }
                file.read_exact_at(buf, off).ok()
            }
            _ => {
                buf.copy_from_slice(self.get(off as usize..end as usize)?);
                Some(())
            }
        }
    }

    /// Whether the file's sections are read on demand (not all in memory).
    pub(super) fn is_sparse(&self) -> bool {
        matches!(self, Backing::Sparse { .. })
    }
}

/// Whether a section is read when its file is opened: headers, notes (the
/// build id), `.gnu_debuglink`, `.eh_frame_hdr`, `.debug_frame` and the
/// PLT. `.eh_frame` is read by the page as unwinding needs its entries (see
/// [`super::cfi`]). Symbol, string and relocation tables are streamed from
/// the file while the symbol index is built, and names read from it on
/// lookup (see [`super::symbols`]); code, data and DWARF are read on first
/// use.
fn wanted_eagerly(name: &[u8], kind: u32, flags: u64) -> bool {
    use object::elf::*;
    // (GNU-style `.zdebug_*`, from old toolchains, are read at once:
    // only their in-file form tells how to inflate them.)
    if name.starts_with(b".debug_") {
        return name == b".debug_frame";
    }
    kind == SHT_NOTE
        || kind == SHT_DYNAMIC
        || name == b".gnu_debuglink"
        || name.starts_with(b".zdebug_")
        || name == b".eh_frame_hdr"
        || (name.starts_with(b".plt") && flags & u64::from(SHF_ALLOC) != 0)
}

/// The decompressed bytes of an xz stream (`.gnu_debugdata`), bounded.
pub(super) fn unxz(data: &[u8]) -> Option<Vec<u8>> {
    /// A writer that refuses to grow past a bound (a corrupt or hostile
    /// stream cannot make us allocate without limit).
    struct Capped(Vec<u8>);
    impl std::io::Write for Capped {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            if self.0.len() + buf.len() > MINIDEBUGINFO_MAX {
                return Err(std::io::Error::other("MiniDebugInfo too large"));
            }
            self.0.extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut out = Capped(Vec::new());
    let mut input = std::io::BufReader::new(data);
    lzma_rs::xz_decompress(&mut input, &mut out).ok()?;
    Some(out.0)
}

/// Bound on a decompressed `.gnu_debugdata` (real ones are a few MB).
const MINIDEBUGINFO_MAX: usize = 256 << 20;

/// A DWARF section's bytes: as [`section_bytes`] when they were read with
/// the file, else read now from the file (and inflated when SHF_COMPRESSED).
pub(super) fn dwarf_section<'d>(
    file: &'d Backing,
    sec: &object::Section<'d, '_>,
) -> Option<Cow<'d, [u8]>> {
    let (off, len) = sec.file_range()?;
    let raw = file.range(off, len)?;
    let Cow::Owned(raw) = raw else {
        return section_bytes(sec);
    };
    let object::SectionFlags::Elf { sh_flags } = sec.flags() else {
        return None;
    };
    if sh_flags & u64::from(object::elf::SHF_COMPRESSED) == 0 {
        return Some(Cow::Owned(raw));
    }
    // Elf64_Chdr: ch_type, ch_reserved, ch_size, ch_addralign; then the stream.
    let ch_type = u32::from_le_bytes(raw.get(..4)?.try_into().ok()?);
    let size = u64::from_le_bytes(raw.get(8..16)?.try_into().ok()?);
    if ch_type != object::elf::ELFCOMPRESS_ZLIB {
        return None;
    }
    inflate(raw.get(24..)?, size).map(Cow::Owned)
}

/// A zlib stream of the declared size, bounded (the size comes from the file).
fn inflate(data: &[u8], size: u64) -> Option<Vec<u8>> {
    use std::io::Read;
    let cap = usize::try_from(size).ok().filter(|&n| n <= 1 << 30)?;
    let mut out = Vec::with_capacity(cap);
    flate2::read::ZlibDecoder::new(data)
        .take(cap as u64)
        .read_to_end(&mut out)
        .ok()?;
    Some(out)
}

/// A section's bytes, decompressed when the section is SHF_COMPRESSED (zlib),
/// as Debian's debug files are.
fn section_bytes<'d>(sec: &object::Section<'d, '_>) -> Option<Cow<'d, [u8]>> {
    let c = sec.compressed_data().ok()?;
    match c.format {
        object::CompressionFormat::None => Some(Cow::Borrowed(c.data)),
        object::CompressionFormat::Zlib => inflate(c.data, c.uncompressed_size).map(Cow::Owned),
        _ => None,
    }
}

/// pyenv's libpython 3.11 (its own symbols, DWARF and a large
/// `.eh_frame`): the real library the unwinder's file-reading tests use.
#[cfg(test)]
pub(super) fn pyenv_libpython311() -> std::path::PathBuf {
    std::fs::read_dir(format!(
        "{}/.pyenv/versions",
        std::env::var("HOME").unwrap()
    ))
    .unwrap()
    .flatten()
    .map(|e| e.path().join("lib/libpython3.11.so.1.0"))
    .find(|p| p.exists())
    .expect("pyenv's 3.11 (libpython with its own symbols and DWARF)")
}
