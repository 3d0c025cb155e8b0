//! The models file beside a segment: its runtime's loaded models, for neuron-monitor's
//! `loaded_models`.

use std::path::{Path, PathBuf};

/// The file beside a segment that lists its runtime's loaded models (JSON), for
/// neuron-monitor's `loaded_models`: `neuron-vfio.PID.N.models`.
pub fn models_path(segment: &Path) -> PathBuf {
    segment.with_extension("models")
}

/// One loaded model, as the models file lists it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ListedModel {
    pub id: u64,
    pub name: String,
    /// The NEFF header's UUID, 32 hex digits.
    pub uuid: String,
    /// Global NCs (the segment's slot indices).
    pub ncs: Vec<usize>,
    /// Device memory its staging took on each.
    pub bytes_per_nc: Vec<u64>,
}

/// The models of a segment's runtime (none when it lists none, or the file is unreadable).
pub fn read_models(segment: &Path) -> Vec<ListedModel> {
    std::fs::read(models_path(segment)).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default()
}

/// The writer of the models file: rewritten whole (to a temporary file, then renamed) at
/// each load and unload, never on the execute path; removed with the segment.
#[derive(Debug)]
pub(super) struct ModelList {
    pub(super) path: PathBuf,
    pub(super) models: crate::locks::Ranked<std::collections::BTreeMap<u64, ListedModel>>,
}

impl ModelList {
    pub(super) fn update(&self, m: &crate::observe::ModelDesc<'_>, loaded: bool) {
        let mut all = self.models.lock();
        if loaded {
            let uuid = m.uuid.iter().map(|b| format!("{b:02x}")).collect();
            let e = ListedModel {
                id: m.id,
                name: m.name.to_string(),
                uuid,
                ncs: m.ncs.to_vec(),
                bytes_per_nc: m.bytes_per_nc.to_vec(),
            };
            all.insert(m.id, e);
        } else {
            all.remove(&m.id);
        }
        let list: Vec<&ListedModel> = all.values().collect();
        let tmp = self.path.with_extension("models.tmp");
        let written = serde_json::to_vec(&list)
            .map_err(std::io::Error::other)
            .and_then(|b| std::fs::write(&tmp, b))
            .and_then(|_| std::fs::rename(&tmp, &self.path));
        if let Err(e) = written {
            tracing::debug!("{}: {e}", self.path.display());
        }
    }
}

impl Drop for ModelList {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}
