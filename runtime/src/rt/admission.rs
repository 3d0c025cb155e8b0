//! vNC admission: which NeuronCores a load gets.
//!
//! Callers number cores logically: vNC `i` is the `i`-th logical core of
//! NEURON_RT_VISIBLE_CORES (all cores when unset), as in libnrt; each is LNC physical cores
//! ([`crate::cores`]). `required` counts vNCs. Several models may share an
//! NC (their executions serialize on the NC's lane, see [`crate::lanes`]), so admission only
//! fails when the cores truly run out: a load asking for `start_nc` takes logical
//! `start_nc..start_nc + required`; without a start it takes the `required` consecutive
//! logical NCs holding the fewest models (lowest index on a tie). Too few cores →
//! NRT_LOAD_NOT_ENOUGH_NC (9) with libnrt's message "Insufficient number of pncs, required:
//! %u, available: %u". Running out of device memory is reported by staging.

use super::{RtError, RtErrorKind, Session};

/// The NCs picked for a load.
pub(super) struct Placement {
    /// Global physical indices (LNC per vNC).
    pub global: Vec<usize>,
    /// vNC indices (one per logical core).
    pub logical: Vec<usize>,
}

impl Session {
    /// Pick `required` visible vNCs (logical cores: `start_nc`, or the least loaded); nothing
    /// is reserved yet. The placement's global NCs are their physical cores, in order.
    pub(super) fn admit(&self, start_nc: Option<usize>, required: usize) -> Result<Placement, RtError> {
        let lnc = self.lnc.max(1);
        let visible = self.visible_logical();
        let placed = self.placed.lock().clone();
        let load = |v: usize| placed.get(crate::cores::physical(visible[v], lnc).start).copied().unwrap_or(0);
        let not_enough = |available: usize| RtError::from(RtErrorKind::NotEnoughNc { required, available });
        let first = match start_nc {
            Some(s) => {
                if s.checked_add(required).is_none_or(|e| e > visible.len()) {
                    return Err(not_enough(visible.len().saturating_sub(s)));
                }
                s
            }
            None => {
                if required > visible.len() {
                    return Err(not_enough(visible.len()));
                }
                // The window whose busiest vNC holds the fewest models, then the fewest in all.
                (0..=visible.len() - required)
                    .min_by_key(|&w| {
                        let loads = (w..w + required).map(load);
                        (loads.clone().max().unwrap_or(0), loads.sum::<usize>())
                    })
                    .unwrap_or(0)
            }
        };
        let logical: Vec<usize> = (first..first + required).collect();
        let cores: Vec<usize> = logical.iter().map(|&v| visible[v]).collect();
        Ok(Placement { global: crate::cores::expand(&cores, lnc), logical })
    }

    /// Where a streaming load writes its weights before it is admitted (after the parse): the
    /// first physical NC of vNC `start_nc`, or of the visible vNC holding the fewest models.
    /// Only a hint — no check, nothing reserved; a var admission places elsewhere is copied.
    pub(super) fn first_nc_hint(&self, start_nc: Option<usize>) -> usize {
        let lnc = self.lnc.max(1);
        let visible = self.visible_logical();
        let placed = self.placed.lock();
        let load = |l: &usize| placed.get(crate::cores::physical(*l, lnc).start).copied().unwrap_or(0);
        match start_nc {
            Some(s) => visible.get(s).copied(),
            None => visible.iter().min_by_key(|l| load(l)).copied(),
        }
        .map_or(0, |l| crate::cores::physical(l, lnc).start)
    }
}
