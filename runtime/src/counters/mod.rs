//! Per-process counters in shared memory, for `neuron-vfio monitor` / `top` in other
//! processes (what neuron-monitor reads from the Neuron runtime).
//!
//! Each initialized [`Runtime`](crate::Runtime) built with this observer ([`attach`]; the CLI
//! and libnrt.so install it) publishes one segment: a file
//! `neuron-vfio.PID.N.counters` in `NEURON_VFIO_SHM_DIR` (default `/dev/shm`), mapped shared,
//! made of 64-bit words. The runtime is its only writer; monitors map it read-only. Every
//! word is updated with a single relaxed atomic operation, so the execute path takes no
//! lock and makes no syscall for it: an atomic add, or, for an NC's execution words, a
//! relaxed load and store — those are written only by the execution that holds the NC's
//! lane (executions on an NC are serialized, and the lane's hand-over orders one writer
//! after the next), so no update is lost without a locked read-modify-write.
//! `NEURON_VFIO_COUNTERS=0` turns publishing off.
//!
//! The layout (version [`VERSION`]) is documented in `docs/monitoring.md`: a header of
//! [`HEADER_WORDS`] words and a device table ([`DEVICE_WORDS`] words per device: its identity
//! — the device, never the process — and the NCs this process owns on it), then one slot of
//! [`SLOT_WORDS`] words per NeuronCore of its devices (global NC index order). Readers must
//! check [`MAGIC`] and [`VERSION`] and take the header, table and slot sizes from the header,
//! so later versions may append words.
//!
//! | module | holds |
//! |---|---|
//! | `layout` | the words: [`hdr`], [`dev`], [`slot`], the sizes, [`ErrorKind`], the latency buckets |
//! | `ids` | [`DeviceId`], [`Holding`], [`NcId`]: what a segment names |
//! | `writer` | [`Counters`] (the writer and the runtime's observer), [`publish`], [`attach`] |
//! | `reader` | [`Reader`], [`Snapshot`], [`NcCounters`], [`discover`] |
//! | `models` | the models file beside a segment ([`ListedModel`], [`read_models`]) |

use std::path::{Path, PathBuf};

mod ids;
mod layout;
mod models;
mod reader;
mod writer;

pub use ids::{is_private_sim_identity, DeviceId, Holding, NcId};
pub use layout::*;
pub use models::{models_path, read_models, ListedModel};
pub use reader::{discover, NcCounters, ReadError, Reader, Snapshot};
pub use writer::{attach, publish, Counters};

/// Where segments live: `NEURON_VFIO_SHM_DIR`, else `/dev/shm` (the temp dir without it).
pub fn shm_dir() -> PathBuf {
    crate::env::shm_dir()
}

/// Whether publishing is on (`NEURON_VFIO_COUNTERS` is not `0`).
pub fn enabled() -> bool {
    crate::env::counters_enabled()
}

/// The writer pid in a segment's file name `neuron-vfio.PID.N.counters`.
fn segment_pid(p: &Path) -> Option<u32> {
    let n = p.file_name()?.to_str()?.strip_prefix("neuron-vfio.")?.strip_suffix(".counters")?;
    n.split('.').next()?.parse().ok()
}

fn alive(pid: u64) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// Remove segments left in `dir` by processes that died without closing their runtime
/// (killed): done once per process, at its first segment. Files of other users stay (the
/// sticky `/dev/shm` refuses), which is harmless: readers skip dead writers.
fn remove_stale(dir: &Path) {
    let Ok(rd) = std::fs::read_dir(dir) else { return };
    for p in rd.filter_map(|e| e.ok().map(|e| e.path())) {
        // A models file goes with its segment: judged by the segment name it stands for.
        let seg = if p.extension().is_some_and(|e| e == "models") { p.with_extension("counters") } else { p.clone() };
        if segment_pid(&seg).is_some_and(|pid| !alive(pid as u64)) {
            let _ = std::fs::remove_file(&p);
        }
    }
}

#[cfg(test)]
mod tests;
