//! Engine programs: the `.bin` instruction streams decoded into slots, and the cross-references
//! the load-time lowering relies on.

use std::collections::{HashMap, HashSet};

use isa::slot::{Instruction, SpSlot, SLOT_BYTES, SLOT_WORDS, SP_SLOT_BYTES};

use super::json::bad;
use super::MAX_INSTRUCTIONS;
use crate::error::NeffError;
use crate::model::*;

/// Decodes a `.bin`: 64-byte slots with `inst_word_len == 16` (8-byte slots for SP).
pub fn decode_program(member: &str, kind: Engine, b: &[u8]) -> Result<Program, NeffError> {
    let slot = if kind == Engine::Sp { SP_SLOT_BYTES } else { SLOT_BYTES };
    if b.len() / slot > MAX_INSTRUCTIONS {
        return Err(bad(
            member,
            "length",
            format!("{} instructions, over the limit of {MAX_INSTRUCTIONS} per engine program", b.len() / slot),
        ));
    }
    if kind == Engine::Sp {
        if !b.len().is_multiple_of(SP_SLOT_BYTES) {
            return Err(bad(member, "length", format!("{} bytes is not a multiple of the 8-byte SP slot", b.len())));
        }
        let slots = b
            .chunks_exact(SP_SLOT_BYTES)
            .map(|s| {
                let mut a = [0u8; SP_SLOT_BYTES];
                a.copy_from_slice(s);
                SpSlot::decode(&a)
            })
            .collect();
        return Ok(Program::Sp(slots));
    }
    if !b.len().is_multiple_of(SLOT_BYTES) {
        return Err(bad(member, "length", format!("{} bytes is not a multiple of the 64-byte slot", b.len())));
    }
    let mut out = Vec::with_capacity(b.len() / SLOT_BYTES);
    for (i, s) in b.chunks_exact(SLOT_BYTES).enumerate() {
        let mut a = [0u8; SLOT_BYTES];
        a.copy_from_slice(s);
        if a[1] != SLOT_WORDS {
            return Err(bad(
                member,
                &format!("slot[{i}].inst_word_len"),
                format!("{} (opcode {:#04x}), expected 16", a[1], a[0]),
            ));
        }
        out.push(Instruction::decode(&a));
    }
    Ok(Program::Tpb(out))
}

/// Cross-references the load-time lowering needs: DMA triggers name a queue and one of its
/// blocks; collectives name vars.
pub(super) fn check_programs(
    m: &str,
    engines: &[EngineProgram],
    vars: &[Var],
    queues: &[DmaQueue],
    blocks: &HashSet<(&str, u32)>,
) -> Result<(), NeffError> {
    let queue_names: HashMap<&str, ()> = queues.iter().map(|q| (q.name.as_str(), ())).collect();
    for e in engines {
        let Program::Tpb(slots) = &e.program else { continue };
        let member = e.instr_member.as_deref().unwrap_or(m);
        for (i, s) in slots.iter().enumerate() {
            match s {
                Instruction::DmaTrigger(t) => {
                    let q = t.queue();
                    if q.is_empty() {
                        return Err(bad(member, &format!("slot[{i}]"), "PSEUDO_DMA_TRIGGER with an empty queue name"));
                    }
                    if !queue_names.contains_key(q.as_str()) {
                        return Err(bad(
                            member,
                            &format!("slot[{i}]"),
                            format!("PSEUDO_DMA_TRIGGER names unknown queue {q:?}"),
                        ));
                    }
                    if t.use_raw_count == 0 && !blocks.contains(&(q.as_str(), t.block_id_or_count)) {
                        return Err(bad(
                            member,
                            &format!("slot[{i}]"),
                            format!(
                                "PSEUDO_DMA_TRIGGER block_id {} is not a DMA block of queue {q:?}",
                                t.block_id_or_count
                            ),
                        ));
                    }
                }
                Instruction::TriggerCollective(t) => {
                    for (what, id) in [("input_tensor_id", t.input_tensor_id), ("output_tensor_id", t.output_tensor_id)]
                    {
                        if id as usize >= vars.len() {
                            return Err(bad(
                                member,
                                &format!("slot[{i}].{what}"),
                                format!("PSEUDO_TRIGGER_COLLECTIVE var_id {id} out of range ({} vars)", vars.len()),
                            ));
                        }
                    }
                }
                _ => {}
            }
        }
    }
    Ok(())
}
