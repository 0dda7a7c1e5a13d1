//! The records leakscope's uprobe programs send to userspace through the ring buffer.
//!
//! This is the kernel ABI of the probe, shared by both sides: the eBPF programs
//! (this crate, built for `bpfel-unknown-none`) fill them, and `leakscope-probe`
//! (built for the host) decodes them. Every record starts with a [`RecordHeader`]
//! whose `kind` says which struct follows. They are `#[repr(C)]` with 8-byte
//! aligned fields (the ring buffer wants 8-byte alignment) and no padding holes.
//!
//! Userspace turns these into the recording's events (`leakscope_recording`);
//! nothing else should depend on their layout.
#![cfg_attr(target_arch = "bpf", no_std)]

/// Whole stacks from builds without frame pointers (issue 30): the compact
/// unwind rows and the step that walks them, shared with the probe (which
/// compiles the rows) and the in-process recorder (which walks them too).
pub use leakscope_unwind as unwind;

/// The names of the eBPF programs in the object (the functions of `src/main.rs`,
/// whose names aya uses as program names). The loader's plan refers to programs
/// only through these; a test of the probe checks that the built object has
/// exactly these programs.
pub mod program {
    pub const MALLOC_ENTER: &str = "malloc_enter";
    pub const CALLOC_ENTER: &str = "calloc_enter";
    pub const REALLOC_ENTER: &str = "realloc_enter";
    pub const RUST_ALLOC_ENTER: &str = "rust_alloc_enter";
    pub const RUST_REALLOC_ENTER: &str = "rust_realloc_enter";
    pub const RUST_DEALLOC_ENTER: &str = "rust_dealloc_enter";
    pub const POSIX_MEMALIGN_ENTER: &str = "posix_memalign_enter";
    pub const ALIGNED_ALLOC_ENTER: &str = "aligned_alloc_enter";
    /// `(size, align)`: mimalloc's `mi_malloc_aligned`, `mi_zalloc_aligned`.
    pub const MALLOC_ALIGNED_ENTER: &str = "malloc_aligned_enter";
    /// `(ptr, size, align)`: mimalloc's `mi_realloc_aligned`.
    pub const REALLOC_ALIGNED_ENTER: &str = "realloc_aligned_enter";
    /// `(size, flags)`: jemalloc's `mallocx` (the alignment in the flags).
    pub const MALLOCX_ENTER: &str = "mallocx_enter";
    /// `(ptr, size, flags)`: jemalloc's `rallocx`.
    pub const RALLOCX_ENTER: &str = "rallocx_enter";
    pub const MALLOC_EXIT: &str = "malloc_exit";
    pub const REALLOC_EXIT: &str = "realloc_exit";
    pub const POSIX_MEMALIGN_EXIT: &str = "posix_memalign_exit";
    pub const FREE_ENTER: &str = "free_enter";
    pub const SCOPE_ENTER: &str = "scope_enter";
    pub const SCOPE_EXIT: &str = "scope_exit";
    pub const NOOP_ENTER: &str = "noop_enter";
    pub const NOOP_EXIT: &str = "noop_exit";

    /// Every program of the object.
    pub const ALL: [&str; 20] = [
        MALLOC_ENTER,
        CALLOC_ENTER,
        REALLOC_ENTER,
        RUST_ALLOC_ENTER,
        RUST_REALLOC_ENTER,
        RUST_DEALLOC_ENTER,
        POSIX_MEMALIGN_ENTER,
        ALIGNED_ALLOC_ENTER,
        MALLOC_ALIGNED_ENTER,
        REALLOC_ALIGNED_ENTER,
        MALLOCX_ENTER,
        RALLOCX_ENTER,
        MALLOC_EXIT,
        REALLOC_EXIT,
        POSIX_MEMALIGN_EXIT,
        FREE_ENTER,
        SCOPE_ENTER,
        SCOPE_EXIT,
        NOOP_ENTER,
        NOOP_EXIT,
    ];

