//! Merging a native stack with the Python stack of the same thread: each
//! eval-loop C frame is replaced by the Python frames it runs.

use super::frame::NativeFrame;

/// A Python frame with what merging needs to know about it.
#[derive(Debug, Clone, PartialEq)]
pub struct PyFrameForMerge<F> {
    pub(crate) frame: F,
    /// The first (outermost) Python frame run by one eval-loop C call: every
    /// frame up to 3.10, `is_entry` on 3.11, the frame after a shim on 3.12+.
    /// The outermost frame is treated as one whatever this says.
    pub(crate) is_entry: bool,
    /// The frame's address in the target (`_PyInterpreterFrame`), matched
    /// against the anchors' frames.
    pub(crate) addr: u64,
}

/// How one sample's native and Python frames were put together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MergeMethod {
    /// Each eval-loop call's state on the C stack (a `_PyCFrame` on 3.11,
    /// the entry shim `_PyInterpreterFrame` on 3.12+) lies inside exactly one
    /// C frame's `[sp, cfa)`: that frame runs those Python frames. Needs no
    /// symbols.
    Address,
    /// Eval-loop C frames recognised by name (`_PyEval_EvalFrameDefault`),
    /// one per group of Python frames: 2.7–3.10, or when addresses could not
    /// decide.
    Name,
    /// No Python frames: the native stack alone.
    NativeOnly,
    /// Neither matched: native frames inner to the first eval-loop frame,
    /// then all the Python frames.
    Fallback,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Merged<F> {
    Python(F),
    Native(NativeFrame),
    /// An eval-loop C frame replaced by the Python frames after it: only the
    /// calls inlined into it at that point (`_PyObject_VectorcallTstate`)
    /// are shown, with `--native-all`.
    EvalInlined(NativeFrame),
}

/// The name without a compiler suffix (`.cold`, `.isra.0`, `.constprop.0`).
fn base_name(function: &str) -> &str {
    match function.find('.') {
        Some(i) if i > 0 => &function[..i],
        _ => function,
    }
}

/// The eval loop: one C frame that runs Python frames.
pub fn is_eval_frame(function: &str) -> bool {
    matches!(
        base_name(function),
        "_PyEval_EvalFrameDefault" | "PyEval_EvalFrameEx"
    )
}

/// The interpreter itself: libpython, or an executable with it linked in.
pub fn is_python_module(module: &str) -> bool {
    module.starts_with("libpython") || (module.starts_with("python") && !module.contains(".so"))
}

/// Interpreter frames a reader can act on: sleeping, builtins that call back
/// into Python, lock waits, the GIL, GC, I/O and select.
const KEEP_PREFIXES: &[&str] = &[
    "time_",
    "pysleep",
    "builtin_",
    "list_sort",
    "acquire_timed",
    "lock_PyThread_acquire_lock",
    "rlock_acquire",
    "PyThread_acquire_lock",
    "_PyMutex_Lock",
    "_PySemaphore_",
    "_PyParkingLot_",
    "PyCOND_",
    "take_gil",
    "drop_gil",
    "gc_",
    "_PyGC_",
    "select_",
    "poll_",
    "epoll_",
    "devpoll_",
    "sock_",
    "os_",
    "_io_",
    "signal_",
    "sys_",
    "PyImport_",
    "PyGILState_",
];

/// Interpreter call machinery: how the eval loop reaches a callee.
const HIDE_EXACT: &[&str] = &[
    "call_function",
    "do_call_core",
    "fast_function",
    "function_code_fastcall",
    // 2.7 and 3.6: calling a function object or a bound method, `f(*args)`.
    "function_call",
    "instancemethod_call",
    "ext_do_call",
    // 3.7+: PyObject_CallFunctionObjArgs and PyObject_CallMethod* internals.
    "object_vacall",
    "callmethod",
    "call_function_tail",
    "methoddescr_call",
    "wrapperdescr_call",
    "classmethoddescr_call",
    "type_call",
    "wrapper_call",
    "method_call",
    "cfunction_call",
    "cfunction_call_varargs",
    "partial_call",
    "thread_run",
    "t_bootstrap",
    "pythread_wrapper",
    "main",
    "Py_BytesMain",
    "Py_RunMain",
    "Py_Main",
    "run_mod",
    "run_eval_code_obj",
    "pyrun_file",
    "pyrun_simple_file",
];

