//! Reset: the whole device (FLR, FW-IO device reset) or one NC (FW-IO TPB reset), and the
//! power-on register contents.

use std::sync::atomic::Ordering;

use csr_maps::consts::{q7 as q7c, seq as seqc};
use csr_maps::InstanceId;

use crate::device::seq::SeqEng;
use crate::device::udma::Engine;
use crate::device::{Dev, State};

impl Dev {
    pub fn reset_all(&self, st: &mut State) {
        let n = self.ncs();
        st.regs.clear();
        for nc in 0..n {
            crate::device::mpu::invalidate(st, nc);
            self.reset_nc_state(st, nc);
        }
        for e in st.udma.iter_mut() {
            *e = Engine::default();
        }
        for s in st.topsp_sems.iter_mut() {
            s.fill(0);
        }
        for s in st.topsp_events.iter_mut() {
            s.fill(0);
        }
        st.nq.clear();
        st.faults.clear();
        st.coll_seq.clear();
        for nc in 0..self.ncs() {
            self.barriers.reset(nc);
        }
        self.init_regs(st);
        self.n.resets.fetch_add(1, Ordering::Relaxed);
    }

    /// A TPB reset as the firmware performs it for reset-map LOW value `map`, per the arch's
    /// groups (`nr_get_tpb_reset_map` in the kmod's `neuron_dhal_v2.c` / `neuron_dhal_v3.c`):
    /// TPB bit n resets NC n's core state; NC n's DMA engines are reset by its SDMA-group bit
    /// where the arch has SDMA groups (V3/V4), else by its TPB bit (V2); TOP_SP bits reset
    /// their TOP_SPs' semaphores and events. A driver that leaves a group out leaves that
    /// unit un-reset.
    pub fn reset_units(&self, st: &mut State, map: u32) {
        let c = &self.arch.consts;
        let map = map as u64;
        let bit = |b: u64| b < 32 && map & (1 << b) != 0;
        for nc in 0..self.ncs() {
            let n = nc as u64;
            if bit(n) {
                self.reset_tpb_state(st, nc);
            }
            let engines = if c.reset_sdma_group_shift != 0 { bit(c.reset_sdma_group_shift + n) } else { bit(n) };
            if engines {
                self.reset_nc_engines(st, nc);
            }
        }
        let topsp_bits = self.arch.counts.ncs * c.reset_topsp_bits_per_nc;
        let per_bit = (self.arch.counts.top_sps / topsp_bits.max(1)).max(1);
        for b in 0..topsp_bits {
            if bit(c.reset_topsp_shift + b) {
                for t in (b * per_bit) as usize..((b + 1) * per_bit) as usize {
                    if let Some(s) = st.topsp_sems.get_mut(t) {
                        s.fill(0);
                    }
                    if let Some(e) = st.topsp_events.get_mut(t) {
                        e.fill(0);
                    }
                }
            }
        }
    }

    /// Reset the queues of NC `nc`'s DMA engines.
    fn reset_nc_engines(&self, st: &mut State, nc: usize) {
        let per = self.arch.counts.dma_engines_per_nc as usize;
        for e in (0..st.udma.len()).filter(|&e| e / per == nc && e < per * self.ncs()) {
            st.udma[e] = Engine::default();
        }
    }

    /// Reset one NC: its core state and its DMA engines' queues.
    pub fn reset_nc_state(&self, st: &mut State, nc: usize) {
        self.reset_tpb_state(st, nc);
        self.reset_nc_engines(st, nc);
    }

    /// Reset one NC's core: semaphores, events, sequencers, NQs, INTC, Q7/NX cores.
    fn reset_tpb_state(&self, st: &mut State, nc: usize) {
        st.sems[nc].fill(0);
        for g in st.sem_gen[nc].iter_mut() {
            *g = g.wrapping_add(1);
        }
        st.events[nc].fill(0);
        for e in st.seq[nc].iter_mut() {
            *e = SeqEng::default();
        }
        self.barriers.reset(nc);
        let clear: Vec<(u64, u64)> =
            [InstanceId::Seq, InstanceId::NcIntc, InstanceId::Notific, InstanceId::NcRegions, InstanceId::NcBarrier]
                .into_iter()
                .filter_map(|inst| self.dec.span(inst, nc as u32))
                .collect();
        st.regs.retain(|k, _| !clear.iter().any(|(a, b)| k >= a && k < b));
        st.nq.retain(|k, _| !clear.iter().any(|(a, b)| k >= a && k < b));
        crate::device::mpu::invalidate(st, nc);
        for c in 0..q7c::POOL_CORES {
            if let Some(q) = self.q7((nc as u64 * q7c::POOL_CORES + c) as usize) {
                st.regs.retain(|k, _| *k < q.base() || *k >= q.base() + csr_maps::blocks::q7::SIZE);
                st.regs.insert(q.claim().offset(), q7c::READY);
            }
        }
        let nx = seqc::Engine::COUNT as u64;
        for c in 0..nx {
            if let Some(q) = self.nx((nc as u64 * nx + c) as usize) {
                st.regs.retain(|k, _| *k < q.base() || *k >= q.base() + csr_maps::blocks::q7::SIZE);
                st.regs.insert(q.claim().offset(), q7c::READY);
            }
        }
        st.faults.retain(|f| f.nc != nc);
        st.pending[nc] = false;
    }

    /// Power-on register contents that differ from the description's reset values.
    pub fn init_regs(&self, st: &mut State) {
        let m = self.misc_ram();
        st.regs.insert(m.device_id().offset(), self.cfg.device_index);
        st.regs.insert(m.fw_api_version().offset(), self.cfg.fw_api_version);
        st.regs.insert(m.serial_lo().offset(), self.cfg.device_index);
        for i in 0..(self.ncs() as u64 * q7c::POOL_CORES) {
            if let Some(q) = self.q7(i as usize) {
                st.regs.insert(q.claim().offset(), q7c::READY);
            }
        }
        for i in 0..(self.ncs() as u64 * seqc::Engine::COUNT as u64) {
            if let Some(q) = self.nx(i as usize) {
                st.regs.insert(q.claim().offset(), q7c::READY);
            }
        }
    }
}
