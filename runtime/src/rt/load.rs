//! Load, share, unload and teardown: NEFF gates → vNC admission → one staged graph per NC
//! ([`crate::stage`]) → model RUNNING. A load is a transaction in three steps — admit (checks
//! and vNC admission, nothing taken), stage (into a [`LoadTxn`] that owns the placement counts,
//! the held lanes, the lifecycle and every staged NC), finish (commit) — so a failure at any
//! step gives everything back through one `Drop`; unload is ref-counted and tears the device
//! state down at zero.

use std::io::Read;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use neff::{Neff, ReadOptions};

use hal::Device;

use super::admission::Placement;
use super::{
    Armed, ExecState, Held, Model, ModelHandle, NcLanes, PollPolicy, RtError, RtErrorKind, Runtime, RuntimeConfig,
    Session,
};
use crate::completion::{ExecTracker, TrackerConfig};
use crate::locks::{Rank, Ranked};
use crate::stage::weights::DeviceSink;
use crate::stage::{stage_graph, GraphPlacement, StagedNc};
use crate::state::{ModelLifecycle, Unload};

/// Where a load sits in a global communicator (several processes or hosts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GlobalPlacement {
    /// Global rank of the NEFF's first graph.
    pub rank_base: usize,
    /// Communicator id of the load's collectives (equal in every process of the job).
    pub comm_id: u32,
    /// Global ranks in all (every process loads the same NEFF: `G` graphs × processes); a
    /// replica group naming a rank at or past it is refused at load.
    pub ranks: usize,
}

/// What admission decided for a load (no resource taken yet), in the session it was decided
/// in (the whole load uses that one).
struct Admitted {
    session: Arc<Session>,
    place: Placement,
    id: u64,
    rank_base: usize,
    comm_id: u32,
}

/// A load in progress: the placement counts it holds, the NCs' lanes, the lifecycle, and
/// every staged NC with its device objects. Dropped without [`LoadTxn::commit`] (a failed
/// step returned), it gives everything back: each staged NC stops its engines, halts its
/// rings and frees its memory; the lifecycle records the failed load; the placement counts
/// drop; the lanes are released (the parked models re-arm on their next execution); idle
/// host memory is trimmed.
struct LoadTxn<'a> {
    rt: &'a Runtime,
    session: Arc<Session>,
    lanes: Arc<NcLanes>,
    /// Global NCs whose placement count this load holds.
    placed: Vec<usize>,
    held: Option<Held>,
    life: ModelLifecycle,
    staged: Vec<StagedNc>,
    devs: Vec<Device>,
    staged_bytes: Vec<u64>,
    committed: bool,
}

/// What a committed load hands to its model.
type Committed = (ModelLifecycle, Vec<StagedNc>, Vec<Device>, Vec<u64>, Arc<NcLanes>, Option<Held>);

impl LoadTxn<'_> {
    /// The load succeeded: keep everything (the model owns it now).
    fn commit(mut self) -> Committed {
        self.committed = true;
        (
            std::mem::take(&mut self.life),
            std::mem::take(&mut self.staged),
            std::mem::take(&mut self.devs),
            std::mem::take(&mut self.staged_bytes),
            self.lanes.clone(),
            self.held.take(),
        )
    }
}

impl Drop for LoadTxn<'_> {
    fn drop(&mut self) {
        if self.committed {
            return;
        }
        for (s, d) in std::mem::take(&mut self.staged).into_iter().zip(self.devs.iter()) {
            s.teardown(d);
        }
        let _ = self.life.load_failed();
        self.session.unplace(&self.placed);
        drop(self.held.take());
        self.rt.release_idle();
    }
}

/// Whether the loader's confinement checks are off (tests only: the field exists only with
/// the `unchecked-loader` feature).
fn unchecked_loader(cfg: &RuntimeConfig) -> bool {
    #[cfg(feature = "unchecked-loader")]
    {
        cfg.unchecked_loader_for_tests
    }
    #[cfg(not(feature = "unchecked-loader"))]
    {
        let _ = cfg;
        false
    }
}

