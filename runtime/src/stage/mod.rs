//! Staging one graph of a NEFF on one NeuronCore through hal, in named steps:
//!
//! 1. [`vars::place_vars`] — device memory (or state buffer) for every var;
//! 2. [`sems::collect_semaphores`] — the semaphores the model uses (reset after every execution);
//! 3. [`queues::build_queues`] — a DMA ring per queue and its prebuilt transfers;
//! 4. [`lower::lower_programs`] — the engine programs, lowered to device form and wrapped so
//!    one MMIO write starts an execution (the lowering is documented in [`lower`]);
//! 5. [`rings::arm_rings`] — notification rings, then the programs as enabled looping streams;
//! 6. [`ucode::dge_mailboxes`], [`ucode::stage_ucode`] — DGE mailboxes and Q7 ucode libraries.
//!
//! [`stage_graph`] runs them in that order and resolves the kickoff slot. A staged NC is the
//! completion engine's [`crate::completion::NotificationSource`] ([`source`]).

use std::collections::BTreeSet;

use hal::{DevBuf, Device, HostBuf, NqRing, Ring, Stream, Xfer};
use neff::{Graph, VarKind};

pub mod lower;
pub mod queues;
pub mod regions;
pub mod rings;
pub mod sems;
pub mod source;
pub mod ucode;
pub mod vars;
pub mod weights;

use crate::error::IoRole;
pub use crate::error::{StageError, StageErrorKind};

/// Records per INFER_STATUS ring and per error ring.
pub const RING_RECORDS: u64 = 256;

/// A var placed in device memory.
pub struct StagedVar {
    pub name: String,
    pub var_id: u32,
    pub kind: VarKind,
    pub size: u64,
    /// Device address.
    pub addr: u64,
    /// Owning allocation (None for state-buffer and virtual vars).
    pub mem: Option<DevBuf>,
}

/// One prebuilt DMA block: its transfers and the completion-semaphore pair.
pub struct StagedBlock {
    pub id: u32,
    pub xfers: Vec<Xfer>,
    /// For each transfer: the var index its source / destination lies in (None for the
    /// semaphore pair), so a bound tensor can replace the var at bind time.
    pub refs: Vec<(Option<usize>, Option<usize>)>,
    pub pairs: u32,
}

/// A model DMA queue on a hardware queue pair.
pub struct StagedQueue {
    pub name: String,
    pub ring: Ring,
    pub blocks: Vec<StagedBlock>,
    /// Block indices in the order the owner engine's program triggers them.
    pub order: Vec<usize>,
}

/// Everything a graph holds on one NC while loaded.
pub struct StagedNc {
    pub nc: usize,
    pub vars: Vec<StagedVar>,
    pub queues: Vec<StagedQueue>,
    pub streams: Vec<Stream>,
    pub infer_rings: Vec<NqRing>,
    pub err_ring: NqRing,
    /// Host word holding 1: source of the semaphore-increment pairs.
    pub one: HostBuf,
    /// `$S[KICK]`'s increment register: the kickoff ([`hal::Device::kick`]).
    pub kick: hal::KickSlot,
    /// Semaphores the model uses (reset by SP after every execution).
    pub model_sems: BTreeSet<u8>,
    pub dge_core: Option<hal::q7::UcodeCore>,
    /// The Q7 pool core claimed for the model's ucode libraries, and the staged libraries.
    pub q7_core: Option<hal::q7::UcodeCore>,
    pub ucode: Vec<hal::q7::LoadableLib>,
    /// The device (for the completion engine's register probes).
    pub dev: Device,
    /// Scratch for raw records (preallocated; the hot path does not allocate).
    pub raw: Vec<[u8; 16]>,
    /// Per TPB engine (bit): the last INFER_STATUS read found the ring empty after its
    /// records, so the drain that follows it has nothing to read ([`crate::completion`]).
    pub seen_empty: source::SeenEmpty,
    /// Per var: a tensor address bound for the next execution (replaces the var in DMA
    /// descriptors), set by the runtime's bind step.
    pub bind: Vec<Option<u64>>,
    /// Per var: referenced only by DMA descriptors (so binding by address is possible).
    pub dma_only: Vec<bool>,
    /// When the network proxy's status was last read ([`crate::completion::SIGNAL_PROBE_INTERVAL`]
    /// apart at most, so a polling harvest stays free of MMIO reads in between).
    pub net_probed: Option<std::time::Instant>,
    /// The replica group whose collectives barrier the NC arms before every execution (the
    /// group of its first collective); None for a graph without collectives or whose first
    /// collective's group is this NC alone (nothing to wait for): such an execution neither
    /// arms nor polls the barrier (docs/faults.md).
    pub barrier: Option<BarrierGroup>,
    /// The NC's ownership regions of this graph, without bound tensors ([`regions`]).
    pub regions: Vec<hal::Region>,
    /// The bindings the NC's region table was last programmed with for this graph (None: the
    /// table does not hold this graph's regions — not yet programmed, or another model ran).
    pub regions_bound: Option<Vec<Option<u64>>>,
    /// The var of each model input, then of each model output, in the model's order (None:
    /// not in this graph), resolved once at load ([`StagedNc::index_io`]) so that binding
    /// makes no name lookups among the vars.
    pub io_vars: Vec<Option<usize>>,
    /// Every transfer [`StagedNc::stage_rings`] writes, in staging order, flattened at load
    /// from the queues' blocks in trigger order (one list to walk per execute).
    pub staging: Vec<Staging>,
}