const HIDE_PREFIXES: &[&str] = &[
    "_Py",
    "PyEval_",
    "PyObject_Call",
    "PyObject_Vectorcall",
    "PyVectorcall_",
    "PyCFunction_Call",
    "PyRun_",
    "pymain_",
    "slot_tp_",
];

/// Frames to hide unless `--native-all`: the call machinery between the eval
/// loop and what it calls. Outside the interpreter only Cython's call helpers.
pub fn is_interpreter_plumbing(function: &str, module_is_libpython: bool) -> bool {
    let f = base_name(function);
    if !module_is_libpython {
        return [
            "__Pyx_PyObject_Call",
            "__Pyx__PyObject_Call",
            "__Pyx_PyFunction_FastCall",
            "__Pyx_PyCFunction_FastCall",
        ]
        .iter()
        .any(|p| f.starts_with(p));
    }
    if KEEP_PREFIXES.iter().any(|p| f.starts_with(p)) {
        return false;
    }
    HIDE_EXACT.contains(&f)
        || HIDE_PREFIXES.iter().any(|p| f.starts_with(p))
        || f.contains("vectorcall")
        || f.contains("Vectorcall")
}

/// Thread and process entry frames at the outer end of every stack.
pub(crate) fn is_start_frame(function: &str) -> bool {
    matches!(
        base_name(function),
        "_start"
            | "__libc_start_main"
            | "__libc_start_call_main"
            | "start_thread"
            | "clone"
            | "clone3"
            | "__clone"
            | "__clone3"
            | "__clone_internal"
    )
}

fn shown<F>(f: &NativeFrame, keep_all: bool) -> Option<Merged<F>> {
    let hide = !keep_all
        && f.function
            .as_deref()
            .is_some_and(|n| is_interpreter_plumbing(n, is_python_module(&f.module)));
    (!hide).then(|| Merged::Native(f.clone()))
}

/// Merge innermost-first native and Python frames into one innermost-first
/// stack. Returns the reason when the two could not be matched; the result
/// then holds the native frames inner to the innermost eval-loop frame and
/// all the Python frames, so the sample is never lost.
pub fn merge<F: Clone>(
    native: &[NativeFrame],
    python: &[PyFrameForMerge<F>],
    anchors: &[(u64, u64)],
    keep_all: bool,
) -> (Vec<Merged<F>>, MergeMethod, Option<String>) {
    if python.is_empty() {
        let out = native.iter().filter_map(|f| shown(f, keep_all)).collect();
        return (
            drop_outer_start(out, keep_all),
            MergeMethod::NativeOnly,
            None,
        );
    }
    if let Some(out) = merge_by_address(native, python, anchors, keep_all) {
        return (out, MergeMethod::Address, None);
    }
    let (out, why) = merge_by_name(native, python, keep_all);
    let method = if why.is_some() {
        MergeMethod::Fallback
    } else {
        MergeMethod::Name
    };
    (out, method, why)
}

/// Python frames (innermost first) cut into one range per eval-loop call,
/// innermost call first: each range ends at an entry frame.
fn groups<F>(python: &[PyFrameForMerge<F>]) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let mut start = 0;
    for (i, p) in python.iter().enumerate() {
        if p.is_entry || i + 1 == python.len() {
            out.push(start..i + 1);
            start = i + 1;
        }
    }
    out
}

/// The merge by stack address (3.11+): None unless every group of Python
/// frames has an anchor inside a C frame, inner groups in inner C frames.
fn merge_by_address<F: Clone>(
    native: &[NativeFrame],
    python: &[PyFrameForMerge<F>],
    anchors: &[(u64, u64)],
    keep_all: bool,
) -> Option<Vec<Merged<F>>> {
    if anchors.is_empty() {
        return None;
    }
    let groups = groups(python);
    // The C frame of each group, innermost group first.
    let mut at: Vec<usize> = Vec::with_capacity(groups.len());
    for g in &groups {
        let frames = &python[g.clone()];
        let n = anchors
            .iter()
            .filter(|(_, fa)| frames.iter().any(|p| p.addr == *fa))
            .find_map(|(sa, _)| {
                native
                    .iter()
                    .position(|f| f.cfa > f.sp && f.sp <= *sa && *sa < f.cfa)
            })?;
        if at.last().is_some_and(|&prev| n <= prev) {
            return None;
        }
        at.push(n);
    }
    let mut out: Vec<Merged<F>> = Vec::with_capacity(native.len() + python.len());
    let mut next = 0;
    for (i, f) in native.iter().enumerate() {
        if at.get(next) == Some(&i) {
            if keep_all {
                out.push(Merged::EvalInlined(f.clone()));
            }
            out.extend(
                python[groups[next].clone()]
                    .iter()
                    .map(|p| Merged::Python(p.frame.clone())),
            );
            next += 1;
        } else if let Some(m) = shown(f, keep_all) {
            out.push(m);
        }
    }
    Some(drop_outer_start(out, keep_all))
}

