//! Which device `nrt_init` opens: the device environment of [`select::env`]
//! (`NEURON_VFIO_DEVICE`, `NEURON_VFIO_SIM_TIMING`, `NEURON_VFIO_SIM_FAULT`, …; the same
//! selection as the CLI's `--device` and nrtpy's), with what is libnrt.so's own: its errors
//! as [`RtError`]s with their status, libnrt's log lines when a shared device's cores are
//! refused, the global communicator connected to the simulated devices (feature `fabric`),
//! and the leases held from `nrt_init` to `nrt_close`.

use runtime::RtError;
use select::env::{self, DeviceEnvError, Fault};
use select::Spec;

pub use select::env::DEVICE_VAR;

fn rt(e: DeviceEnvError) -> RtError {
    RtError::frontend(e)
}

/// Faults named by `NEURON_VFIO_SIM_FAULT`, parsed before anything is opened.
pub fn sim_faults() -> Result<Vec<Fault>, RtError> {
    env::sim_faults().map_err(rt)
}

/// Arms `faults` on the simulated devices of `opened`, after `rt` is initialised on them (the
/// spec's `ncN` is a logical NC: an index into the visible cores).
pub fn arm(rt: &runtime::Runtime, opened: &select::Opened, faults: Vec<Fault>) -> Result<(), RtError> {
    env::arm(opened, faults, |nc| rt.global_nc(nc)).map_err(self::rt)
}

/// The spec named by the environment.
pub fn from_env() -> Result<Spec, RtError> {
    env::spec().map_err(rt)
}

/// The arch and the physical NeuronCores behind a spec, without opening anything.
pub fn arch_and_count(spec: &Spec) -> Result<(&'static csr_maps::Arch, usize), RtError> {
    env::arch_and_count(spec).map_err(rt)
}

/// The cores `nrt_init` reserves on shared devices, as libnrt: NEURON_RT_VISIBLE_CORES, else
/// NEURON_RT_NUM_CORES (any free ones), else every core.
pub fn reserve_of(cfg: &runtime::RuntimeConfig) -> select::Reserve {
    env::reserve(cfg.visible_cores.as_deref(), cfg.num_cores)
}

/// Each opened device with its options (on a shared device: the NCs and device memory this
/// process leased) and the configuration whose visible cores are the leased ones.
pub fn device_setup(
    opened: &select::Opened,
    cfg: runtime::RuntimeConfig,
    base: hal::DeviceOptions,
) -> (runtime::Devices, runtime::RuntimeConfig) {
    let owned = |i| opened.ownership(i).map(|o| (o.ncs, o.hbm, o.firmware));
    runtime::device_setup(&opened.platforms, owned, opened.leased_cores(), cfg, base)
}

/// Shared devices' leases, held from `nrt_init` to `nrt_close` (or exit: the broker sees the
/// process go and takes everything back).
static HELD: std::sync::Mutex<Option<select::Opened>> = std::sync::Mutex::new(None);

/// Keep `opened` (its broker session and leases) until [`release`].
pub fn hold(opened: select::Opened) {
    *platform::sync::lock(&HELD) = Some(opened);
}

/// Give the held leases back (after the runtime closed the devices).
pub fn release() {
    let held = platform::sync::lock(&HELD).take();
    drop(held);
}

/// Open the platforms (every device of a simulated topology), reserving `reserve` on shared
/// devices. With the `fabric` feature the simulated devices' collective hub is connected to
/// the process's global communicator (collectives whose replica group spans processes;
/// `crate::global`). A shared device's cores held by another process fail as libnrt's
/// `nrt_init` does: NRT_FAILURE, with libnrt's log line and one naming the owner.
pub fn platforms(spec: &Spec, reserve: &select::Reserve, lnc: Option<u32>) -> Result<select::Opened, RtError> {
    let opened = env::open(spec, reserve, lnc, crate::base::log_line).map_err(rt)?;
    #[cfg(feature = "fabric")]
    for s in &opened.sims {
        s.set_inter_host(Some(crate::global::global().clone() as std::sync::Arc<dyn sim::InterHost>));
    }
    Ok(opened)
}

#[cfg(test)]
mod tests {
    use super::*;
    use neff::NrtStatus;

    /// The device environment's errors reach libnrt's callers through the runtime's error
    /// type with their status and as the select crate's own type.
    #[test]
    fn device_env_errors_keep_their_status_through_rt_error() {
        let e = select::Spec::parse(Some("sim:inf1")).map_err(DeviceEnvError::select).map_err(rt).unwrap_err();
        assert_eq!(e.status, NrtStatus::Invalid);
        let inner = match &e.kind {
            runtime::RtErrorKind::Frontend(f) => f.as_error().downcast_ref::<DeviceEnvError>(),
            _ => None,
        };
        assert!(matches!(inner, Some(DeviceEnvError::Select { var: Some(DEVICE_VAR), .. })), "{e:?}");
        let e = rt(DeviceEnvError::Select {
            var: None,
            source: select::SelectError::BackendMissing(select::MissingBackend::Any),
        });
        assert_eq!(e.status, NrtStatus::Failure);
    }

    /// A fault on an NC the runtime does not show is NRT_INVALID, naming the variable.
    #[cfg(feature = "sim")]
    #[test]
    fn a_fault_on_an_invisible_nc_is_nrt_invalid() {
        let opened = select::open_platforms(&Spec::Sim { arch: &csr_maps::SUNDA, n: 1 }, select::SimTiming::Inline)
            .expect("simulator");
        let rt = runtime::Runtime::new();
        let fault: Fault = "hbm-ue@nc9".parse().expect("spec");
        let e = arm(&rt, &opened, vec![fault]).unwrap_err();
        assert_eq!(e.status, NrtStatus::Invalid);
        assert!(e.to_string().contains("NEURON_VFIO_SIM_FAULT"), "{e}");
    }
}
