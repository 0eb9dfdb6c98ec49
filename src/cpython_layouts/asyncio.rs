//! Where asyncio keeps its tasks, as data: one table per minor version.
//!
//! `TaskObj` and `FutureObj` are defined in `Modules/_asynciomodule.c`, not
//! in a header, so the layout probe cannot compile against them. Instead
//! `tests/asyncio.rs` runs `python_fixtures/asyncio_probe.py` under every
//! interpreter of the matrix: it builds tasks, futures, coroutines, timer
//! handles and deques whose members it knows, finds those members' addresses
//! in the objects' raw bytes, and the test checks every number here against
//! what it found. 3.14+ also describe part of `TaskObj` and the per-thread
//! task lists in the `_asyncio` module's own `AsyncioDebug` section; the
//! reader checks the table against it and takes the thread and interpreter
//! offsets (which depend on the build) from it.
//!
//! All offsets are byte offsets from the start of the named C struct (x86-64).

/// A flag: `mask` of the byte at `offset` (a C int holding 0/1, or a bit field).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flag {
    pub offset: u64,
    pub mask: u8,
}

/// Where a generator or coroutine object keeps its frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GenFrame {
    /// `gi_frame`: a pointer to a `PyFrameObject` (NULL once finished), ≤3.10.
    Pointer(u64),
    /// `gi_iframe`: the `_PyInterpreterFrame` is embedded at this offset (3.11+).
    Embedded(u64),
}

/// How a suspended frame records the top of its value stack, which holds
/// the object it awaits (`yield from`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StackTop {
    /// A pointer just past the top item (`f_stacktop` ≤3.9, NULL while
    /// running; `stackpointer` 3.14+, a tagged `_PyStackRef`); the awaited
    /// object is `below` items under it (3.15 keeps the sent value on top).
    Pointer { at: u64, below: u64 },
    /// `f_valuestack` (a pointer) and `f_stackdepth` (an int), 3.10.
    BaseDepth { base: u64, depth: u64 },
    /// `stacktop` (an int): items counted from the first local slot (3.11–3.13).
    LocalsIndex(u64),
}

/// `gi_frame_state`: a signed byte; the coroutine finished when it is at
/// least `finished_from` (`FRAME_COMPLETED`, or 3.15's `FRAME_CLEARED`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameState {
    pub offset: u64,
    pub finished_from: i8,
}

/// The 3.14+ parts of `TaskObj` that `_AsyncioDebug` also describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AwaitedBy {
    /// `task_awaited_by`: one awaiter, or a set of them when the flag is set.
    pub awaited_by: u64,
    /// `task_awaited_by_is_set` (a byte).
    pub is_set: u64,
    /// `task_is_task` (a byte).
    pub is_task: u64,
    /// `task_node`: the `llist_node` linking the task into its thread's list.
    pub node: u64,
}

