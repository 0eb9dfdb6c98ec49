//! A module's call frame information (CFI): which addresses it covers, the
//! start of the range covering one, the rows framehop does not evaluate
//! (CFA expressions), and the sections handed to framehop.
//!
//! A large library's `.eh_frame` is never read whole (libtorch_cpu.so's is
//! 18 MB): with a sorted `.eh_frame_hdr` table (read with the file: 8 bytes
//! per function) the FDE for an address is found by binary search, and only
//! the pages holding that FDE and its CIE are read, into a buffer as long as
//! the section whose unread pages are never touched (so cost no memory).
//! Without a usable table the section is read whole and indexed, as is
//! `.debug_frame` (which only files without `.eh_frame` use).

use std::cell::RefCell;
use std::ops::{Deref, Range};
use std::rc::Rc;
use std::sync::Arc;

use gimli::{EndianSlice, LittleEndian, UnwindSection};

use super::backing::Backing;
use crate::zeroed::Zeroed;

/// Read granule of a paged section.
const PAGE: u64 = 4096;
/// Bound on one CIE or FDE (real ones are tens of bytes; a few KB for
/// hand-written code with long instruction lists).
const ENTRY_MAX: u64 = 1 << 20;

/// A section's bytes as handed to framehop: a range of the module's
/// [`Backing`], or a section read by the page on demand.
#[derive(Clone)]
pub(crate) enum SectionData {
    InFile {
        owner: Arc<Backing>,
        range: Range<usize>,
    },
    Paged(Rc<PagedSection>),
}

impl Deref for SectionData {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            SectionData::InFile { owner, range } => &owner[range.clone()],
            SectionData::Paged(p) => p,
        }
    }
}

/// A section of a file read by the page, when first needed. Pages not yet
/// read hold zeros; a caller makes sure the bytes it parses are present
/// ([`PagedSection::ensure`]) before it or framehop looks at them.
pub(crate) struct PagedSection {
    file: Arc<Backing>,
    /// The section's file offset.
    off: u64,
    buf: Zeroed,
    /// One bit per [`PAGE`]: read.
    read: RefCell<Vec<u64>>,
}

impl Deref for PagedSection {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // Bytes are written only in `ensure`, only into pages not read
        // before, and never while a slice from here is alive: a
        // PagedSection is not Sync, and every slice taken from it (here and
        // inside framehop) lives within one call that runs after the
        // `ensure` it needs.
        &self.buf
    }
}

impl PagedSection {
    fn new(file: Arc<Backing>, off: u64, len: usize) -> Option<PagedSection> {
        // Zeroed: its pages are not touched until written.
        let buf = Zeroed::new(len)?;
        let pages = (len as u64).div_ceil(PAGE) as usize;
        Some(PagedSection {
            file,
            off,
            buf,
            read: RefCell::new(vec![0; pages.div_ceil(64)]),
        })
    }

    fn len(&self) -> u64 {
        self.buf.len() as u64
    }

    /// Read the pages holding `r` (section offsets) that are not read yet;
    /// false when `r` is out of the section or the file cannot be read.
    pub(crate) fn ensure(&self, r: Range<u64>) -> bool {
        if r.start > r.end || r.end > self.len() {
            return false;
        }
        if r.is_empty() {
            return true;
        }
        let mut read = self.read.borrow_mut();
        let is_read = |read: &[u64], p: u64| read[(p / 64) as usize] & (1 << (p % 64)) != 0;
        let (first, last) = (r.start / PAGE, (r.end - 1) / PAGE);
        let mut p = first;
        while p <= last {
            if is_read(&read, p) {
                p += 1;
                continue;
            }
            // One read for each run of pages not read yet.
            let mut q = p;
            while q < last && !is_read(&read, q + 1) {
                q += 1;
            }
            let start = p * PAGE;
            let end = ((q + 1) * PAGE).min(self.len());
            let Some(bytes) = self.file.range(self.off + start, end - start) else {
                return false;
            };
            if bytes.len() as u64 != end - start {
                return false;
            }
            // SAFETY: see `deref`: no slice of this section is alive while
            // `ensure` runs (and it is not Sync), and these pages were never
            // read, so nothing that looked at them before relied on their
            // bytes.
            unsafe { self.buf.write(start as usize, &bytes) };
            for x in p..=q {
                read[(x / 64) as usize] |= 1 << (x % 64);
            }
            p = q + 1;
        }
        true
    }

