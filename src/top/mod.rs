//! `top`: a live view of where a Python process spends its time.
//!
//! The sampler runs on its own thread and sends ticks over a bounded
//! channel; the UI thread folds them into an [`aggregate::Aggregator`] as
//! they arrive and redraws once a second (or on a key), so drawing costs
//! nothing per sample.

pub(crate) mod aggregate;
pub(crate) mod threads;
pub(crate) mod ui;
pub(crate) mod view;
