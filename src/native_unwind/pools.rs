//! Threads of native thread pools (OpenMP, BLAS, rayon, onnxruntime, ...):
//! threads Python does not know, which `--native-all` shows. Their OS name
//! is often just the process's (`python3`); the function their thread
//! starts in says which pool they serve.

use super::frame::{cuda_tag, display_name, NativeFrame};

/// A pool's worker loop: the function a worker thread runs (matched on the
/// demangled name, `contains`), the library it must be in when the name
/// alone is too common (prefix of the module's file name), and the name
/// shown.
struct Pool {
    function: &'static str,
    module: Option<&'static str>,
    name: &'static str,
}

const POOLS: &[Pool] = &[
    Pool {
        function: "gomp_thread_start",
        module: None,
        name: "OpenMP worker (libgomp)",
    },
    Pool {
        function: "__kmp_launch_worker",
        module: None,
        name: "OpenMP worker (libiomp)",
    },
    Pool {
        function: "__kmp_launch_thread",
        module: None,
        name: "OpenMP worker (libiomp)",
    },
    Pool {
        function: "blas_thread_server",
        module: None,
        name: "OpenBLAS worker",
    },
    Pool {
        function: "mkl_serv_thread",
        module: None,
        name: "MKL worker",
    },
    Pool {
        function: "rml::private_worker::thread_routine",
        module: None,
        name: "TBB worker",
    },
    Pool {
        function: "rayon_core::registry::main_loop",
        module: None,
        name: "rayon worker",
    },
    Pool {
        function: "rayon_core::registry::ThreadBuilder::run",
        module: None,
        name: "rayon worker",
    },
    // The same in Rust's v0 mangling, as tokenizers' wheel has it
    // (`<rayon_core::registry::ThreadBuilder>::run`).
    Pool {
        function: "rayon_core::registry::ThreadBuilder>::run",
        module: None,
        name: "rayon worker",
    },
    Pool {
        function: "onnxruntime::concurrency::ThreadPoolTempl",
        module: None,
        name: "onnxruntime pool worker",
    },
    Pool {
        function: "Eigen::ThreadPoolTempl<tsl::",
        module: None,
        name: "XLA (TSL) pool worker",
    },
    Pool {
        function: "Eigen::ThreadPoolTempl<tensorflow::",
        module: None,
        name: "TensorFlow pool worker",
    },
    Pool {
        function: "Eigen::ThreadPoolTempl<",
        module: None,
        name: "Eigen pool worker",
    },
    Pool {
        function: "c10::ThreadPool::main_loop",
        module: None,
        name: "PyTorch pool worker (c10)",
    },
    Pool {
        function: "torch::autograd::Engine::thread_init",
        module: None,
        name: "PyTorch autograd worker",
    },
    // XNNPACK's pthreadpool, bundled into libtorch_cpu with a plain name.
    Pool {
        function: "thread_main",
        module: Some("libtorch_cpu"),
        name: "pthreadpool worker (XNNPACK)",
    },
];

/// Threads named by the library they start in, when that library's own
/// function there has no name (a stripped wheel) or none that says more:
/// the prefix of the module's file name, and the name shown.
const STARTED_IN: &[(&str, &str)] = &[
    ("libcuda.", "CUDA driver thread"),
    // onnxruntime's wheels strip their module, so its pools' worker
    // loops are bare addresses; it starts no threads but its pools'.
    ("onnxruntime_pybind11_state", "onnxruntime pool worker"),
    ("libonnxruntime", "onnxruntime pool worker"),
];

/// The pool whose worker loop the thread runs (`frames` innermost first),
/// by the outermost frame that names one; else, by [`STARTED_IN`], the
/// library its outermost frame past the thread start is in (a `std::thread`
/// trampoline in the C++ runtime skipped): a thread the CUDA driver
/// started is a "CUDA driver thread".
pub(crate) fn pool_worker(frames: &[NativeFrame]) -> Option<&'static str> {
    for f in frames.iter().rev() {
        let Some(function) = f.function.as_deref() else {
            continue;
        };
        let hit = POOLS.iter().find(|p| {
            let named = if p.module.is_some() {
                display_name(function) == p.function
            } else {
                function.contains(p.function)
            };
            named && p.module.is_none_or(|m| f.module.starts_with(m))
        });
        if let Some(p) = hit {
            return Some(p.name);
        }
    }
    let base = frames.iter().rev().find(|f| {
        let start = f
            .function
            .as_deref()
            .is_some_and(super::merge::is_start_frame);
        let trampoline = ["libstdc++", "libc++"]
            .iter()
            .any(|p| f.module.starts_with(p));
        !start && !trampoline
    })?;
    STARTED_IN
        .iter()
        .find(|(module, _)| base.module.starts_with(module))
        .map(|&(_, name)| name)
}

/// Whether a thread's OS name says nothing of its own: empty, the
/// process's name (what a thread inherits), or an interpreter's
/// (`python3.12`, which some runtimes set for every thread).
pub(crate) fn generic_thread_name(name: Option<&str>, process: Option<&str>) -> bool {
    match name {
        None => true,
        Some(n) => n.is_empty() || Some(n) == process || n.starts_with("python"),
    }
}

