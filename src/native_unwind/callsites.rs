//! Tail-call frames rebuilt from DWARF call-site records, as gdb does.
//!
//! A function that ends in a jump to its callee (a tail call) leaves no
//! frame on the stack: the callee returns straight to the caller's caller.
//! The compiler records each call and jump in DWARF (`DW_TAG_call_site`,
//! `DW_TAG_GNU_call_site` before DWARF 5): its return address, whether it is
//! a tail call, and what it calls when that is known without registers. So
//! when a caller's return address is a call site that calls G, while the
//! callee's frame is in another function H, G must have reached H through
//! tail calls: the tail-call sites from G, searched depth first, give the
//! chain G -> ... -> H. Only a unique chain is shown (gdb keeps the common
//! part of several; we keep nothing), and the search is bounded.

use std::collections::HashMap;
use std::sync::Arc;

use gimli::{EndianSlice, LittleEndian};

type Slice = EndianSlice<'static, LittleEndian>;

/// Tail-call sites visited in one search, over every branch.
pub(crate) const MAX_SITES_VISITED: usize = 4096;
/// Longest chain of tail calls searched (gdb has no bound; real ones are a
/// handful deep).
pub(crate) const MAX_DEPTH: usize = 32;
/// DIEs read when indexing one unit (CPython's ceval.c has ~100k).
const MAX_UNIT_DIES: usize = 4 << 20;

/// What a call site calls, as the record says it without registers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum CallTarget {
    /// The callee's entry address (svma).
    Addr(u64),
    /// A declaration: the callee's linkage name, found in symbol tables.
    Name(Arc<str>),
    /// A DIE in another unit (`.debug_info` offset), resolved on use.
    Die(u64),
}

/// One `DW_TAG_call_site`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct CallSite {
    /// The address after the call or jump instruction (svma).
    pub(crate) ret: u64,
    /// A jump that replaced a call (`DW_AT_call_tail_call`).
    pub(crate) tail: bool,
    /// None: an indirect call through a register or memory.
    pub(crate) target: Option<CallTarget>,
}

/// The call sites of one compilation unit.
#[derive(Default, Debug)]
pub(crate) struct UnitCallSites {
    /// Every call site by its return address.
    pub(crate) by_ret: HashMap<u64, CallSite>,
    /// The tail-call sites of each function (by its entry address), in
    /// DWARF order; those inside inlined code count for the function they
    /// were inlined into, as gdb counts them.
    pub(crate) tails: HashMap<u64, Arc<[CallSite]>>,
}

fn flag(e: &gimli::DebuggingInformationEntry<Slice>, at: gimli::DwAt) -> bool {
    matches!(
        e.attr_value(at),
        Ok(Some(gimli::AttributeValue::Flag(true)))
    )
}

fn address(
    dwarf: &gimli::Dwarf<Slice>,
    unit: &gimli::Unit<Slice>,
    e: &gimli::DebuggingInformationEntry<Slice>,
    at: gimli::DwAt,
) -> Option<u64> {
    let v = e.attr_value(at).ok()??;
    dwarf.attr_address(unit, v).ok()?
}

/// A function DIE's entry: `DW_AT_low_pc`, else the start of its first
/// range (a function split into hot and cold parts lists the hot one
/// first). Zero is a function the linker discarded.
fn entry_pc(
    dwarf: &gimli::Dwarf<Slice>,
    unit: &gimli::Unit<Slice>,
    e: &gimli::DebuggingInformationEntry<Slice>,
) -> Option<u64> {
    let pc = match address(dwarf, unit, e, gimli::DW_AT_low_pc) {
        Some(pc) => pc,
        None => {
            e.attr_value(gimli::DW_AT_ranges).ok()??;
            let mut r = dwarf.die_ranges(unit, e).ok()?;
            r.next().ok()??.begin
        }
    };
    (pc != 0).then_some(pc)
}

/// The target a DIE names: a function with code (its entry), or a
/// declaration (its linkage name). An abstract instance (inlined only, no
/// code of its own) names nothing, as for gdb.
pub(crate) fn die_target(
    dwarf: &gimli::Dwarf<Slice>,
    unit: &gimli::Unit<Slice>,
    off: gimli::UnitOffset,
) -> Option<CallTarget> {
    let e = unit.entry(off).ok()?;
    if let Some(pc) = entry_pc(dwarf, unit, &e) {
        return Some(CallTarget::Addr(pc));
    }
    if !flag(&e, gimli::DW_AT_declaration) {
        return None;
    }
    [
        gimli::DW_AT_linkage_name,
        gimli::DW_AT_MIPS_linkage_name,
        gimli::DW_AT_name,
    ]
    .iter()
    .find_map(|&at| {
        let v = e.attr_value(at).ok()??;
        let s = dwarf.attr_string(unit, v).ok()?;
        let s = std::str::from_utf8(s.slice()).ok()?;
        (!s.is_empty()).then(|| CallTarget::Name(Arc::from(s)))
    })
}

