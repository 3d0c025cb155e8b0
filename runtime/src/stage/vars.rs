//! Step 1, place vars: every var of the graph gets its device address — state-buffer vars
//! are packed into the NC's state buffer, virtual vars resolve into their backing var, all
//! others get their own HBM allocation (initial data written). Also the address resolvers
//! the later steps use (every address a model can name is range-checked against its var)
//! and which vars may be rebound to a tensor per execution.

use std::collections::BTreeSet;

use csr_maps::consts::addr8;
use hal::Device;
use isa::slot::Instruction;
use neff::{Graph, Program, VarKind};

use super::weights::{copy_member, DeviceSink};
use super::{StageError, StageErrorKind, StagedVar};

/// Bytes of initial data written per step when the caller follows progress.
const PROGRESS_CHUNK: usize = 16 << 20;

/// Place the vars of `g` on NC `nc` (ordered by var id) and write their initial data;
/// `written(n)` after every `n` bytes of it reach the device. `unchecked` (tests only, see
/// `RuntimeConfig::unchecked_loader_for_tests`) skips the confinement checks: state-buffer
/// vars are packed with wrapping arithmetic and no fit check, and a virtual var takes its
/// backing var's address (device address 0 when backed by itself) whatever its range. The
/// checked allocator still refuses a size no memory can hold.
/// Vars whose weights were streamed ([`neff::Var::streamed`]) take their member's device
/// allocation from `weights` when it lies on this NC's channel, suitably aligned; otherwise
/// the data is copied there from the member (device to device).
pub fn place_vars(
    dev: &Device,
    g: &Graph,
    nc: usize,
    unchecked: bool,
    written: &dyn Fn(u64),
    mut weights: Option<&mut DeviceSink>,
) -> Result<Vec<StagedVar>, StageError> {
    let chan = dev.hbm_for_nc(nc);
    let arch = dev.arch();
    let mut vars: Vec<StagedVar> = Vec::new();
    // Per var: its memory is its streamed member's allocation (the data is already there).
    let mut adopted: Vec<bool> = Vec::new();
    let no_sbuf = || StageError::from(StageErrorKind::NoStateBuffer { nc });
    let sbuf = arch.region("sbuf").ok_or_else(no_sbuf)?;
    let sbuf_base = sbuf.dev_base(nc as u64).ok_or_else(no_sbuf)?;
    let mut sb_off = 0u64;
    let mut ordered: Vec<&neff::Var> = g.vars.iter().collect();
    ordered.sort_by_key(|v| v.var_id);
    for v in &ordered {
        let size = v
            .size
            .or_else(|| v.data.as_ref().map(|d| d.len() as u64))
            .or_else(|| v.streamed.as_ref().map(|s| s.len))
            .unwrap_or(0);
        let align = v.alignment.unwrap_or(64).max(64);
        if !align.is_power_of_two() {
            return Err(StageError::from(StageErrorKind::VarAlignment { var: v.name.clone(), align }));
        }
        let mut took = false;
        let (addr, mem) = match v.kind {
            VarKind::StateBuffer => {
                // Checked: two vars whose end wraps past 2^64 must not both "fit".
                let end = sb_off.checked_next_multiple_of(align).and_then(|a| Some((a, a.checked_add(size)?)));
                let a = match end {
                    _ if unchecked => {
                        let a = sb_off.checked_next_multiple_of(align).unwrap_or(0);
                        sb_off = a.wrapping_add(size);
                        a
                    }
                    Some((a, e)) if e <= sbuf.size => {
                        sb_off = e;
                        a
                    }
                    _ => {
                        return Err(StageError::from(StageErrorKind::StateBufferFull {
                            var: v.name.clone(),
                            size,
                            capacity: sbuf.size,
                        }))
                    }
                };
                (sbuf_base.wrapping_add(a), None)
            }
            VarKind::Virtual => (0, None), // resolved below against its backing var
            _ if adoptable(dev, chan, v, size, align, weights.as_deref()) => {
                let s = v
                    .streamed
                    .as_ref()
                    .ok_or_else(|| StageError::from(StageErrorKind::NotStreamed { var: v.name.clone() }))?;
                let gone = || {
                    StageError::from(StageErrorKind::StreamedMemberGone {
                        var: v.name.clone(),
                        member: s.member.clone(),
                    })
                };
                let m = weights.as_deref_mut().and_then(|w| w.take(&s.member)).ok_or_else(gone)?;
                let a = m.addr_of(s.offset).ok_or_else(gone)?;
                took = true;
                (a, Some(m.mem))
            }
            _ => {
                // Streamed weights copied here (below) overwrite the start of the var and the
                // rest is zeroed there, so its memory need not be zeroed first.
                let alloc = if v.streamed.is_some() && weights.is_some() {
                    Device::alloc_device_for_overwrite
                } else {
                    Device::alloc_device
                };
                let m = alloc(dev, chan, size.max(1), align)
                    .map_err(|source| StageError::from(StageErrorKind::VarAlloc { var: v.name.clone(), source }))?;
                (m.addr(), Some(m))
            }
        };
        vars.push(StagedVar { name: v.name.clone(), var_id: v.var_id, kind: v.kind, size, addr, mem });
        adopted.push(took);
    }
    for (i, v) in ordered.iter().enumerate() {
        if v.kind == VarKind::Virtual {
            // The backing var must be a real allocation (never another virtual var, itself
            // included: its address is not placed yet and would read as device address 0).
            let found = v.backing_buf.as_deref().and_then(|b| vars.iter().find(|x| x.name == b));
            let back = found.filter(|b| b.kind != VarKind::Virtual).map(|b| (b.addr, b.size));
            let off = v.backing_variable_off.unwrap_or(0);
            if unchecked {
                vars[i].addr = found.map_or(0, |b| b.addr).wrapping_add(off);
                continue;
            }
            match back {
                Some((a, s)) if off.checked_add(vars[i].size).is_some_and(|e| e <= s) => vars[i].addr = a + off,
                _ => return Err(StageError::from(StageErrorKind::VirtualBacking { var: v.name.clone() })),
            }
        }
        if let (Some(data), Some(_)) = (&v.data, &vars[i].mem) {
            let data: &[u8] = data.as_ref();
            for (k, c) in data.chunks(PROGRESS_CHUNK).enumerate() {
                dev.write_device(nc, vars[i].addr + (k * PROGRESS_CHUNK) as u64, c)?;
                written(c.len() as u64);
            }
        }
        // Streamed weights not adopted above: copy them from their member.
        if let (Some(s), Some(_)) = (&v.streamed, &vars[i].mem) {
            if !adopted[i] {
                let w = weights
                    .as_deref()
                    .ok_or_else(|| StageError::from(StageErrorKind::NoWeightSink { var: v.name.clone() }))?;
                let src = w.get(&s.member).and_then(|m| m.addr_of(s.offset)).ok_or_else(|| {
                    StageError::from(StageErrorKind::StreamedMemberGone {
                        var: v.name.clone(),
                        member: s.member.clone(),
                    })
                })?;
                let len = s.len.min(vars[i].size);
                copy_member(w.device(), src, dev, nc, vars[i].addr, len)?;
                // The bytes past the weights (the memory was not zeroed at allocation).
                if let Some(m) = &vars[i].mem {
                    let end = vars[i].addr + len;
                    let stop = m.addr() + m.len();
                    if end < stop {
                        dev.zero_device(nc, end, stop - end)?;
                    }
                }
                written(len);
            } else {
                written(s.len.min(vars[i].size));
            }
        }
    }
    Ok(vars)
}

