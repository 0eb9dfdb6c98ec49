//! Decoding of Python string payloads copied out of the target.
