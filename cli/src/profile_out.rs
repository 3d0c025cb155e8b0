//! `run --profile DIR` and `NEURON_RT_INSPECT_ENABLE` in the CLI (as libnrt honours it): the
//! run's events are collected from before the load to after the last execute, then written
//! as two files in the directory (docs/profiling.md):
//! - `sys_trace_pid<PID>.json`: libnrt's system trace (`nrt_sys_trace_fetch_events`'s
//!   document, the file `libnrt.so` writes under `NEURON_RT_INSPECT_ENABLE`);
//! - `trace.json`: the same run as a Chrome trace-event JSON timeline (Perfetto's UI and
//!   chrome://tracing open it): a process per NeuronCore with a thread per engine and one for
//!   its executions, and the host's runtime calls.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use runtime::profile::{self, chrome_trace, Collector};
use runtime::sys_trace;

use crate::report::CliError;

/// A capture in progress: unsubscribed when dropped.
pub struct Capture {
    id: u64,
    sink: Arc<Collector>,
    dir: PathBuf,
}

impl Capture {
    /// Starts capturing when `--profile DIR` is given (it wins) or `NEURON_RT_INSPECT_ENABLE`
    /// is on (into `NEURON_RT_INSPECT_OUTPUT_DIR`, default `./output`); `None` otherwise.
    pub fn begin(profile_dir: Option<&Path>) -> Result<Option<Capture>, CliError> {
        let dir = match profile_dir {
            Some(d) => d.to_path_buf(),
            None => {
                let env = runtime::env::InspectEnv::from_lookup(|k| std::env::var(k).ok())
                    .map_err(|e| CliError::invalid(e.to_string()))?;
                if !env.enable {
                    return Ok(None);
                }
                env.output_dir
            }
        };
        let sink = Arc::new(Collector::new(None));
        let id = profile::subscribe(sink.clone());
        Ok(Some(Capture { id, sink, dir }))
    }

    /// Writes what was captured; `lnc` maps the physical NCs of the events to the logical
    /// ones of the system trace. The files written, in order.
    pub fn finish(self, lnc: usize) -> Result<Vec<PathBuf>, CliError> {
        let events = self.sink.take();
        let write = |name: String, text: String| -> Result<PathBuf, CliError> {
            std::fs::create_dir_all(&self.dir)
                .map_err(|e| CliError::invalid(format!("--profile {}: {e}", self.dir.display())))?;
            let p = self.dir.join(name);
            std::fs::write(&p, text).map_err(|e| CliError::failure(format!("{}: {e}", p.display())))?;
            Ok(p)
        };
        let lnc = lnc.max(1);
        let logical = move |nc: usize| nc / lnc;
        let sys: Vec<sys_trace::SysEvent> = events.iter().flat_map(|e| sys_trace::records(e, &logical)).collect();
        Ok(vec![
            write(format!("sys_trace_pid{}.json", std::process::id()), sys_trace::to_json(&sys))?,
            write("trace.json".into(), chrome_trace(&events))?,
        ])
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        profile::unsubscribe(self.id);
    }
}