    /// Read the whole section; false when the file cannot be read.
    fn ensure_all(&self) -> bool {
        self.ensure(0..self.len())
    }

    /// The bounds of the CIE or FDE at `off`, its length field read first.
    fn entry(&self, off: u64) -> Option<Range<u64>> {
        let word = |at: u64, n: u64| -> Option<u64> {
            if !self.ensure(at..at.checked_add(n)?) {
                return None;
            }
            let b = self.get(at as usize..(at + n) as usize)?;
            Some(if n == 4 {
                u64::from(u32::from_le_bytes(b.try_into().ok()?))
            } else {
                u64::from_le_bytes(b.try_into().ok()?)
            })
        };
        let (len, head) = match word(off, 4)? {
            0xffff_ffff => (word(off + 4, 8)?, 12),
            n => (n, 4),
        };
        if len > ENTRY_MAX {
            return None;
        }
        let end = off.checked_add(head + len)?;
        (end <= self.len() && self.ensure(off..end)).then_some(off..end)
    }

    /// Read the FDE at `off` and the CIE it points to.
    fn ensure_fde(&self, off: u64) -> Option<()> {
        let fde = self.entry(off)?;
        let head = if fde.end - fde.start >= 12
            && self.get(off as usize..off as usize + 4)? == [0xff; 4]
        {
            12
        } else {
            4
        };
        let id_at = off + head;
        let id = if head == 12 {
            u64::from_le_bytes(
                self.get(id_at as usize..id_at as usize + 8)?
                    .try_into()
                    .ok()?,
            )
        } else {
            u64::from(u32::from_le_bytes(
                self.get(id_at as usize..id_at as usize + 4)?
                    .try_into()
                    .ok()?,
            ))
        };
        if id == 0 {
            return Some(()); // a CIE: nothing else to read
        }
        // In `.eh_frame` the CIE pointer counts back from where it stands.
        self.entry(id_at.checked_sub(id)?).map(|_| ())
    }
}

/// Where a module's CFI is, so that we can tell whether an address is
/// covered before asking framehop (which silently falls back to frame
/// pointers), and the sections framehop gets.
pub(crate) enum Cfi {
    /// `.eh_frame_hdr`'s sorted table: a binary search per lookup, and
    /// `.eh_frame` read by the page.
    Hdr {
        hdr: SectionData,
        hdr_svma: u64,
        eh: SectionData,
        eh_svma: u64,
    },
    /// FDE ranges (svma, sorted) for `.eh_frame` without a usable header,
    /// or `.debug_frame`.
    Ranges(Vec<(u64, u64)>),
    None,
}

/// Where a module's unwind sections are in its file.
pub(crate) struct CfiSections {
    /// (svma, file range) of `.eh_frame`, `.eh_frame_hdr`, `.debug_frame`.
    pub(crate) eh: Option<(u64, Range<u64>)>,
    pub(crate) hdr: Option<(u64, Range<u64>)>,
    pub(crate) debug_frame: Option<(u64, Range<u64>)>,
}

/// The bytes of one section of `bytes`: borrowed from the backing when
/// they were read with the file, else read by the page (or whole when
/// `whole`). None when the file cannot give them.
fn section(bytes: &Arc<Backing>, r: &Range<u64>, whole: bool) -> Option<SectionData> {
    let range = usize::try_from(r.start).ok()?..usize::try_from(r.end).ok()?;
    bytes.get(range.clone())?;
    if bytes.has(r.start, r.end - r.start) {
        return Some(SectionData::InFile {
            owner: bytes.clone(),
            range,
        });
    }
    let p = PagedSection::new(bytes.clone(), r.start, range.len())?;
    if whole && !p.ensure_all() {
        return None;
    }
    Some(SectionData::Paged(Rc::new(p)))
}

