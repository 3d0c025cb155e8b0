//! Register dispatch: a BAR0 offset is decoded to its typed identity ([`RegId`]) and handed
//! to the block that gives it behaviour; the rest are plain storage with the access type of
//! their description (read-only, write-1-to-clear, write-1-to-set, read/write).

use std::sync::atomic::Ordering;

use csr_maps::blocks::{notific, sdma};
use csr_maps::meta::Access;
use csr_maps::RegId;

use crate::decode::Hit;
use crate::device::{Dev, State};

impl Dev {
    /// Generic stored value (or the reset value).
    pub fn stored(&self, st: &State, off: u64, reset: u64) -> u32 {
        st.regs.get(&off).copied().unwrap_or(reset as u32)
    }

    /// Stored value of a plain register, falling back to its described reset value.
    pub fn reg_value(&self, st: &State, off: u64) -> u32 {
        let reset = self.dec.decode(off).map(|h| h.def.reset).unwrap_or(0);
        self.stored(st, off, reset)
    }

    /// Register read with side effects and computed values.
    pub fn reg_read(&self, st: &mut State, off: u64) -> u32 {
        let Some(hit) = st.decoded.decode(&self.dec, off) else {
            self.n.unclaimed.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(offset = format_args!("{off:#x}"), "sim: read of an unknown BAR0 offset returns 0");
            return 0;
        };
        match hit.id {
            RegId::TpbSem(nc, r) => crate::device::sem::read(st, crate::device::sem::Window::Tpb, nc, r),
            RegId::TopspSem(sp, r) => crate::device::sem::read(st, crate::device::sem::Window::TopSp, sp, r),
            RegId::Udma(e, r) => crate::device::udma::reg_read(self, st, &hit, e, r),
            RegId::Notific(_, notific::RegId::Nq(_, r))
            | RegId::NotificTopsp(_, notific::RegId::Nq(_, r))
            | RegId::Sdma(_, sdma::RegId::TraceNq(notific::RegId::Nq(_, r))) => {
                crate::device::nq::reg_read(self, st, &hit, r)
            }
            RegId::Seq(nc, r) => crate::device::seq::reg_read(self, st, &hit, nc, r),
            RegId::MiscRam(_, r) => crate::fwio::reg_read(self, st, &hit, r),
            RegId::NcBarrier(nc, r) => crate::device::barrier::reg_read(self, st, &hit, nc, r),
            _ => self.generic_read(st, &hit),
        }
    }

    /// Read of a register without block-specific read behaviour.
    pub fn generic_read(&self, st: &State, hit: &Hit) -> u32 {
        if !hit.def.access.readable() {
            return 0;
        }
        if let Some(v) = crate::device::intc::read(self, st, hit) {
            return v;
        }
        self.stored(st, hit.off, hit.def.reset)
    }

    /// Register write with side effects. Returns nothing; work is flagged in `st.pending`.
    pub fn reg_write(&self, st: &mut State, off: u64, val: u32) {
        let Some(hit) = st.decoded.decode(&self.dec, off) else {
            self.n.unclaimed.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(
                offset = format_args!("{off:#x}"),
                value = format_args!("{val:#x}"),
                "sim: write to an unknown BAR0 offset ignored"
            );
            return;
        };
        match hit.id {
            RegId::TpbSem(nc, r) => crate::device::sem::write(st, &hit, crate::device::sem::Window::Tpb, nc, r, val),
            RegId::TopspSem(sp, r) => {
                crate::device::sem::write(st, &hit, crate::device::sem::Window::TopSp, sp, r, val)
            }
            RegId::Udma(e, r) => crate::device::udma::reg_write(self, st, &hit, e, r, val),
            RegId::Notific(_, notific::RegId::Nq(_, r))
            | RegId::NotificTopsp(_, notific::RegId::Nq(_, r))
            | RegId::Sdma(_, sdma::RegId::TraceNq(notific::RegId::Nq(_, r))) => {
                crate::device::nq::reg_write(self, st, &hit, r, val)
            }
            RegId::Seq(nc, r) => crate::device::seq::reg_write(self, st, &hit, nc, r, val),
            RegId::MiscRam(_, r) => crate::fwio::reg_write(self, st, &hit, r, val),
            RegId::Q7(..) | RegId::Nx(..) => crate::device::seq::q7_write(self, st, &hit, val),
            RegId::NcRegions(nc, _) => crate::device::mpu::reg_write(self, st, &hit, nc, val),
            RegId::NcBarrier(nc, r) => crate::device::barrier::reg_write(self, st, &hit, nc, r, val),
            _ => self.generic_write(st, &hit, val),
        }
    }

    /// Write of a register without block-specific write behaviour.
    pub fn generic_write(&self, st: &mut State, hit: &Hit, val: u32) {
        if crate::device::intc::write(self, st, hit, val) {
            return;
        }
        let (off, def) = (hit.off, hit.def);
        match def.access {
            Access::ReadOnly => {
                tracing::debug!(
                    reg = def.name,
                    id = ?hit.id,
                    value = format_args!("{val:#x}"),
                    "sim: write to a read-only register ignored"
                );
            }
            Access::WriteOneToClear => {
                let c = self.stored(st, off, def.reset);
                st.regs.insert(off, c & !val);
            }
            Access::WriteOneToSet => {
                let c = self.stored(st, off, def.reset);
                st.regs.insert(off, c | val);
            }
            Access::WriteZeroToClear => {
                let c = self.stored(st, off, def.reset);
                st.regs.insert(off, c & val);
            }
            Access::ReadWrite | Access::WriteOnly => {
                st.regs.insert(off, val);
            }
        }
    }
}
