//! greenlet's own objects (gevent's and eventlet's coroutines), as data.
//!
//! greenlet keeps a greenlet's state in a C++ object (`Greenlet`, with its
//! subclasses `UserGreenlet` and `MainGreenlet`) that the Python object
//! (`PyGreenlet`) points at; its layout differs by greenlet release and by
//! the Python it was compiled for. One table per (greenlet release, Python
//! minor), each number computed by compiling
//! `python_fixtures/greenlet_layout_probe.cpp` against that release's own
//! headers (its source distribution from PyPI) and that interpreter's
//! include dir: see `python_fixtures/greenlet_layout_probe.sh`, which
//! prints these tables. A release not listed here is named as such.
//!
//! Beside greenlet's offsets, the few CPython facts the greenlet reader
//! needs and the general layout does not carry yet (the collector's
//! generation lists, `PyThreadState.exc_state`, `PyFrameObject.f_frame`,
//! `PyFunctionObject.func_qualname`, `PyTypeObject.tp_base`), from the same
//! probe (`greenlet_gc_probe.c`, compiled against the interpreter's
//! internal headers).

/// Offsets inside greenlet's objects (x86-64), for one greenlet release
/// built for one Python minor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GreenletLayout {
    /// `greenlet.__version__`.
    pub release: &'static str,
    pub python: (u8, u8),
    /// `PyGreenlet.pimpl`: the C++ `Greenlet*`.
    pub pimpl: u64,
    /// `Greenlet::exception_state.exc_info`: the `_PyErr_StackItem*` the
    /// greenlet's thread state had when it switched away.
    pub exc_info: u64,
    /// `Greenlet::stack_state._stack_start`: non-NULL while the greenlet is
    /// active (running, or suspended mid-run); 1 for a main greenlet.
    pub stack_start: u64,
    /// `Greenlet::stack_state.stack_stop`: NULL until started; -1 for a
    /// main greenlet.
    pub stack_stop: u64,
    /// `Greenlet::python_state._top_frame`: the suspended greenlet's
    /// innermost `PyFrameObject*` (NULL while it runs).
    pub top_frame: u64,
    /// `UserGreenlet::_main_greenlet`: the main greenlet of its thread.
    pub user_main_greenlet: u64,
    /// `UserGreenlet::_run_callable`.
    pub user_run_callable: u64,
    /// `UserGreenlet::_parent`.
    pub user_parent: u64,
    /// `MainGreenlet::_thread_state`: greenlet's `ThreadState*` (NULL once
    /// the thread is gone).
    pub main_thread_state: u64,
    /// `ThreadState::current_greenlet`: the greenlet running on that thread.
    pub thread_state_current: u64,
}

/// CPython facts the greenlet reader needs, per Python minor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GreenletPython {
    pub python: (u8, u8),
    /// The collector's state is in `_PyRuntime` (3.7, 3.8), not in each
    /// interpreter: the offsets below are from there.
    pub gc_in_runtime: bool,
    /// `PyInterpreterState.gc.generations` (`_PyRuntimeState`'s with
    /// `gc_in_runtime`): the collector's lists.
    pub gc_generations: u64,
    /// `NUM_GENERATIONS`.
    pub gc_generation_count: u64,
    /// `sizeof(struct gc_generation)`.
    pub gc_generation_size: u64,
    /// `PyInterpreterState.gc.permanent_generation` (`gc.freeze()`).
    pub gc_permanent: u64,
    /// `sizeof(PyGC_Head)`: an object follows its list node.
    pub gc_head_size: u64,
    /// `PyThreadState.exc_state`: where a thread's exception-state chain ends.
    pub tstate_exc_state: u64,
    /// `_PyErr_StackItem.previous_item`.
    pub err_stackitem_previous: u64,
    /// `PyFrameObject.f_frame` (3.11+): the frame object's interpreter frame.
    pub frameobject_f_frame: Option<u64>,
    /// `PyFunctionObject.func_qualname`.
    pub func_qualname: u64,
    /// `PyMethodObject.im_func`.
    pub method_func: u64,
    /// `PyMethodObject.im_self`: a bound method's object.
    pub method_self: u64,
    /// `PyCFunctionObject.m_self`: a built-in method's object (a
    /// greenlet's `switch`, bound).
    pub cfunction_self: u64,
    /// `PyTypeObject.tp_base`.
    pub tp_base: u64,
}

/// greenlet 3.5.6 on 3.11–3.13 (one layout: the fields greenlet saves are
/// the same size there).
const fn g356_311(python: (u8, u8)) -> GreenletLayout {
    GreenletLayout {
        release: "3.5.6",
        python,
        pimpl: 32,
        exc_info: 16,
        stack_start: 56,
        stack_stop: 64,
        top_frame: 104,
        user_main_greenlet: 168,
        user_run_callable: 176,
        user_parent: 184,
        main_thread_state: 176,
        thread_state_current: 8,
    }
}

/// greenlet 3.1.1 on 3.7 and 3.8, and 3.2.5 on 3.9 (one layout).
const fn g311_39(python: (u8, u8), release: &'static str) -> GreenletLayout {
    GreenletLayout {
        release,
        python,
        pimpl: 32,
        exc_info: 16,
        stack_start: 72,
        stack_stop: 80,
        top_frame: 120,
        user_main_greenlet: 136,
        user_run_callable: 144,
        user_parent: 152,
        main_thread_state: 144,
        thread_state_current: 8,
    }
}

