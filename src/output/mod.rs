//! Renderers built on the one stack model.
