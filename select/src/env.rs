//! The device environment of the libnrt front ends (`libnrt.so`'s `nrt_init`, nrtpy): which
//! device they open and how, from the environment alone — the same selection as the CLI's
//! `--device`.
//!
//! - [`DEVICE_VAR`] `NEURON_VFIO_DEVICE=sim[:shared][:ARCH[:N]] | <PCI BDF>`; unset, the first
//!   Neuron device bound to vfio-pci, else the simulator;
//! - `NEURON_VFIO_SYSFS`, `NEURON_VFIO_DEVDIR`, `NEURON_VFIO_BACKEND` (the crate's docs);
//! - for the simulator, [`SIM_TIMING_VAR`] `NEURON_VFIO_SIM_TIMING=inline|threaded` (default
//!   `inline`), and [`SIM_FAULT_VAR`] `NEURON_VFIO_SIM_FAULT=KIND@ncN[:ENGINE|:qN][,…]`:
//!   simulator faults armed once the runtime is initialised on the opened devices — the CLI's
//!   `--sim-fault` specs (the simulator's own parser, `sim::FaultSpec`), `ncN` a logical NC as
//!   every other knob names one (e.g. `net-proxy@nc0` in a rank process makes its next
//!   collective fail its network proxy).
//!
//! The runtime is not a dependency: a front end passes its visible cores ([`reserve`]) and its
//! mapping of logical to global NCs ([`arm`]), and wraps [`DeviceEnvError`] in its own error
//! type with the status [`DeviceEnvError::status`] gives.

use nrt_status::{NrtStatus, Status};

use crate::{open_reserving, resolve_default, shared, sysfs, Opened, Reserve, SelectError, SimTiming, Spec};

/// The device-selection environment variable.
pub const DEVICE_VAR: &str = "NEURON_VFIO_DEVICE";
/// The simulator-timing environment variable.
pub const SIM_TIMING_VAR: &str = "NEURON_VFIO_SIM_TIMING";
/// The simulator-fault environment variable (module docs).
pub const SIM_FAULT_VAR: &str = "NEURON_VFIO_SIM_FAULT";

/// A failure of the device environment. Its status is the one every front end reports: a
/// selection error keeps [`SelectError::status`] (the CLI's `--device` reports the same); a
/// malformed variable is NRT_INVALID.
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
    /// A fault spec's NC is not a visible logical NC (the front end's reason).
    #[error("{SIM_FAULT_VAR}: {source}")]
    FaultNc {
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A fault spec's NC is served by no simulated device.
    #[error("{SIM_FAULT_VAR}: no simulated device serves NC {nc}")]
    NoSimulatedNc { nc: usize },
}

impl DeviceEnvError {
    /// The status a front end returns (exhaustive: a new variant must choose).
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

    /// A selection error with its own status; a refused value (NRT_INVALID) names
    /// [`DEVICE_VAR`].
    pub fn select(e: SelectError) -> Self {
        let var = (e.status() == NrtStatus::Invalid).then_some(DEVICE_VAR);
        DeviceEnvError::Select { var, source: e }
    }
}

impl Status for DeviceEnvError {
    fn status(&self) -> NrtStatus {
        DeviceEnvError::status(self)
    }
}

/// A simulator fault to arm (nothing can be armed in a build without the simulator).
#[cfg(feature = "sim")]
pub type Fault = sim::FaultSpec;
/// A simulator fault to arm (nothing can be armed in a build without the simulator).
#[cfg(not(feature = "sim"))]
pub type Fault = std::convert::Infallible;

/// A variable's value (None: unset); one that is not UTF-8 is an error naming it.
fn var(name: &'static str) -> Result<Option<String>, DeviceEnvError> {
    match std::env::var(name) {
        Ok(v) => Ok(Some(v)),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => Err(DeviceEnvError::NotUnicode { var: name }),
    }
}

/// Faults named by [`SIM_FAULT_VAR`], parsed before anything is opened (NRT_INVALID when one
/// does not parse; built without the simulator, when any is named).
pub fn sim_faults() -> Result<Vec<Fault>, DeviceEnvError> {
    let Some(v) = var(SIM_FAULT_VAR)?.filter(|v| !v.trim().is_empty()) else { return Ok(Vec::new()) };
    #[cfg(feature = "sim")]
    return v.split(',').map(|f| f.trim().parse().map_err(DeviceEnvError::SimFault)).collect();
    #[cfg(not(feature = "sim"))]
    Err(DeviceEnvError::NoSimulator { value: v })
}

/// The spec named by [`DEVICE_VAR`] (unset: [`Spec::Default`]).
pub fn spec() -> Result<Spec, DeviceEnvError> {
    match var(DEVICE_VAR)? {
        Some(v) => Spec::parse(Some(&v)).map_err(DeviceEnvError::select),
        None => Ok(Spec::Default),
    }
}

