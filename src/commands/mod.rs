//! Thin drivers for the subcommands.

pub mod dump;
pub mod record;
pub mod top;
