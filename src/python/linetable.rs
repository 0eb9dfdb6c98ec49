//! Line-number tables: co_lnotab (≤3.9), the 3.10 co_linetable, the 3.11+ location table.
