//! Which device `nrt_init` opens: `NEURON_VFIO_DEVICE=sim[:ARCH[:N]] | <PCI BDF>`; unset, the
//! first Neuron device bound to vfio-pci, else the simulator — the same selection as the
//! CLI's `--device` (both use the `select` crate).
//!
//! Other knobs: `NEURON_VFIO_SYSFS`, `NEURON_VFIO_DEVDIR`, `NEURON_VFIO_BACKEND` (see
//! `select`) and, for the simulator, `NEURON_VFIO_SIM_TIMING=inline|threaded` (default
//! `inline`), and `NEURON_VFIO_SIM_FAULT=KIND@ncN[:ENGINE|:qN][,…]`: simulator faults armed
//! once `nrt_init` has opened the devices — the CLI's `--sim-fault` specs (the simulator's
//! own parser, `sim::FaultSpec`), `ncN` a logical NC as every other knob names one (e.g.
//! `net-proxy@nc0` in a rank process makes its next collective fail its network proxy).

use neff::{NrtStatus, Status};
use runtime::RtError;
use select::{SelectError, SimTiming, Spec};

/// The device-selection environment variable.
pub const DEVICE_VAR: &str = "NEURON_VFIO_DEVICE";
/// The simulator-timing environment variable.
pub const SIM_TIMING_VAR: &str = "NEURON_VFIO_SIM_TIMING";
/// The simulator-fault environment variable (module docs).
pub const SIM_FAULT_VAR: &str = "NEURON_VFIO_SIM_FAULT";

