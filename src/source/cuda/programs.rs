//! The probes' BPF programs, assembled here. Three kinds, each with its probe's number baked
//! in:
//!
//! - **count** (on entry): adds one to `counts[pid, tid, probe, 0]`, and for a copy the size
//!   argument (the third, `%rdx` on x86-64) to its bytes; for an NCCL collective the third
//!   argument (its element count) to `counts[pid, tid, probe, fourth argument]` (its
//!   datatype, which userspace turns into bytes); for a send or receive the second argument by
//!   the third;
//!   a kernel launch's only while its launch window's gate (`window_open`) is open (its
//!   timing entry likewise);
//! - **wait entry**: `starts[pid_tgid] = (now, probe)` unless the thread is already inside a
//!   wait (the outermost one is timed);
//! - **wait exit** (on return): if the thread's open wait is this probe's, adds its duration to
//!   `waits[pid, tid, probe]` (where it lasted at least the program's minimum) and closes it.
//!
//! A kernel launch, timed only in the launch windows, uses a `starts` map of its own whose
//! entries a new launch overwrites (a launch in progress when a window closes never returns
//! through its probe), and counts only launches that lasted long enough to have waited for
//! room in the launch queue, noting when a thread's first of them began and its last returned
//! (`held_first`, `held_last`, keyed by `pid_tgid`; cleared after each window).
//!
//! - **mark** (on entry): writes (pid, tid, now, probe) to the `marks` ring buffer: when a
//!   process synced, copied or issued a collective, for the loop's cadence; an NCCL send's
//!   mark also carries its peer (which ranks a process sends to tells a pipeline stage from
//!   an all-to-all).
//!
//! Keys of `counts` and `waits` are 16 bytes (u32 pid, tid, probe, 0) and their values two u64
//! (hits, and bytes or nanoseconds); `starts` maps the u64 `pid << 32 | tid` to (start ns,
//! probe). A thread with an entry in `starts` is inside a CUDA wait now: the stack sampler asks.

use super::bpf::R8;
use super::bpf::{Insn, GET_CURRENT_PID_TGID, KTIME_GET_NS, MAP_DELETE_ELEM, RINGBUF_OUTPUT};
use super::bpf::{ANY, MAP_LOOKUP_ELEM, MAP_UPDATE_ELEM, NOEXIST, R0, R1, R10, R2, R3, R4, R6, R7};

/// Offsets of the second, third and fourth argument registers in x86-64's `struct pt_regs`
/// (%rsi, %rdx, %rcx).
#[cfg(target_arch = "x86_64")]
const SECOND_ARGUMENT: i16 = 104;
#[cfg(target_arch = "x86_64")]
const THIRD_ARGUMENT: i16 = 96;
#[cfg(target_arch = "x86_64")]
const FOURTH_ARGUMENT: i16 = 88;
/// aarch64's `struct user_pt_regs`: x1, x2, x3.
#[cfg(target_arch = "aarch64")]
const SECOND_ARGUMENT: i16 = 8;
#[cfg(target_arch = "aarch64")]
const THIRD_ARGUMENT: i16 = 16;
#[cfg(target_arch = "aarch64")]
const FOURTH_ARGUMENT: i16 = 24;

/// What a count program adds beside the hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Measured {
    Nothing,
    /// The third argument, to the value's second word (a copy's bytes).
    Third,
    /// The third argument too, keyed by the fourth (an NCCL collective's elements, by type).
    ThirdByFourth,
    /// The second argument, keyed by the third (an NCCL send's or receive's elements, by
    /// type).
    SecondByThird,
}

impl Measured {
    /// Where the amount added to the bytes word is, and the argument that keys it, if any.
    fn arguments(self) -> Option<(i16, Option<i16>)> {
        match self {
            Measured::Nothing => None,
            Measured::Third => Some((THIRD_ARGUMENT, None)),
            Measured::ThirdByFourth => Some((THIRD_ARGUMENT, Some(FOURTH_ARGUMENT))),
            Measured::SecondByThird => Some((SECOND_ARGUMENT, Some(THIRD_ARGUMENT))),
        }
    }
}

