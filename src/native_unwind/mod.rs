//! Native stacks: registers, CFI unwinding, symbols, and merging with Python frames.