/// The merge by eval-loop function names.
fn merge_by_name<F: Clone>(
    native: &[NativeFrame],
    python: &[PyFrameForMerge<F>],
    keep_all: bool,
) -> (Vec<Merged<F>>, Option<String>) {
    let is_eval = |f: &NativeFrame| f.function.as_deref().is_some_and(is_eval_frame);
    let evals = native.iter().filter(|f| is_eval(f)).count();
    // Python frames grouped per eval-loop call, outermost group first, each
    // group outer to inner.
    let mut groups: Vec<Vec<&F>> = Vec::new();
    for (i, p) in python.iter().rev().enumerate() {
        if i == 0 || p.is_entry {
            groups.push(Vec::new());
        }
        if let Some(g) = groups.last_mut() {
            g.push(&p.frame);
        }
    }
    // One eval frame more than entries: the innermost eval call has not
    // pushed its frame yet, or has just popped it (a function returning).
    let matched = evals == groups.len() || (evals == groups.len() + 1 && !groups.is_empty());
    if !matched {
        let inner_end = native.iter().position(is_eval).unwrap_or(native.len());
        let mut out: Vec<Merged<F>> = native[..inner_end]
            .iter()
            .filter_map(|f| shown(f, keep_all))
            .collect();
        out.extend(python.iter().map(|p| Merged::Python(p.frame.clone())));
        if evals == 0 && python.is_empty() {
            return (drop_outer_start(out, keep_all), None);
        }
        let reason = format!(
            "{evals} eval-loop frames for {} Python entry frames",
            groups.len()
        );
        return (drop_outer_start(out, keep_all), Some(reason));
    }
    let mut outer_first: Vec<Merged<F>> = Vec::with_capacity(native.len() + python.len());
    let mut next_group = groups.into_iter();
    for f in native.iter().rev() {
        if is_eval(f) {
            if let Some(g) = next_group.next() {
                outer_first.extend(g.into_iter().map(|p| Merged::Python(p.clone())));
                if keep_all {
                    outer_first.push(Merged::EvalInlined(f.clone()));
                }
            }
        } else if let Some(m) = shown(f, keep_all) {
            outer_first.push(m);
        }
    }
    outer_first.reverse();
    (drop_outer_start(outer_first, keep_all), None)
}

/// Drop `_start`, `__libc_start_main`, `start_thread`, `clone3`... at the
/// outer end (innermost-first input), unless everything is wanted. Unnamed
/// interpreter frames there go too: outside the outermost Python frame the
/// interpreter only starts threads and the main program (`thread_run`,
/// `pymain_*`), which a stripped interpreter such as Debian's static
/// python3.11 cannot name (its `.dynsym` has only the exported API); and
/// unnamed C-runtime frames there are the thread or process start.
fn drop_outer_start<F>(mut frames: Vec<Merged<F>>, keep_all: bool) -> Vec<Merged<F>> {
    if keep_all {
        return frames;
    }
    while let Some(Merged::Native(f)) = frames.last() {
        // A stripped C library (sid's libc without its -dbg files) cannot
        // name its thread and process start either.
        let unnamed_start =
            f.function.is_none() && (is_python_module(&f.module) || is_runtime_module(&f.module));
        if unnamed_start || f.function.as_deref().is_some_and(is_start_frame) {
            frames.pop();
        } else {
            break;
        }
    }
    frames
}

/// Modules of the C runtime, which every stack passes through.
pub(crate) fn is_runtime_module(module: &str) -> bool {
    [
        "libc.so",
        "libc-",
        "libpthread",
        "ld-linux",
        "libdl",
        "librt",
        "libm.so",
        "[vdso]",
    ]
    .iter()
    .any(|p| module.starts_with(p))
}

