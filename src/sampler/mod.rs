//! The sampling shared by every command: what a sampler is told
//! ([`config`]), one followed process and its read ([`read`]: `dump`
//! reads through it once, `record`, `top` and `watch` at every tick), the
//! schedule that follows the processes ([`follow`]), whether the asked rate
//! was held ([`rate`]), and what only a live process has: its /proc files
//! ([`live`]).
//!
//! Per tick and process the cost is: one `pread` of each Python thread's
//! syscall file (kept open; its stat file too when it is in a new call),
//! the ptrace pause of the Python threads only
//! (unless `nonblocking`), and the reader's snapshot, whose code-object and
//! name caches live as long as the process is followed.

mod config;
mod follow;
mod live;
mod rate;
mod read;

pub use config::{
    AsyncMode, Filters, PausePolicy, ReadConfig, SamplerConfig, Schedule, TargetConfig,
};
pub(crate) use follow::{ProcessSample, Sampler, Tick};
pub(crate) use rate::{format_rate, RateHealth};
pub(crate) use read::{Target, TaskReaders};