/// One transfer of an execution's staging: the queue it goes on, the transfer as loaded, and
/// the vars its source and destination lie in (a bound tensor replaces the var).
#[derive(Debug, Clone, Copy)]
pub struct Staging {
    pub queue: usize,
    pub xfer: Xfer,
    pub src_var: Option<usize>,
    pub dst_var: Option<usize>,
}

/// The staging list of `queues`: each queue's blocks in trigger order, each block's transfers.
fn staging(queues: &[StagedQueue]) -> Vec<Staging> {
    let mut out = Vec::new();
    for (queue, q) in queues.iter().enumerate() {
        for blk in q.order.iter().filter_map(|&b| q.blocks.get(b)) {
            for (&xfer, &(src_var, dst_var)) in blk.xfers.iter().zip(&blk.refs) {
                out.push(Staging { queue, xfer, src_var, dst_var });
            }
        }
    }
    out
}

/// An NC's place in the replica group of its collectives barrier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BarrierGroup {
    /// Communicator id of the group (the id its collectives carry).
    pub comm: u32,
    pub rank: u8,
    pub size: u8,
}

/// The barrier group of the lowered programs: the group of the first collective of the TPB
/// engines' programs (PE, ACT, POOL, DVE in that order), unless it is a group of one.
fn barrier_group(progs: &[lower::Slots]) -> Option<BarrierGroup> {
    use isa::device_ops::CollectiveOp;
    use isa::slot::Opcode;
    let b = progs.iter().take(4).flatten().find(|b| Opcode::from_code(b[0]) == Opcode::Sb2sbCollective)?;
    let c = CollectiveOp::decode(b);
    (c.group_size > 1).then_some(BarrierGroup { comm: c.comm_id, rank: c.rank, size: c.group_size })
}

impl StagedNc {
    /// A var by name.
    pub fn var(&self, name: &str) -> Option<&StagedVar> {
        self.vars.iter().find(|v| v.name == name)
    }

    /// Index of a var by name.
    pub fn var_index(&self, name: &str) -> Option<usize> {
        self.vars.iter().position(|v| v.name == name)
    }

    /// The var of the model's input or output `k` ([`StagedNc::io_vars`] order: inputs, then
    /// outputs), if this graph has it.
    #[inline]
    pub fn io_var(&self, k: usize) -> Option<usize> {
        self.io_vars.get(k).copied().flatten()
    }

