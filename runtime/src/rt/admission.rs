//! vNC admission: which NeuronCores a load gets.
//!
//! Callers number cores logically: logical NC `i` is the `i`-th core of
//! NEURON_RT_VISIBLE_CORES (all cores when unset), as in libnrt. Several models may share an
//! NC (their executions serialize on the NC's lane, see [`crate::lanes`]), so admission only
//! fails when the cores truly run out: a load asking for `start_nc` takes logical
//! `start_nc..start_nc + required`; without a start it takes the `required` consecutive
//! logical NCs holding the fewest models (lowest index on a tie). Too few cores →
//! NRT_LOAD_NOT_ENOUGH_NC (9) with libnrt's message "Insufficient number of pncs, required:
//! %u, available: %u". Running out of device memory is reported by staging.

use super::{lock, RtError, RtErrorKind, Runtime};

/// The NCs picked for a load.
pub(super) struct Placement {
    /// Global indices.
    pub global: Vec<usize>,
    /// Logical indices.
    pub logical: Vec<usize>,
}

impl Runtime {
    /// Pick `required` visible NCs (logical `start_nc`, or the least loaded); nothing is
    /// reserved yet.
    pub(super) fn admit(&self, start_nc: Option<usize>, required: usize) -> Result<Placement, RtError> {
        let visible = self.visible_ncs();
        let placed = lock(&self.placed).clone();
        let load = |l: usize| placed.get(visible[l]).copied().unwrap_or(0);
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
                // The window whose busiest NC holds the fewest models, then the fewest in all.
                (0..=visible.len() - required)
                    .min_by_key(|&w| {
                        let loads = (w..w + required).map(load);
                        (loads.clone().max().unwrap_or(0), loads.sum::<usize>())
                    })
                    .unwrap_or(0)
            }
        };
        let logical: Vec<usize> = (first..first + required).collect();
        Ok(Placement { global: logical.iter().map(|&l| visible[l]).collect(), logical })
    }

    /// Where a streaming load writes its weights before it is admitted (after the parse): the
    /// global NC of logical `start_nc`, or the visible NC holding the fewest models. Only a
    /// hint — no check, nothing reserved; a var admission places elsewhere is copied.
    pub(super) fn first_nc_hint(&self, start_nc: Option<usize>) -> usize {
        let visible = self.visible_ncs();
        let placed = lock(&self.placed);
        let load = |g: &usize| placed.get(*g).copied().unwrap_or(0);
        match start_nc {
            Some(s) => visible.get(s).copied(),
            None => visible.iter().min_by_key(|g| load(g)).copied(),
        }
        .unwrap_or(0)
    }
}