impl Cfi {
    /// The module's CFI and the (`.eh_frame`, `.eh_frame_hdr`,
    /// `.debug_frame`) data framehop gets, with their svma ranges.
    #[allow(clippy::type_complexity)]
    pub(crate) fn load(
        bytes: &Arc<Backing>,
        s: &CfiSections,
    ) -> (Cfi, [Option<(Range<u64>, SectionData)>; 3]) {
        let svma = |(a, r): &(u64, Range<u64>)| *a..a.saturating_add(r.end - r.start);
        let hdr = s
            .hdr
            .as_ref()
            .and_then(|h| Some((h.0, svma(h), section(bytes, &h.1, true)?)));
        let eh_lazy =
            s.eh.as_ref()
                .and_then(|e| Some((e.0, svma(e), section(bytes, &e.1, false)?)));
        if let (Some((eh_svma, eh_r, eh)), Some((hdr_svma, hdr_r, hdr))) = (&eh_lazy, &hdr) {
            if hdr_sorted(hdr, *hdr_svma, *eh_svma) {
                let cfi = Cfi::Hdr {
                    hdr: hdr.clone(),
                    hdr_svma: *hdr_svma,
                    eh: eh.clone(),
                    eh_svma: *eh_svma,
                };
                return (
                    cfi,
                    [
                        Some((eh_r.clone(), eh.clone())),
                        Some((hdr_r.clone(), hdr.clone())),
                        None,
                    ],
                );
            }
        }
        // No usable header: the section read whole, indexed here and by
        // framehop.
        if let Some((eh_svma, eh_r, eh)) = eh_lazy {
            if let SectionData::Paged(p) = &eh {
                if !p.ensure_all() {
                    return (Cfi::None, [None, None, None]);
                }
            }
            let ranges = eh_frame_ranges(&eh, eh_svma);
            return (Cfi::Ranges(ranges), [Some((eh_r, eh)), None, None]);
        }
        if let Some(df) = &s.debug_frame {
            if let Some(d) = section(bytes, &df.1, true) {
                let ranges = debug_frame_ranges(&d);
                return (Cfi::Ranges(ranges), [None, None, Some((svma(df), d))]);
            }
        }
        (Cfi::None, [None, None, None])
    }

    /// Whether CFI (the one framehop will use) covers `svma`.
    pub(crate) fn covers(&self, svma: u64) -> bool {
        self.fde_range(svma).is_some()
    }

    /// The range (svma) of the FDE covering `svma`.
    pub(crate) fn fde_range(&self, svma: u64) -> Option<(u64, u64)> {
        match self {
            Cfi::Hdr { .. } => self.with_fde(svma, |_, _, fde| {
                let start = fde.initial_address();
                Some((start, start.saturating_add(fde.len())))
            }),
            Cfi::Ranges(r) => {
                let i = r.partition_point(|&(s, _)| s <= svma);
                (i > 0 && svma < r[i - 1].1).then(|| r[i - 1])
            }
            Cfi::None => None,
        }
    }

    /// Read the FDE (and its CIE) that `.eh_frame_hdr`'s table gives for
    /// `svma`, covering it or not: what framehop parses to unwind there.
    pub(crate) fn prepare(&self, svma: u64) {
        if let Cfi::Hdr {
            hdr,
            hdr_svma,
            eh: SectionData::Paged(p),
            eh_svma,
        } = self
        {
            if let Some(off) = hdr_lookup(hdr, *hdr_svma, *eh_svma, svma) {
                p.ensure_fde(off);
            }
        }
    }

    /// Run `f` on the FDE from `.eh_frame_hdr`'s table that covers `svma`,
    /// its bytes and its CIE's read first.
    fn with_fde<T>(
        &self,
        svma: u64,
        f: impl FnOnce(&gimli::EhFrame<Slice<'_>>, &gimli::BaseAddresses, Fde<'_>) -> Option<T>,
    ) -> Option<T> {
        let Cfi::Hdr {
            hdr,
            hdr_svma,
            eh,
            eh_svma,
        } = self
        else {
            return None;
        };
        let bases = gimli::BaseAddresses::default()
            .set_eh_frame_hdr(*hdr_svma)
            .set_eh_frame(*eh_svma);
        let off = hdr_lookup(hdr, *hdr_svma, *eh_svma, svma)?;
        if let SectionData::Paged(p) = eh {
            p.ensure_fde(off)?;
        }
        let off = gimli::EhFrameOffset(usize::try_from(off).ok()?);
        let eh_frame = gimli::EhFrame::new(eh, LittleEndian);
        let fde = eh_frame
            .fde_from_offset(&bases, off, gimli::EhFrame::cie_from_offset)
            .ok()?;
        if !fde.contains(svma) {
            return None;
        }
        f(&eh_frame, &bases, fde)
    }

