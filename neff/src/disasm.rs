//! Disassembler in the producer's `.asm` syntax, e.g.
//! `PSEUDO_DMA_TRIGGER $S[22]>0 q_gradient_out block_id=0;` (docs/facts/libnrt.md §2, fixture asm).
//!
//! Operand spelling for slots the fixture shows no asm for is ours: `key=value` pairs.

use std::fmt::Write as _;

use isa::slot::{coll_op, Dma2d, Dma2dLeg, Events, Instruction, SpSlot, TraceMode, UpdateMode, WaitMode};

use crate::model::{Neff, Program};

fn wait_str(e: &Events) -> Option<String> {
    let (i, v) = (e.wait_idx, e.semaphore_value);
    Some(match e.wait_mode {
        WaitMode::None => return None,
        WaitMode::EqImm => format!("$S[{i}]=={v}"),
        WaitMode::GtImm => format!("$S[{i}]>{v}"),
        WaitMode::GeImm => format!("$S[{i}]>={v}"),
        m => format!("wait({:#04x},$S[{i}],{v})", m.code()),
    })
}

fn update_str(e: &Events) -> Option<String> {
    let (i, v) = (e.update_idx, e.semaphore_value);
    Some(match e.update_mode {
        UpdateMode::None => return None,
        UpdateMode::IncRead => format!("$S[{i}]+=1@read"),
        UpdateMode::IncComplete => format!("$S[{i}]+=1"),
        UpdateMode::AddImmComplete => format!("$S[{i}]+={v}"),
        UpdateMode::WrRegComplete => format!("$S[{i}]=reg"),
        UpdateMode::Other(c) => format!("update({c:#04x},$S[{i}])"),
    })
}

/// The reduction operator's name for the documented ALU codes ([`coll_op`]); any other code
/// (the simulator's modeled MIN included) raw.
fn coll_op_name(op: u8) -> String {
    match isa::device_ops::alu::op(op) {
        Some(o) if op == coll_op::ADD || op == coll_op::MAX => o.name().into(),
        _ => format!("{op:#04x}"),
    }
}

/// The element type's name ([`isa::DType::name`]) of a DTYPE code, or the code raw.
fn coll_dtype_name(d: u8) -> String {
    match isa::device_ops::dtype::of(d) {
        Some(t) => t.name().into(),
        None => format!("{d:#04x}"),
    }
}

fn leg(name: &str, l: &Dma2dLeg) -> String {
    format!(
        "{name}={:#x}[{},{}]x[{},{}]*{}",
        l.start_addr, l.step_elem[0], l.step_elem[1], l.num_elem[0], l.num_elem[1], l.elem_size
    )
}

fn dma2d_ops(d: &Dma2d, op_key: &str) -> Vec<String> {
    vec![
        leg("src", &d.src),
        leg("dst", &d.dst),
        format!("{op_key}={}", d.op),
        format!("sem={}", d.semaphore),
        format!("inc={}", d.sem_increment),
        format!("prio={}", d.priority_class()),
        format!("dtype={:#04x}>{:#04x}", d.in_dtype, d.out_dtype),
    ]
}

fn payload_hex(p: &[u8]) -> Option<String> {
    let end = p.iter().rposition(|&b| b != 0)? + 1;
    Some(format!("payload={}", p[..end].iter().map(|b| format!("{b:02x}")).collect::<String>()))
}

