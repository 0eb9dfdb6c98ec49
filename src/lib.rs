//! pyinspect: read the Python (and native) call stacks of a running CPython
//! process from the outside.

pub mod commands;
pub mod core;
pub mod cpython_layouts;
pub mod elf;
pub mod error;
pub mod launch;
pub mod memory;
pub mod native_unwind;
pub mod options;
pub mod output;
pub mod pause;
pub mod privilege;
pub mod procfs;
pub mod python;
pub mod sampler;
pub mod stack;
pub mod target;
pub mod top;
pub mod wait;