fn jeq_zero_over(block: &[Insn]) -> Insn {
    Insn::jeq_imm(R0, 0, block.len() as i16)
}

/// `r2 = r10 + offset` (a pointer into the stack), as argument `register`.
fn stack_pointer(register: u8, offset: i32) -> [Insn; 2] {
    [Insn::mov(register, R10), Insn::add_imm(register, offset)]
}

fn finish() -> [Insn; 2] {
    [Insn::mov_imm(R0, 0), Insn::exit()]
}

/// The start of a gated program: it ends at once unless key 0 of the map `gate` holds a
/// value other than zero. Uses r0-r5 and the stack's top four bytes.
fn gated(gate: i32) -> Vec<Insn> {
    let mut code = vec![Insn::store32_imm(R10, -4, 0)];
    code.extend(Insn::load_map(R1, gate));
    code.extend(stack_pointer(R2, -4));
    code.push(Insn::call(MAP_LOOKUP_ELEM));
    code.push(Insn::jne_imm(R0, 0, 2));
    code.extend(finish());
    code.push(Insn::load64(R1, R0, 0));
    code.push(Insn::jne_imm(R1, 0, 2));
    code.extend(finish());
    code
}

/// The count program of `probe`; with a `gate` (a map whose key 0 holds a u64), it counts
/// only while that value is not zero.
pub fn count(counts: i32, probe: u32, measured: Measured, gate: Option<i32>) -> Vec<Insn> {
    let arguments = measured.arguments();
    let mut code = vec![Insn::mov(R6, R1)];
    code.extend(gate.map(gated).unwrap_or_default());
    code.extend([
        Insn::call(GET_CURRENT_PID_TGID),
        Insn::store32(R10, -12, R0),
        Insn::rsh_imm(R0, 32),
        Insn::store32(R10, -16, R0),
        Insn::store32_imm(R10, -8, probe as i32),
    ]);
    if let Some((_, Some(key))) = arguments {
        code.push(Insn::load64(R1, R6, key));
        code.push(Insn::store32(R10, -4, R1));
    } else {
        code.push(Insn::store32_imm(R10, -4, 0));
    }
    code.extend(Insn::load_map(R1, counts));
    code.extend(stack_pointer(R2, -16));
    code.push(Insn::call(MAP_LOOKUP_ELEM));
    // Found: add to it.
    let mut found = vec![Insn::mov_imm(R1, 1), Insn::atomic_add64(R0, 0, R1)];
    if let Some((amount, _)) = arguments {
        found.push(Insn::load64(R1, R6, amount));
        found.push(Insn::atomic_add64(R0, 8, R1));
    }
    found.extend(finish());
    code.push(jeq_zero_over(&found));
    code.extend(found);
    // Not yet: insert (1, bytes).
    code.push(Insn::store64_imm(R10, -32, 1));
    if let Some((amount, _)) = arguments {
        code.push(Insn::load64(R1, R6, amount));
        code.push(Insn::store64(R10, -24, R1));
    } else {
        code.push(Insn::store64_imm(R10, -24, 0));
    }
    code.extend(Insn::load_map(R1, counts));
    code.extend(stack_pointer(R2, -16));
    code.extend(stack_pointer(R3, -32));
    code.push(Insn::mov_imm(R4, NOEXIST));
    code.push(Insn::call(MAP_UPDATE_ELEM));
    code.extend(finish());
    code
}

/// The entry program of a timed wait; `overwrite`: a thread's open entry is replaced, not
/// kept; with a `gate` (as [`count`]'s), only calls begun while it is open are timed.
pub fn wait_entry(starts: i32, probe: u32, overwrite: bool, gate: Option<i32>) -> Vec<Insn> {
    let mut code = gate.map(gated).unwrap_or_default();
    code.extend([
        Insn::call(GET_CURRENT_PID_TGID),
        Insn::store64(R10, -8, R0),
        Insn::call(KTIME_GET_NS),
        Insn::store64(R10, -24, R0),
        Insn::store64_imm(R10, -16, probe as i32),
    ]);
    code.extend(Insn::load_map(R1, starts));
    code.extend(stack_pointer(R2, -8));
    code.extend(stack_pointer(R3, -24));
    code.push(Insn::mov_imm(R4, if overwrite { ANY } else { NOEXIST }));
    code.push(Insn::call(MAP_UPDATE_ELEM));
    code.extend(finish());
    code
}