/// What a pool worker is doing, for the thread's header: the index of its
/// innermost named frame outside the C, C++ and Rust runtimes (`gomp_barrier_wait_end`
/// in libgomp, `Eigen::EventCount::CommitWait` rather than the
/// `std::condition_variable::wait` it sleeps in), else of the innermost
/// named frame (`syscall` in libc: a futex, most often).
pub(crate) fn waiting_frame(frames: &[NativeFrame]) -> Option<usize> {
    let named = |f: &NativeFrame| f.function.is_some();
    let runtime = |m: &str| {
        super::merge::is_runtime_module(m)
            || ["libstdc++", "libc++", "libgcc_s"]
                .iter()
                .any(|p| m.starts_with(p))
    };
    // Rust's and C++'s standard library compiled into the library itself
    // (`<std::sys::sync::condvar::futex::Condvar>::wait`).
    let standard = |f: &NativeFrame| {
        f.function.as_deref().is_some_and(|n| {
            ["std::", "<std::", "core::", "<core::"]
                .iter()
                .any(|p| n.starts_with(p))
        })
    };
    frames
        .iter()
        .position(|f| named(f) && !runtime(&f.module) && !standard(f))
        .or_else(|| frames.iter().position(named))
}

/// CUDA calls that block their caller until the GPU has finished the work
/// queued before them: the runtime API's (`libcudart`) and the driver's
/// (`libcuda`), whose per-thread-stream and versioned exports end in
/// `_ptsz`, `_ptds` or `_v2`.
const CUDA_SYNCS: &[&str] = &[
    "cudaStreamSynchronize",
    "cudaDeviceSynchronize",
    "cudaEventSynchronize",
    "cudaThreadSynchronize",
    "cuStreamSynchronize",
    "cuCtxSynchronize",
    "cuEventSynchronize",
];

/// Whether `function` (a frame's shown name) is one of [`CUDA_SYNCS`].
fn is_cuda_sync(function: &str) -> bool {
    CUDA_SYNCS.iter().any(|s| {
        function
            .strip_prefix(s)
            .is_some_and(|rest| rest.is_empty() || ["_ptsz", "_ptds", "_v2"].contains(&rest))
    })
}