    /// Return probes (uretprobes) end in this.
    pub const EXIT_SUFFIX: &str = "_exit";
}

/// Frames captured per allocation stack. 32 frames of a frame-pointer walk reach
/// from the allocator's caller up through rmcp into tokio's task poll.
pub const MAX_STACK_DEPTH: usize = 32;

/// Bytes of the target's stack one read can bring into the walk's scratch
/// window.
///
/// Why the programs walk the frame-pointer chain themselves instead of calling
/// `bpf_get_stack` for every allocation: the helper reads two words per frame
/// through the perf callchain machinery, ~2.5 us for a 32-frame stack (by hand,
/// with `--bpf-stats`, see docs/probe.md; a
/// frame-pointer build's allocation deep in tokio has that many), most of what
/// the probe costs a real server per allocation. Reading user memory costs
/// ~150-250 ns a read on top of the bytes copied (this machine: a KVM guest,
/// hardened usercopy checking the destination at every read), so the walk
/// reads the stack in as few pieces as it safely can: up to the end of the
/// frame's page while it knows nothing of the thread, then, once a walk on the
/// same thread and CPU has read up to some address, everything up to it in one
/// read of at most this many bytes.
pub const STACK_WINDOW_BYTES: usize = 16384;

/// Set in a stack frame where the walk found the uretprobe trampoline in place
/// of a return address: the frame then holds the address of the stack slot the
/// return address was read from, with this bit set (user addresses are below
/// 2^47). At a probed function's entry that slot is where its stack pointer
/// points ([`ScopeRecord::sp`]), so userspace matches the frame to exactly one
/// call, or to none (see `leakscope-probe`'s capture).
pub const TRAMPOLINE_SLOT_MARK: u64 = 1 << 63;

/// Set in a lifecycle function's uprobe cookie, and so in its
/// [`ScopeRecord::scope`], when the function also has a return probe; the low
/// bits are the scope kind.
///
/// Why the cookie says it: only such a function's return address is hidden
/// by the trampoline, so only its entry reads the word at the stack pointer
/// (an 8-byte user read, ~150 ns, wasted at the other entries), and userspace
/// learns per probe, not per scope kind, which calls will return (a preset may
/// probe one kind's functions both ways).
pub const SCOPE_RETURNS: u32 = 1 << 31;

/// Where a lifecycle function's uprobe cookie keeps which argument its entry
/// sends (0 to 5: rdi, rsi, rdx, rcx, r8, r9), in the bits above the kind.
///
/// Why not always the first: a function that returns a large value (an async
/// block's poll returning `Poll<Result<(), WorkerQuitReason>>`) takes a hidden
/// pointer to the return slot as its first argument, so `self` (the future,
/// inside its task's cell) is the second.
pub const SCOPE_ARG_SHIFT: u32 = 8;

/// Bits of the scope kind's index in a cookie.
pub const SCOPE_KIND_MASK: u32 = 0xff;

/// The uprobe cookie of a lifecycle function: its scope kind's index, which
/// argument its entry sends, and whether it has a return probe.
pub const fn scope_cookie(kind: u32, returns: bool, arg: u32) -> u64 {
    let cookie = (kind & SCOPE_KIND_MASK) | ((arg & 0xf) << SCOPE_ARG_SHIFT);
    (if returns {
        cookie | SCOPE_RETURNS
    } else {
        cookie
    }) as u64
}

/// A [`ScopeRecord::scope`] split into the scope kind's index and whether its
/// function has a return probe.
pub const fn split_scope(scope: u32) -> (u32, bool) {
    (scope & SCOPE_KIND_MASK, scope & SCOPE_RETURNS != 0)
}

/// Which argument a scope's entry sends (see [`SCOPE_ARG_SHIFT`]).
pub const fn scope_arg(scope: u32) -> u32 {
    (scope >> SCOPE_ARG_SHIFT) & 0xf
}

