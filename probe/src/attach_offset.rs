//! Where to put an entry-only uprobe so that it costs least.
//!
//! On x86-64 the kernel emulates a few instructions under a uprobe (`push reg`,
//! branches, nops) and single-steps every other one out of line, which costs an
//! extra trap: glibc's `free` begins with `test %rdi,%rdi` and probing it there
//! costs ~10 us per call, against ~0.8 us at the `push %rbp` right after its NULL
//! check. So for probes that only need the arguments at entry we decode the
//! prologue and move forward past instructions that leave the argument registers
//! and memory alone, until an emulated `push`. A `test rdi,rdi; je` NULL guard is
//! skipped only for functions where a NULL argument is a no-op (`free`): those calls
//! are then not seen, and need not be. Return probes stay at offset 0: a uretprobe
//! must see the return address at `[rsp]`.

use iced_x86::{
    Code, Decoder, DecoderOptions, FlowControl, Instruction, InstructionInfoFactory, Mnemonic,
    OpAccess, OpKind, Register,
};

/// How far into a prologue we look.
const MAX_INSTRUCTIONS: usize = 6;

/// The cheapest offset from the function start at which an entry probe still sees
/// every argument register unchanged. `null_guard_ok`: a NULL first argument makes
/// the call a no-op, so a leading NULL check may be skipped.
pub fn entry_probe_offset(code: &[u8], null_guard_ok: bool) -> u64 {
    let mut decoder = Decoder::with_ip(64, code, 0, DecoderOptions::NONE);
    let mut previous: Option<Instruction> = None;
    for _ in 0..MAX_INSTRUCTIONS {
        if !decoder.can_decode() {
            break;
        }
        let instruction = decoder.decode();
        if instruction.is_invalid() {
            break;
        }
        if is_emulated(&instruction) {
            return instruction.ip();
        }
        let skippable = is_harmless(&instruction)
            || (null_guard_ok
                && matches!(instruction.mnemonic(), Mnemonic::Je)
                && previous.as_ref().is_some_and(is_test_rdi_rdi));
        if !skippable {
            break;
        }
        previous = Some(instruction);
    }
    0
}

/// `push r64`: emulated by the kernel's uprobe code, no single-step.
fn is_emulated(instruction: &Instruction) -> bool {
    matches!(instruction.code(), Code::Push_r64)
}

/// Instructions we may step over without changing what the probe reads: they only
/// set flags (`test`, `cmp`) or do nothing (`endbr64`, `nop`).
fn is_harmless(instruction: &Instruction) -> bool {
    matches!(
        instruction.mnemonic(),
        Mnemonic::Test | Mnemonic::Cmp | Mnemonic::Endbr64 | Mnemonic::Nop
    )
}

/// The integer argument registers of the System V ABI.
const ARGUMENT_REGISTERS: [Register; 6] = [
    Register::RDI,
    Register::RSI,
    Register::RDX,
    Register::RCX,
    Register::R8,
    Register::R9,
];

/// Later offsets where an entry probe still sees every argument register as
/// the caller set it: the following instruction boundaries, for as long as
/// the instructions from `from` on write no argument register and do not
/// branch (a branch is the last place: the probe is *at* it). Tried in turn
/// when the kernel cannot probe the instruction at `from` ("Unknown error
/// 524", ENOTSUPP): a counting `#[global_allocator]`'s `__rust_dealloc` built
/// without frame pointers begins with `lock sub %rsi, COUNT(%rip)`, which the
/// kernel's uprobes refuse, and goes on to `jmp *free`.
pub fn later_entry_offsets(code: &[u8], from: u64) -> Vec<u64> {
    let mut decoder = Decoder::with_ip(64, code, 0, DecoderOptions::NONE);
    let mut info = InstructionInfoFactory::new();
    let mut later = Vec::new();
    for _ in 0..MAX_INSTRUCTIONS {
        if !decoder.can_decode() {
            break;
        }
        let instruction = decoder.decode();
        if instruction.is_invalid() {
            break;
        }
        if instruction.ip() < from {
            continue;
        }
        if instruction.ip() > from {
            later.push(instruction.ip());
        }
        let writes_argument = info.info(&instruction).used_registers().iter().any(|used| {
            matches!(
                used.access(),
                OpAccess::Write
                    | OpAccess::CondWrite
                    | OpAccess::ReadWrite
                    | OpAccess::ReadCondWrite
            ) && ARGUMENT_REGISTERS.contains(&used.register().full_register())
        });
        if writes_argument || instruction.flow_control() != FlowControl::Next {
            break;
        }
    }
    later
}

fn is_test_rdi_rdi(instruction: &Instruction) -> bool {
    instruction.mnemonic() == Mnemonic::Test
        && instruction.op0_kind() == OpKind::Register
        && instruction.op1_kind() == OpKind::Register
        && instruction.op0_register() == Register::RDI
        && instruction.op1_register() == Register::RDI
}

#[cfg(test)]
mod tests {
    use super::*;

    /// glibc 2.36 `free`: test %rdi,%rdi; je +0xbf; push %rbp; lea -0x10(%rdi),%rsi
    const GLIBC_FREE: &[u8] = &[
        0x48, 0x85, 0xff, 0x0f, 0x84, 0xbf, 0x00, 0x00, 0x00, 0x55, 0x48, 0x8d, 0x77, 0xf0,
    ];
    /// glibc 2.36 `malloc`: push %r12; push %rbp; push %rbx
    const GLIBC_MALLOC: &[u8] = &[0x41, 0x54, 0x55, 0x53, 0x48, 0x89, 0xfb];
    /// mov %rdi,%rbx; push %rbp (the move writes a register: stop)
    const WRITES_FIRST: &[u8] = &[0x48, 0x89, 0xfb, 0x55];

    #[test]
    fn free_is_probed_after_its_null_check() {
        assert_eq!(entry_probe_offset(GLIBC_FREE, true), 9);
    }

    #[test]
    fn null_check_is_kept_when_null_matters() {
        assert_eq!(entry_probe_offset(GLIBC_FREE, false), 0);
    }

    /// A counting wrapper's `__rust_dealloc` without frame pointers:
    /// lock sub %rsi,0x42928(%rip); jmp *0x40742(%rip)
    const COUNTING_DEALLOC: &[u8] = &[
        0xf0, 0x48, 0x29, 0x35, 0x28, 0x29, 0x04, 0x00, 0xff, 0x25, 0x42, 0x07, 0x04, 0x00,
    ];

    #[test]
    fn later_offsets_keep_the_arguments_and_stop_at_a_branch() {
        assert_eq!(later_entry_offsets(COUNTING_DEALLOC, 0), vec![8]);
        // push %r12; push %rbp; push %rbx; mov %rdi,%rbx (writes rbx only; the
        // slice ends there)
        assert_eq!(later_entry_offsets(GLIBC_MALLOC, 0), vec![2, 3, 4]);
        // test; je: the branch is the last place.
        assert_eq!(later_entry_offsets(GLIBC_FREE, 0), vec![3]);
        // lea -0x10(%rdi),%rsi writes an argument register: nothing after it.
        assert_eq!(later_entry_offsets(&GLIBC_FREE[9..], 0), vec![1]);
    }

    #[test]
    fn push_at_start_stays_at_start() {
        assert_eq!(entry_probe_offset(GLIBC_MALLOC, true), 0);
        assert_eq!(entry_probe_offset(WRITES_FIRST, true), 0);
    }
}