/// The native entry point a thread is inside, e.g. `cuStreamSynchronize
/// (libcuda.so.1)`: the outermost exported function of the innermost library
/// on the (innermost-first) stack that is neither the C runtime nor the
/// interpreter; failing that, the C runtime's own entry (`read (libc.so.6)`)
/// when the thread is inside it. Named by its symbol (see
/// [`native_entry_frame`] for the frame).
pub fn native_entry(frames: &[NativeFrame]) -> Option<String> {
    let f = &frames[native_entry_frame(frames)?];
    Some(format!("{} ({})", f.name(), f.module))
}

/// The index in `frames` of the [`native_entry`] frame, which has a symbol.
pub(crate) fn native_entry_frame(frames: &[NativeFrame]) -> Option<usize> {
    let entry_of = |start: usize| {
        let module = &frames[start].module;
        frames[start..]
            .iter()
            .enumerate()
            .take_while(|(_, f)| &f.module == module)
            .filter(|(_, f)| f.exported && !f.inlined && f.function.is_some())
            .last()
            .map(|(i, _)| start + i)
    };
    let library = frames.iter().position(|f| {
        !is_runtime_module(&f.module) && !is_python_module(&f.module) && !f.module.starts_with('[')
    });
    library.and_then(entry_of).or_else(|| {
        frames
            .first()
            .filter(|f| is_runtime_module(&f.module))
            .and_then(|_| entry_of(0))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::native_unwind::test_frame as nf;
    const PY: &str = "libpython3.12.so.1.0";

    fn py(name: &'static str, is_entry: bool) -> PyFrameForMerge<&'static str> {
        PyFrameForMerge {
            frame: name,
            is_entry,
            addr: 0,
        }
    }

    fn names(m: &[Merged<&'static str>]) -> Vec<String> {
        m.iter()
            .map(|x| match x {
                Merged::Python(p) => format!("py:{p}"),
                Merged::Native(n) => n.name(),
                Merged::EvalInlined(n) => format!("inlined-in:{}", n.name()),
            })
            .collect()
    }

    /// Innermost-first native stack of a main thread in `read` called from C
    /// code called from Python code.
    fn thread_stack(evals: usize) -> Vec<NativeFrame> {
        let mut v = vec![
            nf("read", "libc.so.6"),
            nf("", "libfixture.so"),
            nf("fixture_block", "libfixture.so"),
            nf("ffi_call_unix64", "libffi.so.8"),
            nf("_PyObject_MakeTpCall", PY),
            nf("PyObject_Vectorcall", PY),
        ];
        for i in 0..evals {
            v.push(nf("_PyEval_EvalFrameDefault", PY));
            if i + 1 < evals {
                v.push(nf("_PyFunction_Vectorcall", PY));
            }
        }
        v.extend([
            nf("PyEval_EvalCode", PY),
            nf("run_mod", PY),
            nf("Py_BytesMain", PY),
            nf("__libc_start_call_main", "libc.so.6"),
            nf("__libc_start_main", "libc.so.6"),
            nf("_start", "python3.12"),
        ]);
        v
    }

    #[test]
    fn one_eval_frame_per_python_frame_up_to_3_10() {
        let native = thread_stack(3);
        let python = [py("c", true), py("b", true), py("<module>", true)];
        let (m, _, why) = merge(&native, &python, &[], false);
        assert_eq!(why, None);
        assert_eq!(
            names(&m),
            [
                "read",
                "libfixture.so+0x10",
                "fixture_block",
                "ffi_call_unix64",
                "py:c",
                "py:b",
                "py:<module>"
            ]
        );
    }

    #[test]
    fn is_entry_groups_frames_on_3_11() {
        // One C eval call runs c, b and <module>.
        let native = thread_stack(1);
        let python = [py("c", false), py("b", false), py("<module>", true)];
        let (m, _, why) = merge(&native, &python, &[], false);
        assert_eq!(why, None);
        assert_eq!(
            names(&m)[3..],
            ["ffi_call_unix64", "py:c", "py:b", "py:<module>"]
        );
    }

    #[test]
    fn native_python_native_sandwich_with_shim_entries() {
        // 3.12: top -> mid -> sorted(key=leaf) -> leaf -> zlib.compress.
        // The reader marks `leaf` (after a shim) and `<module>` as entries.
        let native = vec![
            nf("deflate", "libz.so.1"),
            nf("zlib_compress_impl", "zlib.cpython-312-x86_64-linux-gnu.so"),
            nf("cfunction_vectorcall_FASTCALL_KEYWORDS", PY),
            nf("_PyEval_EvalFrameDefault", PY),
            nf("_PyFunction_Vectorcall", PY),
            nf("list_sort_impl", PY),
            nf("builtin_sorted", PY),
            nf("_PyEval_EvalFrameDefault", PY),
            nf("PyEval_EvalCode", PY),
            nf("__libc_start_main", "libc.so.6"),
        ];
        let python = [
            py("leaf", true),
            py("mid", false),
            py("top", false),
            py("<module>", true),
        ];
        let (m, _, why) = merge(&native, &python, &[], false);
        assert_eq!(why, None);
        assert_eq!(
            names(&m),
            [
                "deflate",
                "zlib_compress_impl",
                "py:leaf",
                "list_sort_impl",
                "builtin_sorted",
                "py:mid",
                "py:top",
                "py:<module>"
            ]
        );
        // --native-all keeps the machinery and the eval frames' neighbours.
        let (all, _, _) = merge(&native, &python, &[], true);
        let all = names(&all);
        assert!(all.contains(&"_PyFunction_Vectorcall".to_string()));
        assert_eq!(all.last().map(String::as_str), Some("__libc_start_main"));
    }

    #[test]
    fn mismatch_falls_back_without_losing_the_sample() {
        let native = thread_stack(3);
        let python = [py("b", true), py("<module>", true)];
        // 3 eval frames for 2 entries is the "returning" case: accepted.
        let (_, _, why) = merge(&native, &python, &[], false);
        assert_eq!(why, None);
        let python = [py("<module>", true)];
        let (m, _, why) = merge(&native, &python, &[], false);
        assert_eq!(
            why.as_deref(),
            Some("3 eval-loop frames for 1 Python entry frames")
        );
        assert_eq!(
            names(&m),
            [
                "read",
                "libfixture.so+0x10",
                "fixture_block",
                "ffi_call_unix64",
                "py:<module>"
            ]
        );
        // The unwind stopped early: no eval frame at all.
        let native = vec![nf("dgemm_kernel", "libopenblas.so")];
        let (m, _, why) = merge(&native, &[py("f", true), py("<module>", true)], &[], false);
        assert!(why.is_some());
        assert_eq!(names(&m), ["dgemm_kernel", "py:f", "py:<module>"]);
    }

    #[test]
    fn stack_addresses_merge_unnamed_eval_loops() {
        // Debian sid's stripped, tail-calling 3.14: the eval loop's C frames
        // have no names; its entry shims sit in two of them.
        let exe = "python3.14";
        let mut native = vec![
            nf("read", "libc.so.6"),
            nf("fixture_block", "libfixture.so"),
            nf("", exe), // the eval loop of the inner call
            nf("", exe),
            nf("PyObject_Vectorcall", exe),
            nf("", exe), // the eval loop of the outer call
            nf("", exe),
            nf("__libc_start_main", "libc.so.6"),
        ];
        for (i, f) in native.iter_mut().enumerate() {
            f.sp = 0x1000 + 0x100 * i as u64;
            f.cfa = f.sp + 0x100;
        }
        let frame = |name, is_entry, addr| PyFrameForMerge {
            frame: name,
            is_entry,
            addr,
        };
        let python = [
            frame("leaf", false, 0xa1),
            frame("mid", true, 0xa2),
            frame("<module>", true, 0xa3),
        ];
        // (shim on the stack, the entry frame it started)
        let anchors = [(0x1208, 0xa2), (0x1510, 0xa3)];
        let (m, how, why) = merge(&native, &python, &anchors, false);
        assert_eq!((how, why), (MergeMethod::Address, None));
        assert_eq!(
            names(&m),
            [
                "read",
                "fixture_block",
                "py:leaf",
                "py:mid",
                "python3.14+0x10",
                "py:<module>"
            ]
        );
        // An anchor outside every frame (the unwind stopped early): by
        // names, which a stripped build cannot give, so it falls back.
        let anchors = [(0x1208, 0xa2), (0x9000, 0xa3)];
        let (_, how, why) = merge(&native, &python, &anchors, false);
        assert_eq!(how, MergeMethod::Fallback);
        assert!(why.is_some());
        // Inner groups must sit in inner C frames.
        let anchors = [(0x1510, 0xa2), (0x1208, 0xa3)];
        let (_, how, _) = merge(&native, &python, &anchors, false);
        assert_ne!(how, MergeMethod::Address);
    }

    #[test]
    fn returning_function_leaves_one_eval_frame_empty() {
        // The innermost eval call has popped its Python frame already.
        let native = thread_stack(2);
        let (m, _, why) = merge(&native, &[py("<module>", true)], &[], false);
        assert_eq!(why, None);
        assert_eq!(names(&m).last().map(String::as_str), Some("py:<module>"));
        assert_eq!(names(&m).len(), 5);
    }

    #[test]
    fn unnamed_interpreter_frames_outside_python_are_dropped() {
        // Debian's static, stripped python3.11: thread_run and
        // pythread_wrapper have no symbol; builtin_sorted has none either.
        let exe = "python3.11";
        let native = vec![
            nf("read", "libc.so.6"),
            nf("", exe),
            nf("_PyEval_EvalFrameDefault", exe),
            nf("", exe),
            nf("_PyEval_EvalFrameDefault", exe),
            nf("", exe),
            nf("", exe),
            nf("start_thread", "libc.so.6"),
        ];
        let python = [py("key", true), py("caller", true)];
        let (m, _, why) = merge(&native, &python, &[], false);
        assert_eq!(why, None);
        assert_eq!(
            names(&m),
            [
                "read",
                "python3.11+0x10",
                "py:key",
                "python3.11+0x10",
                "py:caller"
            ]
        );
        // --native-all: every native frame; the eval-loop ones as the calls
        // inlined into them, inner to the Python frames they ran.
        let (all, _, _) = merge(&native, &python, &[], true);
        assert_eq!(all.len(), 10);
        assert_eq!(
            names(&all)[2..4],
            ["inlined-in:_PyEval_EvalFrameDefault", "py:key"]
        );
    }

    #[test]
    fn plumbing_classification() {
        assert!(is_eval_frame("_PyEval_EvalFrameDefault"));
        assert!(is_eval_frame("_PyEval_EvalFrameDefault.cold"));
        assert!(is_eval_frame("PyEval_EvalFrameEx"));
        assert!(!is_eval_frame("PyEval_EvalCode"));
        for hidden in [
            "_PyFunction_Vectorcall",
            "method_vectorcall_O",
            "_PyObject_MakeTpCall",
            "PyObject_Call",
            "slot_tp_call",
            "call_function",
            "pymain_run_python.constprop.0",
            "function_call",
            "instancemethod_call",
            "ext_do_call",
            "object_vacall",
        ] {
            assert!(is_interpreter_plumbing(hidden, true), "{hidden}");
        }
        for kept in [
            "time_sleep",
            "pysleep",
            "builtin_sorted",
            "list_sort_impl",
            "acquire_timed",
            "lock_PyThread_acquire_lock",
            "PyThread_acquire_lock_timed",
            "gc_collect_main",
            "take_gil",
            "select_select",
        ] {
            assert!(!is_interpreter_plumbing(kept, true), "{kept}");
        }
        assert!(!is_interpreter_plumbing("_PyFoo", false));
        assert!(is_interpreter_plumbing("__Pyx_PyObject_Call", false));
        assert!(is_python_module("python3.11") && is_python_module("libpython3.9.so.1.0"));
        assert!(!is_python_module("_ssl.cpython-312-x86_64-linux-gnu.so"));
    }

    #[test]
    fn native_entry_is_outermost_export_of_innermost_library() {
        let exported = |f: &str, m: &str| {
            let mut x = nf(f, m);
            x.exported = true;
            x
        };
        let frames = vec![
            exported("ioctl", "libc.so.6"),
            nf("", "libcuda.so.1"),
            exported("cuInternal", "libcuda.so.1"),
            exported("cuStreamSynchronize", "libcuda.so.1"),
            exported("cudaStreamSynchronize", "libcudart.so.12"),
            nf("_PyEval_EvalFrameDefault", PY),
        ];
        assert_eq!(
            native_entry(&frames).as_deref(),
            Some("cuStreamSynchronize (libcuda.so.1)")
        );
        let only_libc = vec![
            exported("clock_nanosleep", "libc.so.6"),
            nf("time_sleep", PY),
        ];
        assert_eq!(
            native_entry(&only_libc).as_deref(),
            Some("clock_nanosleep (libc.so.6)")
        );
        assert_eq!(native_entry(&[nf("time_sleep", PY)]), None);
    }
}