    /// The caller's (return address, stack pointer, rbp) where the CFA
    /// rule of `svma` is a DWARF expression, as in functions that realign
    /// the stack (GCC's `DW_OP_breg6 -8; DW_OP_deref`, common in AVX code).
    /// framehop does not evaluate those: it falls back to the frame
    /// pointer, which finds the right return address but the wrong stack
    /// pointer, and the next frame goes astray. None: not such a frame (use
    /// framehop); Some(None): such a frame that could not be evaluated (or
    /// no FDE to tell).
    pub(crate) fn expression_step(
        &self,
        svma: u64,
        sp: u64,
        bp: u64,
        read: &mut dyn FnMut(u64) -> Option<u64>,
    ) -> Option<Option<(u64, u64, u64)>> {
        if !matches!(self, Cfi::Hdr { .. }) {
            return None;
        }
        let row = self.with_fde(svma, |eh_frame, bases, fde| {
            let mut ctx = Box::new(gimli::UnwindContext::new());
            let row = fde
                .unwind_info_for_address(eh_frame, bases, &mut ctx, svma)
                .ok()?;
            let gimli::CfaRule::Expression(e) = row.cfa() else {
                return Some(None);
            };
            let cfa_expr = e.get(eh_frame).ok()?;
            let ra_rule = row.register(gimli::X86_64::RA);
            let bp_rule = row.register(gimli::X86_64::RBP);
            let bp_expr = match &bp_rule {
                gimli::RegisterRule::Expression(e) => Some(e.get(eh_frame).ok()?),
                _ => None,
            };
            let step = (|| {
                let cfa = eval_cfi_expr(cfa_expr, sp, bp, None, read)?;
                let ra = match ra_rule {
                    gimli::RegisterRule::Offset(o) => read(cfa.wrapping_add(o as u64))?,
                    _ => return None,
                };
                let new_bp = match (bp_rule, bp_expr) {
                    (gimli::RegisterRule::Offset(o), _) => read(cfa.wrapping_add(o as u64))?,
                    (gimli::RegisterRule::Expression(_), Some(e)) => {
                        let at = eval_cfi_expr(e, sp, bp, Some(cfa), read)?;
                        read(at)?
                    }
                    _ => bp,
                };
                Some((ra, cfa, new_bp))
            })();
            Some(Some(step))
        });
        match row {
            // Found, and its CFA is no expression.
            Some(None) => None,
            Some(Some(step)) => Some(step),
            None => Some(None),
        }
    }
}

type Slice<'a> = EndianSlice<'a, LittleEndian>;
type Fde<'a> = gimli::FrameDescriptionEntry<Slice<'a>>;

/// The `.eh_frame` offset of the FDE that `.eh_frame_hdr`'s table gives for
/// `svma` (the last one starting at or below it).
fn hdr_lookup(hdr: &[u8], hdr_svma: u64, eh_svma: u64, svma: u64) -> Option<u64> {
    let bases = gimli::BaseAddresses::default()
        .set_eh_frame_hdr(hdr_svma)
        .set_eh_frame(eh_svma);
    let parsed = gimli::EhFrameHdr::new(hdr, LittleEndian)
        .parse(&bases, 8)
        .ok()?;
    let table = parsed.table()?;
    let ptr = table.lookup(svma, &bases).ok()?;
    Some(table.pointer_to_offset(ptr).ok()?.0 as u64)
}

