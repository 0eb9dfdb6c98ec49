//! The CPython reader: finds the interpreter, walks threads and frames.

pub(crate) mod asyncio;
pub(crate) mod bounds;
pub(crate) mod datastack;
pub(crate) mod gc;
pub(crate) mod greenlet;
pub(crate) mod linetable;
pub(crate) mod native;
pub(crate) mod objects;
pub(crate) mod obmalloc;
pub(crate) mod pagecache;
pub(crate) mod process;
pub(crate) mod reader;
mod repr;
pub(crate) mod strings;
pub(crate) mod tracemalloc;
pub(crate) mod waits;
