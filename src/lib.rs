//! pyinspect: read the Python (and native) call stacks of a running CPython
//! process from the outside.

pub mod bpf;
pub mod commands;
pub mod core;
pub mod cpython_layouts;
pub(crate) mod elf;
pub mod error;
pub(crate) mod heap;
pub(crate) mod launch;
pub(crate) mod mapping;
pub mod memory;
pub mod native_unwind;
pub mod options;
pub mod output;
pub mod pause;
pub mod privilege;
pub mod procfs;
pub(crate) mod python;
pub mod sampler;
pub mod stack;
pub mod target;
pub(crate) mod top;
pub mod wait;
pub mod watch;
pub(crate) mod zeroed;
