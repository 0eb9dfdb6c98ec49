// SPDX-License-Identifier: MIT OR GPL-2.0
//
// pyinspect's eBPF sampler: attached to per-CPU cpu-clock perf events. When
// the interrupted task belongs to a target process, it walks the task's
// Python frame chain with bpf_probe_read_user and writes the chain (code
// object and instruction position of each frame) to a ring buffer.
// With --native, the sampled thread's user registers and a copy of the
// top of its user stack go out too, in a record of their own written just
// before the sample: user space unwinds them with its CFI unwinder, and
// merges by the frames' addresses, which the walk then notes. With
// --async that record holds the frames' addresses alone (user space finds
// the running asyncio task by its coroutine's frame).
// For the off-CPU and wall modes, a second program on the scheduler's
// sched_switch tracepoint does the same when a target thread leaves its
// CPU (with the system call it sleeps in, from its saved registers), and
// writes a short record when it comes back: user space weighs the stack by
// the time between the two. The
// offsets come from user space (our layout tables), one entry per target
// process; nothing here knows a CPython version. The thread state of each
// thread comes from user space too (tid -> PyThreadState*), which reads the
// interpreter's thread list.
//
// Built without kernel headers: the few definitions needed are below.
// Rebuild with bpf/build.sh (the object is committed; .ci/run checks that
// it matches this source).

typedef unsigned char u8;
typedef unsigned int u32;
typedef unsigned long long u64;

#define SEC(name) __attribute__((section(name), used))
#define __uint(name, val) int (*name)[val]
#define __type(name, val) typeof(val) *name

// Map types and helpers, by their numbers in the kernel's UAPI.
#define BPF_MAP_TYPE_HASH 1
#define BPF_MAP_TYPE_ARRAY 2
#define BPF_MAP_TYPE_PERCPU_ARRAY 6
#define BPF_MAP_TYPE_RINGBUF 27

static void *(*bpf_map_lookup_elem)(void *map, const void *key) = (void *)1;
static long (*bpf_map_update_elem)(void *map, const void *key, const void *value, u64 flags) = (void *)2;
static long (*bpf_map_delete_elem)(void *map, const void *key) = (void *)3;
static long (*bpf_probe_read_kernel)(void *dst, u32 size, const void *src) = (void *)113;
static void *(*bpf_get_current_task_btf)(void) = (void *)158;
static void *(*bpf_task_pt_regs)(void *task) = (void *)175;
static u64 (*bpf_ktime_get_ns)(void) = (void *)5;
static u64 (*bpf_get_current_pid_tgid)(void) = (void *)14;
static long (*bpf_probe_read_user)(void *dst, u32 size, const void *src) = (void *)112;
static long (*bpf_ringbuf_output)(void *rb, void *data, u64 size, u64 flags) = (void *)130;
static long (*bpf_loop)(u32 nr_loops, void *callback_fn, void *callback_ctx, u64 flags) = (void *)181;
static u32 (*bpf_get_smp_processor_id)(void) = (void *)8;

// Frames kept per sample, and frame-chain steps taken (shim frames are
// stepped over without being kept).
#define MAX_FRAMES 128
#define MAX_STEPS 160
#define MAX_TARGETS 256
#define NO_FIELD 0xffffffffu

// Sample flags.
#define F_TRUNCATED 1   // the chain went on past MAX_STEPS / MAX_FRAMES
#define F_READ_ERROR 2  // a frame could not be read
#define F_NO_TSTATE 4   // the thread is not (yet) in the tstates map

// Record kinds.
#define K_SAMPLE 0      // a cpu-clock tick of a thread on a CPU
#define K_OFF 1         // a thread left its CPU (stack, state, call)
#define K_ON 2          // a thread that had left came back (no stack)
#define K_NATIVE 3      // the registers and stack bytes of the sample after it

// Bytes of user stack copied at most (a layout asks for up to this), and
// below the stack pointer, the red zone a leaf function may use.
#define STACK_MAX (64 << 10)
#define PAGE 4096
#define RED_ZONE 128

