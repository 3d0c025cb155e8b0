//! vNC admission: which global NeuronCores a load gets.
//!
//! The candidates are the NCs named by NEURON_RT_VISIBLE_CORES (all when unset) that no
//! loaded model owns. A load asking for `start_nc` takes `start_nc..start_nc + required`
//! (those of them that are free); otherwise the first free ones. Too few →
//! NRT_LOAD_NOT_ENOUGH_NC (9) with libnrt's message "Insufficient number of pncs, required:
//! %u, available: %u" (available = the free NCs of the requested range, or all free NCs).

use neff::NrtStatus;

use super::{lock, RtError, RtErrorKind, Runtime, RuntimeConfig};

impl Runtime {
    /// Pick `required` free visible NCs (global indices) for a load; nothing is reserved yet.
    pub(super) fn admit(
        &self,
        cfg: &RuntimeConfig,
        start_nc: Option<usize>,
        required: usize,
    ) -> Result<Vec<usize>, RtError> {
        let owners = lock(&self.owners);
        let visible: Vec<usize> = match &cfg.visible_cores {
            Some(v) => v.iter().copied().filter(|&c| c < owners.len()).collect(),
            None => (0..owners.len()).collect(),
        };
        let free: Vec<usize> = visible.iter().copied().filter(|&c| owners[c].is_none()).collect();
        let cand: Vec<usize> = match start_nc {
            Some(s) => (s..s.saturating_add(required)).filter(|c| free.contains(c)).collect(),
            None => free.iter().copied().take(required).collect(),
        };
        if cand.len() < required {
            let available = if start_nc.is_some() { cand.len() } else { free.len() };
            return Err(RtError::with(
                NrtStatus::LoadNotEnoughNc,
                RtErrorKind::Resource(format!(
                    "Insufficient number of pncs, required: {required}, available: {available}"
                )),
            ));
        }
        Ok(cand)
    }
}