fn call_target(
    dwarf: &gimli::Dwarf<Slice>,
    unit: &gimli::Unit<Slice>,
    e: &gimli::DebuggingInformationEntry<Slice>,
) -> Option<CallTarget> {
    for at in [gimli::DW_AT_call_origin, gimli::DW_AT_abstract_origin] {
        match e.attr_value(at) {
            Ok(Some(gimli::AttributeValue::UnitRef(off))) => return die_target(dwarf, unit, off),
            Ok(Some(gimli::AttributeValue::DebugInfoRef(o))) => {
                return match o.to_unit_offset(&unit.header) {
                    Some(off) => die_target(dwarf, unit, off),
                    None => Some(CallTarget::Die(o.0 as u64)),
                };
            }
            _ => {}
        }
    }
    // A target given as an expression: only a constant address is known
    // without the caller's registers.
    for at in [gimli::DW_AT_call_target, gimli::DW_AT_GNU_call_site_target] {
        if let Ok(Some(gimli::AttributeValue::Exprloc(expr))) = e.attr_value(at) {
            let mut ops = expr.operations(unit.encoding());
            let first = ops.next().ok()??;
            if !matches!(ops.next(), Ok(None)) {
                return None;
            }
            return match first {
                gimli::Operation::Address { address } => Some(CallTarget::Addr(address)),
                gimli::Operation::AddressIndex { index } => {
                    dwarf.address(unit, index).ok().map(CallTarget::Addr)
                }
                _ => None,
            };
        }
    }
    None
}

/// Every call site of `unit`, in one pass over its DIEs.
pub(crate) fn index_unit(dwarf: &gimli::Dwarf<Slice>, unit: &gimli::Unit<Slice>) -> UnitCallSites {
    let mut by_ret = HashMap::new();
    let mut tails: HashMap<u64, Vec<CallSite>> = HashMap::new();
    // Enclosing functions: (depth, entry).
    let mut funcs: Vec<(isize, Option<u64>)> = Vec::new();
    let mut depth = 0isize;
    let mut cursor = unit.entries();
    let mut seen = 0usize;
    while let Ok(Some((delta, e))) = cursor.next_dfs() {
        depth += delta;
        seen += 1;
        if seen > MAX_UNIT_DIES {
            break;
        }
        while funcs.last().is_some_and(|&(d, _)| d >= depth) {
            funcs.pop();
        }
        match e.tag() {
            gimli::DW_TAG_subprogram => funcs.push((depth, entry_pc(dwarf, unit, e))),
            gimli::DW_TAG_call_site | gimli::DW_TAG_GNU_call_site => {
                let Some(ret) = address(dwarf, unit, e, gimli::DW_AT_call_return_pc)
                    .or_else(|| address(dwarf, unit, e, gimli::DW_AT_low_pc))
                else {
                    continue;
                };
                let site = CallSite {
                    ret,
                    tail: flag(e, gimli::DW_AT_call_tail_call)
                        || flag(e, gimli::DW_AT_GNU_tail_call),
                    target: call_target(dwarf, unit, e),
                };
                if site.tail {
                    if let Some(&(_, Some(f))) = funcs.last() {
                        tails.entry(f).or_default().push(site.clone());
                    }
                }
                by_ret.insert(ret, site);
            }
            _ => {}
        }
    }
    UnitCallSites {
        by_ret,
        tails: tails.into_iter().map(|(f, v)| (f, v.into())).collect(),
    }
}

/// What the chain search asks of a module.
pub(crate) trait TailCallInfo {
    /// The tail-call sites of the function entered at `entry`; None when
    /// there is no DWARF for it.
    fn tail_sites(&mut self, entry: u64) -> Option<Arc<[CallSite]>>;
    /// The entry address a target stands for; None when it cannot be told.
    fn resolve(&mut self, target: &CallTarget) -> Option<u64>;
}

