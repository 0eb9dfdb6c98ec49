//! `pyinspect heap`: where a process's memory went, by type, read from
//! outside (src/commands/heap.rs drives it).

pub(crate) mod census;
pub(crate) mod diff;
pub(crate) mod holders;
pub(crate) mod memsplit;
pub(crate) mod output;
