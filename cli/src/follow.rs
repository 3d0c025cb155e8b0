//! Following another process's device: the client of the runtime's read-only debug endpoint
//! (`runtime::debug_endpoint`, protocol in docs/monitoring.md). `--pid PID` picks the
//! process; `--follow` the only process serving one.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use clap::Args;
use csr_maps::{Arch, RegInstance};
use runtime::debug_endpoint as ep;
use serde_json::{json, Value};

use crate::report::CliError;

/// `--pid` / `--follow`.
#[derive(Args, Clone, Debug, Default)]
pub struct FollowArgs {
    /// Read the device a running process (CLI `run`, a libnrt.so program) drives, through
    /// its read-only debug endpoint, instead of opening a device.
    #[arg(long, value_name = "PID", conflicts_with = "follow")]
    pub pid: Option<u32>,
    /// Like --pid, for the only process serving a debug endpoint.
    #[arg(long)]
    pub follow: bool,
    /// With --pid/--follow: the device index within that process's runtime.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub pid_device: usize,
}

impl FollowArgs {
    /// Whether another process is to be followed.
    pub fn active(&self) -> bool {
        self.pid.is_some() || self.follow
    }
}

/// A connection to another process's endpoint, on one of its devices.
pub struct Remote {
    w: UnixStream,
    r: BufReader<UnixStream>,
    /// The serving process.
    pub pid: u32,
    /// The device index within its runtime.
    pub device: usize,
    /// The device's arch.
    pub arch: &'static Arch,
    /// NeuronCores of the device.
    pub ncs: usize,
    /// Devices the process's runtime drives.
    pub devices: usize,
    /// The device's identity (the endpoint's `identity`: a BDF, `sim:shared:ARCH:K`, or
    /// `sim:PID/INDEX` for a simulated device private to the process).
    pub identity: String,
}

/// The identity the endpoint gives device `d` of process `pid` (`hello`'s `identity`; an
/// endpoint from before it named devices: `PID/INDEX`).
fn identity_of(d: &Value, pid: u32, device: usize) -> String {
    d["identity"].as_str().map(str::to_string).unwrap_or_else(|| format!("{pid}/{device}"))
}

fn fail(m: impl Into<String>) -> CliError {
    CliError::failure(m.into())
}

impl Remote {
    /// Connect as `f` says.
    pub fn connect(f: &FollowArgs) -> Result<Self, CliError> {
        let dir = runtime::counters::shm_dir();
        let all = ep::discover(&dir);
        let pick = match f.pid {
            Some(pid) => all.into_iter().find(|(p, _, _)| *p == pid).ok_or_else(|| {
                fail(format!(
                    "process {pid} serves no debug endpoint in {} (is it running a runtime, with \
                     NEURON_VFIO_DEBUG_ENDPOINT unset and the same NEURON_VFIO_SHM_DIR?)",
                    dir.display()
                ))
            })?,
            None => {
                let mut pids: Vec<u32> = all.iter().map(|(p, _, _)| *p).collect();
                pids.dedup();
                match pids.as_slice() {
                    [_] => all.into_iter().next().ok_or_else(|| fail("no debug endpoint"))?,
                    [] => return Err(fail(format!("no process serves a debug endpoint in {}", dir.display()))),
                    many => {
                        return Err(CliError::invalid(format!(
                            "{} processes serve a debug endpoint ({}): pick one with --pid",
                            many.len(),
                            many.iter().map(|p| p.to_string()).collect::<Vec<_>>().join(", ")
                        )))
                    }
                }
            }
        };
        let (pid, _, path) = pick;
        Self::connect_to(pid, &path, f.pid_device)
    }

    /// Connect to the endpoint at `path` (of process `pid`), on its device `device`.
    pub fn connect_to(pid: u32, path: &std::path::Path, device: usize) -> Result<Self, CliError> {
        let s = UnixStream::connect(path).map_err(|e| fail(format!("cannot connect to {}: {e}", path.display())))?;
        let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
        let r = BufReader::new(s.try_clone().map_err(|e| fail(e.to_string()))?);
        let mut me = Self { w: s, r, pid, device, arch: &csr_maps::SUNDA, ncs: 0, devices: 0, identity: String::new() };
        let h = me.request(json!({"op": "hello"}))?;
        me.devices = h["devices"].as_array().map(|a| a.len()).unwrap_or(0);
        let d = h["devices"]
            .get(device)
            .ok_or_else(|| {
                CliError::invalid(format!(
                    "process {pid} drives {} device(s); no device {}",
                    h["devices"].as_array().map(|a| a.len()).unwrap_or(0),
                    device
                ))
            })?
            .clone();
        let arch = d["arch"].as_str().unwrap_or("");
        me.arch = Arch::by_name(arch)?;
        me.ncs = d["ncs"].as_u64().unwrap_or(0) as usize;
        me.identity = identity_of(&d, pid, device);
        Ok(me)
    }

    /// Switch to device `device` of the same process.
    pub fn select(&mut self, device: usize) -> Result<(), CliError> {
        self.device = device;
        let h = self.request(json!({"op": "hello"}))?;
        let d = &h["devices"][device];
        self.arch = Arch::by_name(d["arch"].as_str().unwrap_or(""))?;
        self.ncs = d["ncs"].as_u64().unwrap_or(0) as usize;
        self.identity = identity_of(d, self.pid, device);
        Ok(())
    }

    /// The device's name, as `monitor` names devices: its identity, never the process.
    pub fn label(&self) -> String {
        self.identity.clone()
    }

    /// One request (protocol version added); the response when `ok`.
    pub fn request(&mut self, mut req: Value) -> Result<Value, CliError> {
        req["v"] = json!(ep::VERSION);
        req["device"] = json!(self.device);
        let line = req.to_string();
        writeln!(self.w, "{line}").map_err(|e| fail(format!("debug endpoint of process {}: {e}", self.pid)))?;
        let mut resp = String::new();
        match self.r.read_line(&mut resp) {
            Ok(0) => return Err(fail(format!("process {} closed its debug endpoint", self.pid))),
            Ok(_) => {}
            Err(e) => return Err(fail(format!("debug endpoint of process {}: {e}", self.pid))),
        }
        let v: Value = serde_json::from_str(&resp)
            .map_err(|e| fail(format!("bad response from process {}'s debug endpoint: {e}", self.pid)))?;
        if v["ok"].as_bool() != Some(true) {
            return Err(fail(format!(
                "process {}'s debug endpoint: {}",
                self.pid,
                v["error"].as_str().unwrap_or("request failed")
            )));
        }
        Ok(v)
    }

    /// Read registers (batched to the endpoint's per-request bound).
    pub fn read_regs(&mut self, regs: &[&RegInstance]) -> Result<Vec<u64>, CliError> {
        let mut out = Vec::with_capacity(regs.len());
        for chunk in regs.chunks(ep::MAX_READS) {
            let req: Vec<Value> = chunk.iter().map(|r| json!([r.bar, r.offset, r.def.width])).collect();
            let v = self.request(json!({"op": "read", "regs": req}))?;
            let vals = v["values"].as_array().filter(|a| a.len() == chunk.len()).ok_or_else(|| {
                fail(format!("process {}'s debug endpoint answered the wrong number of values", self.pid))
            })?;
            out.extend(vals.iter().map(|x| x.as_u64().unwrap_or(0)));
        }
        Ok(out)
    }
}