/// greenlet 3.3.2 (Debian sid's) on 3.14 and 3.15 (one layout).
const fn g332_314(python: (u8, u8)) -> GreenletLayout {
    GreenletLayout {
        release: "3.3.2",
        python,
        pimpl: 32,
        exc_info: 16,
        stack_start: 56,
        stack_stop: 64,
        top_frame: 104,
        user_main_greenlet: 176,
        user_run_callable: 184,
        user_parent: 192,
        main_thread_state: 184,
        thread_state_current: 8,
    }
}

pub(crate) static GREENLET_LAYOUTS: &[GreenletLayout] = &[
    g311_39((3, 7), "3.1.1"),
    g311_39((3, 8), "3.1.1"),
    g311_39((3, 9), "3.2.5"),
    GreenletLayout {
        release: "3.5.6",
        python: (3, 10),
        pimpl: 32,
        exc_info: 16,
        stack_start: 72,
        stack_stop: 80,
        top_frame: 120,
        user_main_greenlet: 152,
        user_run_callable: 160,
        user_parent: 168,
        main_thread_state: 160,
        thread_state_current: 8,
    },
    GreenletLayout {
        release: "2.0.2",
        python: (3, 11),
        pimpl: 32,
        exc_info: 8,
        stack_start: 48,
        stack_stop: 56,
        top_frame: 96,
        user_main_greenlet: 168,
        user_run_callable: 176,
        user_parent: 184,
        main_thread_state: 168,
        thread_state_current: 8,
    },
    g356_311((3, 11)),
    g356_311((3, 12)),
    g356_311((3, 13)),
    g332_314((3, 14)),
    g332_314((3, 15)),
];

/// The facts every probed Python 3.10–3.15 shares (3.9 differs in one).
const fn python(
    python: (u8, u8),
    gc_generations: u64,
    gc_permanent: u64,
    tstate_exc_state: u64,
    err_stackitem_previous: u64,
    frameobject_f_frame: Option<u64>,
) -> GreenletPython {
    GreenletPython {
        python,
        gc_in_runtime: false,
        gc_generations,
        gc_generation_count: 3,
        gc_generation_size: 24,
        gc_permanent,
        gc_head_size: 16,
        tstate_exc_state,
        err_stackitem_previous,
        frameobject_f_frame,
        func_qualname: 40,
        method_func: 16,
        method_self: 24,
        cfunction_self: 24,
        tp_base: 256,
    }
}

pub(crate) static GREENLET_PYTHONS: &[GreenletPython] = &[
    GreenletPython {
        gc_in_runtime: true,
        gc_generation_size: 48,
        gc_head_size: 32,
        func_qualname: 104,
        ..python((3, 7), 352, 512, 112, 24, None)
    },
    GreenletPython {
        gc_in_runtime: true,
        func_qualname: 104,
        ..python((3, 8), 368, 448, 112, 24, None)
    },
    GreenletPython {
        func_qualname: 104,
        ..python((3, 9), 640, 720, 112, 24, None)
    },
    python((3, 10), 640, 720, 112, 24, None),
    python((3, 11), 672, 752, 320, 8, Some(24)),
    python((3, 12), 136, 216, 256, 8, Some(24)),
    python((3, 13), 7424, 7504, 256, 8, Some(24)),
    python((3, 14), 7432, 7504, 256, 8, Some(24)),
    python((3, 15), 7408, 7480, 288, 8, Some(24)),
];

/// The table for greenlet `release` built for Python `major.minor`.
pub fn greenlet_layout(release: &str, major: u8, minor: u8) -> Option<&'static GreenletLayout> {
    GREENLET_LAYOUTS
        .iter()
        .find(|l| l.release == release && l.python == (major, minor))
}

/// The CPython facts for `major.minor`.
pub fn greenlet_python(major: u8, minor: u8) -> Option<&'static GreenletPython> {
    GREENLET_PYTHONS.iter().find(|p| p.python == (major, minor))
}

/// Where gevent keeps the C fields pyinspect reads (gevent's classes are
/// Cython extension types, whose fields no Python-level descriptor names),
/// for one gevent release. Each number is found by
/// `python_fixtures/gevent_layout_probe.py`, which reads the running
/// interpreter's own objects and matches the values gevent reports for
/// them; `tests/greenlets.rs` checks these tables against it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GeventLayout {
    /// `gevent.__version__`.
    pub release: &'static str,
    /// `Greenlet._ident` (its `minimal_ident`, from which gevent makes the
    /// name `Greenlet-N`), past the end of greenlet's own object (the
    /// greenlet type's `tp_basicsize`): NULL until something asks for it.
    pub greenlet_ident_from_base: u64,
    /// How far before the end of a libev `timer` object (`tp_basicsize`)
    /// its `ev_timer.at` lies: the deadline, a C double on the monotonic
    /// clock (libev's `mn_now`), while the timer is started.
    pub timer_at_from_end: u64,
}

const fn gevent(release: &'static str) -> GeventLayout {
    GeventLayout {
        release,
        greenlet_ident_from_base: 96,
        timer_at_from_end: 16,
    }
}

/// The gevent releases `.ci/gevent-deps` installs (22.10.2 is also Debian
/// bookworm's python3-gevent; 25.9.1 is sid's).
pub(crate) static GEVENT_LAYOUTS: &[GeventLayout] = &[
    gevent("22.10.2"),
    gevent("24.2.1"),
    gevent("25.9.1"),
    gevent("26.9.0"),
];

/// The table for gevent `release`.
pub fn gevent_layout(release: &str) -> Option<&'static GeventLayout> {
    GEVENT_LAYOUTS.iter().find(|l| l.release == release)
}
