//! `_Py_DebugOffsets` (3.13+): the interpreter's own description of its layout.