/// [`Spec::Default`] resolved against sysfs (its notice logged); other specs unchanged.
pub fn resolve(spec: Spec) -> Result<Spec, DeviceEnvError> {
    match spec {
        Spec::Default => {
            let (s, notice) = resolve_default(&sysfs()).map_err(DeviceEnvError::select)?;
            if let Some(n) = notice {
                tracing::info!("{n}");
            }
            Ok(s)
        }
        s => Ok(s),
    }
}

/// The arch and the physical NeuronCores behind a spec, without opening anything.
pub fn arch_and_count(spec: &Spec) -> Result<(&'static csr_maps::Arch, usize), DeviceEnvError> {
    match spec {
        Spec::Default => arch_and_count(&resolve(Spec::Default)?),
        Spec::Sim { arch, n } | Spec::SimShared { arch, n } => Ok((arch, arch.counts.ncs as usize * n)),
        Spec::Pci(addr) => {
            let f = crate::function(&sysfs(), *addr).map_err(DeviceEnvError::select)?;
            let arch = crate::arch_of(&f).ok_or_else(|| {
                DeviceEnvError::select(SelectError::NotNeuron { addr: *addr, vendor: f.vendor, device: f.device })
            })?;
            Ok((arch, arch.counts.ncs as usize))
        }
    }
}

/// How the simulator runs ([`SIM_TIMING_VAR`]).
pub fn sim_timing() -> Result<SimTiming, DeviceEnvError> {
    match std::env::var(SIM_TIMING_VAR).as_deref() {
        Err(_) | Ok("") | Ok("inline") => Ok(SimTiming::Inline),
        Ok("threaded") => Ok(SimTiming::Threaded),
        Ok(v) => Err(DeviceEnvError::SimTiming { value: v.to_string() }),
    }
}

/// The cores a process reserves on shared devices, as libnrt's `nrt_init`: its visible cores
/// (`NEURON_RT_VISIBLE_CORES`), else a count (`NEURON_RT_NUM_CORES`, any free ones), else
/// every core.
pub fn reserve(visible_cores: Option<&[usize]>, num_cores: Option<usize>) -> Reserve {
    match (visible_cores, num_cores) {
        (Some(v), _) => Reserve::Cores(v.to_vec()),
        (None, Some(n)) => Reserve::Count(n),
        (None, None) => Reserve::All,
    }
}

/// The lines libnrt logs when `nrt_init` is refused a shared device's cores: its own, then one
/// naming the process that holds them (none for other errors).
pub fn refusal_lines(e: &SelectError) -> Vec<String> {
    let Some((owner, line)) = shared::cores_unavailable(e) else { return Vec::new() };
    let mut lines = vec![line.to_string()];
    if owner != 0 {
        lines.push(format!(
            "NeuronCore(s) requested are held by process {owner} (NEURON_RT_VISIBLE_CORES or NEURON_RT_NUM_CORES \
             choose others)"
        ));
    }
    lines
}

/// Open the platforms of `spec` (resolved first; every device of a simulated topology) with the
/// environment's simulator timing, reserving `reserve` on shared devices (`lnc`: the logical
/// NeuronCore size, [`open_reserving`]). A shared device's cores held by another process fail
/// as libnrt's `nrt_init` does: NRT_FAILURE, with [`refusal_lines`] given to `log` first.
pub fn open(spec: &Spec, reserve: &Reserve, lnc: Option<u32>, log: impl Fn(&str)) -> Result<Opened, DeviceEnvError> {
    let spec = resolve(spec.clone())?;
    open_reserving(&spec, sim_timing()?, reserve, lnc).map_err(|e| {
        for line in refusal_lines(&e) {
            log(&line);
        }
        DeviceEnvError::select(e)
    })
}

/// Arm `faults` on the simulated devices of `opened`, once the runtime is initialised on them:
/// a spec's `ncN` is a logical NC, which `global_nc` maps to the global NC (an error: the NC is
/// not visible).
#[cfg(feature = "sim")]
pub fn arm<E>(
    opened: &Opened,
    faults: Vec<Fault>,
    global_nc: impl Fn(usize) -> Result<usize, E>,
) -> Result<(), DeviceEnvError>
where
    E: std::error::Error + Send + Sync + 'static,
{
    for mut f in faults {
        let global = global_nc(f.nc).map_err(|e| DeviceEnvError::FaultNc { source: Box::new(e) })?;
        let (s, local) = opened.sim_of_nc(global).ok_or(DeviceEnvError::NoSimulatedNc { nc: f.nc })?;
        tracing::info!(fault = %f, global, "arming a simulator fault");
        f.nc = local;
        s.inject(f);
    }
    Ok(())
}

/// Built without the simulator there is nothing to arm.
#[cfg(not(feature = "sim"))]
pub fn arm<E>(_: &Opened, faults: Vec<Fault>, _: impl Fn(usize) -> Result<usize, E>) -> Result<(), DeviceEnvError>
where
    E: std::error::Error + Send + Sync + 'static,
{
    match faults.into_iter().next() {
        Some(f) => match f {},
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests;
