//! Step 3, build queues: each NEFF DMA queue becomes a hardware queue pair (queue 0 of one
//! of this NC's DMA engines) with a descriptor ring sized for one execution. Its DMA blocks
//! are prebuilt as transfers — access patterns coalesced into contiguous runs, every address
//! range-checked against its var, the queue's completion semaphore incremented by a 4-byte
//! copy of a host word holding 1 — and ordered as the owning engine's program triggers them.

use std::collections::BTreeSet;

use hal::{Device, HostBuf, Ring, Xfer};
use isa::slot::Instruction;
use neff::{Graph, Program};

use super::vars::addr_by_name;
use super::{StageError, StageErrorKind, StagedBlock, StagedQueue, StagedVar};

/// Build the DMA queues of `g` on NC `nc`; `one` is the host word holding 1. `unchecked`
/// (tests only) skips the range checks of descriptor addresses against their vars.
pub fn build_queues(
    dev: &Device,
    g: &Graph,
    nc: usize,
    vars: &[StagedVar],
    one: &HostBuf,
    unchecked: bool,
) -> Result<Vec<StagedQueue>, StageError> {
    let per = dev.arch().counts.dma_engines_per_nc as usize;
    if g.dma_queues.len() > per {
        return Err(StageError::from(StageErrorKind::TooManyQueues { queues: g.dma_queues.len(), engines: per }));
    }
    let mut queues: Vec<StagedQueue> = Vec::new();
    for (qi, q) in g.dma_queues.iter().enumerate() {
        let mut blocks = Vec::new();
        for e in &g.engines {
            for b in e.dma_blocks.iter().filter(|b| b.queue == q.name) {
                let mut xfers = Vec::new();
                let mut refs = Vec::new();
                for (k, d) in b.descs.iter().enumerate() {
                    let (fi, ti) =
                        (vars.iter().position(|v| v.name == d.from), vars.iter().position(|v| v.name == d.to));
                    if d.op != neff::DmaOp::Copy {
                        return Err(StageError::from(StageErrorKind::UnsupportedDmaOp {
                            queue: q.name.clone(),
                            block: b.id,
                            op: d.op.name(),
                        }));
                    }
                    let what = format!("queue {} block {} desc {k}", q.name, b.id);
                    let src = runs(&d.from_sizes, &d.from_steps, &what)?;
                    let dst = runs(&d.to_sizes, &d.to_steps, &what)?;
                    let ts: u64 = src.iter().map(|r| r.1).sum();
                    let td: u64 = dst.iter().map(|r| r.1).sum();
                    if ts != td {
                        return Err(StageError::from(StageErrorKind::DmaSizeMismatch {
                            what: what.clone(),
                            src: ts,
                            dst: td,
                        }));
                    }
                    let (mut si, mut so, mut di, mut dof) = (0usize, 0u64, 0usize, 0u64);
                    while si < src.len() && di < dst.len() {
                        let n = (src[si].1 - so).min(dst[di].1 - dof);
                        let at = |o: i64, k: u64| {
                            i64::try_from(k)
                                .ok()
                                .and_then(|k| o.checked_add(k))
                                .ok_or_else(|| StageError::from(StageErrorKind::PatternOffset { what: what.clone() }))
                        };
                        let s = addr_by_name(vars, &d.from, at(src[si].0, so)?, n, &what, unchecked)?;
                        let t = addr_by_name(vars, &d.to, at(dst[di].0, dof)?, n, &what, unchecked)?;
                        xfers.push(Xfer { src: s, dst: t, len: n });
                        refs.push((fi, ti));
                        so += n;
                        dof += n;
                        if so == src[si].1 {
                            si += 1;
                            so = 0;
                        }
                        if dof == dst[di].1 {
                            di += 1;
                            dof = 0;
                        }
                    }
                }
                if let Some(s) = q.semaphore {
                    xfers.push(Xfer { src: dev.host_addr(one), dst: dev.sem_inc_dev_addr(nc, s as u64)?, len: 4 });
                    refs.push((None, None));
                }
                let pairs: u64 = xfers.iter().map(|x| Ring::pairs_for(x.len) as u64).sum();
                blocks.push(StagedBlock { id: b.id, xfers, refs, pairs: pairs as u32 });
            }
        }
        // Trigger order from the programs.
        let mut order = Vec::new();
        let mut owners = BTreeSet::new();
        for e in &g.engines {
            if let Program::Tpb(ins) = &e.program {
                for i in ins {
                    if let Instruction::DmaTrigger(t) = i {
                        if t.queue() == q.name {
                            if t.use_raw_count != 0 {
                                return Err(StageError::from(StageErrorKind::RawCountTrigger {
                                    queue: q.name.clone(),
                                }));
                            }
                            let b = blocks.iter().position(|b| b.id == t.block_id_or_count).ok_or_else(|| {
                                StageError::from(StageErrorKind::NoDmaBlock {
                                    queue: q.name.clone(),
                                    block: t.block_id_or_count as u64,
                                })
                            })?;
                            order.push(b);
                            owners.insert(e.kind.index());
                        }
                    }
                }
            }
        }
        if owners.len() > 1 {
            return Err(StageError::from(StageErrorKind::SharedQueue { queue: q.name.clone() }));
        }
        let total: u64 = order.iter().map(|&b| blocks[b].pairs as u64).sum();
        let ndesc = (total + 17).checked_next_power_of_two().unwrap_or(u64::MAX).max(32);
        if ndesc > 1 << 20 {
            return Err(StageError::from(StageErrorKind::TooManyDescriptors { queue: q.name.clone(), total }));
        }
        let engine = (nc * per + qi) as u64;
        let ring = dev.new_ring(engine, 0, ndesc as u32)?;
        queues.push(StagedQueue { name: q.name.clone(), ring, blocks, order });
    }
    Ok(queues)
}

