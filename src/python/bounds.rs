//! Bounds on what a corrupt or racing target can make the readers walk:
//! shared by the frame reader, the data-stack walk and the interpreter
//! lists of the gc, heap and allocator readers.

/// Interpreters followed on a runtime's list.
pub(crate) const MAX_INTERPRETERS: usize = 256;
/// Threads followed on an interpreter's list.
pub(crate) const MAX_THREADS: usize = 8192;
/// Python frames followed on one thread's stack.
pub(crate) const MAX_FRAMES: usize = 16384;
