//! Step 2, collect semaphores: every semaphore the graph's programs wait on or update, and
//! its queues' completion semaphores. SP resets them after every execution; the runtime's
//! own (`$S[250..=255]`: [`KICK`], [`DONE`], [`START`]) must not be among them.

use std::collections::BTreeSet;

use isa::slot::{Instruction, UpdateMode, WaitMode};
use neff::{Graph, Program};

use super::{StageError, StageErrorKind};

// Reserved semaphores (the top of the 256).

/// Kickoff token (one MMIO increment per execution).
pub const KICK: u8 = 255;
/// Engines done counter.
pub const DONE: u8 = 254;
/// Start tokens of PE, ACT, POOL, DVE.
pub const START: [u8; 4] = [250, 251, 252, 253];
/// Lowest reserved index.
pub const FIRST_RESERVED: u8 = 250;

/// The semaphores graph `g` uses; refused if one is reserved or out of range.
pub fn collect_semaphores(g: &Graph) -> Result<BTreeSet<u8>, StageError> {
    let mut model_sems: BTreeSet<u8> = BTreeSet::new();
    for e in &g.engines {
        if let Program::Tpb(ins) = &e.program {
            for i in ins {
                let ev = i.events();
                if ev.wait_mode != WaitMode::None {
                    model_sems.insert(ev.wait_idx);
                }
                if ev.update_mode != UpdateMode::None {
                    model_sems.insert(ev.update_idx);
                }
                if let Instruction::DmaMemcpy(d) | Instruction::PseudoDmaDirect2d(d) = i {
                    if d.sem_increment > 0 {
                        model_sems.insert(d.semaphore);
                    }
                }
            }
        }
    }
    for q in &g.dma_queues {
        for s in [q.semaphore, q.semaphore_set].into_iter().flatten() {
            model_sems.insert(u8::try_from(s).map_err(|_| {
                StageError::from(StageErrorKind::SemaphoreRange { queue: q.name.clone(), sem: s as u64 })
            })?);
        }
    }
    if let Some(&s) = model_sems.range(FIRST_RESERVED..).next() {
        return Err(StageError::from(StageErrorKind::ReservedSemaphore { sem: s }));
    }
    Ok(model_sems)
}
