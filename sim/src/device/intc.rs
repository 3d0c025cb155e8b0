//! Interrupt controllers: the IOFIC register groups (the UDMA engines' `gen` groups, the
//! NC INTC groups, the user error trigger) and the NC INTC lines the device raises.
//!
//! A group's `cause` is write-0-to-clear (writing 1 leaves a bit alone: the Annapurna Labs
//! HAL's `al_iofic_clear_cause` writes the complement of the bits it clears), `cause_set` ORs bits into `cause`, `mask_clear`
//! ANDs into `mask` (the kmod's `al_udma_iofic` usage), and `status` reads `cause & !mask`.

use csr_maps::blocks::{
    iofic_axi_parity, iofic_group, iofic_m2s_err, iofic_s2m_err, iofic_summary, nc_intc_g0, nc_intc_g1,
};
use csr_maps::LeafReg;

use super::{Dev, State};
use crate::decode::Hit;

/// What a register of an IOFIC group does.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    Cause,
    CauseSet,
    MaskClear,
    Status,
    /// Stored with its access type (`mask`, `control`, `abort_mask`).
    Plain,
}

/// A register of an IOFIC group: its role and the BAR0 offsets of its group's `cause` and
/// `mask`.
struct Group {
    role: Role,
    cause: u64,
    mask: u64,
}

/// The IOFIC group `hit` belongs to, if it is in one. Every interrupt-group block shares the
/// layout; each is listed so a renamed register fails the build.
fn group(hit: &Hit) -> Option<Group> {
    macro_rules! groups {
        ($($variant:ident => $m:ident),+ $(,)?) => {
            match hit.id.leaf() {
                $(LeafReg::$variant(r) => {
                    let base = hit.leaf_base(r.offset());
                    let role = match r {
                        $m::RegId::Cause => Role::Cause,
                        $m::RegId::CauseSet => Role::CauseSet,
                        $m::RegId::MaskClear => Role::MaskClear,
                        $m::RegId::Status => Role::Status,
                        $m::RegId::Mask | $m::RegId::Control | $m::RegId::AbortMask => Role::Plain,
                    };
                    Some(Group { role, cause: base + $m::CAUSE_OFFSET, mask: base + $m::MASK_OFFSET })
                })+
                _ => None,
            }
        };
    }
    groups!(
        IoficGroup => iofic_group,
        IoficAxiParity => iofic_axi_parity,
        IoficM2sErr => iofic_m2s_err,
        IoficS2mErr => iofic_s2m_err,
        IoficSummary => iofic_summary,
        NcIntcG0 => nc_intc_g0,
        NcIntcG1 => nc_intc_g1,
    )
}

/// The value of an IOFIC `status` read (`cause & !mask`), or `None` for any other register.
pub(crate) fn read(dev: &Dev, st: &State, hit: &Hit) -> Option<u32> {
    let g = group(hit).filter(|g| g.role == Role::Status)?;
    Some(dev.stored(st, g.cause, 0) & !dev.stored(st, g.mask, u32::MAX as u64))
}

/// Apply a write to an IOFIC `cause`, `cause_set` or `mask_clear`. Returns whether it was one.
pub(crate) fn write(dev: &Dev, st: &mut State, hit: &Hit, val: u32) -> bool {
    let Some(g) = group(hit) else { return false };
    match g.role {
        Role::Cause => {
            let c = dev.stored(st, hit.off, 0);
            st.regs.insert(hit.off, c & val);
        }
        Role::CauseSet => {
            let v = dev.stored(st, g.cause, 0);
            st.regs.insert(g.cause, v | val);
        }
        Role::MaskClear => {
            let v = dev.stored(st, g.mask, u32::MAX as u64);
            st.regs.insert(g.mask, v & val);
        }
        Role::Status | Role::Plain => return false,
    }
    true
}

/// An NC INTC line the device raises.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Line {
    SeqFatal,
    DmaAbort,
    DmaFault,
    HbmUe,
    HbmUeRepairable,
    NcUe,
    CcError,
    NetProxyFail,
    SwNqOverflow,
}

impl Line {
    /// Group (0 or 1) and cause bits of the line.
    fn cause(self) -> (u8, u32) {
        let g0 = nc_intc_g0::Cause(0);
        match self {
            Line::SeqFatal => (0, g0.with_seq_fatal(1).0),
            Line::DmaAbort => (0, g0.with_dma_abort(1).0),
            Line::DmaFault => (0, g0.with_dma_fault(1).0),
            Line::HbmUe => (0, g0.with_hbm_ue(1).0),
            Line::HbmUeRepairable => (0, g0.with_hbm_ue_repairable(1).0),
            Line::NcUe => (0, g0.with_nc_ue(1).0),
            Line::CcError => (0, g0.with_cc_error(1).0),
            Line::NetProxyFail => (0, g0.with_net_proxy_fail(1).0),
            Line::SwNqOverflow => (1, nc_intc_g1::Cause(0).with_sw_nq_overflow(1).0),
        }
    }
}

impl Dev {
    /// Latch cause bits at the register `off` (an IOFIC `cause`).
    pub fn latch(&self, st: &mut State, off: u64, bits: u32) {
        let c = self.stored(st, off, 0);
        st.regs.insert(off, c | bits);
    }

    /// Whether NC INTC line `line` of NC `nc` is latched.
    pub fn intc_latched(&self, st: &mut State, nc: usize, line: Line) -> bool {
        let Some(b) = self.nc_intc(nc) else { return false };
        let (group, bits) = line.cause();
        let off = if group == 0 { b.g0().cause().offset() } else { b.g1().cause().offset() };
        self.stored(st, off, 0) & bits == bits
    }

    /// Latch NC INTC line `line` of NC `nc`.
    pub fn intc(&self, st: &mut State, nc: usize, line: Line) {
        let Some(b) = self.nc_intc(nc) else { return };
        let (group, bits) = line.cause();
        let off = if group == 0 { b.g0().cause().offset() } else { b.g1().cause().offset() };
        self.latch(st, off, bits);
    }
}
