//! A native frame as the unwinder gives it (where it is, what names it,
//! how its caller was found) and the name it is shown by: a leaf every
//! other room of native_unwind builds on.

/// How the caller of a frame was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum UnwindMethod {
    /// DWARF call frame information (`.eh_frame`, `.debug_frame`).
    Cfi,
    /// The saved frame pointer chain (`rbp`), confirmed by the scan.
    FramePointer,
    /// The nearest stack word that is a return address just after a call.
    Scan,
}

#[derive(Debug, Clone, PartialEq)]
pub struct NativeFrame {
    /// The program counter (innermost frame) or the return address.
    pub ip: u64,
    /// Demangled function name as the symbol has it (compiler suffixes
    /// included); None when no symbol covers the address.
    pub function: Option<String>,
    /// Without a symbol: start (module-relative) of the CFI range holding
    /// the address, which names it so that one stripped function's samples
    /// aggregate.
    pub range_start: Option<u64>,
    /// Library file name, e.g. "libc.so.6"; a pseudo name ("[vdso]",
    /// "[anon]") for code outside any file.
    pub module: String,
    pub(crate) module_path: String,
    /// `ip` as an address in the module's own ELF address space (what
    /// `addr2line -e module` takes); for code outside any file, the offset
    /// in its mapping. Stable across runs.
    pub offset: u64,
    pub file: Option<String>,
    pub line: Option<u32>,
    /// A frame produced by DWARF inlining info (its caller is the next frame).
    pub inlined: bool,
    /// A function that jumped to its callee (a tail call), so that no stack
    /// frame of it is left: rebuilt from DWARF call-site records, as gdb
    /// rebuilds it (see [`NativeUnwinder::tail_calls_between`]).
    pub tail_call: bool,
    /// Some("cuda") for frames in CUDA libraries.
    pub tag: Option<&'static str>,
    /// How this frame's caller was found.
    pub how: UnwindMethod,
    /// The function is exported (a global or weak symbol in `.dynsym`).
    pub exported: bool,
    /// `ip` is a return address (every frame but the innermost): symbol and
    /// line lookups use `ip - 1`, which lies inside the call instruction.
    pub return_address: bool,
    /// The frame's stack range `[sp, cfa)`: its stack pointer, and the
    /// caller's stack pointer (0 when its caller was not found). The merge
    /// finds eval-loop calls by what lies in this range.
    pub sp: u64,
    pub cfa: u64,
}

impl NativeFrame {
    /// The function without compiler suffixes, or `module+0xSTART` when
    /// there is no symbol (START: the containing CFI range, else the
    /// frame's own offset).
    pub fn name(&self) -> String {
        match &self.function {
            Some(f) => display_name(f).to_string(),
            None => format!(
                "{}+0x{:x}",
                self.module,
                self.range_start.unwrap_or(self.offset)
            ),
        }
    }

    pub(super) fn lookup_ip(&self) -> u64 {
        if self.return_address {
            self.ip.saturating_sub(1)
        } else {
            self.ip
        }
    }
}

/// Libraries whose frames are tagged "cuda".
pub(crate) fn cuda_tag(module: &str) -> Option<&'static str> {
    const PREFIXES: &[&str] = &[
        "libcuda.",
        "libcudart",
        "libcublas",
        "libcudnn",
        "libnccl",
        "libtorch_cuda",
        "libnvrtc",
        "libcufft",
        "libcusparse",
        "libcurand",
        "libcusolver",
        "libnvToolsExt",
        "libnvJitLink",
        "libcupti",
        "libc10_cuda",
    ];
    PREFIXES
        .iter()
        .any(|p| module.starts_with(p))
        .then_some("cuda")
}

/// The name as shown: without the suffixes compilers add to clones and
/// split-off parts (`.constprop.0`, `.lto_priv.0`, `.isra.0`, `.part.0`,
/// `.cold`, Rust's `.llvm.N`), however many are stacked.
pub fn display_name(function: &str) -> &str {
    let mut n = function;
    loop {
        let before = n;
        n = n
            .strip_suffix(".cold")
            .filter(|b| !b.is_empty())
            .unwrap_or(n);
        for marker in [
            ".constprop.",
            ".lto_priv.",
            ".isra.",
            ".part.",
            ".llvm.",
            ".cold.",
        ] {
            if let Some(i) = n.rfind(marker) {
                let digits = &n[i + marker.len()..];
                if i > 0 && !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
                    n = &n[..i];
                }
            }
        }
        if n == before {
            return n;
        }
    }
}

/// A native frame for unit tests: `function` (none if empty) in `module`,
/// unwound by CFI, a return address.
#[cfg(test)]
pub(crate) fn test_frame(function: &str, module: &str) -> NativeFrame {
    NativeFrame {
        ip: 0x1000,
        function: (!function.is_empty()).then(|| function.to_string()),
        range_start: None,
        module: module.to_string(),
        module_path: format!("/lib/{module}"),
        offset: 0x10,
        file: None,
        line: None,
        inlined: false,
        tail_call: false,
        tag: None,
        how: UnwindMethod::Cfi,
        exported: false,
        return_address: true,
        sp: 0,
        cfa: 0,
    }
}