/// A failure of the device environment `nrt_init` reads. Its status is the one every front
/// end reports: a selection error keeps [`SelectError::status`] (the CLI's `--device` reports
/// the same); a malformed variable is NRT_INVALID.
#[derive(Debug, thiserror::Error)]
pub enum DeviceEnvError {
    /// Device selection failed; `var` names the variable when its value was refused.
    #[error("{}{source}", var.map(|v| format!("{v}: ")).unwrap_or_default())]
    Select {
        var: Option<&'static str>,
        #[source]
        source: SelectError,
    },
    /// A variable that is not UTF-8.
    #[error("{var} is not UTF-8")]
    NotUnicode { var: &'static str },
    /// [`SIM_TIMING_VAR`] names no timing.
    #[error("{SIM_TIMING_VAR}={value}: expected inline or threaded")]
    SimTiming { value: String },
    /// A [`SIM_FAULT_VAR`] spec that does not parse.
    #[cfg(feature = "sim")]
    #[error("{SIM_FAULT_VAR}: {0}")]
    SimFault(#[source] sim::FaultSpecError),
    /// [`SIM_FAULT_VAR`] set in a build without the simulator.
    #[error("{SIM_FAULT_VAR}={value}: libnrt built without the simulator (cargo feature `sim`)")]
    NoSimulator { value: String },
    /// A fault spec's NC is not a visible logical NC.
    #[error("{SIM_FAULT_VAR}: {source}")]
    FaultNc {
        #[source]
        source: Box<RtError>,
    },
    /// A fault spec's NC is served by no simulated device.
    #[error("{SIM_FAULT_VAR}: no simulated device serves NC {nc}")]
    NoSimulatedNc { nc: usize },
}

impl DeviceEnvError {
    /// The status `nrt_init` returns (exhaustive: a new variant must choose).
    pub fn status(&self) -> NrtStatus {
        match self {
            DeviceEnvError::Select { source, .. } => source.status(),
            #[cfg(feature = "sim")]
            DeviceEnvError::SimFault(_) => NrtStatus::Invalid,
            DeviceEnvError::NotUnicode { .. }
            | DeviceEnvError::SimTiming { .. }
            | DeviceEnvError::NoSimulator { .. }
            | DeviceEnvError::FaultNc { .. }
            | DeviceEnvError::NoSimulatedNc { .. } => NrtStatus::Invalid,
        }
    }
}

impl Status for DeviceEnvError {
    fn status(&self) -> NrtStatus {
        DeviceEnvError::status(self)
    }
}

/// Faults named by [`SIM_FAULT_VAR`], parsed before anything is opened (NRT_INVALID when one
/// does not parse).
#[cfg(feature = "sim")]
pub fn sim_faults() -> Result<Vec<sim::FaultSpec>, RtError> {
    let Some(v) = fault_var()? else { return Ok(Vec::new()) };
    v.split(',').map(|f| f.trim().parse().map_err(|e| RtError::frontend(DeviceEnvError::SimFault(e)))).collect()
}

/// Built without the simulator there is nothing to arm: a set [`SIM_FAULT_VAR`] is NRT_INVALID.
#[cfg(not(feature = "sim"))]
pub fn sim_faults() -> Result<Vec<std::convert::Infallible>, RtError> {
    match fault_var()? {
        None => Ok(Vec::new()),
        Some(value) => Err(RtError::frontend(DeviceEnvError::NoSimulator { value })),
    }
}

fn fault_var() -> Result<Option<String>, RtError> {
    match std::env::var(SIM_FAULT_VAR) {
        Ok(v) if v.trim().is_empty() => Ok(None),
        Ok(v) => Ok(Some(v)),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => {
            Err(RtError::frontend(DeviceEnvError::NotUnicode { var: SIM_FAULT_VAR }))
        }
    }
}

/// Arms `faults` on the simulated devices of `opened`, after `rt` is initialised on them (the
/// spec's `ncN` is a logical NC: an index into the visible cores).
#[cfg(feature = "sim")]
pub fn arm(rt: &runtime::Runtime, opened: &select::Opened, faults: Vec<sim::FaultSpec>) -> Result<(), RtError> {
    for mut f in faults {
        let global =
            rt.global_nc(f.nc).map_err(|e| RtError::frontend(DeviceEnvError::FaultNc { source: Box::new(e) }))?;
        let (s, local) =
            opened.sim_of_nc(global).ok_or_else(|| RtError::frontend(DeviceEnvError::NoSimulatedNc { nc: f.nc }))?;
        tracing::info!(fault = %f, global, "arming a simulator fault");
        f.nc = local;
        s.inject(f);
    }
    Ok(())
}

#[cfg(not(feature = "sim"))]
pub fn arm(_: &runtime::Runtime, _: &select::Opened, faults: Vec<std::convert::Infallible>) -> Result<(), RtError> {
    match faults.into_iter().next() {
        Some(f) => match f {},
        None => Ok(()),
    }
}

/// A selection error with its own status ([`SelectError::status`], the one the CLI reports
/// too); a refused value (NRT_INVALID) names [`DEVICE_VAR`].
fn rt(e: SelectError) -> RtError {
    let var = (e.status() == NrtStatus::Invalid).then_some(DEVICE_VAR);
    RtError::frontend(DeviceEnvError::Select { var, source: e })
}

/// The spec named by the environment.
pub fn from_env() -> Result<Spec, RtError> {
    match std::env::var(DEVICE_VAR) {
        Ok(v) => Spec::parse(Some(&v)).map_err(rt),
        Err(std::env::VarError::NotPresent) => Ok(Spec::Default),
        Err(std::env::VarError::NotUnicode(_)) => {
            Err(RtError::frontend(DeviceEnvError::NotUnicode { var: DEVICE_VAR }))
        }
    }
}

/// [`Spec::Default`] resolved against sysfs; other specs unchanged.
pub fn resolve(spec: Spec) -> Result<Spec, RtError> {
    match spec {
        Spec::Default => {
            let (s, notice) = select::resolve_default(&select::sysfs()).map_err(rt)?;
            if let Some(n) = notice {
                tracing::info!("{n}");
            }
            Ok(s)
        }
        s => Ok(s),
    }
}

/// Physical NeuronCores behind a spec, without opening anything.
pub fn nc_count(spec: &Spec) -> Result<usize, RtError> {
    arch_and_count(spec).map(|(_, n)| n)
}

/// The arch and the physical NeuronCores behind a spec, without opening anything.
pub fn arch_and_count(spec: &Spec) -> Result<(&'static csr_maps::Arch, usize), RtError> {
    match spec {
        Spec::Default => arch_and_count(&resolve(Spec::Default)?),
        Spec::Sim { arch, n } | Spec::SimShared { arch, n } => Ok((arch, arch.counts.ncs as usize * n)),
        Spec::Pci(addr) => {
            let f = select::function(&select::sysfs(), *addr).map_err(rt)?;
            let arch = select::arch_of(&f)
                .ok_or_else(|| rt(SelectError::NotNeuron { addr: *addr, vendor: f.vendor, device: f.device }))?;
            Ok((arch, arch.counts.ncs as usize))
        }
    }
}

fn sim_timing() -> Result<SimTiming, RtError> {
    match std::env::var(SIM_TIMING_VAR).as_deref() {
        Err(_) | Ok("") | Ok("inline") => Ok(SimTiming::Inline),
        Ok("threaded") => Ok(SimTiming::Threaded),
        Ok(v) => Err(RtError::frontend(DeviceEnvError::SimTiming { value: v.to_string() })),
    }
}

/// The cores `nrt_init` reserves on shared devices, as libnrt: NEURON_RT_VISIBLE_CORES, else
/// NEURON_RT_NUM_CORES (any free ones), else every core.
pub fn reserve_of(cfg: &runtime::RuntimeConfig) -> select::Reserve {
    match (&cfg.visible_cores, cfg.num_cores) {
        (Some(v), _) => select::Reserve::Cores(v.clone()),
        (None, Some(n)) => select::Reserve::Count(n),
        (None, None) => select::Reserve::All,
    }
}

/// Each opened device with its options (on a shared device: the NCs and device memory this
/// process leased) and the configuration whose visible cores are the leased ones.
pub fn device_setup(
    opened: &select::Opened,
    cfg: runtime::RuntimeConfig,
    base: hal::DeviceOptions,
) -> (runtime::Devices, runtime::RuntimeConfig) {
    runtime::device_setup(
        &opened.platforms,
        |i| opened.ownership(i).map(|o| (o.ncs, o.hbm, o.firmware)),
        opened.leased_cores(),
        cfg,
        base,
    )
}

/// Shared devices' leases, held from `nrt_init` to `nrt_close` (or exit: the broker sees the
/// process go and takes everything back).
static HELD: std::sync::Mutex<Option<select::Opened>> = std::sync::Mutex::new(None);

/// Keep `opened` (its broker session and leases) until [`release`].
pub fn hold(opened: select::Opened) {
    *HELD.lock().unwrap_or_else(|e| e.into_inner()) = Some(opened);
}

/// Give the held leases back (after the runtime closed the devices).
pub fn release() {
    let held = HELD.lock().unwrap_or_else(|e| e.into_inner()).take();
    drop(held);
}

/// Open the platforms (every device of a simulated topology), reserving `reserve` on shared
/// devices. With the `fabric` feature the simulated devices' collective hub is connected to
/// the process's global communicator (collectives whose replica group spans processes;
/// `crate::global`). A shared device's cores held by another process fail as libnrt's
/// `nrt_init` does: NRT_FAILURE, with libnrt's log line and one naming the owner.
pub fn platforms(spec: &Spec, reserve: &select::Reserve, lnc: Option<u32>) -> Result<select::Opened, RtError> {
    let spec = resolve(spec.clone())?;
    let opened = select::open_reserving(&spec, sim_timing()?, reserve, lnc).map_err(|e| {
        if let Some((owner, line)) = select::shared::cores_unavailable(&e) {
            // libnrt's line, then ours naming the holder.
            crate::base::log_line(line);
            if owner != 0 {
                crate::base::log_line(&format!(
                    "NeuronCore(s) requested are held by process {owner} (NEURON_RT_VISIBLE_CORES or \
                     NEURON_RT_NUM_CORES choose others)"
                ));
            }
        }
        rt(e)
    })?;
    #[cfg(feature = "fabric")]
    for s in &opened.sims {
        s.set_inter_host(Some(crate::global::global().clone() as std::sync::Arc<dyn sim::InterHost>));
    }
    Ok(opened)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sim_nc_count_without_opening() {
        let s = Spec::Sim { arch: &csr_maps::SUNDA, n: 2 };
        assert_eq!(nc_count(&s).ok(), Some(csr_maps::SUNDA.counts.ncs as usize * 2));
    }

    #[test]
    fn bad_specs_are_nrt_invalid() {
        let e = Spec::parse(Some("sim:inf1")).map_err(rt).err().map(|e| e.status);
        assert_eq!(e, Some(NrtStatus::Invalid));
    }

    #[cfg(not(feature = "sim"))]
    #[test]
    fn without_the_simulator_a_sim_device_is_nrt_invalid() {
        let e = Spec::parse(Some("sim")).map_err(rt).err();
        assert_eq!(e.as_ref().map(|e| e.status), Some(NrtStatus::Invalid));
        let select = e.as_ref().and_then(|e| match &e.kind {
            runtime::RtErrorKind::Frontend(f) => f.as_error().downcast_ref::<DeviceEnvError>(),
            _ => None,
        });
        assert!(matches!(select, Some(DeviceEnvError::Select { source: SelectError::NoSimulator(_), .. })), "{e:?}");
    }

    /// Every variant of the device environment's error with its status (exhaustive: a new
    /// variant does not compile until listed).
    #[test]
    fn every_device_env_error_has_its_status() {
        fn variant(e: &DeviceEnvError) -> usize {
            match e {
                DeviceEnvError::Select { .. } => 0,
                DeviceEnvError::NotUnicode { .. } => 1,
                DeviceEnvError::SimTiming { .. } => 2,
                #[cfg(feature = "sim")]
                DeviceEnvError::SimFault(_) => 3,
                DeviceEnvError::NoSimulator { .. } => 4,
                DeviceEnvError::FaultNc { .. } => 5,
                DeviceEnvError::NoSimulatedNc { .. } => 6,
            }
        }
        let missing = SelectError::BackendMissing(select::MissingBackend::Any);
        let mut table = vec![
            (DeviceEnvError::Select { var: None, source: missing }, NrtStatus::Failure),
            (
                DeviceEnvError::Select {
                    var: Some(DEVICE_VAR),
                    source: SelectError::UnknownBackend { requested: "x".into() },
                },
                NrtStatus::Invalid,
            ),
            (DeviceEnvError::NotUnicode { var: DEVICE_VAR }, NrtStatus::Invalid),
            (DeviceEnvError::SimTiming { value: "fast".into() }, NrtStatus::Invalid),
            (DeviceEnvError::NoSimulator { value: "x".into() }, NrtStatus::Invalid),
            (
                DeviceEnvError::FaultNc { source: Box::new(RtError::new(NrtStatus::Invalid, "no logical NC 9")) },
                NrtStatus::Invalid,
            ),
            (DeviceEnvError::NoSimulatedNc { nc: 3 }, NrtStatus::Invalid),
        ];
        #[cfg(feature = "sim")]
        table.push((DeviceEnvError::SimFault("bogus".parse::<sim::FaultSpec>().unwrap_err()), NrtStatus::Invalid));
        let mut seen = std::collections::BTreeSet::new();
        for (e, want) in table {
            assert_eq!(e.status(), want, "{e:?}");
            seen.insert(variant(&e));
            // Through the runtime's error type the status is unchanged.
            assert_eq!(RtError::frontend(e).status, want);
        }
        let all: std::collections::BTreeSet<usize> = (0..7).filter(|&i| cfg!(feature = "sim") || i != 3).collect();
        assert_eq!(seen, all);
    }
}
