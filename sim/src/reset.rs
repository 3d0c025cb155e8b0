//! Reset: the whole device (FLR, FW-IO device reset) or one NC (FW-IO TPB reset), and the
//! power-on register contents.

use std::sync::atomic::Ordering;

use csr_maps::consts::{q7 as q7c, seq as seqc};
use csr_maps::InstanceId;

use crate::device::{Dev, State};
use crate::seq::SeqEng;
use crate::udma::Engine;

impl Dev {
    pub fn reset_all(&self, st: &mut State) {
        let n = self.ncs();
        st.regs.clear();
        for nc in 0..n {
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
        self.init_regs(st);
        self.n.resets.fetch_add(1, Ordering::Relaxed);
    }

    /// Reset one NC: semaphores, events, sequencers, its DMA engines' queues, NQs, INTC.
    pub fn reset_nc_state(&self, st: &mut State, nc: usize) {
        st.sems[nc].fill(0);
        for g in st.sem_gen[nc].iter_mut() {
            *g = g.wrapping_add(1);
        }
        st.events[nc].fill(0);
        for e in st.seq[nc].iter_mut() {
            *e = SeqEng::default();
        }
        let clear: Vec<(u64, u64)> = [InstanceId::Seq, InstanceId::NcIntc, InstanceId::Notific]
            .into_iter()
            .filter_map(|inst| self.dec.span(inst, nc as u32))
            .collect();
        let per = self.arch.counts.dma_engines_per_nc as usize;
        for e in (0..st.udma.len()).filter(|&e| e / per == nc && e < per * self.ncs()) {
            st.udma[e] = Engine::default();
        }
        st.regs.retain(|k, _| !clear.iter().any(|(a, b)| k >= a && k < b));
        st.nq.retain(|k, _| !clear.iter().any(|(a, b)| k >= a && k < b));
        for c in 0..q7c::POOL_CORES {
            if let Some(q) = self.q7((nc as u64 * q7c::POOL_CORES + c) as usize) {
                st.regs.retain(|k, _| *k < q.base() || *k >= q.base() + csr_maps::blocks::q7::SIZE);
                st.regs.insert(q.claim().offset(), q7c::READY);
            }
        }
        let nx = seqc::ENGINES.len() as u64;
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
        for i in 0..(self.ncs() as u64 * seqc::ENGINES.len() as u64) {
            if let Some(q) = self.nx(i as usize) {
                st.regs.insert(q.claim().offset(), q7c::READY);
            }
        }
    }
}
