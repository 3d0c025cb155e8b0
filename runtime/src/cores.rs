//! Logical NeuronCores (docs/lifecycle.md, "Logical NeuronCores"): the one home of the
//! logical ↔ physical arithmetic.
//!
//! On Trn2 (cayman) and Trn3 (mariana) the NeuronCore every interface numbers is the logical
//! one: LNC physical cores grouped (`NEURON_LOGICAL_NC_CONFIG` / `NEURON_RT_VIRTUAL_CORE_SIZE`,
//! default 2 there, [`resolve_lnc`]); sunda has only LNC=1. Logical core `l` of the runtime
//! is physical cores `l·LNC .. (l+1)·LNC` in global physical order (devices in order, each
//! device's cores in order), so a logical core never spans two devices (every device's core
//! count is a multiple of its LNC). hal, the simulator and the completion engine see physical
//! cores only; the runtime converts at its edges.

use std::ops::Range;

use crate::env::LncRequest;
use crate::error::{RtError, RtErrorKind};

/// The logical NeuronCore size on `arch` for `requested` (None: the arch's default, csr-maps
/// `lnc_default`); a size above the arch's `lnc_max` is refused naming the variable.
pub fn resolve_lnc(arch: &csr_maps::Arch, requested: Option<LncRequest>) -> Result<usize, RtError> {
    arch.lnc(requested.map(|r| r.size)).ok_or_else(|| {
        let r = requested.unwrap_or(LncRequest { size: 0, var: crate::env::LNC_VAR });
        RtError::from(RtErrorKind::LncUnsupported {
            var: r.var,
            size: r.size,
            arch: arch.name,
            max: arch.consts.lnc_max.max(1) as u32,
        })
    })
}

/// The physical cores of logical core `l`.
pub fn physical(l: usize, lnc: usize) -> Range<usize> {
    l * lnc..(l + 1) * lnc
}

/// The logical core of physical core `p`.
pub fn logical(p: usize, lnc: usize) -> usize {
    p / lnc.max(1)
}

/// Logical cores `logical`, expanded to their physical cores in order.
pub fn expand(logical: &[usize], lnc: usize) -> Vec<usize> {
    logical.iter().flat_map(|&l| physical(l, lnc)).collect()
}

/// The logical cores of a list of physical cores (whole logical cores, in order): physical
/// cores of a partial logical core are dropped.
pub fn group(physical_cores: &[usize], lnc: usize) -> Vec<usize> {
    let lnc = lnc.max(1);
    let mut out: Vec<usize> = Vec::new();
    for &p in physical_cores {
        let l = p / lnc;
        if out.last() != Some(&l) && physical(l, lnc).all(|q| physical_cores.contains(&q)) {
            out.push(l);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_per_arch() {
        assert_eq!(resolve_lnc(&csr_maps::SUNDA, None).unwrap(), 1);
        assert_eq!(resolve_lnc(&csr_maps::CAYMAN, None).unwrap(), 2);
        assert_eq!(resolve_lnc(&csr_maps::MARIANA, None).unwrap(), 2);
        let two = LncRequest { size: 2, var: crate::env::LNC_VAR };
        let e = resolve_lnc(&csr_maps::SUNDA, Some(two)).unwrap_err();
        assert!(e.to_string().contains("NEURON_LOGICAL_NC_CONFIG=2"), "{e}");
        assert_eq!(e.status, neff::NrtStatus::Invalid);
        let one = LncRequest { size: 1, var: crate::env::VIRTUAL_CORE_SIZE_VAR };
        assert_eq!(resolve_lnc(&csr_maps::CAYMAN, Some(one)).unwrap(), 1);
    }

    #[test]
    fn logical_and_physical() {
        assert_eq!(physical(1, 2), 2..4);
        assert_eq!(logical(3, 2), 1);
        assert_eq!(expand(&[1, 2], 2), vec![2, 3, 4, 5]);
        assert_eq!(group(&[2, 3, 4, 5], 2), vec![1, 2]);
        assert_eq!(group(&[3, 4, 5], 2), vec![2]);
        assert_eq!(group(&[0, 1, 2], 1), vec![0, 1, 2]);
    }
}