// In a K_NATIVE record's frame addresses: the frame is the first one its
// eval-loop call ran (3.11's is_entry; on 3.12+ the walk marks the frame
// before a shim).
#define A_ENTRY 1

// A task's state at its last switch, after it exited.
#define TASK_DEAD 0x80

// The only kernel types read, by CO-RE: the loader matches the fields by
// name against the running kernel's BTF, so no kernel headers are needed.
struct task_struct {
	int pid;
	int tgid;
} __attribute__((preserve_access_index));

// x86_64's saved user registers (struct pt_regs): the system call's
// number and its six arguments, and bp, ip and sp, at their fixed places.
#define REGS_BP 4
#define REGS_R10 7
#define REGS_R9 8
#define REGS_R8 9
#define REGS_DX 12
#define REGS_SI 13
#define REGS_DI 14
#define REGS_ORIG_AX 15
#define REGS_IP 16
#define REGS_SP 19
#define REGS_WORDS 20

// Where to find things, for one target process (one interpreter layout).
struct layout {
	u32 tstate_frame;   // tstate -> current frame, or (via_cframe) -> cframe
	u32 via_cframe;     // 1: 3.11/3.12, tstate->cframe->current_frame
	u32 cframe_current; // offset of current_frame in _PyCFrame
	u32 frame_previous; // f_back / previous
	u32 frame_code;     // f_code / f_executable
	u32 frame_pos;      // f_lasti / prev_instr / instr_ptr (8 bytes read)
	u32 owner;          // owner byte, or NO_FIELD
	u32 shim_from;      // owner values from this on are shim frames
	u32 switches;       // 1: walk the stack of a thread leaving its CPU
	u32 block_from;     // the frame's fields lie in [block_from, +block_len):
	u32 block_len;      // one read a frame (0: a read a field)
	u32 entry;          // 3.11's is_entry byte, or NO_FIELD
	u32 cframe_previous; // offset of previous in _PyCFrame
	u32 stack_bytes;    // --native: user stack bytes to copy (0: none)
	u32 gil_only;       // --mode gil: only the thread holding the GIL
	u32 frame_addrs;    // --async: the frames' addresses, with no stack
	u64 gil_holder;     // the GIL holder's PyThreadState * is here
	u64 gil_locked;     // the GIL's locked flag (int) is here, or 0
};

// Bytes of a frame read at once at most.
#define BLOCK_MAX 128

struct frame {
	u64 code;
	u64 pos;
};

struct sample {
	u32 tgid;
	u32 tid;
	u64 time_ns;
	u32 nframes;
	u32 flags;
	u32 kind;           // K_*
	u32 state;          // K_OFF: the task's state (1 asleep, 2 in D), 0: preempted
	u64 call;           // K_OFF: the system call's number (orig_ax), or -1
	u64 args[6];        // and its arguments
	struct frame frames[MAX_FRAMES];
};

// What --native adds to a sample: its thread's user registers, where each
// kept frame is (and whether it is an entry frame), the shim frame after
// each (3.12+; on the C stack of the eval-loop call that runs it), and
// the top of the stack.
struct native {
	u32 tgid;
	u32 tid;
	u64 time_ns;
	u32 nframes;        // as the sample's
	u32 len;            // stack bytes copied
	u32 kind;           // K_NATIVE (where a sample has its kind)
	u32 pad;
	u64 ip, sp, bp;
	u64 base;           // the address of stack[0]
	u64 cframe;         // 3.11/3.12: tstate->cframe (its chain anchors the eval loop's calls)
	u64 addrs[MAX_FRAMES]; // frame address | A_ENTRY
	u64 shims[MAX_FRAMES]; // the shim frame after it, or 0
	u8 stack[STACK_MAX];
};