/// Whether streamed var `v` can take its member's allocation as its own memory: the member is
/// still in `w` (not taken by an earlier var), on this device and channel, and the data offset
/// meets the var's alignment and holds its size.
fn adoptable(dev: &Device, chan: usize, v: &neff::Var, size: u64, align: u64, w: Option<&DeviceSink>) -> bool {
    let (Some(s), Some(w)) = (&v.streamed, w) else { return false };
    let Some(m) = w.get(&s.member) else { return false };
    let Some(a) = m.addr_of(s.offset) else { return false };
    w.device().same(dev)
        && m.mem.chan() == chan
        && a % align == 0
        && (a - m.mem.addr()).checked_add(size.max(1)).is_some_and(|e| e <= m.mem.len())
}

/// Var `id` + `off`, `len` bytes → device address; refused unless inside the var
/// (`unchecked`, tests only: the address whatever the range).
pub fn addr_of(
    vars: &[StagedVar],
    id: u32,
    off: u64,
    len: u64,
    what: &str,
    unchecked: bool,
) -> Result<u64, StageError> {
    let v = vars
        .iter()
        .find(|v| v.var_id == id)
        .ok_or_else(|| StageError::from(StageErrorKind::UnknownVarId { what: what.to_string(), id: id as u64 }))?;
    if unchecked {
        return Ok(v.addr.wrapping_add(off));
    }
    match off.checked_add(len) {
        Some(end) if end <= v.size => Ok(v.addr + off),
        _ => Err(StageError::from(StageErrorKind::OutsideVar {
            what: what.to_string(),
            var: v.name.clone(),
            off,
            len,
            size: v.size,
        })),
    }
}

/// Var `name` + `off`, `len` bytes → device address; refused unless inside the var
/// (`unchecked`, tests only: the address whatever the range).
pub fn addr_by_name(
    vars: &[StagedVar],
    name: &str,
    off: i64,
    len: u64,
    what: &str,
    unchecked: bool,
) -> Result<u64, StageError> {
    let v = vars.iter().find(|v| v.name == name).ok_or_else(|| {
        StageError::from(StageErrorKind::UnknownVar { what: what.to_string(), name: name.to_string() })
    })?;
    if unchecked {
        return Ok(v.addr.wrapping_add_signed(off));
    }
    if off < 0 || (off as u64).checked_add(len).is_none_or(|e| e > v.size) || len == 0 && off as u64 > v.size {
        return Err(StageError::from(StageErrorKind::AccessOutsideVar {
            what: what.to_string(),
            var: name.to_string(),
            off,
            len,
            size: v.size,
        }));
    }
    Ok(v.addr + off as u64)
}

/// Per var: referenced only by DMA descriptors, so a bound tensor can replace it per
/// execution. Vars that instructions address directly (collectives, 2-D DMA with var
/// addresses) and vars without their own allocation cannot.
pub fn dma_only(g: &Graph, vars: &[StagedVar]) -> Vec<bool> {
    let mut by_insn: BTreeSet<u32> = BTreeSet::new();
    for e in &g.engines {
        if let Program::Tpb(ins) = &e.program {
            for i in ins {
                match i {
                    Instruction::TriggerCollective(c) => {
                        by_insn.insert(c.input_tensor_id);
                        by_insn.insert(c.output_tensor_id);
                    }
                    Instruction::PseudoDmaDirect2d(d) | Instruction::DmaMemcpy(d) => {
                        for l in [&d.src, &d.dst] {
                            if l.start_addr & addr8::VAR_MARKER != 0 {
                                by_insn.insert(((l.start_addr >> addr8::VAR_ID_SHIFT) & addr8::VAR_ID_MASK) as u32);
                            }
                        }
                    }
                    _ => {}
                }
            }
        }
    }
    vars.iter().map(|v| !by_insn.contains(&v.var_id) && v.mem.is_some()).collect()
}