impl Runtime {
    /// `nrt_load`: parse and stage `neff` on `nc_count` vNCs starting at vNC `start_nc`
    /// (None = the least-loaded visible vNCs). `nc_count` None = what one instance needs (its
    /// graphs / LNC: one graph per physical core).
    /// The NCs may already hold other models: staging waits for the NCs' lanes (running
    /// executions finish first) and parks the model armed there.
    pub fn load(&self, bytes: &[u8], start_nc: Option<usize>, nc_count: Option<usize>) -> Result<ModelHandle, RtError> {
        self.load_placed(bytes, start_nc, nc_count, None)
    }

    /// `nrt_load_collectives` with a global communicator: as [`Self::load`], but graph `i` is
    /// global rank `g.rank_base + i` in the NEFF's replica groups, and the collectives use the
    /// communicator id `g.comm_id`, which every process of the job passes alike.
    pub fn load_global(
        &self,
        bytes: &[u8],
        start_nc: Option<usize>,
        nc_count: Option<usize>,
        g: GlobalPlacement,
    ) -> Result<ModelHandle, RtError> {
        self.load_placed(bytes, start_nc, nc_count, Some(g))
    }

    /// The API guard, then the NEFF reader's options: this runtime's verify setting and the
    /// devices' arch.
    fn read_options(&self) -> Result<ReadOptions, RtError> {
        self.guard()?;
        let s = self.current()?;
        Ok(ReadOptions {
            verify: s.cfg.verify,
            arch: Some(s.arch),
            allow_legacy: s.cfg.allow_legacy,
            ..ReadOptions::default()
        })
    }

    fn load_placed(
        &self,
        bytes: &[u8],
        start_nc: Option<usize>,
        nc_count: Option<usize>,
        global: Option<GlobalPlacement>,
    ) -> Result<ModelHandle, RtError> {
        let n = Neff::parse(bytes, &self.read_options()?)?;
        self.load_parsed(n, start_nc, nc_count, global, None)
    }

    /// `nrt_load` from a reader (e.g. a file) of `len` bytes, streaming: the weights go from
    /// the inflater straight into device memory through the DMA path in bounded,
    /// double-buffered chunks ([`crate::stage::weights`]), so host memory does not grow with
    /// the model. Every gate of [`Runtime::load`] applies; the digest is computed on the same
    /// pass and a NEFF that fails it (or any later check) frees what was written.
    pub fn load_reader<R: Read + Send>(
        &self,
        r: R,
        len: u64,
        start_nc: Option<usize>,
        nc_count: Option<usize>,
    ) -> Result<ModelHandle, RtError> {
        self.load_reader_placed(r, len, start_nc, nc_count, None)
    }

    /// [`Self::load_global`] from a reader, streaming as [`Self::load_reader`] does.
    pub fn load_reader_global<R: Read + Send>(
        &self,
        r: R,
        len: u64,
        start_nc: Option<usize>,
        nc_count: Option<usize>,
        g: GlobalPlacement,
    ) -> Result<ModelHandle, RtError> {
        self.load_reader_placed(r, len, start_nc, nc_count, Some(g))
    }

    fn load_reader_placed<R: Read + Send>(
        &self,
        r: R,
        len: u64,
        start_nc: Option<usize>,
        nc_count: Option<usize>,
        global: Option<GlobalPlacement>,
    ) -> Result<ModelHandle, RtError> {
        let opts = self.read_options()?;
        // Stream to the NC the model's first graph will most likely land on (admission runs
        // once, after the parse; a var placed elsewhere is copied device to device).
        let session = self.current()?;
        let target = session.first_nc_hint(start_nc);
        let (dev, local) =
            session.device_of(target).ok_or_else(|| RtError::from(RtErrorKind::NoDeviceForNc { nc: target }))?;
        drop(session);
        let mut sink = DeviceSink::new(&dev, local);
        let n = Neff::parse_streaming(r, len, &opts, &mut sink)?;
        let m = self.load_parsed(n, start_nc, nc_count, global, Some(&mut sink))?;
        sink.commit();
        Ok(m)
    }

