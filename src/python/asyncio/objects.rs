//! Generic readers of Python objects that asyncio's structures are made
//! of: attributes through `__dict__`, the class or `__slots__`, callback
//! lists, deques and a future's state.

use crate::cpython_layouts::asyncio::{AsyncioLayout, DEQUE_BLOCK_LEN};
use crate::memory::{le_u64, MemoryExt};
use crate::python::objects::ObjReader;

/// Most callbacks looked at per future.
const MAX_CALLBACKS: u64 = 64;

/// An attribute of a Python-level object: its `__dict__`'s, else its
/// class's (asyncio's Python `Future` keeps defaults such as `_state` there).
pub(super) fn py_attr(objr: &ObjReader, l: &AsyncioLayout, obj: u64, name: &str) -> Option<u64> {
    if let Ok(Some(v)) = objr.instance_attr(obj, name) {
        return Some(v);
    }
    let ty = objr.type_of(obj).ok()?;
    let mro = objr.mem.read_u64(ty.wrapping_add(l.type_mro)).ok()?;
    let (types, _) = objr.tuple_items(mro, 32).ok()?;
    types.into_iter().find_map(|t| {
        let d = objr.mem.read_u64(t.wrapping_add(l.type_dict)).ok()?;
        if d == 0 {
            return None;
        }
        objr.dict_get(d, name).ok().flatten()
    })
}

/// Those of `names` an instance has in its `__dict__`, read in one pass.
pub(super) fn instance_attrs(
    objr: &ObjReader,
    obj: u64,
    names: &[&'static str],
) -> Vec<(&'static str, u64)> {
    let Ok(items) = objr.instance_items(obj) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (k, v) in items {
        let Ok((key, false)) = objr.string(k, 32) else {
            continue;
        };
        if let Some(n) = names.iter().find(|n| **n == key) {
            out.push((*n, v));
        }
    }
    out
}

/// The callbacks of a list of (callback, context) tuples.
pub(super) fn callback_list(objr: &ObjReader, list: u64) -> Vec<u64> {
    let Ok((items, _)) = objr.list_items(list, MAX_CALLBACKS) else {
        return Vec::new();
    };
    items
        .into_iter()
        .filter_map(|it| match objr.type_name(it).ok()?.as_str() {
            "tuple" => objr.tuple_items(it, 1).ok()?.0.first().copied(),
            _ => Some(it),
        })
        .collect()
}

/// Items of a `collections.deque`, at most `max`.
pub(super) fn deque_items(objr: &ObjReader, l: &AsyncioLayout, dq: u64, max: u64) -> Vec<u64> {
    let mem = objr.mem;
    let mut out = Vec::new();
    let Ok(len) = mem.read_u64(dq.wrapping_add(objr.layout.object.ob_size)) else {
        return out;
    };
    let n = len.min(max);
    let Ok(mut block) = mem.read_u64(dq.wrapping_add(l.deque_leftblock)) else {
        return out;
    };
    let Ok(mut idx) = mem.read_u64(dq.wrapping_add(l.deque_leftindex)) else {
        return out;
    };
    if idx >= DEQUE_BLOCK_LEN {
        return out;
    }
    let mut blocks = 0;
    while (out.len() as u64) < n && block != 0 && blocks < 1 + max / DEQUE_BLOCK_LEN + 1 {
        let Ok(raw) = mem.read_vec(block, ((DEQUE_BLOCK_LEN + 2) * 8) as usize, 1 << 12) else {
            break;
        };
        while idx < DEQUE_BLOCK_LEN && (out.len() as u64) < n {
            out.push(le_u64(&raw, 8 + idx * 8));
            idx += 1;
        }
        block = le_u64(&raw, 8 + DEQUE_BLOCK_LEN * 8);
        idx = 0;
        blocks += 1;
    }
    out
}

/// A Python-level future's `_state` string → the C enum's value.
pub(super) fn py_state(objr: &ObjReader, s: u64) -> Option<u8> {
    match objr.string(s, 16).ok()?.0.as_str() {
        "PENDING" => Some(0),
        "CANCELLED" => Some(1),
        "FINISHED" => Some(2),
        _ => None,
    }
}