// Counters, per CPU: samples taken, samples the ring buffer had no room for.
#define C_SAMPLES 0
#define C_LOST 1
#define C_COUNT 2

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_TARGETS);
	__type(key, u32);   // tgid
	__type(value, u32); // index into layouts
} targets SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_TARGETS);
	__type(key, u32);
	__type(value, struct layout);
} layouts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, u32);   // tid
	__type(value, u64); // PyThreadState *, or 0: not a Python thread
} tstates SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, u32);   // tid of a target thread off its CPU
	__type(value, u64); // since when
} off_cpu SEC(".maps");

// One per program (a tick and a switch never run nested on one CPU: the
// switch runs with interrupts off; two slots all the same).
#define SCRATCH_TICK 0
#define SCRATCH_SWITCH 1

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2);
	__type(key, u32);
	__type(value, struct sample);
} scratch SEC(".maps");

struct block {
	u8 b[BLOCK_MAX + 8];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2);
	__type(key, u32);
	__type(value, struct block);
} blocks SEC(".maps");

// Two per CPU, by its number (too big for a per-CPU map): 2 × cpu for a
// tick's sample, 2 × cpu + 1 for a switch's. User space sizes it to the
// CPUs there are when --native, --async or watch asks for frame addresses.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, struct native);
} natives SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, C_COUNT);
	__type(key, u32);
	__type(value, u64);
} counters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4 << 20);
} samples SEC(".maps");

static void count(u32 which)
{
	u64 *c = bpf_map_lookup_elem(&counters, &which);
	if (c)
		__sync_fetch_and_add(c, 1);
}

static u64 read_u64(u64 addr, long *err)
{
	u64 v = 0;
	if (bpf_probe_read_user(&v, sizeof(v), (const void *)addr) != 0)
		*err = 1;
	return v;
}

// The walk's state, between steps of bpf_loop (which the verifier checks
// once, where a plain loop would be checked step by step).
struct walk {
	u64 f;
	struct layout *l;
	struct sample *s;
	struct block *blk;
	struct native *nat; // NULL: no frame addresses noted
	u32 n;
	u32 err;
};

// The word at `off` of the frame block `blk` read from `base`.
static __attribute__((always_inline)) u64 in_block(struct block *blk, u32 off, u32 base)
{
	u32 at = off - base;
	if (at > BLOCK_MAX)
		return 0;
	return *(u64 *)&blk->b[at];
}

// One step along the frame chain: keep the frame unless it is a shim (or
// holds no code object), move to the previous one. 1 ends the walk.
static long step(u32 i, void *ctx)
{
	struct walk *w = ctx;
	struct layout *l = w->l;
	struct sample *s = w->s;
	struct block *blk = w->blk;
	if (!w->f)
		return 1;
	u64 f = w->f;
	u64 code, pos, prev;
	int shim = 0, entry = 0;
	u32 base = l->block_from, len = l->block_len;
	if (len > BLOCK_MAX)
		len = BLOCK_MAX;
	// One read for the frame's fields when they lie close together; a
	// read each when that block cannot be read (it may run past the end
	// of a mapping the fields themselves are in).
	if (len && bpf_probe_read_user(blk->b, len, (const void *)(f + base)) == 0) {
		code = in_block(blk, l->frame_code, base);
		pos = in_block(blk, l->frame_pos, base);
		prev = in_block(blk, l->frame_previous, base);
		if (l->owner != NO_FIELD)
			shim = (u8)in_block(blk, l->owner, base) >= l->shim_from;
		if (l->entry != NO_FIELD)
			entry = (u8)in_block(blk, l->entry, base) != 0;
	} else {
		long err = 0;
		code = read_u64(f + l->frame_code, &err);
		pos = read_u64(f + l->frame_pos, &err);
		prev = read_u64(f + l->frame_previous, &err);
		if (err) {
			w->err = 1;
			return 1;
		}
		if (l->owner != NO_FIELD) {
			u8 owner = 0;
			if (bpf_probe_read_user(&owner, 1, (const void *)(f + l->owner)) != 0) {
				w->err = 1;
				return 1;
			}
			shim = owner >= l->shim_from;
		}
		if (l->entry != NO_FIELD) {
			u8 e = 0;
			bpf_probe_read_user(&e, 1, (const void *)(f + l->entry));
			entry = e != 0;
		}
	}
	struct native *nat = w->nat;
	if (shim && nat) {
		// The frame inside this shim is the first of its eval-loop call;
		// the first shim after it is its call's (3.15's thread state ends
		// the chain with one more, not on the C stack).
		u32 last = w->n - 1;
		if (last < MAX_FRAMES) {
			nat->addrs[last] |= A_ENTRY;
			if (!nat->shims[last])
				nat->shims[last] = f;
		}
	}
	if (!shim && code) {
		u32 n = w->n;
		if (n >= MAX_FRAMES)
			return 1;
		s->frames[n].code = code;
		s->frames[n].pos = pos;
		if (nat) {
			nat->addrs[n] = f | (entry ? A_ENTRY : 0);
			nat->shims[n] = 0;
		}
		w->n = n + 1;
	}
	w->f = prev;
	return 0;
}