/// The index of the outermost frame (of `frames`, innermost first) that is
/// a CUDA synchronisation call in a CUDA library (see
/// [`super::cuda_tag`]): the call the program made
/// (`cudaStreamSynchronize` in libcudart rather than the driver's
/// `cuStreamSynchronize` it calls), or None when the thread is not waiting
/// for the GPU. `frame` gives a frame's name and module.
pub(crate) fn cuda_sync<T>(
    frames: &[T],
    frame: impl Fn(&T) -> (Option<&str>, &str),
) -> Option<usize> {
    frames.iter().rposition(|f| {
        let (function, module) = frame(f);
        cuda_tag(module).is_some() && function.is_some_and(|n| is_cuda_sync(display_name(n)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::native_unwind::test_frame as nf;

    #[test]
    fn pools_are_named_by_their_worker_loop() {
        let gomp = [
            nf("gomp_barrier_wait_end", "libgomp.so.1"),
            nf("gomp_thread_start", "libgomp.so.1"),
            nf("start_thread", "libc.so.6"),
            nf("clone3", "libc.so.6"),
        ];
        assert_eq!(pool_worker(&gomp), Some("OpenMP worker (libgomp)"));
        assert_eq!(waiting_frame(&gomp), Some(0));
        let xnn = [
            nf("syscall", "libc.so.6"),
            nf("thread_main", "libtorch_cpu.so"),
            nf("start_thread", "libc.so.6"),
        ];
        assert_eq!(pool_worker(&xnn), Some("pthreadpool worker (XNNPACK)"));
        assert_eq!(waiting_frame(&xnn), Some(1));
        // A plain `thread_main` elsewhere names no pool.
        assert_eq!(pool_worker(&[nf("thread_main", "libfoo.so")]), None);
        let ort = [
            nf(
                "onnxruntime::concurrency::ThreadPoolTempl<onnxruntime::Env>::WorkerLoop(int)",
                "libonnxruntime.so",
            ),
            nf("start_thread", "libc.so.6"),
        ];
        assert_eq!(pool_worker(&ort), Some("onnxruntime pool worker"));
        // The PyPI wheel's stripped worker loop, started by std::thread.
        let stripped = [
            nf("std::condition_variable::wait", "libstdc++.so.6.0.30"),
            nf(
                "",
                "onnxruntime_pybind11_state.cpython-311-x86_64-linux-gnu.so",
            ),
            nf("", "libstdc++.so.6.0.30"),
            nf("start_thread", "libc.so.6"),
        ];
        assert_eq!(pool_worker(&stripped), Some("onnxruntime pool worker"));
        // An unnamed frame of another library names nothing.
        assert_eq!(
            pool_worker(&[nf("", "libfoo.so"), nf("start_thread", "libc.so.6")]),
            None
        );
        // tokenizers' rayon pool (v0-mangled Rust, main_loop inlined).
        let rayon = [
            nf("syscall", "libc.so.6"),
            nf(
                "<std::sys::sync::condvar::futex::Condvar>::wait",
                "tokenizers.abi3.so",
            ),
            nf(
                "<rayon_core::registry::WorkerThread>::wait_until_cold",
                "tokenizers.abi3.so",
            ),
            nf(
                "<rayon_core::registry::ThreadBuilder>::run",
                "tokenizers.abi3.so",
            ),
            nf(
                "<std::sys::thread::unix::Thread>::new::thread_start",
                "tokenizers.abi3.so",
            ),
            nf("start_thread", "libc.so.6"),
        ];
        assert_eq!(pool_worker(&rayon), Some("rayon worker"));
        assert_eq!(waiting_frame(&rayon), Some(2));
        // XLA's pool: the pool's wait, not the C++ runtime's it sleeps in.
        let xla = [
            nf("__futex_abstimed_wait_common", "libc.so.6"),
            nf("pthread_cond_wait", "libc.so.6"),
            nf("std::condition_variable::wait", "libstdc++.so.6.0.30"),
            nf("Eigen::EventCount::CommitWait", "libjax_common.so"),
            nf(
                "Eigen::ThreadPoolTempl<tsl::thread::EigenEnvironment>::WorkerLoop(int)",
                "libjax_common.so",
            ),
            nf("start_thread", "libc.so.6"),
        ];
        assert_eq!(pool_worker(&xla), Some("XLA (TSL) pool worker"));
        assert_eq!(waiting_frame(&xla), Some(3));
        // Only the C runtime named: its innermost frame.
        let bare = [nf("", "libfoo.so"), nf("syscall", "libc.so.6")];
        assert_eq!(waiting_frame(&bare), Some(1));
        let cuda = [
            nf("poll", "libc.so.6"),
            nf("", "libcuda.so.1"),
            nf("start_thread", "libc.so.6"),
            nf("clone3", "libc.so.6"),
        ];
        assert_eq!(pool_worker(&cuda), Some("CUDA driver thread"));
        assert!(generic_thread_name(Some("python3"), Some("python3")));
        assert!(generic_thread_name(Some("python3.12"), Some("pytest")));
        assert!(!generic_thread_name(Some("torch-worker"), Some("python3")));
    }

    /// A recorded stack of a thread in `torch.cuda.synchronize()`-like
    /// code (frames as the unwinder gives them: the driver's internals
    /// unnamed, the exports named), and look-alikes that are not.
    #[test]
    fn cuda_synchronisation_is_found_by_its_outermost_call() {
        fn name(f: &NativeFrame) -> (Option<&str>, &str) {
            (f.function.as_deref(), f.module.as_str())
        }
        let stream = [
            nf("sched_yield", "libc.so.6"),
            nf("", "libcuda.so.1"),
            nf("", "libcuda.so.1"),
            nf("cuStreamSynchronize", "libcuda.so.1"),
            nf("", "libcudart.so.12"),
            nf("cudaStreamSynchronize", "libcudart.so.12"),
            nf(
                "c10::cuda::stream_synchronize(CUstream_st*)",
                "libc10_cuda.so",
            ),
            nf(
                "at::native::_local_scalar_dense_cuda(at::Tensor const&)",
                "libtorch_cuda.so",
            ),
            nf("_PyEval_EvalFrameDefault", "libpython3.12.so.1.0"),
            nf("start_thread", "libc.so.6"),
        ];
        assert_eq!(cuda_sync(&stream, name), Some(5));
        // The driver alone (a program calling it directly), blocking in a
        // futex, and the per-thread default stream's export.
        let driver = [
            nf("syscall", "libc.so.6"),
            nf("", "libcuda.so.1"),
            nf("cuCtxSynchronize", "libcuda.so.1"),
            nf("main", "app"),
        ];
        assert_eq!(cuda_sync(&driver, name), Some(2));
        let ptsz = [nf("cudaStreamSynchronize_ptsz", "libcudart.so.13")];
        assert_eq!(cuda_sync(&ptsz, name), Some(0));
        let device = [
            nf("ioctl", "libc.so.6"),
            nf("cudaDeviceSynchronize", "libcudart.so.12"),
        ];
        assert_eq!(cuda_sync(&device, name), Some(1));
        // Not a CUDA library, not a synchronisation, or only a prefix.
        let lookalikes = [
            nf("cudaStreamSynchronize", "libmyshim.so"),
            nf("cudaLaunchKernel", "libcudart.so.12"),
            nf("cudaStreamSynchronizeAll", "libcudart.so.12"),
            nf("cuStreamQuery", "libcuda.so.1"),
        ];
        assert_eq!(cuda_sync(&lookalikes, name), None);
        assert_eq!(cuda_sync::<NativeFrame>(&[], name), None);
    }
}
