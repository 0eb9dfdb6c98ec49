//! The CPython reader: finds the interpreter, walks threads and frames.

pub mod linetable;
pub mod strings;