/// 3.14+: where the `_asyncio` module's state (`asyncio_state`) keeps the
/// tasks that are no C `Task`: Python-level Task implementations that
/// register through `asyncio._register_task` / `_register_eager_task` (a
/// third-party loop's tasks, a Task subclass of its own).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModuleState {
    /// `PyModuleObject.md_state`: a pointer to the module's state.
    pub md_state: u64,
    /// In `asyncio_state`: `FutureType` and `TaskType`, the type objects
    /// `_asyncio.Future` and `_asyncio.Task` (what proves the state is one).
    pub future_type: u64,
    pub task_type: u64,
    /// `non_asyncio_tasks`: a `weakref.WeakSet`.
    pub tasks: u64,
    /// `non_asyncio_eager_tasks`: a `set`.
    pub eager_tasks: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AsyncioLayout {
    pub major: u8,
    pub minor: u8,
    /// `sizeof(TaskObj)`: bytes copied per task.
    pub task_size: u64,
    /// `FutureObj_HEAD` members (shared by futures and tasks).
    pub fut_loop: u64,
    pub fut_callback0: u64,
    /// A list of (callback, context) tuples after the first callback.
    pub fut_callbacks: u64,
    /// `fut_state` (an enum int): 0 pending, 1 cancelled, 2 finished.
    pub fut_state: u64,
    /// Set while an exception (or a result, for tasks) was never retrieved.
    pub fut_log_tb: Flag,
    pub task_fut_waiter: u64,
    pub task_coro: u64,
    /// `task_name` (3.8+: 3.7's tasks have no name).
    pub task_name: Option<u64>,
    pub task_must_cancel: Flag,
    /// `task_num_cancels_requested` (an int), 3.11+.
    pub task_num_cancels_requested: Option<u64>,
    pub awaited_by: Option<AwaitedBy>,
    /// 3.14+: the module state's registries of non-C tasks.
    pub module_state: Option<ModuleState>,
    pub gen_frame: GenFrame,
    /// `gi_frame_state` (3.11+), whose embedded frame is stale once finished.
    pub gen_frame_state: Option<FrameState>,
    /// Relative to the frame (`PyFrameObject` or the embedded one).
    pub stack_top: StackTop,
    /// Where the callback that wakes an awaiting task keeps that task
    /// (`TaskWakeupMethWrapper.ww_task` ≤3.9, `PyCFunctionObject.m_self` after).
    pub wakeup_task: u64,
    /// Where the callback a new or woken C task puts in its loop's ready
    /// queue keeps that task (`TaskStepMethWrapper.sw_task`, every version).
    pub step_task: u64,
    /// `PyMethodObject.im_self`.
    pub method_self: u64,
    /// `PyFunctionObject.func_closure` and `.func_name`.
    pub func_closure: u64,
    pub func_name: u64,
    /// `functools.partial`'s `fn` and `args`.
    pub partial_fn: u64,
    pub partial_args: u64,
    /// `PyWeakReference.wr_object`.
    pub weakref_object: u64,
    /// `dequeobject.leftblock` and `.leftindex`; a block is a left link, 64
    /// item slots, a right link.
    pub deque_leftblock: u64,
    pub deque_leftindex: u64,
    /// `PyAsyncGenASend.ags_gen`.
    pub asend_gen: u64,
    /// `futureiterobject.future`.
    pub futureiter_future: u64,
    /// `PyTypeObject.tp_dict` and `.tp_mro` (heap types).
    pub type_dict: u64,
    pub type_mro: u64,
    /// `PyMemberDescrObject.d_member` (a `PyMemberDef *`, whose `offset` is at 16).
    pub member_descr_def: u64,
}

/// Items per deque block (`BLOCKLEN`).
pub(crate) const DEQUE_BLOCK_LEN: u64 = 64;
/// `PyMemberDef.offset`.
pub(crate) const MEMBER_DEF_OFFSET: u64 = 16;

const COMMON: AsyncioLayout = AsyncioLayout {
    major: 3,
    minor: 0,
    task_size: 0,
    fut_loop: 16,
    fut_callback0: 24,
    fut_callbacks: 40,
    fut_state: 0,
    fut_log_tb: Flag { offset: 0, mask: 1 },
    task_fut_waiter: 0,
    task_coro: 0,
    task_name: None,
    task_must_cancel: Flag { offset: 0, mask: 1 },
    task_num_cancels_requested: None,
    awaited_by: None,
    module_state: None,
    gen_frame: GenFrame::Pointer(16),
    gen_frame_state: None,
    stack_top: StackTop::Pointer { at: 72, below: 1 },
    wakeup_task: 24,
    step_task: 16,
    method_self: 24,
    func_closure: 72,
    func_name: 32,
    partial_fn: 16,
    partial_args: 24,
    weakref_object: 16,
    deque_leftblock: 24,
    deque_leftindex: 40,
    asend_gen: 16,
    futureiter_future: 16,
    type_dict: 264,
    type_mro: 344,
    member_descr_def: 40,
};

pub(crate) static V3_7: AsyncioLayout = AsyncioLayout {
    minor: 7,
    task_size: 136,
    fut_state: 72,
    fut_log_tb: Flag {
        offset: 76,
        mask: 1,
    },
    task_fut_waiter: 104,
    task_coro: 112,
    task_must_cancel: Flag {
        offset: 128,
        mask: 1,
    },
    wakeup_task: 16,
    func_closure: 48,
    func_name: 64,
    ..COMMON
};

pub(crate) static V3_8: AsyncioLayout = AsyncioLayout {
    minor: 8,
    task_size: 144,
    fut_state: 72,
    fut_log_tb: Flag {
        offset: 76,
        mask: 1,
    },
    task_fut_waiter: 104,
    task_coro: 112,
    task_name: Some(120),
    task_must_cancel: Flag {
        offset: 136,
        mask: 1,
    },
    wakeup_task: 16,
    func_closure: 48,
    func_name: 64,
    ..COMMON
};