/// One slot as an `.asm` line (with the trailing `;`).
pub fn disasm_slot(i: &Instruction) -> String {
    let h = i.header();
    let e = i.events();
    let mut parts = vec![h.op().mnemonic()];
    parts.extend(wait_str(&e));
    parts.extend(update_str(&e));
    match i {
        Instruction::DmaTrigger(t) => {
            parts.push(t.queue());
            if t.use_raw_count == 0 {
                parts.push(format!("block_id={}", t.block_id_or_count));
            } else {
                parts.push(format!("count={}", t.block_id_or_count));
            }
        }
        Instruction::TriggerCollective(t) => {
            parts.push(match isa::device_ops::ctype::name(t.ctype) {
                Some(n) => n.into(),
                None => format!("ctype={:#04x}", t.ctype),
            });
            parts.push(format!("op={}", coll_op_name(t.op)));
            parts.push(format!("dtype={}", coll_dtype_name(t.dtype)));
            parts.push(format!("group={}", t.group_id));
            parts.push(format!("in=%{}", t.input_tensor_id));
            parts.push(format!("out=%{}", t.output_tensor_id));
            parts.push(format!("n={}", t.num_elements));
            if t.src_offset_elems != 0 || t.dst_offset_elems != 0 {
                parts.push(format!("src_off={}", t.src_offset_elems));
                parts.push(format!("dst_off={}", t.dst_offset_elems));
            }
        }
        Instruction::DmaMemcpy(d) => parts.extend(dma2d_ops(d, "compute_op")),
        Instruction::PseudoDmaDirect2d(d) => parts.extend(dma2d_ops(d, "dge_op")),
        Instruction::EventSemaphore(x)
        | Instruction::Nop(x)
        | Instruction::Notify(x)
        | Instruction::Write(x)
        | Instruction::Semaphore(x)
        | Instruction::ExtendedInst(x) => parts.extend(payload_hex(&x.payload)),
        Instruction::Raw { bytes, .. } => parts.extend(payload_hex(&bytes[12..])),
    }
    match h.trace_mode() {
        TraceMode::Off => {}
        TraceMode::OnStart => parts.push("trace=start".into()),
        TraceMode::OnEnd => parts.push("trace=end".into()),
        TraceMode::Both => parts.push("trace=both".into()),
    }
    if h.halt_en() {
        parts.push("halt".into());
    }
    if h.debug_hint != 0 {
        parts.push(format!("hint={}", h.debug_hint));
    }
    format!("{};", parts.join(" "))
}

/// One SP slot as an `.asm` line.
pub fn disasm_sp(s: &SpSlot) -> String {
    let name = s.opcode.name().map(str::to_string).unwrap_or_else(|| format!("SP_OP_{:#04x}", s.opcode.code()));
    let ops: String = s.operands.iter().map(|b| format!("{b:02x}")).collect();
    format!("{name}{} {ops};", if s.phase { ".p1" } else { "" })
}

/// A whole program, one line per slot.
pub fn disasm_program(p: &Program) -> Vec<String> {
    match p {
        Program::Tpb(v) => v.iter().map(disasm_slot).collect(),
        Program::Sp(v) => v.iter().map(disasm_sp).collect(),
    }
}

/// Every program of every graph, with `; graph/engine` section comments.
pub fn disassemble(neff: &Neff) -> String {
    let mut out = String::new();
    for g in &neff.graphs {
        for e in &g.engines {
            let _ = writeln!(
                out,
                "; graph {} engine {} ({} slots{})",
                g.name,
                e.kind.name(),
                e.program.len(),
                e.instr_member.as_deref().map(|m| format!(", {m}")).unwrap_or_default()
            );
            for (i, l) in disasm_program(&e.program).into_iter().enumerate() {
                let _ = writeln!(out, "{i:6}: {l}");
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use isa::slot::{DmaTrigger, EventsOnly, Opcode};

    #[test]
    fn fixture_line() {
        let t = DmaTrigger::new(Events::wait_gt(22, 0), "q_gradient_out", 0);
        assert_eq!(disasm_slot(&Instruction::DmaTrigger(t)), "PSEUDO_DMA_TRIGGER $S[22]>0 q_gradient_out block_id=0;");
        let e = EventsOnly::new(Opcode::EventSemaphore, Events::wait_gt(11, 0));
        assert_eq!(disasm_slot(&Instruction::EventSemaphore(e)), "EVENT_SEMAPHORE $S[11]>0;");
        let raw = Instruction::decode_slice(&[0x03, 0x10]);
        assert_eq!(disasm_slot(&raw), "OP_0x03;");
    }

    #[test]
    fn collective_names_come_from_the_one_dtype_and_op() {
        let dt: Vec<_> = [0x0A, 0x06, 0x07, 0x08, 0x09, 0x0B].map(coll_dtype_name).to_vec();
        assert_eq!(dt, ["fp32", "bf16", "fp16", "int32", "uint32", "0x0b"]);
        // MIN's code is the simulator's modeled one, not a documented encoding: shown raw.
        let ops: Vec<_> = [0x04, 0x08, 0x0C].map(coll_op_name).to_vec();
        assert_eq!(ops, ["add", "max", "0x0c"]);
    }
}