/// Slots of the programs' `UPROBE_TRAMPOLINE` array map, which userspace fills
/// from the target's `[uprobes]` mapping once the kernel has created it.
///
/// Why the walk needs it: a function with a pending uretprobe (an rmcp lifecycle
/// function being probed) has its return address replaced by the kernel's
/// trampoline. `bpf_get_stack` puts the real address back; a walk in the
/// program cannot, so it records where it read the trampoline's address
/// ([`TRAMPOLINE_SLOT_MARK`]) and userspace puts the real one back: the entry
/// probe of every function with a return probe sends its return address and
/// where it is ([`ScopeRecord::ret`], [`ScopeRecord::sp`]). While the range is
/// still unknown (slot 0 = 0) the walk cannot tell, and every stack is
/// `bpf_get_stack`'s.
pub mod trampoline {
    /// First address of the target's `[uprobes]` mapping.
    pub const START: u32 = 0;
    /// One past its last address.
    pub const END: u32 = 1;
    /// Slots in the map.
    pub const SLOTS: u32 = 2;

    /// What a return address read by a walk says of the trampoline.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Seen {
        /// Not the trampoline: the range is known and the address is outside it.
        NotIt,
        /// The range is not known yet: any address may be the trampoline's.
        Maybe,
        /// The trampoline's.
        It,
    }

    /// Whether `pc` is the trampoline's, with `start` and `end` as a walk
    /// read them from the map's two slots. Userspace writes the end first
    /// and the start second, so a walk can read a start still 0 beside an
    /// end already set: the range is known only once the start is, never
    /// `0..end`, which holds every address of the target's code and once
    /// cut a stack at its first frame as if a trampoline stood there
    /// (production_builds.rs, a plain release build, ~1 run in 8).
    #[inline(always)]
    pub fn seen(start: u64, end: u64, pc: u64) -> Seen {
        if start == 0 {
            Seen::Maybe
        } else if pc >= start && pc < end {
            Seen::It
        } else {
            Seen::NotIt
        }
    }
}

/// What a record is. Stored as `u32` in [`RecordHeader::kind`].
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordKind {
    /// [`AllocEnterRecord`]: an allocation function was entered (malloc, calloc,
    /// realloc, aligned_alloc, posix_memalign or a Rust alloc shim).
    AllocEnter = 1,
    /// [`FreeRecord`]: free (the libc layer).
    Free = 2,
    /// [`AllocExitRecord`]: an allocation function returned.
    AllocExit = 3,
    /// [`ScopeRecord`]: entry or return of an rmcp lifecycle function.
    Scope = 4,
    /// [`FreeRecord`]: `__rust_dealloc`, the Rust layer. Told apart from
    /// [`RecordKind::Free`] because a `#[global_allocator]` that wraps
    /// `System` calls libc's `free` inside it: when both layers are probed,
    /// that inner free is the same block going back (see [`ALLOC_FLAG_RUST`]).
    RustFree = 5,
    /// [`FreeRecord`]: in a sampled recording once the `SAMPLED` map has
    /// been full, a free (either layer) of a block not filed in it: it may be
    /// one userspace filed ([`EXIT_FLAG_UNFILED`]), whose free is then
    /// written; any other is dropped there.
    UnfiledFree = 6,
}

impl RecordKind {
    pub fn from_u32(value: u32) -> Option<Self> {
        Some(match value {
            1 => Self::AllocEnter,
            2 => Self::Free,
            3 => Self::AllocExit,
            4 => Self::Scope,
            5 => Self::RustFree,
            6 => Self::UnfiledFree,
            _ => return None,
        })
    }
}

/// First 16 bytes of every record.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordHeader {
    /// A [`RecordKind`].
    pub kind: u32,
    /// Thread id (the kernel's pid of the thread).
    pub tid: u32,
    /// `bpf_ktime_get_ns()`: CLOCK_MONOTONIC nanoseconds.
    pub ts_ns: u64,
}