// A record's header, its frames none yet.
static __attribute__((always_inline)) void header(struct sample *s, u32 tgid, u32 tid, u32 kind, u64 call)
{
	s->tgid = tgid;
	s->tid = tid;
	s->time_ns = bpf_ktime_get_ns();
	s->nframes = 0;
	s->flags = 0;
	s->kind = kind;
	s->state = 0;
	s->call = call;
}

// Fill `s` with the stack of thread `tid` of target `tgid` (whose layout
// is in slot `slot`), in scratch slot `which`. 0: not a Python thread, no
// record to write.
// With `nat`, the frames' addresses are noted in it.
static __attribute__((always_inline)) int take_stack(struct sample *s, u32 which, u32 slot, u32 tgid, u32 tid, u32 kind, struct native *nat)
{
	struct layout *l = bpf_map_lookup_elem(&layouts, &slot);
	struct block *blk = bpf_map_lookup_elem(&blocks, &which);
	if (!l || !blk)
		return 0;
	struct walk w = {.l = l, .s = s, .blk = blk, .nat = nat};
	header(s, tgid, tid, kind, (u64)-1);
	if (nat)
		nat->cframe = 0;
	u64 *tstate = bpf_map_lookup_elem(&tstates, &tid);
	if (tstate && !*tstate)
		return 0; // a thread user space found to run no Python
	if (!tstate) {
		s->flags = F_NO_TSTATE;
	} else {
		long err = 0;
		u64 f = read_u64(*tstate + l->tstate_frame, &err);
		u64 cf = f;
		if (nat && l->via_cframe)
			nat->cframe = cf;
		if (!err && l->via_cframe && f)
			f = read_u64(f + l->cframe_current, &err);
		w.f = f;
		w.err = err != 0;
		if (!w.err)
			bpf_loop(MAX_STEPS, step, &w, 0);
		if (l->via_cframe && w.err && !w.n && cf) {
			// An eval-loop call that has pushed its cframe but not set
			// its frame yet (3.11, 3.12): what runs is its caller's.
			err = 0;
			u64 prev = read_u64(cf + l->cframe_previous, &err);
			f = 0;
			if (!err && prev)
				f = read_u64(prev + l->cframe_current, &err);
			w.f = f;
			w.err = err != 0;
			if (!w.err)
				bpf_loop(MAX_STEPS, step, &w, 0);
		}
		if (w.err)
			s->flags |= F_READ_ERROR;
		else if (w.f)
			s->flags |= F_TRUNCATED;
	}
	u32 n = w.n;
	if (n > MAX_FRAMES)
		n = MAX_FRAMES;
	s->nframes = n;
	return 1;
}