    /// A parsed NEFF through the three steps of a load: admit (nothing taken), stage (into a
    /// [`LoadTxn`], which gives everything back if a later step fails), finish (commit).
    fn load_parsed(
        &self,
        n: Neff,
        start_nc: Option<usize>,
        nc_count: Option<usize>,
        global: Option<GlobalPlacement>,
        weights: Option<&mut DeviceSink>,
    ) -> Result<ModelHandle, RtError> {
        let admitted = self.admit_load(&n, start_nc, nc_count, global)?;
        let mut txn = self.begin_load(&admitted)?;
        self.stage_load(&mut txn, &n, &admitted, weights)?;
        self.finish_load(txn, &n, admitted)
    }

    /// Admit: the checks that need no device (bound I/O, collectives) and the NCs the load
    /// gets (vNC admission, run once per load). Nothing is taken yet.
    fn admit_load(
        &self,
        n: &Neff,
        start_nc: Option<usize>,
        nc_count: Option<usize>,
        global: Option<GlobalPlacement>,
    ) -> Result<Admitted, RtError> {
        let session = self.current()?;
        let arch = session.arch;
        crate::stage::check_io(n).map_err(|e| RtError::from(RtErrorKind::Bindings(Box::new(e))))?;
        // Collectives that can never complete are refused before anything is placed.
        let ranks = match global {
            Some(g) => crate::collectives::LoadRanks { first: g.rank_base, total: g.ranks },
            None => crate::collectives::LoadRanks::local(n.graphs.len()),
        };
        crate::collectives::check(n, ranks)?;
        // A NEFF runs on logical NeuronCores of the size it was compiled for (its header's
        // vnc_size, one graph per physical core of each): another size is refused.
        let lnc = session.lnc.max(1);
        let vnc_size = n.header.vnc_size.max(1);
        if vnc_size as usize != lnc {
            return Err(RtError::from(RtErrorKind::LncMismatch {
                neff: vnc_size,
                runtime: lnc,
                arch: arch.name,
                default: arch.consts.lnc_default,
            }));
        }
        if !n.graphs.len().is_multiple_of(lnc) {
            return Err(RtError::from(RtErrorKind::LncGraphs { graphs: n.graphs.len(), lnc }));
        }
        let per_instance = n.graphs.len() / lnc;
        let required = nc_count.unwrap_or(per_instance).max(per_instance);
        let place = session.admit(start_nc, required)?;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (rank_base, comm_id) = match global {
            Some(g) => (g.rank_base, g.comm_id),
            None => (0, (id as u32).wrapping_mul(2654435761) ^ (std::process::id() << 8)),
        };
        Ok(Admitted { session, place, id, rank_base, comm_id })
    }