    /// Resolve [`StagedNc::io_vars`]: `names` are the model's inputs then its outputs.
    pub fn index_io<'a>(&mut self, names: impl Iterator<Item = &'a str>) {
        let io: Vec<Option<usize>> = names.map(|n| self.var_index(n)).collect();
        self.io_vars = io;
    }

    /// Program the NC's ownership region table with this graph's regions and the tensors
    /// bound by address, unless it already holds exactly that (then nothing is written or
    /// allocated). The NC must be idle with this graph armed.
    pub fn program_regions(&mut self) -> Result<(), hal::HalError> {
        if self.regions_bound.as_deref() == Some(&self.bind[..]) {
            return Ok(());
        }
        let mut all = self.regions.clone();
        for (b, v) in self.bind.iter().zip(&self.vars) {
            if let Some(a) = *b {
                all.push(hal::Region::new(a, v.size, hal::Perm::READ | hal::Perm::WRITE));
            }
        }
        self.regions_bound = None;
        self.dev.set_regions(self.nc, &all)?;
        self.regions_bound = Some(self.bind.clone());
        Ok(())
    }

    /// Write every queue's descriptors for one execution (the bind step), with bound
    /// tensors in place of their vars, after programming the NC's region table for them
    /// ([`StagedNc::program_regions`]: nothing allocated or written when the bindings are
    /// those of the last execution).
    pub fn stage_rings(&mut self) -> Result<(), hal::HalError> {
        self.program_regions()?;
        let (vars, bind) = (&self.vars, &self.bind);
        let rebase = |a: u64, r: Option<usize>| match r.and_then(|i| bind[i].map(|b| (b, vars[i].addr))) {
            Some((b, base)) => b + (a - base),
            None => a,
        };
        for e in &self.staging {
            let x = Xfer { src: rebase(e.xfer.src, e.src_var), dst: rebase(e.xfer.dst, e.dst_var), len: e.xfer.len };
            if let Some(q) = self.queues.get_mut(e.queue) {
                q.ring.stage(std::slice::from_ref(&x))?;
            }
        }
        Ok(())
    }

    /// Stop the engines and halt the rings (unload / failed load), then free everything.
    /// Dropping a staged NC without this still resets its engines, halts its notification
    /// slots and parks its DMA queues (each hal object does so on drop, where it still owns
    /// the hardware); this also quiesces the queues and clears the NC's region table.
    pub fn teardown(self, dev: &Device) {
        let regs = dev.regs();
        for s in self.streams {
            if let Err(err) = s.unload() {
                tracing::warn!(nc = self.nc, %err, "could not reset a sequencer engine");
            }
        }
        for r in self.infer_rings.iter().chain(std::iter::once(&self.err_ring)) {
            let _ = r.halt(&regs);
        }
        for q in &self.queues {
            let _ = q.ring.quiesce(&regs);
        }
        // Nothing of this graph remains for the table to grant.
        let _ = dev.clear_regions(self.nc);
    }
}

/// Every model input and output must bind to exactly one var, as libnrt binds them from the
/// graph: an input to an `input` var of some graph, an output to an `output` var of the first
/// graph (where outputs are read), and no graph may hold two vars of that name. Anything else
/// is refused at load, so an execute never returns a tensor bound to nothing.
pub fn check_io(n: &neff::Neff) -> Result<(), StageError> {
    let bound = |name: &str, kind: VarKind, graphs: &[Graph]| -> Result<usize, StageError> {
        let mut found = 0;
        for g in graphs {
            let mut same = g.vars.iter().filter(|v| v.name == name);
            match (same.next(), same.next()) {
                (Some(_), Some(_)) => {
                    return Err(StageError::from(StageErrorKind::DuplicateVar {
                        graph: g.name.clone(),
                        name: name.to_string(),
                    }))
                }
                (Some(v), None) if v.kind != kind => {
                    return Err(StageError::from(StageErrorKind::WrongVarType {
                        name: name.to_string(),
                        found: v.kind.type_str(),
                        expected: kind.type_str(),
                    }))
                }
                (Some(_), None) => found += 1,
                _ => {}
            }
        }
        Ok(found)
    };
    for i in &n.inputs {
        if bound(&i.name, VarKind::Input, &n.graphs)? == 0 {
            return Err(StageError::from(StageErrorKind::Unbound { role: IoRole::Input, name: i.name.clone() }));
        }
    }
    for o in &n.outputs {
        if bound(&o.name, VarKind::Output, n.graphs.get(..1).unwrap_or(&[]))? == 0 {
            return Err(StageError::from(StageErrorKind::Unbound { role: IoRole::Output, name: o.name.clone() }));
        }
    }
    Ok(())
}