/// Whether `.eh_frame_hdr` has a table to search, sorted as the binary
/// search needs (a linker writes it sorted; a table that is not is treated
/// as absent, and `.eh_frame` read whole).
fn hdr_sorted(hdr: &[u8], hdr_svma: u64, eh_svma: u64) -> bool {
    let bases = gimli::BaseAddresses::default()
        .set_eh_frame_hdr(hdr_svma)
        .set_eh_frame(eh_svma);
    let Ok(parsed) = gimli::EhFrameHdr::new(hdr, LittleEndian).parse(&bases, 8) else {
        return false;
    };
    let Some(table) = parsed.table() else {
        return false;
    };
    let mut it = table.iter(&bases);
    let mut prev = 0u64;
    loop {
        match it.next() {
            Ok(Some((loc, _))) => {
                let Ok(loc) = loc.direct() else { return false };
                if loc < prev {
                    return false;
                }
                prev = loc;
            }
            Ok(None) => return true,
            Err(_) => return false,
        }
    }
}

/// Evaluate a CFI expression with rsp and rbp known (the CFA pushed first
/// for a register rule): the address it computes.
fn eval_cfi_expr(
    expr: gimli::Expression<EndianSlice<'_, LittleEndian>>,
    sp: u64,
    bp: u64,
    cfa: Option<u64>,
    read: &mut dyn FnMut(u64) -> Option<u64>,
) -> Option<u64> {
    let encoding = gimli::Encoding {
        format: gimli::Format::Dwarf32,
        version: 4,
        address_size: 8,
    };
    let mut eval = expr.evaluation(encoding);
    if let Some(c) = cfa {
        eval.set_initial_value(c);
    }
    let mut result = eval.evaluate().ok()?;
    for _ in 0..64 {
        match result {
            gimli::EvaluationResult::Complete => {
                let piece = eval.as_result().last()?;
                return match piece.location {
                    gimli::Location::Address { address } => Some(address),
                    _ => None,
                };
            }
            gimli::EvaluationResult::RequiresRegister { register, .. } => {
                let v = match register {
                    gimli::X86_64::RSP => sp,
                    gimli::X86_64::RBP => bp,
                    _ => return None,
                };
                result = eval.resume_with_register(gimli::Value::Generic(v)).ok()?;
            }
            gimli::EvaluationResult::RequiresMemory {
                address, size: 8, ..
            } => {
                let v = read(address)?;
                result = eval.resume_with_memory(gimli::Value::Generic(v)).ok()?;
            }
            _ => return None,
        }
    }
    None
}

fn eh_frame_ranges(eh: &[u8], eh_svma: u64) -> Vec<(u64, u64)> {
    let bases = gimli::BaseAddresses::default().set_eh_frame(eh_svma);
    fde_ranges(&gimli::EhFrame::new(eh, LittleEndian), &bases)
}

fn debug_frame_ranges(df: &[u8]) -> Vec<(u64, u64)> {
    let mut s = gimli::DebugFrame::new(df, LittleEndian);
    s.set_address_size(8);
    fde_ranges(&s, &gimli::BaseAddresses::default())
}

