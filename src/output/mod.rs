//! Renderers built on the one stack model.
//!
//! `record` feeds every sampled thread stack into a [`Profile`], which
//! aggregates as it goes: frames and stacks are interned once, and each sample
//! only bumps a counter keyed by (stack, thread). Memory therefore grows with
//! the number of *distinct* stacks, not with recording time. The two
//! time-ordered formats (speedscope, Chrome trace) also need the order in
//! which stacks followed each other; for those the profile keeps a compact
//! timeline (no strings: stack id, thread id, start, duration), where
//! consecutive samples of a thread with the same stack are merged into one
//! run. Ask for it with [`ProfileOptions::timeline`] only when the chosen
//! format needs it ([`OutputFormat::needs_timeline`]).
//!
//! [`OutputFormat::write`] hands a profile to its format's writer: the
//! writers know the profile, the profile knows none of them.

mod chrometrace;
mod collapsed;
mod diff;
mod dump_text;
mod filenames;
mod gecko;
mod heatmap;
mod html;
mod pprof;
mod profile;
pub(crate) mod sink;
mod speedscope;

use std::io::Write;
use thiserror::Error;

pub use diff::wire;
pub(crate) use diff::{read_recording, share_changes, write_differential, Recording};
pub(crate) use dump_text::write_text as write_dump_text;
pub(crate) use filenames::shorten as short_filename;
pub use profile::Profile;

/// How samples are turned into frames, and what the profile keeps.
#[derive(Debug, Clone)]
pub struct ProfileOptions {
    /// A root frame per thread: `thread <os tid or ident> "<name>"`.
    pub threads: bool,
    /// Leave line numbers out of frame names (frames of one function merge).
    /// With `--function` the sampler already passes each frame's first line
    /// (`co_firstlineno`), so that mode needs nothing here.
    pub nolineno: bool,
    /// Keep file names as the target reported them instead of shortening
    /// them to the package-relative path.
    pub full_filenames: bool,
    /// A root frame per process: `process <pid>: "<command line>"`.
    pub subprocesses: bool,
    /// Samples per second asked for; the pprof `period`.
    pub rate: f64,
    /// Keep the per-thread timeline needed by speedscope and Chrome trace.
    pub timeline: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    /// Interactive flame graph SVG.
    Flamegraph,
    /// speedscope JSON (https://www.speedscope.app).
    Speedscope,
    /// Chrome trace event JSON (Perfetto, chrome://tracing).
    Chrometrace,
    /// Collapsed stacks, one `a;b;c count` line each (flamegraph.pl, inferno).
    Raw,
    /// Gzipped pprof profile.proto (`go tool pprof`, Pyroscope, Grafana).
    Pprof,
    /// Firefox Profiler JSON (https://profiler.firefox.com): a track per thread.
    Gecko,
    /// One self-contained HTML page: zoomable flame graph, search, threads, top functions.
    Html,
    /// One HTML page: per source file, each sampled line's own and total share.
    Heatmap,
}

impl OutputFormat {
    /// File name extension, without the dot.
    pub fn extension(&self) -> &'static str {
        match self {
            OutputFormat::Flamegraph => "svg",
            OutputFormat::Speedscope | OutputFormat::Chrometrace => "json",
            OutputFormat::Raw => "txt",
            OutputFormat::Pprof => "pb.gz",
            OutputFormat::Gecko => "json",
            OutputFormat::Html => "html",
            OutputFormat::Heatmap => "heatmap.html",
        }
    }

    /// Whether writing this format needs [`ProfileOptions::timeline`].
    pub(crate) fn needs_timeline(&self) -> bool {
        matches!(
            self,
            OutputFormat::Speedscope | OutputFormat::Chrometrace | OutputFormat::Gecko
        )
    }

    /// Write `profile` in this format. `title` (usually the profiled command
    /// line) heads the flame graph and names the speedscope file.
    pub fn write(
        &self,
        profile: &Profile,
        out: &mut dyn Write,
        title: &str,
    ) -> Result<(), OutputError> {
        if self.needs_timeline() && !profile.keeps_timeline() {
            return Err(OutputError::NoTimeline(self.name()));
        }
        let mut out = std::io::BufWriter::new(out);
        match self {
            OutputFormat::Flamegraph => collapsed::write_flamegraph(profile, &mut out, title)?,
            OutputFormat::Raw => collapsed::write_raw(profile, &mut out)?,
            OutputFormat::Speedscope => speedscope::write(profile, &mut out, title)?,
            OutputFormat::Chrometrace => chrometrace::write(profile, &mut out, title)?,
            OutputFormat::Pprof => pprof::write(profile, &mut out, title)?,
            OutputFormat::Gecko => gecko::write(profile, &mut out, title)?,
            OutputFormat::Html => html::write(profile, &mut out, title)?,
            OutputFormat::Heatmap => heatmap::write(profile, &mut out, title)?,
        }
        out.flush()?;
        Ok(())
    }

    fn name(&self) -> &'static str {
        match self {
            OutputFormat::Flamegraph => "flamegraph",
            OutputFormat::Speedscope => "speedscope",
            OutputFormat::Chrometrace => "chrometrace",
            OutputFormat::Raw => "raw",
            OutputFormat::Pprof => "pprof",
            OutputFormat::Gecko => "gecko",
            OutputFormat::Html => "html",
            OutputFormat::Heatmap => "heatmap",
        }
    }
}

#[derive(Debug, Error)]
pub enum OutputError {
    /// The cause alone: the caller names the path.
    #[error("{0}")]
    Io(std::io::Error),
    #[error("the {0} format needs the sample timeline, which this profile did not keep")]
    NoTimeline(&'static str),
}

impl From<std::io::Error> for OutputError {
    fn from(e: std::io::Error) -> Self {
        OutputError::Io(e)
    }
}

/// The version string exporters record, so a file says what wrote it.
const EXPORTER: &str = concat!("pyinspect@", env!("CARGO_PKG_VERSION"));