/// How far a load has got writing the model's initial data (weights) to the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoadProgress {
    /// Bytes written so far.
    pub done: u64,
    /// Bytes of initial data in the model (every graph).
    pub total: u64,
}

/// A load-progress callback (`Runtime::set_load_progress`).
pub type LoadProgressFn = std::sync::Arc<dyn Fn(LoadProgress) + Send + Sync>;

/// Bytes of initial variable data in graph `g`.
pub fn initial_bytes(g: &Graph) -> u64 {
    g.vars.iter().filter_map(|v| v.data.as_ref().map(|d| d.len() as u64)).sum()
}

/// Placement of one graph of a model.
pub struct GraphPlacement {
    pub nc: usize,
    /// Index of the graph in the model (its rank in replica groups).
    pub rank: usize,
    /// Communicator id shared by every graph of this load.
    pub comm_id: u32,
    /// Tests only (`RuntimeConfig::unchecked_loader_for_tests`): skip the loader's
    /// confinement checks, so that the device's region table is what stops a hostile model.
    pub unchecked: bool,
}

/// Stage graph `g` of a model on `p.nc` of `dev`.
/// `written(n)`: `n` more bytes of initial variable data are on the device. `weights`: the
/// sink a streaming load wrote the large members into (None for a NEFF parsed in memory).
pub fn stage_graph(
    dev: &Device,
    g: &Graph,
    p: &GraphPlacement,
    written: &dyn Fn(u64),
    weights: Option<&mut weights::DeviceSink>,
) -> Result<StagedNc, StageError> {
    let nc = p.nc;
    // The table holds the parked model's regions: off while this graph is staged (its
    // engines fetch their first slot when enabled), programmed with this graph's at the end.
    dev.clear_regions(nc)?;
    let vars = vars::place_vars(dev, g, nc, p.unchecked, written, weights)?;
    let model_sems = sems::collect_semaphores(g)?;
    // The source word of every queue's completion-semaphore increment.
    let one = dev.alloc_host(64, 64)?;
    one.write_u32(0, 1)?;
    let queues = queues::build_queues(dev, g, nc, &vars, &one, p.unchecked)?;
    let progs = lower::lower_programs(dev, g, p, &vars, &queues, &model_sems)?;
    let barrier = barrier_group(&progs);
    let rings::Armed { infer_rings, err_ring, streams } = rings::arm_rings(dev, nc, &progs)?;
    let dge_core = Some(ucode::dge_mailboxes(dev, nc)?);
    let (q7_core, ucode) = ucode::stage_ucode(dev, g, nc)?;
    let kick = dev.kick_slot(nc, sems::KICK as u64)?;
    let dma_only = vars::dma_only(g, &vars);
    let bind = vec![None; vars.len()];
    let bindable =
        vars.iter().zip(&dma_only).filter(|(v, &d)| d && matches!(v.kind, VarKind::Input | VarKind::Output)).count();
    let (regions, fits) = match regions::own_regions(dev, nc, &vars, &queues, &streams, &one) {
        Ok(r) => {
            let fits = regions::check_fits(&r, bindable);
            (r, fits)
        }
        Err(e) => (Vec::new(), Err(e)),
    };
    let staging = staging(&queues);
    let mut s = StagedNc {
        nc,
        vars,
        queues,
        streams,
        infer_rings,
        err_ring,
        one,
        kick,
        model_sems,
        dge_core,
        q7_core,
        ucode,
        dev: dev.clone(),
        raw: Vec::with_capacity(RING_RECORDS as usize),
        seen_empty: source::SeenEmpty::default(),
        bind,
        dma_only,
        net_probed: None,
        barrier,
        regions,
        regions_bound: None,
        io_vars: Vec::new(),
        staging,
    };
    // The engines are armed: a refusal from here on stops them before the memory goes.
    if let Err(e) = fits.and_then(|()| s.program_regions().map_err(StageError::from)) {
        s.teardown(dev);
        return Err(e);
    }
    Ok(s)
}