/// Bytes of one mark: u32 pid, u32 tid, u64 CLOCK_MONOTONIC ns, u32 probe, u32 peer + 1 (0:
/// none).
pub const MARK_BYTES: usize = 24;

/// The mark program of `probe`: one record to the ring, the consumer not woken (it polls).
/// With `peer`, the record carries the call's fourth argument plus one: an NCCL send's peer
/// (`ncclSend(buffer, count, datatype, peer, ...)`).
pub fn mark(ring: i32, probe: u32, peer: bool) -> Vec<Insn> {
    const NO_WAKEUP: i32 = 1;
    let mut code = vec![
        Insn::mov(R6, R1),
        Insn::call(GET_CURRENT_PID_TGID),
        Insn::store32(R10, -20, R0),
        Insn::rsh_imm(R0, 32),
        Insn::store32(R10, -24, R0),
        Insn::call(KTIME_GET_NS),
        Insn::store64(R10, -16, R0),
        Insn::store32_imm(R10, -8, probe as i32),
    ];
    if peer {
        code.push(Insn::load64(R1, R6, FOURTH_ARGUMENT));
        code.push(Insn::add_imm(R1, 1));
        code.push(Insn::store32(R10, -4, R1));
    } else {
        code.push(Insn::store32_imm(R10, -4, 0));
    }
    code.extend(Insn::load_map(R1, ring));
    code.extend(stack_pointer(R2, -(MARK_BYTES as i32)));
    code.push(Insn::mov_imm(R3, MARK_BYTES as i32));
    code.push(Insn::mov_imm(R4, NO_WAKEUP));
    code.push(Insn::call(RINGBUF_OUTPUT));
    code.extend(finish());
    code
}

/// One call as its mark tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mark {
    pub pid: u32,
    pub tid: u32,
    pub ns: u64,
    pub probe: usize,
    /// The peer of an NCCL send (`None` for every other call).
    pub peer: Option<u32>,
}

/// A mark's record, decoded. Pure.
pub fn decode_mark(record: &[u8]) -> Option<Mark> {
    let u32_at = |i: usize| Some(u32::from_ne_bytes(record.get(i..i + 4)?.try_into().ok()?));
    let ns = u64::from_ne_bytes(record.get(8..16)?.try_into().ok()?);
    Some(Mark {
        pid: u32_at(0)?,
        tid: u32_at(4)?,
        ns,
        probe: u32_at(16)? as usize,
        peer: u32_at(20)?.checked_sub(1),
    })
}

