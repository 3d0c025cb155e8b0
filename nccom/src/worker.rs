//! A worker: one process per rank, a runtime client on its own logical NeuronCore (leased
//! through the broker on a shared device, as `nrt_init` with `NEURON_RT_VISIBLE_CORES=rank`
//! leases it). For each size it loads the collectives NEFF as its global rank, runs the
//! warm-up and timed executions, checks its output, and reports one JSON line on stdout.

use std::io::Write;
use std::time::Instant;

use runtime::{GlobalPlacement, NrtStatus, Runtime, RuntimeConfig, TensorSet};
use serde_json::json;

use crate::args::Plan;
use crate::data;
use crate::model::CollModel;

/// Environment naming the device set the workers share (the launcher sets it).
pub const DEVICE_VAR: &str = "NEURON_VFIO_DEVICE";
/// Simulator faults a worker arms on its own core (`KIND@ncN[:…]`, `ncN` the worker's logical
/// NC; docs/faults.md), as libnrt's `nrt_init` does in a libnrt process.
pub const FAULT_VAR: &str = "NEURON_VFIO_SIM_FAULT";

/// A worker's failure (reported on stderr and as its last JSON line).
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error("{0}")]
    Runtime(String),
    #[error("device: {0}")]
    Select(#[from] select::SelectError),
    #[error("model: {0}")]
    Model(#[from] crate::model::ModelError),
    #[error("{var}: {why}")]
    Fault { var: &'static str, why: String },
    #[error("execute: {0}")]
    Execute(String),
    #[error("joining the other hosts: {0}")]
    Hosts(String),
}

fn rt(e: runtime::RtError) -> WorkerError {
    WorkerError::Runtime(format!("{}: {}", e.status.name(), e.message()))
}

fn emit(v: serde_json::Value) {
    let mut out = std::io::stdout().lock();
    // The launcher reads these lines; a closed pipe means it is gone and the worker will be
    // stopped, nothing to report to.
    let _ = writeln!(out, "{v}");
    let _ = out.flush();
}

/// The communicator id of size `index` of job `job` (the same in every worker).
pub fn comm_id(job: u64, index: usize) -> u32 {
    (job as u32).wrapping_mul(0x9e37_79b1).wrapping_add(index as u32 * 0x0101)
}

/// Arms `FAULT_VAR`'s specs on this worker's cores through the shared device's host.
fn arm_faults(opened: &select::Opened, lnc: usize) -> Result<(), WorkerError> {
    let Ok(specs) = std::env::var(FAULT_VAR) else { return Ok(()) };
    let bad = |why: String| WorkerError::Fault { var: FAULT_VAR, why };
    let lease = opened.shared.as_ref().ok_or_else(|| bad("faults need a shared simulated device".into()))?;
    let dev = lease.devices.first().ok_or_else(|| bad("no leased device".into()))?;
    let socket = broker::server::host_socket(lease.session().socket(), lease.arch, dev.index as u32);
    for s in specs.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let mut f: sim::FaultSpec = s.parse().map_err(|e: sim::FaultSpecError| bad(e.to_string()))?;
        f.nc = dev.ncs.start + f.nc * lnc;
        let reply = sim_serve::host::control(&socket, &f.to_string()).map_err(|e| bad(e.to_string()))?;
        if !reply.starts_with("ok") {
            return Err(bad(reply));
        }
    }
    Ok(())
}

/// A multi-host run: tells the device's host that this host is host `rank / L` of the job's
/// hosts (its device host joins the others at the root address) and which communicators span
/// the hosts — every size's, the replica group of all workers, worker `w` on host `w / L` —
/// before this worker loads anything (`sim_serve::seam`; every worker of the host sends the
/// same lines, the first one joins).
fn join_hosts(plan: &Plan, opened: &select::Opened, rank: usize, job: u64) -> Result<(), WorkerError> {
    let Some(m) = plan.multi.as_ref().filter(|_| plan.nnodes > 1) else { return Ok(()) };
    let bad = |why: String| WorkerError::Hosts(why);
    let lease = opened.shared.as_ref().ok_or_else(|| {
        bad("a multi-host run needs a shared simulated device (sim:shared): the inter-host path of a \
             device is its host's libfabric seam"
            .into())
    })?;
    let dev = lease.devices.first().ok_or_else(|| bad("no leased device".into()))?;
    let socket = broker::server::host_socket(lease.session().socket(), lease.arch, dev.index as u32);
    let secs = match std::env::var(runtime::env::EXEC_TIMEOUT_VAR) {
        Ok(v) => runtime::env::parse_exec_timeout(&v).map_err(|e| bad(e.to_string()))?,
        Err(_) => runtime::env::DEFAULT_EXEC_TIMEOUT_SECS,
    };
    let per = plan.ranks / plan.nnodes;
    let send = |line: String| -> Result<(), WorkerError> {
        let reply = sim_serve::host::control(&socket, &line).map_err(|e| bad(e.to_string()))?;
        if reply.starts_with("ok") {
            Ok(())
        } else {
            Err(bad(format!("{line}: {reply}")))
        }
    };
    send(format!("interhost join {job} {} {} {} {secs}", m.root, rank / per, plan.nnodes))?;
    let hosts: Vec<String> = (0..plan.ranks).map(|w| (w / per).to_string()).collect();
    let hosts = hosts.join(",");
    for (i, &size) in plan.sizes.iter().enumerate() {
        if data::shape(plan.op, plan.dtype, plan.ranks, size).is_some() {
            // The communicator as the runtime lowers it: the load's id × 256 + replica group 0.
            send(format!("interhost span {job} {} {hosts}", comm_id(job, i).wrapping_mul(256)))?;
        }
    }
    Ok(())
}

/// Run worker `rank` of `job`; every outcome is reported on stdout (the error too).
pub fn run(plan: &Plan, rank: usize, job: u64) -> Result<(), WorkerError> {
    let r = work(plan, rank, job);
    if let Err(e) = &r {
        emit(json!({"rank": rank, "error": e.to_string()}));
    }
    r
}

fn work(plan: &Plan, rank: usize, job: u64) -> Result<(), WorkerError> {
    let spec = select::Spec::parse(std::env::var(DEVICE_VAR).ok().as_deref())?;
    let cfg = RuntimeConfig::from_env().map_err(rt)?;
    // The worker's logical core on its host's device (ranks K·L … of host K are its cores 0 …).
    let per = plan.ranks / plan.nnodes.max(1);
    let reserve = select::Reserve::Cores(vec![rank % per.max(1)]);
    let opened = select::open_reserving(&spec, select::SimTiming::Inline, &reserve, cfg.lnc.map(|l| l.size))?;
    let (devices, cfg) = runtime::device_setup(
        &opened.platforms,
        |i| opened.ownership(i).map(|o| (o.ncs, o.hbm, o.firmware)),
        opened.leased_cores(),
        cfg,
        hal::DeviceOptions::default(),
    );
    let rt_ = Runtime::new();
    rt_.init_devices(devices, cfg).map_err(rt)?;
    let lnc = rt_.lnc();
    arm_faults(&opened, lnc)?;
    join_hosts(plan, &opened, rank, job)?;
    let target = opened.shared.as_ref().map(|l| l.arch.name).unwrap_or("*");
    for (i, &size) in plan.sizes.iter().enumerate() {
        let Some(s) = data::shape(plan.op, plan.dtype, plan.ranks, size) else { continue };
        let bytes = CollModel {
            op: plan.op,
            wire: s.wire,
            in_bytes: s.in_bytes,
            out_bytes: s.out_bytes,
            workers: plan.ranks,
            lnc: lnc as u32,
            target,
            pairs: &plan.pairs,
        }
        .build()?;
        let place = GlobalPlacement { rank_base: rank * lnc, comm_id: comm_id(job, i), ranks: plan.ranks * lnc };
        let m = rt_.load_global(&bytes, Some(0), Some(1), place).map_err(rt)?;
        let ti = rt_.alloc_tensor("input", s.in_bytes, false, 0).map_err(rt)?;
        ti.write(0, &data::input(plan.check, plan.dtype, &s, rank, plan.seed)).map_err(rt)?;
        let to = rt_.alloc_tensor("output", s.out_bytes, false, 0).map_err(rt)?;
        let mut ins = TensorSet::new();
        ins.add("input", ti);
        if plan.op == crate::ops::Op::AllToAllV {
            let meta: Vec<u8> = data::alltoallv_meta(plan.ranks, s.in_bytes / plan.dtype.size() as u64, rank)
                .iter()
                .flat_map(|w| w.to_le_bytes())
                .collect();
            let tm = rt_.alloc_tensor("meta", meta.len() as u64, false, 0).map_err(rt)?;
            tm.write(0, &meta).map_err(rt)?;
            ins.add("meta", tm);
        }
        let mut outs = TensorSet::new();
        outs.add("output", to.clone());
        let mut times = Vec::with_capacity(plan.iters);
        for k in 0..plan.warmup + plan.iters {
            let t0 = Instant::now();
            let (st, _) = rt_.execute(&m, &ins, &outs).map_err(rt)?;
            let ns = t0.elapsed().as_nanos() as u64;
            if st != NrtStatus::Success {
                return Err(WorkerError::Execute(format!("size {}: {} ({})", s.size, st.name(), st.code())));
            }
            if k >= plan.warmup {
                times.push(ns);
            }
        }
        let check = match plan.check {
            None => serde_json::Value::Null,
            Some(c) => {
                let got = to.to_vec().map_err(rt)?;
                match data::expected(plan, c, &s, rank) {
                    Ok(want) => match data::compare(&got, &want, &s.wire) {
                        None => json!("pass"),
                        Some(m) => json!(m),
                    },
                    Err(e) => json!(format!("no host reference: {e}")),
                }
            }
        };
        rt_.unload(&m).map_err(rt)?;
        emit(json!({"rank": rank, "size": s.size, "in_bytes": s.in_bytes, "times_ns": times, "check": check,
                    "lnc": lnc, "wire": s.wire.dtype.name()}));
    }
    rt_.close().map_err(rt)?;
    Ok(())
}