/// An allocation function's entry: the call's arguments.
///
/// Why entry and return are two records, paired in userspace, rather than one
/// record sent at return with the entry's arguments kept in a per-thread map:
/// the map's insert, lookup and delete were most of the probe's own cost per
/// allocation (a hash-map update is the dearest helper a uprobe calls), and
/// the ring buffer already keeps one thread's records in order.
///
/// Only realloc's entry carries a time (`header.ts_ns`; 0 for the others):
/// the recording needs it for realloc alone (`Realloc::entry_ts`), the block's
/// time is its return's, and pairing needs none. `bpf_ktime_get_ns` is one of
/// the dearer parts of a record (~70 ns of ~950 per pair in a VM, where it
/// reads the TSC through the paravirtual clock); userspace stamps the others
/// when they arrive, which is all its rule for calls left open too long needs.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct AllocEnterRecord {
    pub header: RecordHeader,
    /// An [`AllocCall`].
    pub call: u32,
    /// [`ALLOC_FLAG_RUST`] or 0.
    pub flags: u32,
    /// Bytes asked for (calloc: count times size).
    pub size: u64,
    /// realloc: the block being resized.
    pub ptr_arg: u64,
    /// The stack pointer at entry (it points at the return address). The
    /// return's stack pointer is this plus [`RETURN_SP_OFFSET`]: that pairs a
    /// return with its entry even when records of a nested call were lost.
    pub sp: u64,
    /// Records the ring buffer had refused so far (the `DROPS` counter). A call
    /// entered while another is open on the same thread is nested in it (a tail
    /// call such as `realloc(NULL, n)` -> `malloc` even shares its frame)
    /// unless a record was dropped in between: then the open call's return may
    /// be the one dropped, and it is not taken as open.
    pub drops: u64,
}

/// An allocation function's return: the block, and the caller's stack.
///
/// The stack is read here rather than at entry: at the return the frame-pointer
/// walk starts at the caller (the return address is the instruction pointer),
/// while at entry the caller's return address is not in the frame chain yet
/// and would cost one more read of user memory.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct AllocExitRecord {
    pub header: RecordHeader,
    /// Which return probe: an [`AllocCall`] family (`Malloc` for malloc, calloc,
    /// aligned_alloc and the Rust alloc shims; `Realloc`; `PosixMemalign`).
    pub call: u32,
    /// [`EXIT_FLAG_UNFILED`] or 0.
    pub flags: u32,
    /// The block the caller got; 0 when the allocator failed.
    pub addr: u64,
    /// The stack pointer just after the return.
    pub sp: u64,
    /// Bytes of `stack` filled (by the program's frame-pointer walk or by
    /// `bpf_get_stack`, which fill it alike), or `bpf_get_stack`'s negative errno;
    /// 0, not walked, for a call whose new block is not sampled
    /// ([`ALLOC_FLAG_NEW_UNSAMPLED`] on its entry).
    pub stack_bytes: i64,
    /// User return addresses, innermost first (the allocator's caller is first).
    pub stack: [u64; MAX_STACK_DEPTH],
}

/// Set in [`AllocEnterRecord::flags`] by the entries of the Rust allocator
/// shims (`__rust_alloc`, `__rust_alloc_zeroed`, `__rust_realloc`).
///
/// Why userspace needs to know the layer: a process with its own
/// `#[global_allocator]` has its Rust allocations probed at the shims and its
/// C allocations at libc's malloc family. A wrapper around `System` reaches
/// libc from inside a shim: the nested allocation is dropped as any nested
/// call is, and so is a libc `free` made while a shim call is open on its
/// thread (an allocator's realloc moving the block), which only this flag
/// tells from a free made between allocator calls.
pub const ALLOC_FLAG_RUST: u32 = 1;

/// Set in [`AllocEnterRecord::flags`] in a sampled recording, on a realloc
/// recorded only because the block it resizes was sampled: the new block
/// was not, so userspace records the old one's free alone.
pub const ALLOC_FLAG_NEW_UNSAMPLED: u32 = 2;