/// The tail-call sites (outermost first: G's own site first) by which G,
/// entered at `g`, reached the function entered at `h`; None when there is
/// no such chain, more than one, or the search could not finish (an
/// unresolvable target on the way, or the bounds hit): then nothing is
/// known for sure.
pub(crate) fn find_chain(info: &mut dyn TailCallInfo, g: u64, h: u64) -> Option<Vec<u64>> {
    if g == h {
        return None;
    }
    struct Search<'a> {
        info: &'a mut dyn TailCallInfo,
        h: u64,
        path: Vec<u64>,
        found: Option<Vec<u64>>,
        visited: usize,
    }
    /// false: give up (ambiguous, unresolvable, or over the bounds).
    fn visit(s: &mut Search, f: u64) -> bool {
        let Some(sites) = s.info.tail_sites(f) else {
            // A function without tail-call records makes no tail call.
            return true;
        };
        for site in sites.iter() {
            s.visited += 1;
            if s.visited > MAX_SITES_VISITED {
                return false;
            }
            // A site already on the path would loop.
            if s.path.contains(&site.ret) {
                continue;
            }
            let Some(t) = site.target.as_ref().and_then(|t| s.info.resolve(t)) else {
                return false;
            };
            s.path.push(site.ret);
            if t == s.h {
                if s.found.is_some() {
                    return false;
                }
                s.found = Some(s.path.clone());
            } else if s.path.len() >= MAX_DEPTH || !visit(s, t) {
                return false;
            }
            s.path.pop();
        }
        true
    }
    let mut s = Search {
        info,
        h,
        path: Vec::new(),
        found: None,
        visited: 0,
    };
    if !visit(&mut s, g) {
        return None;
    }
    s.found
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Functions by entry, each with its tail-call sites (return address,
    /// target; None: indirect).
    type Graph = Vec<(u64, Vec<(u64, Option<u64>)>)>;

    /// A module's call-site records without DWARF.
    struct Fake(HashMap<u64, Arc<[CallSite]>>);

    impl Fake {
        fn new(funcs: Graph) -> Fake {
            Fake(
                funcs
                    .into_iter()
                    .map(|(f, sites)| {
                        let v: Vec<CallSite> = sites
                            .into_iter()
                            .map(|(ret, t)| CallSite {
                                ret,
                                tail: true,
                                target: t.map(CallTarget::Addr),
                            })
                            .collect();
                        (f, v.into())
                    })
                    .collect(),
            )
        }
    }

    impl TailCallInfo for Fake {
        fn tail_sites(&mut self, entry: u64) -> Option<Arc<[CallSite]>> {
            self.0.get(&entry).cloned()
        }
        fn resolve(&mut self, t: &CallTarget) -> Option<u64> {
            match t {
                CallTarget::Addr(a) => Some(*a),
                _ => None,
            }
        }
    }

    #[test]
    fn a_unique_chain_is_found_and_an_ambiguous_one_is_not() {
        // 1 -> 2 -> 3 -> 9; 1 -> 4 (a dead end).
        let mut f = Fake::new(vec![
            (1, vec![(0x14, Some(4)), (0x12, Some(2))]),
            (2, vec![(0x23, Some(3))]),
            (3, vec![(0x39, Some(9))]),
        ]);
        assert_eq!(find_chain(&mut f, 1, 9), Some(vec![0x12, 0x23, 0x39]));
        assert_eq!(find_chain(&mut f, 2, 9), Some(vec![0x23, 0x39]));
        // No chain: G calls H directly, or never reaches it.
        assert_eq!(find_chain(&mut f, 9, 9), None);
        assert_eq!(find_chain(&mut f, 4, 9), None);
        assert_eq!(find_chain(&mut f, 1, 7), None);
        // Two ways from 1 to 9: ambiguous.
        let mut f = Fake::new(vec![
            (1, vec![(0x12, Some(2)), (0x13, Some(3))]),
            (2, vec![(0x29, Some(9))]),
            (3, vec![(0x39, Some(9))]),
        ]);
        assert_eq!(find_chain(&mut f, 1, 9), None);
        // An indirect tail call on the way could reach 9 too: unknown.
        let mut f = Fake::new(vec![
            (1, vec![(0x12, Some(2)), (0x10, None)]),
            (2, vec![(0x29, Some(9))]),
        ]);
        assert_eq!(find_chain(&mut f, 1, 9), None);
    }

    #[test]
    fn loops_and_deep_or_wide_graphs_end() {
        // 1 <-> 2 loop, then 2 -> 9.
        let mut f = Fake::new(vec![
            (1, vec![(0x12, Some(2))]),
            (2, vec![(0x21, Some(1)), (0x29, Some(9))]),
        ]);
        assert_eq!(find_chain(&mut f, 1, 9), Some(vec![0x12, 0x29]));
        // A chain longer than the bound is not followed to its end.
        let mut f = Fake::new(
            (1..=40u64)
                .map(|i| (i, vec![(0x1000 + i, Some(i + 1))]))
                .collect(),
        );
        assert_eq!(find_chain(&mut f, 1, 41), None);
        assert_eq!(find_chain(&mut f, 30, 41).map(|c| c.len()), Some(11));
        // Every function tail-calls every other: the visit bound stops it.
        let mut f = Fake::new(
            (1..=20u64)
                .map(|i| {
                    let sites = (1..=20u64)
                        .filter(|&j| j != i)
                        .map(|j| (i * 100 + j, Some(j)))
                        .collect();
                    (i, sites)
                })
                .collect(),
        );
        assert_eq!(find_chain(&mut f, 1, 99), None);
    }
}