/// The return program of a timed wait, adding only waits of at least `min_ns`; for those,
/// where maps `held = (first, last)` are given, noting when the thread's first one began
/// (`first[pid_tgid]`, kept once written) and its last one returned (`last[pid_tgid]`).
pub fn wait_exit(
    starts: i32,
    waits: i32,
    probe: u32,
    min_ns: i32,
    held: Option<(i32, i32)>,
) -> Vec<Insn> {
    let mut head = vec![
        Insn::call(GET_CURRENT_PID_TGID),
        Insn::mov(R6, R0),
        Insn::store64(R10, -8, R0),
    ];
    head.extend(Insn::load_map(R1, starts));
    head.extend(stack_pointer(R2, -8));
    head.push(Insn::call(MAP_LOOKUP_ELEM));

    let mut record = vec![
        Insn::mov(R1, R6),
        Insn::rsh_imm(R1, 32),
        Insn::store32(R10, -32, R1),
        Insn::store32(R10, -28, R6),
        Insn::store32_imm(R10, -24, probe as i32),
        Insn::store32_imm(R10, -20, 0),
    ];
    record.extend(Insn::load_map(R1, waits));
    record.extend(stack_pointer(R2, -32));
    record.push(Insn::call(MAP_LOOKUP_ELEM));
    let mut insert = vec![Insn::store64_imm(R10, -48, 1), Insn::store64(R10, -40, R7)];
    insert.extend(Insn::load_map(R1, waits));
    insert.extend(stack_pointer(R2, -32));
    insert.extend(stack_pointer(R3, -48));
    insert.push(Insn::mov_imm(R4, NOEXIST));
    insert.push(Insn::call(MAP_UPDATE_ELEM));
    let add = [
        Insn::mov_imm(R1, 1),
        Insn::atomic_add64(R0, 0, R1),
        Insn::atomic_add64(R0, 8, R7),
        Insn::ja(insert.len() as i16),
    ];
    record.push(jeq_zero_over(&add));
    record.extend(add);
    record.extend(insert);
    if let Some((first, last)) = held {
        record.push(Insn::call(KTIME_GET_NS));
        record.push(Insn::store64(R10, -56, R0));
        record.extend(Insn::load_map(R1, last));
        record.extend(stack_pointer(R2, -8));
        record.extend(stack_pointer(R3, -56));
        record.push(Insn::mov_imm(R4, ANY));
        record.push(Insn::call(MAP_UPDATE_ELEM));
        // Its start: the return less the duration (r7 survives the calls).
        record.push(Insn::load64(R1, R10, -56));
        record.push(Insn::sub(R1, R7));
        record.push(Insn::store64(R10, -56, R1));
        record.extend(Insn::load_map(R1, first));
        record.extend(stack_pointer(R2, -8));
        record.extend(stack_pointer(R3, -56));
        record.push(Insn::mov_imm(R4, NOEXIST));
        record.push(Insn::call(MAP_UPDATE_ELEM));
    }
    let mut close = vec![
        Insn::call(KTIME_GET_NS),
        Insn::sub(R0, R7),
        Insn::mov(R7, R0),
        Insn::jlt_imm(R7, min_ns, record.len() as i16),
    ];
    close.extend(record);
    let mut delete = Insn::load_map(R1, starts).to_vec();
    delete.extend(stack_pointer(R2, -8));
    delete.push(Insn::call(MAP_DELETE_ELEM));
    close.extend(delete);

    // The open wait is this probe's: read it, time it, close it.
    let mut opened = vec![
        Insn::load64(R7, R0, 0),
        Insn::load64(R8, R0, 8),
        Insn::jne_imm(R8, probe as i32, close.len() as i16),
    ];
    opened.extend(close);

    let mut code = head;
    code.push(jeq_zero_over(&opened));
    code.extend(opened);
    code.extend(finish());
    code
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every jump lands inside the program, and every path ends in `exit`.
    fn well_formed(code: &[Insn]) {
        for (at, insn) in code.iter().enumerate() {
            if insn.code & 0x07 == 0x05 && insn.code != 0x85 && insn.code != 0x95 {
                let target = at as i64 + 1 + i64::from(insn.off);
                assert!(
                    (0..code.len() as i64).contains(&target),
                    "jump at {at} to {target} of {}",
                    code.len()
                );
            }
        }
        assert_eq!(code.last().map(|i| i.code), Some(0x95));
    }

    /// What the gated count programs probe in the test below: a function of this binary.
    #[no_mangle]
    #[inline(never)]
    pub extern "C" fn gated_count_probe_target(x: u64) -> u64 {
        std::hint::black_box(x).wrapping_add(1)
    }

    #[test]
    fn a_gated_count_counts_only_while_its_gate_is_open() {
        use super::super::bpf::{Attached, Map, Program, UprobePmu};
        use std::sync::Arc;
        // Loading and attaching need CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN): where this
        // test runs without them, the refusal is the probes' own (tests/cuda_probes.rs).
        let (Ok(counts), Ok(gate), Ok(pmu)) = (
            Map::hash(16, 16, 16),
            Map::hash(4, 8, 1),
            UprobePmu::find(std::path::Path::new("/sys")),
        ) else {
            return;
        };
        let program = Program::load(&count(counts.fd(), 3, Measured::Nothing, Some(gate.fd())))
            .map(Arc::new)
            .unwrap();
        let exe = std::env::current_exe().unwrap();
        let bytes = std::fs::read(&exe).unwrap();
        let offset =
            super::super::elf::offsets(&bytes, &["gated_count_probe_target"]).unwrap()[0].unwrap();
        let _attached = Attached::new(pmu, &exe, offset, false, program).unwrap();
        let hits = || {
            counts
                .entries()
                .iter()
                .filter(|(key, _)| key[..4] == std::process::id().to_ne_bytes() && key[8] == 3)
                .map(|(_, value)| u64::from_ne_bytes(value[..8].try_into().unwrap()))
                .sum::<u64>()
        };
        let set = |open: u64| gate.set(&0u32.to_ne_bytes(), &open.to_ne_bytes()).unwrap();
        let call = |n: u64| (0..n).fold(0, |acc, x| acc ^ gated_count_probe_target(x));
        // No gate value yet, then a closed gate: nothing counted.
        call(10);
        set(0);
        call(10);
        assert_eq!(hits(), 0);
        set(1);
        call(25);
        assert_eq!(hits(), 25);
        set(0);
        call(10);
        assert_eq!(hits(), 25);
    }

    /// What the mark programs probe in the test below: `ncclSend`'s shape (the peer fourth).
    #[no_mangle]
    #[inline(never)]
    pub extern "C" fn mark_probe_target(buffer: u64, count: u64, datatype: u64, peer: u64) -> u64 {
        std::hint::black_box(buffer ^ count ^ datatype ^ peer)
    }

    #[test]
    fn a_send_mark_carries_its_peer_and_other_marks_none() {
        use super::super::bpf::{Attached, Program, UprobePmu};
        use super::super::ring::Ring;
        use std::sync::Arc;
        // Needs CAP_BPF and CAP_PERFMON, as the test above.
        let (Ok(ring), Ok(pmu)) = (
            Ring::new(1 << 16),
            UprobePmu::find(std::path::Path::new("/sys")),
        ) else {
            return;
        };
        let exe = std::env::current_exe().unwrap();
        let bytes = std::fs::read(&exe).unwrap();
        let offset =
            super::super::elf::offsets(&bytes, &["mark_probe_target"]).unwrap()[0].unwrap();
        let attach = |probe: u32, peer: bool| {
            let program = Program::load(&mark(ring.fd(), probe, peer))
                .map(Arc::new)
                .unwrap();
            Attached::new(pmu, &exe, offset, false, program).unwrap()
        };
        let _with_peer = attach(4, true);
        let _without = attach(5, false);
        for peer in [0, 3, 6] {
            mark_probe_target(1, 2, 7, peer);
        }
        let mut marks = Vec::new();
        ring.drain(|record| marks.extend(decode_mark(record)));
        let mine = |probe: usize| -> Vec<Option<u32>> {
            let pid = std::process::id();
            let of = marks.iter().filter(|m| m.pid == pid && m.probe == probe);
            of.map(|m| m.peer).collect()
        };
        assert_eq!(mine(4), [Some(0), Some(3), Some(6)]);
        assert_eq!(mine(5), [None, None, None]);
    }

    #[test]
    fn the_programs_jump_within_themselves() {
        well_formed(&count(3, 1, Measured::Nothing, None));
        well_formed(&count(3, 1, Measured::Nothing, Some(4)));
        well_formed(&count(3, 1, Measured::Third, None));
        well_formed(&count(3, 1, Measured::ThirdByFourth, None));
        well_formed(&count(3, 1, Measured::SecondByThird, None));
        well_formed(&wait_entry(4, 7, false, None));
        well_formed(&wait_entry(4, 7, true, Some(9)));
        well_formed(&wait_exit(4, 5, 7, 0, None));
        well_formed(&wait_exit(4, 5, 7, 100_000, Some((6, 8))));
        well_formed(&mark(6, 7, false));
        well_formed(&mark(6, 7, true));
    }
}