/// Set in [`AllocEnterRecord::flags`] in a sampled recording, on a call
/// recorded whole whatever the countdown said: its block is aligned to
/// [`WHOLE_ALIGN`] or more (the alignment argument of `__rust_alloc`,
/// `__rust_realloc`, `posix_memalign`, `aligned_alloc` and `memalign`,
/// mimalloc's `mi_*_aligned`, and the alignment in jemalloc's
/// `mallocx`/`rallocx` flags).
/// Userspace writes it as `Record::WholeAlloc`.
pub const ALLOC_FLAG_WHOLE: u32 = 4;

/// Set in [`AllocEnterRecord::flags`] in a sampled recording once the
/// `SAMPLED` map has been full: a realloc of a block not filed in it,
/// recorded because the block may be one userspace filed
/// ([`EXIT_FLAG_UNFILED`]). Userspace writes the old block's going only if
/// it is; with [`ALLOC_FLAG_NEW_UNSAMPLED`] too, nothing else.
pub const ALLOC_FLAG_OLD_UNFILED: u32 = 8;

/// The alignment from which a sampled recording records a block whole:
/// `leakscope_recording::WHOLE_ALIGN` (tokio aligns its task cells and its
/// channels to a cache-line pair, 128 bytes on x86_64), so that tasks are
/// counted from their cells exactly while everything else is sampled.
pub const WHOLE_ALIGN: u64 = 128;

/// Slots of the `SPACINGS` array: spacings between sampling points, the
/// quantiles of an exponential of the recording's mean, which userspace
/// fills and the programs pick from at random (BPF has no floating point to
/// draw one).
pub const SPACING_SLOTS: u32 = 4096;

/// Scope kinds (the low bits of a cookie) whose calls are a session's birth
/// window: `ScopeKind::SessionCreate` and `ScopeKind::WorkerSpawn`. In a
/// sampled recording every allocation made inside one is recorded whole, so
/// that a session's map entry, channels and worker task are seen, and its
/// state is as exact as in a recording of every call.
pub const BIRTH_SCOPE_KINDS: [u32; 2] = [0, 1];

/// Sampled blocks alive that the programs can tell a free of (the `SAMPLED`
/// hash map, by default; `attach --sampled-blocks` sets it for tests). Not
/// preallocated, so its memory follows the blocks alive (~64 B each, and an
/// array of 16 B per entry, 16 MiB, at load). Blocks recorded whole
/// ([`ALLOC_FLAG_WHOLE`]: tokio's task cells and channels) and a session's
/// birth blocks share it: a server that abandons sessions keeps ~2 a
/// session, so a million entries hold ~500,000 leaked sessions (~4.6 hours
/// at 30 a second). Past that nothing is lost: a block the map cannot take
/// is sent marked [`EXIT_FLAG_UNFILED`] and from then on every free is sent
/// ([`RecordKind::UnfiledFree`]), for userspace to match against the blocks
/// it filed itself; only dearer. (At 256 Ki preallocated entries, a
/// 105-minute soak of abandoned sessions filled it after 72 minutes, and
/// the frees it could not file were lost: a wrong verdict.)
pub const SAMPLED_BLOCKS: u32 = 1 << 20;

/// Set in [`AllocExitRecord::flags`] in a sampled recording: the block could
/// not be filed in the `SAMPLED` map (full), so its free reaches userspace
/// as a [`RecordKind::UnfiledFree`], which userspace matches against the
/// blocks it was sent with this flag.
pub const EXIT_FLAG_UNFILED: u32 = 1;

/// A return's stack pointer minus its entry's: `ret` pops the return address.
pub const RETURN_SP_OFFSET: u64 = 8;

/// A block handed back to the allocator.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct FreeRecord {
    pub header: RecordHeader,
    pub addr: u64,
}