/// An access pattern (`sizes` / `steps` per dimension, dimension 0 innermost) as contiguous
/// `(offset, length)` runs, abutting runs coalesced.
pub fn runs(sizes: &[u64], steps: &[i64], what: &str) -> Result<Vec<(i64, u64)>, StageError> {
    if sizes.len() != steps.len() || sizes.is_empty() || sizes.contains(&0) {
        return Err(StageError::from(StageErrorKind::PatternShape {
            what: what.to_string(),
            sizes: sizes.to_vec(),
            steps: steps.to_vec(),
        }));
    }
    let total = sizes.iter().try_fold(1u128, |a, &s| a.checked_mul(s as u128).filter(|&t| t <= 1 << 34));
    let Some(total) = total else {
        return Err(StageError::from(StageErrorKind::PatternOverflow {
            what: what.to_string(),
            sizes: sizes.to_vec(),
        }));
    };
    if total > 1 << 34 {
        return Err(StageError::from(StageErrorKind::PatternTooLarge { what: what.to_string(), total }));
    }
    // Dimension 0 is innermost; a unit step makes it one contiguous run.
    let (inner, outer) = if steps[0] == 1 { (sizes[0], &sizes[1..]) } else { (1, sizes) };
    let osteps = if steps[0] == 1 { &steps[1..] } else { steps };
    let count: u128 = outer.iter().map(|&s| s as u128).product(); // ≤ total ≤ 2^34
    if count > 1 << 20 {
        return Err(StageError::from(StageErrorKind::PatternRuns { what: what.to_string(), count }));
    }
    let mut out: Vec<(i64, u64)> = Vec::new();
    let mut idx = vec![0u64; outer.len()];
    let overflow = || StageError::from(StageErrorKind::PatternOffset { what: what.to_string() });
    for _ in 0..count {
        // Exact, all signs: i128 cannot wrap here (indices < 2^34, steps < 2^63, ≤ 2^20 terms
        // of nonzero size), and the sum must fit the i64 offset.
        let off: i128 = idx.iter().zip(osteps).map(|(&i, &s)| i as i128 * s as i128).sum();
        let off = i64::try_from(off).map_err(|_| overflow())?;
        match out.last_mut() {
            Some((o, l)) if (*o as i128 + *l as i128) == off as i128 => *l += inner,
            _ => out.push((off, inner)),
        }
        for (d, i) in idx.iter_mut().enumerate() {
            *i += 1;
            if *i < outer[d] {
                break;
            }
            *i = 0;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_patterns_to_runs() {
        // The fixture: sizes [128, 1], steps [1, 128] → one 128-byte run.
        assert_eq!(runs(&[128, 1], &[1, 128], "t").unwrap(), vec![(0, 128)]);
        // Strided rows: 4 rows of 16 bytes, 64 apart.
        assert_eq!(runs(&[16, 4], &[1, 64], "t").unwrap(), vec![(0, 16), (64, 16), (128, 16), (192, 16)]);
        // Rows that abut coalesce.
        assert_eq!(runs(&[16, 4], &[1, 16], "t").unwrap(), vec![(0, 64)]);
        // Element-strided: 3 single bytes 2 apart.
        assert_eq!(runs(&[3], &[2], "t").unwrap(), vec![(0, 1), (2, 1), (4, 1)]);
        assert!(runs(&[0], &[1], "t").is_err());
        assert!(runs(&[4, 4], &[1], "t").is_err());
        assert!(runs(&[1 << 30, 1 << 30], &[1, 1], "t").is_err());
    }
}
