//! The CPython reader: finds the interpreter, walks threads and frames.

pub mod asyncio;
pub mod linetable;
pub mod native;
pub mod objects;
pub mod pagecache;
pub mod process;
pub mod reader;
pub mod strings;