    /// Take the admitted NCs into a transaction: count the placement, hold the NCs' lanes
    /// (running executions finish first), park the models armed there and reset NCs a fault
    /// left dirty.
    fn begin_load(&self, a: &Admitted) -> Result<LoadTxn<'_>, RtError> {
        let picked = a.place.global.clone();
        a.session.place(&picked);
        let lanes = a.session.lanes.clone();
        let mut txn = LoadTxn {
            rt: self,
            session: a.session.clone(),
            held: Some(Held::acquire(&lanes, &picked)),
            lanes,
            placed: picked,
            life: ModelLifecycle::new(),
            staged: Vec::new(),
            devs: Vec::new(),
            staged_bytes: Vec::new(),
            committed: false,
        };
        // Staging programs the NCs' hardware: park the models armed there first.
        for &g in &txn.placed {
            super::ncs::park_armed(&txn.lanes, g);
            if txn.lanes.set_dirty(g, false) {
                if let Some((dev, local)) = a.session.device_of(g) {
                    if let Err(e) = dev.reset_nc(local) {
                        txn.lanes.set_dirty(g, true);
                        return Err(e.into());
                    }
                }
            }
        }
        txn.life.begin_load()?;
        Ok(txn)
    }

    /// Stage: one graph per NC into `txn` (a failure leaves what was staged to `txn`'s drop).
    fn stage_load(
        &self,
        txn: &mut LoadTxn<'_>,
        n: &Neff,
        a: &Admitted,
        mut weights: Option<&mut DeviceSink>,
    ) -> Result<(), RtError> {
        let progress = self.load_progress.lock().clone();
        let total: u64 = n.graphs.iter().map(crate::stage::initial_bytes).sum();
        let done = std::sync::atomic::AtomicU64::new(0);
        let written = |b: u64| {
            if let Some(f) = &progress {
                let d = done.fetch_add(b, Ordering::Relaxed) + b;
                f(crate::stage::LoadProgress { done: d, total });
            }
        };
        if let Some(f) = &progress {
            f(crate::stage::LoadProgress { done: 0, total });
        }
        for (rank, g) in n.graphs.iter().enumerate() {
            let global = a
                .place
                .global
                .get(rank)
                .copied()
                .ok_or_else(|| RtError::from(RtErrorKind::NoDeviceForNc { nc: rank }))?;
            let (dev, local) =
                a.session.device_of(global).ok_or_else(|| RtError::from(RtErrorKind::NoDeviceForNc { nc: global }))?;
            let before = super::hbm_used(&dev, local);
            let s = stage_graph(
                &dev,
                g,
                &GraphPlacement {
                    nc: local,
                    rank: a.rank_base + rank,
                    comm_id: a.comm_id,
                    unchecked: unchecked_loader(&a.session.cfg),
                },
                &written,
                weights.as_deref_mut(),
            )
            .map_err(|e| RtError::from(RtErrorKind::Stage { graph: g.name.clone(), source: Box::new(e) }))?;
            txn.staged_bytes.push(super::hbm_used(&dev, local).saturating_sub(before));
            txn.staged.push(s);
            txn.devs.push(dev);
        }
        for s in &mut txn.staged {
            s.index_io(n.inputs.iter().chain(&n.outputs).map(|t| t.name.as_str()));
        }
        Ok(())
    }

    /// Finish: the completion tracker, the clock sync point and the interrupt, then the model
    /// (RUNNING, armed on its NCs) — the transaction commits only when nothing can fail.
    fn finish_load(&self, mut txn: LoadTxn<'_>, n: &Neff, a: Admitted) -> Result<ModelHandle, RtError> {
        let cfg = &a.session.cfg;
        let mut tc = TrackerConfig::new(a.session.arch, cfg.exec_timeout);
        tc.reads_per_sweep = crate::stage::RING_RECORDS as usize;
        tc.barrier_warn = cfg.barrier_warn;
        // Both execute paths step the engine on the coarse clock.
        tc.clock = platform::clock::ClockKind::Coarse;
        let tracker = ExecTracker::new(txn.staged.len(), tc).map_err(|e| RtError::from(RtErrorKind::Tracker(e)))?;
        // The sync point: the device clock read between two host clock reads, paired with
        // their midpoint (the pairing error is at most half the gap).
        let before = self.epoch.elapsed().as_nanos() as u64;
        let t0 = txn.staged.first().map(|s| s.dev.device_time(s.nc)).transpose()?.unwrap_or(0);
        let after = self.epoch.elapsed().as_nanos() as u64;
        let sync = crate::timestamp::TimestampSync {
            clocks: [crate::timestamp::EngineClock::nominal(t0); csr_maps::Engine::COUNT],
            sync: crate::timestamp::SyncPoint { device_ns: 0, cpu_ns: before + (after - before) / 2 },
        };
        let irq = match (cfg.poll, txn.staged.first()) {
            (PollPolicy::Interrupt, Some(s)) => s.dev.irq(s.nc)?,
            _ => None,
        };
        txn.life.load_succeeded()?;
        // Nothing below fails: the transaction's parts become the model's.
        let (life, staged, devs, staged_bytes, lanes, held) = txn.commit();
        let id = a.id;
        let model = Arc::new(Model {
            id,
            name: n.header.name_str().to_string(),
            uuid: n.header.uuid,
            inputs: n.inputs.clone(),
            outputs: n.outputs.clone(),
            ncs: a.place.global,
            vncs: a.place.logical,
            lifecycle: super::Lifecycle::new(life),
            exec: Ranked::new(Rank::Exec, Some(ExecState { irq, ncs: staged, tracker, seq: 0, sync })),
            poll: cfg.poll,
            phase_timings: cfg.phase_timings,
            devices: devs,
            lanes: lanes.clone(),
            epoch: self.epoch,
            observers: a.session.observers.clone(),
            staged_bytes,
        });
        model.observers.model_loaded(&model.ncs, &model.staged_bytes);
        model.observers.model_listed(&model.desc(), true);
        for &g in &model.ncs {
            lanes.set_active(g, Some(Armed { id, model: Arc::downgrade(&model) }));
        }
        drop(held);
        self.models.lock().insert(id, model.clone());
        Ok(model)
    }

    /// Take another reference on a loaded model (a shared model is torn down at zero).
    pub fn share(&self, m: &ModelHandle) -> Result<ModelHandle, RtError> {
        self.guard()?;
        m.lifecycle.update(|lc| lc.acquire())?;
        Ok(m.clone())
    }

    /// `nrt_unload`.
    pub fn unload(&self, m: &ModelHandle) -> Result<(), RtError> {
        self.guard()?;
        match m.lifecycle.update(|lc| lc.unload())? {
            Unload::StillReferenced { .. } => return Ok(()),
            Unload::Teardown => {}
        }
        self.models.lock().remove(&m.id);
        self.retire_workers();
        // Wait for the executions queued on the model's NCs before it (each bounded by its
        // timeout), then tear down with the NCs held.
        let held = Held::acquire(&m.lanes, &m.ncs);
        self.teardown(m);
        drop(held);
        let _ = m.lifecycle.update(|lc| lc.finish_teardown());
        self.release_idle();
        Ok(())
    }

    /// Devices with no model loaded give their idle host DMA memory back. Nothing in use is
    /// released: host-transfer rings and the devices stay until [`Runtime::close`], so tensor
    /// I/O on other threads is never torn down under them.
    pub(super) fn release_idle(&self) {
        let Some(s) = self.session() else { return };
        let models = self.models.lock();
        for d in &s.devices {
            if !models.values().any(|x| x.devices.iter().any(|y| y.same(d))) {
                d.trim();
            }
        }
    }

    /// Tear `m` down; the caller holds `m`'s lanes (or nothing else can use them: close).
    pub(super) fn teardown(&self, m: &Model) {
        let poisoned = m.lifecycle.read(|lc| lc.poisoned().is_some());
        if let Some(ex) = m.exec.lock().take() {
            m.observers.model_unloaded(&m.ncs, &m.staged_bytes);
            m.observers.model_listed(&m.desc(), false);
            for ((s, d), &g) in ex.ncs.into_iter().zip(m.devices.iter()).zip(m.ncs.iter()) {
                let nc = s.nc;
                if m.lanes.active(g).is_none_or(|a| a.id != m.id) {
                    // Parked: another model (or nothing) is armed on the NC; free the memory
                    // (its queues, slots and engines are reset only where they still run it).
                    drop(s);
                    continue;
                }
                m.lanes.set_active(g, None);
                m.lanes.set_dirty(g, false);
                s.teardown(d);
                // libnrt leaves a faulted core to the management firmware; we reset the NCs of
                // a poisoned model through the firmware at unload so the next load on them
                // starts clean. Healthy NCs only get their latched causes cleared.
                if poisoned {
                    if let Err(e) = d.reset_nc(nc) {
                        tracing::warn!("NC {nc}: reset after a fatal execution failed: {e}");
                    }
                }
                let _ = d.clear_causes(nc);
            }
        }
        for d in &m.devices {
            d.trim();
        }
        if let Some(s) = self.session() {
            s.unplace(&m.ncs);
        }
    }
}