pub(crate) static V3_9: AsyncioLayout = AsyncioLayout {
    minor: 9,
    task_size: 184,
    fut_state: 80,
    fut_log_tb: Flag {
        offset: 84,
        mask: 1,
    },
    task_fut_waiter: 144,
    task_coro: 152,
    task_name: Some(160),
    task_must_cancel: Flag {
        offset: 176,
        mask: 1,
    },
    wakeup_task: 16,
    func_closure: 48,
    func_name: 64,
    ..COMMON
};

pub(crate) static V3_10: AsyncioLayout = AsyncioLayout {
    minor: 10,
    task_size: 192,
    fut_state: 88,
    fut_log_tb: Flag {
        offset: 92,
        mask: 1,
    },
    task_fut_waiter: 152,
    task_coro: 160,
    task_name: Some(168),
    task_must_cancel: Flag {
        offset: 184,
        mask: 1,
    },
    stack_top: StackTop::BaseDepth {
        base: 64,
        depth: 80,
    },
    ..COMMON
};

pub(crate) static V3_11: AsyncioLayout = AsyncioLayout {
    minor: 11,
    task_size: 176,
    fut_state: 88,
    fut_log_tb: Flag {
        offset: 92,
        mask: 1,
    },
    task_fut_waiter: 128,
    task_coro: 136,
    task_name: Some(144),
    task_must_cancel: Flag {
        offset: 160,
        mask: 1,
    },
    task_num_cancels_requested: Some(168),
    gen_frame: GenFrame::Embedded(80),
    gen_frame_state: Some(FrameState {
        offset: 75,
        finished_from: 1,
    }),
    stack_top: StackTop::LocalsIndex(64),
    ..COMMON
};

pub(crate) static V3_12: AsyncioLayout = AsyncioLayout {
    minor: 12,
    gen_frame: GenFrame::Embedded(72),
    gen_frame_state: Some(FrameState {
        offset: 67,
        finished_from: 1,
    }),
    ..V3_11
};

pub(crate) static V3_13: AsyncioLayout = AsyncioLayout {
    minor: 13,
    task_size: 144,
    fut_state: 96,
    fut_log_tb: Flag {
        offset: 100,
        mask: 1,
    },
    task_fut_waiter: 112,
    task_coro: 120,
    task_name: Some(128),
    task_must_cancel: Flag {
        offset: 100,
        mask: 4,
    },
    task_num_cancels_requested: Some(104),
    gen_frame: GenFrame::Embedded(72),
    gen_frame_state: Some(FrameState {
        offset: 67,
        finished_from: 1,
    }),
    stack_top: StackTop::LocalsIndex(64),
    ..COMMON
};

pub(crate) static V3_14: AsyncioLayout = AsyncioLayout {
    minor: 14,
    task_size: 168,
    fut_state: 104,
    fut_log_tb: Flag {
        offset: 110,
        mask: 1,
    },
    task_fut_waiter: 120,
    task_coro: 128,
    task_name: Some(136),
    task_must_cancel: Flag {
        offset: 110,
        mask: 4,
    },
    task_num_cancels_requested: Some(112),
    awaited_by: Some(AwaitedBy {
        awaited_by: 96,
        is_set: 109,
        is_task: 108,
        node: 152,
    }),
    module_state: Some(ModuleState {
        md_state: 32,
        future_type: 16,
        task_type: 24,
        tasks: 48,
        eager_tasks: 56,
    }),
    gen_frame: GenFrame::Embedded(72),
    gen_frame_state: Some(FrameState {
        offset: 67,
        finished_from: 1,
    }),
    stack_top: StackTop::Pointer { at: 64, below: 1 },
    ..COMMON
};

pub(crate) static V3_15: AsyncioLayout = AsyncioLayout {
    minor: 15,
    gen_frame_state: Some(FrameState {
        offset: 67,
        finished_from: 5,
    }),
    stack_top: StackTop::Pointer { at: 64, below: 2 },
    // 3.15's PyModuleObject keeps md_state right after md_dict.
    module_state: Some(ModuleState {
        md_state: 24,
        future_type: 16,
        task_type: 24,
        tasks: 48,
        eager_tasks: 56,
    }),
    ..V3_14
};

/// Every table, oldest first.
pub(crate) static ALL: &[&AsyncioLayout] = &[
    &V3_7, &V3_8, &V3_9, &V3_10, &V3_11, &V3_12, &V3_13, &V3_14, &V3_15,
];

pub fn for_version(major: u8, minor: u8) -> Option<&'static AsyncioLayout> {
    ALL.iter()
        .copied()
        .find(|l| l.major == major && l.minor == minor)
}