static __attribute__((always_inline)) void put(struct sample *s)
{
	u32 n = s->nframes;
	if (n > MAX_FRAMES)
		n = MAX_FRAMES;
	u64 size = sizeof(*s) - sizeof(s->frames) + (u64)n * sizeof(struct frame);
	if (bpf_ringbuf_output(&samples, s, size, 0) != 0)
		count(C_LOST);
}

// Whether thread `tid` holds its process's GIL (as far as the GIL says).
static __attribute__((always_inline)) int holds_gil(struct layout *l, u32 tid)
{
	u64 *tstate = bpf_map_lookup_elem(&tstates, &tid);
	if (!tstate || !*tstate)
		return 0;
	int locked = 1;
	u64 holder = 0;
	if (l->gil_locked && bpf_probe_read_user(&locked, sizeof(locked), (const void *)l->gil_locked) != 0)
		return 0;
	if (bpf_probe_read_user(&holder, sizeof(holder), (const void *)l->gil_holder) != 0)
		return 0;
	return locked && holder == *tstate;
}

// Copying the stack a page at a time: a read that runs past the end of
// the stack's mapping fails whole, so the copy ends at the last page that
// could be read.
struct copy {
	struct native *nat;
	u64 from;
	u32 len;
	u32 want;
};

static long copy_page(u32 i, void *ctx)
{
	struct copy *c = ctx;
	u32 off = c->len;
	if (off >= c->want || off > STACK_MAX - PAGE)
		return 1;
	if (bpf_probe_read_user(&c->nat->stack[off], PAGE, (const void *)(c->from + off)) != 0)
		return 1;
	c->len = off + PAGE;
	return 0;
}

// The thread's user registers and the top of its stack, into `nat`.
static __attribute__((always_inline)) void copy_native(struct native *nat, u32 want)
{
	u64 regs[REGS_WORDS];
	void *pt = bpf_task_pt_regs(bpf_get_current_task_btf());
	if (!pt || bpf_probe_read_kernel(regs, sizeof(regs), pt) != 0)
		return;
	nat->ip = regs[REGS_IP];
	nat->sp = regs[REGS_SP];
	nat->bp = regs[REGS_BP];
	u64 from = nat->sp - RED_ZONE;
	nat->base = from;
	// Up to the page's end first, then whole pages.
	u32 head = PAGE - (u32)(from & (PAGE - 1));
	if (bpf_probe_read_user(nat->stack, head, (const void *)from) != 0)
		return;
	struct copy c = {.nat = nat, .from = from, .len = head, .want = want};
	bpf_loop(STACK_MAX / PAGE, copy_page, &c, 0);
	nat->len = c.len;
}

// The native record of sample `s`, written just before it: its frames'
// addresses (noted by the walk), and with --native (`want` stack bytes)
// the current task's registers and stack bytes. 0: not written, nor is
// the sample to be.
static __attribute__((always_inline)) int put_native(struct native *nat, struct sample *s, u32 want)
{
	nat->len = 0;
	nat->ip = nat->sp = nat->bp = nat->base = 0;
	if (want)
		copy_native(nat, want);
	nat->tgid = s->tgid;
	nat->tid = s->tid;
	nat->time_ns = s->time_ns;
	nat->kind = K_NATIVE;
	nat->nframes = s->nframes;
	u32 len = nat->len;
	if (len > STACK_MAX)
		len = STACK_MAX;
	// The clamped value itself to the size (the compiler may otherwise
	// size from a copy the verifier sees unbounded).
	asm volatile("" : "+r"(len));
	if (len > STACK_MAX)
		return 0;
	u64 size = sizeof(*nat) - sizeof(nat->stack) + len;
	if (bpf_ringbuf_output(&samples, nat, size, 0) != 0)
		count(C_LOST);
	return 1;
}