fn fde_ranges<'a, S>(section: &S, bases: &gimli::BaseAddresses) -> Vec<(u64, u64)>
where
    S: UnwindSection<EndianSlice<'a, LittleEndian>>,
{
    let mut out = Vec::new();
    let mut entries = section.entries(bases);
    while let Ok(Some(entry)) = entries.next() {
        if let gimli::CieOrFde::Fde(partial) = entry {
            if let Ok(fde) = partial.parse(S::cie_from_offset) {
                let start = fde.initial_address();
                out.push((start, start.saturating_add(fde.len())));
            }
        }
    }
    out.sort_unstable();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use object::{Object, ObjectSection, ObjectSymbol};

    fn sections(bytes: &[u8]) -> CfiSections {
        let obj = object::File::parse(bytes).unwrap();
        let r = |n: &str| {
            let s = obj.section_by_name(n)?;
            let (off, len) = s.file_range()?;
            Some((s.address(), off..off + len))
        };
        CfiSections {
            eh: r(".eh_frame"),
            hdr: r(".eh_frame_hdr"),
            debug_frame: r(".debug_frame"),
        }
    }

    fn pages_read(cfi: &Cfi) -> (usize, usize) {
        match cfi {
            Cfi::Hdr {
                eh: SectionData::Paged(p),
                ..
            } => {
                let n = p
                    .read
                    .borrow()
                    .iter()
                    .map(|w| w.count_ones() as usize)
                    .sum();
                (n, p.len().div_ceil(PAGE) as usize)
            }
            _ => panic!("not a paged .eh_frame with a header"),
        }
    }

    /// `.eh_frame` read by the page through `.eh_frame_hdr` finds the same
    /// FDE as the whole section does, for every FDE of a large library
    /// (pyenv's libpython 3.11, and libc), reading only what is asked.
    #[test]
    fn paged_eh_frame_finds_what_the_whole_section_does() {
        let libpython = super::super::backing::pyenv_libpython311();
        let libc = std::path::PathBuf::from("/lib/x86_64-linux-gnu/libc.so.6");
        for path in [libpython, libc] {
            let sparse = Arc::new(Backing::open(&path).unwrap());
            let whole = Arc::new(Backing::Owned(std::fs::read(&path).unwrap()));
            let s = sections(&whole);
            let (paged, [eh, hdr, _]) = Cfi::load(&sparse, &s);
            let (read_all, _) = Cfi::load(&whole, &s);
            assert!(matches!(eh, Some((_, SectionData::Paged(_)))), "{path:?}");
            assert!(matches!(hdr, Some((_, SectionData::InFile { .. }))));
            assert!(matches!(
                read_all,
                Cfi::Hdr {
                    eh: SectionData::InFile { .. },
                    ..
                }
            ));
            assert_eq!(
                pages_read(&paged).0,
                0,
                "{path:?}: nothing read before a lookup"
            );
            let (eh_svma, r) = s.eh.clone().unwrap();
            let all = eh_frame_ranges(&whole[r.start as usize..r.end as usize], eh_svma);
            assert!(all.len() > 1000, "{path:?}: {} FDEs", all.len());
            // A few lookups read a few pages.
            for &(start, end) in all.iter().step_by(all.len() / 8) {
                assert_eq!(
                    paged.fde_range(start + (end - start) / 2),
                    Some((start, end))
                );
            }
            let (n, total) = pages_read(&paged);
            assert!(
                n <= 3 * 9 && total >= 30,
                "{path:?}: {n} of {total} pages read"
            );
            for &(start, end) in &all {
                for at in [start, start + (end - start) / 2, end] {
                    assert_eq!(
                        paged.fde_range(at),
                        read_all.fde_range(at),
                        "{path:?} {at:#x}"
                    );
                }
            }
        }
    }

    /// A library over a megabyte (read sparsely) built without
    /// `.eh_frame_hdr`: its `.eh_frame` is read whole and indexed.
    #[test]
    fn eh_frame_without_header_is_read_whole() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("big.c");
        std::fs::write(
            &src,
            "const char pad[2 << 20] = {1};\nint f(int x) { return pad[x] + 1; }\n",
        )
        .unwrap();
        for (flag, with_hdr) in [
            ("-Wl,--no-eh-frame-hdr", false),
            ("-Wl,--eh-frame-hdr", true),
        ] {
            let lib = dir.path().join(format!("libbig{with_hdr}.so"));
            let out = std::process::Command::new("gcc")
                .args(["-O2", "-shared", "-fPIC", flag, "-o"])
                .arg(&lib)
                .arg(&src)
                .output()
                .expect("run gcc");
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let bytes = Arc::new(Backing::open(&lib).unwrap());
            assert!(matches!(*bytes, Backing::Sparse { .. }));
            let whole = std::fs::read(&lib).unwrap();
            let obj = object::File::parse(&whole[..]).unwrap();
            let f = obj.symbol_by_name("f").map(|s| s.address()).expect("f");
            let s = sections(&whole);
            assert_eq!(s.hdr.is_some(), with_hdr);
            let (cfi, [eh, hdr, _]) = Cfi::load(&bytes, &s);
            assert_eq!(matches!(cfi, Cfi::Ranges(_)), !with_hdr);
            assert_eq!(hdr.is_some(), with_hdr);
            assert!(eh.is_some());
            assert_eq!(cfi.fde_range(f + 1).map(|r| r.0), Some(f), "{flag}");
        }
    }
}
