//! Thin drivers for the subcommands.

pub mod diff;
pub mod dump;
pub mod heap;
pub mod record;
pub mod top;
pub mod watch;