SEC("perf_event")
int on_sample(void *ctx)
{
	u64 id = bpf_get_current_pid_tgid();
	u32 tgid = id >> 32, tid = (u32)id;
	u32 *slot = bpf_map_lookup_elem(&targets, &tgid);
	if (!slot)
		return 0;
	u32 which = SCRATCH_TICK;
	struct sample *s = bpf_map_lookup_elem(&scratch, &which);
	struct layout *l = bpf_map_lookup_elem(&layouts, slot);
	if (!s || !l)
		return 0;
	if (l->gil_only && !holds_gil(l, tid))
		return 0;
	count(C_SAMPLES);
	struct native *nat = 0;
	u32 want = l->stack_bytes;
	if (want || l->frame_addrs) {
		u32 i = bpf_get_smp_processor_id() * 2;
		nat = bpf_map_lookup_elem(&natives, &i);
	}
	if (!take_stack(s, which, *slot, tgid, tid, K_SAMPLE, nat))
		return 0;
	if (nat && !put_native(nat, s, want))
		return 0;
	put(s);
	return 0;
}

// sched_switch(bool preempt, struct task_struct *prev,
//              struct task_struct *next, unsigned int prev_state), run by
// the CPU that switches, in prev's context, with interrupts off.
SEC("raw_tracepoint/sched_switch")
int on_switch(u64 *ctx)
{
	u32 which = SCRATCH_SWITCH;
	struct sample *s = bpf_map_lookup_elem(&scratch, &which);
	if (!s)
		return 0;
	// A target thread coming back: how long it was away.
	struct task_struct *next = (struct task_struct *)ctx[2];
	int next_tid = 0;
	bpf_probe_read_kernel(&next_tid, sizeof(next_tid), &next->pid);
	u32 key = next_tid;
	u64 *since = bpf_map_lookup_elem(&off_cpu, &key);
	if (since) {
		int next_tgid = 0;
		bpf_probe_read_kernel(&next_tgid, sizeof(next_tgid), &next->tgid);
		// The interval's start rides in `call`.
		header(s, next_tgid, key, K_ON, *since);
		bpf_map_delete_elem(&off_cpu, &key);
		put(s);
	}
	// A target thread leaving: its stack, its state and its call.
	u64 id = bpf_get_current_pid_tgid();
	u32 tgid = id >> 32, tid = (u32)id;
	u32 *slot = bpf_map_lookup_elem(&targets, &tgid);
	if (!slot)
		return 0;
	struct layout *l = bpf_map_lookup_elem(&layouts, slot);
	if (!l || !l->switches)
		return 0;
	u32 state = ctx[0] ? 0 : (u32)ctx[3];
	if (state & TASK_DEAD) {
		// Its last switch: it never comes back.
		bpf_map_delete_elem(&off_cpu, &tid);
		return 0;
	}
	// The frames' addresses too when they are asked for (a thread's
	// stack as it left is as good as a sample's to watch), and with
	// --native its registers and stack's top: where in native code it
	// waits (its registers are those it entered the kernel with).
	struct native *nat = 0;
	u32 want = l->stack_bytes;
	if (l->frame_addrs || want) {
		u32 i = bpf_get_smp_processor_id() * 2 + 1;
		nat = bpf_map_lookup_elem(&natives, &i);
	}
	if (!take_stack(s, which, *slot, tgid, tid, K_OFF, nat))
		return 0;
	s->state = state;
	u64 regs[REGS_WORDS];
	void *pt = bpf_task_pt_regs(bpf_get_current_task_btf());
	if (pt && bpf_probe_read_kernel(regs, sizeof(regs), pt) == 0) {
		s->call = regs[REGS_ORIG_AX];
		s->args[0] = regs[REGS_DI];
		s->args[1] = regs[REGS_SI];
		s->args[2] = regs[REGS_DX];
		s->args[3] = regs[REGS_R10];
		s->args[4] = regs[REGS_R8];
		s->args[5] = regs[REGS_R9];
	}
	u64 now = s->time_ns;
	bpf_map_update_elem(&off_cpu, &tid, &now, 0);
	if (nat && !put_native(nat, s, want))
		return 0;
	put(s);
	return 0;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