/// Which lifecycle function a [`ScopeRecord`] is about. Values are the scope
/// kind's index (`leakscope_recording::ScopeKind`), which with
/// [`SCOPE_RETURNS`] makes a probe's cookie; userspace maps them to names.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ScopeRecord {
    pub header: RecordHeader,
    /// The uprobe's cookie: the scope kind's index, with [`SCOPE_RETURNS`]
    /// set if the function has a return probe ([`split_scope`]).
    pub scope: u32,
    /// 0 = enter, 1 = exit.
    pub phase: u32,
    /// The argument the cookie names at entry ([`scope_arg`], usually the
    /// first); return value at exit.
    pub arg: u64,
    /// The stack pointer: at entry it points to the return address, at exit
    /// it is 8 above that (the return popped it).
    pub sp: u64,
    /// At the entry of a function with a return probe, its return address
    /// (the word at `sp`, 0 if unreadable), which the kernel's trampoline
    /// replaces while the function runs, so that stack walks find the
    /// trampoline in its place (see [`trampoline`]). Else 0.
    pub ret: u64,
}

/// Scope phase values of [`ScopeRecord::phase`].
pub const PHASE_ENTER: u32 = 0;
pub const PHASE_EXIT: u32 = 1;

/// Indices of the probe's drop counters (a per-CPU array map named `LOST`).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LostReason {
    /// The ring buffer was full.
    RingFull = 0,
    /// A posix_memalign call's slot was taken by another thread's call while
    /// it ran, so its block is not known.
    PendingFull = 1,
    /// `bpf_get_stack` failed (the record is still sent, without frames).
    Stack = 2,
}

/// Number of [`LostReason`] counters.
pub const LOST_REASONS: u32 = 3;

impl LostReason {
    /// Every counter, in index order.
    pub const ALL: [LostReason; LOST_REASONS as usize] = [
        LostReason::RingFull,
        LostReason::PendingFull,
        LostReason::Stack,
    ];
}

#[cfg(feature = "user")]
impl From<LostReason> for leakscope_recording::LostReason {
    fn from(reason: LostReason) -> Self {
        match reason {
            LostReason::RingFull => Self::RingFull,
            LostReason::PendingFull => Self::PendingFull,
            LostReason::Stack => Self::Stack,
        }
    }
}

/// Which allocation function a call is.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AllocCall {
    Malloc = 1,
    Calloc = 2,
    Realloc = 3,
    PosixMemalign = 4,
    AlignedAlloc = 5,
}

impl AllocCall {
    pub fn from_u32(value: u32) -> Option<Self> {
        Some(match value {
            1 => Self::Malloc,
            2 => Self::Calloc,
            3 => Self::Realloc,
            4 => Self::PosixMemalign,
            5 => Self::AlignedAlloc,
            _ => return None,
        })
    }

    /// The return probe this call's return goes through (see [`AllocExitRecord::call`]).
    pub fn exit(self) -> Self {
        match self {
            Self::Malloc | Self::Calloc | Self::AlignedAlloc => Self::Malloc,
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::{align_of, size_of};

    #[test]
    fn records_are_ring_buffer_friendly() {
        assert_eq!(size_of::<RecordHeader>(), 16);
        assert_eq!(size_of::<AllocEnterRecord>(), 56);
        assert_eq!(
            size_of::<AllocExitRecord>(),
            16 + 8 * 4 + 8 * MAX_STACK_DEPTH
        );
        assert_eq!(size_of::<FreeRecord>(), 24);
        assert_eq!(size_of::<ScopeRecord>(), 48);
        assert_eq!(align_of::<AllocExitRecord>(), 8);
    }

    #[test]
    fn a_range_half_published_is_not_yet_known() {
        use trampoline::{Seen, seen};
        let (start, end) = (0x7fe0_e1ff_f000, 0x7fe0_e200_0000);
        let code = 0x55d0_c0a0_1234;
        // The end written, the start not yet: no address is the trampoline's
        // for sure, the binary's code least of all.
        assert_eq!(seen(0, end, code), Seen::Maybe);
        assert_eq!(seen(0, end, start + 0x10), Seen::Maybe);
        assert_eq!(seen(0, 0, code), Seen::Maybe);
        assert_eq!(seen(start, end, start + 0x10), Seen::It);
        assert_eq!(seen(start, end, code), Seen::NotIt);
        assert_eq!(seen(start, end, end), Seen::NotIt);
    }
}
