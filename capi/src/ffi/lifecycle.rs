//! Lifecycle: `nrt_init`, `nrt_close`. The NRT_INIT_STATE machine is the runtime's own
//! ([`runtime::Runtime::guard`], [`runtime::Runtime::check_init`]); these calls only
//! serialize against each other and add the C API's device selection.

use super::*;

/// Serializes `nrt_init` and `nrt_close` (the state itself is the runtime's).
static LIFECYCLE: Mutex<()> = Mutex::new(());

/// `nrt_init`: open the device named by `NEURON_VFIO_DEVICE` and initialise the runtime.
///
/// # Safety
/// Pointer arguments are as nrt.h requires: NULL (rejected with NRT_INVALID where nrt.h
/// makes the argument mandatory) or valid for the reads/writes nrt.h describes. Handles
/// are validated against the live-handle registry, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn nrt_init(
    framework: nrt_framework_type_t,
    fw_version: *const c_char,
    fal_version: *const c_char,
) -> NRT_STATUS {
    entry("nrt_init", || {
        // SAFETY: nrt.h: the version strings are NULL or NUL-terminated.
        let (fw, fal) = unsafe { (opt_cstr(fw_version), opt_cstr(fal_version)) };
        tracing::debug!(framework, ?fw, ?fal, "nrt_init");
        let _serial = lock(&LIFECYCLE);
        // Refuse (already initialised, forked child) before any device is opened.
        rt().check_init()?;
        let cfg = RuntimeConfig::from_env()?;
        // Every NEURON_RT_* variable set but not applied: one line each, never silently.
        for line in runtime::env::documented::notices_from_env() {
            crate::base::log_warning(&line);
        }
        let faults = crate::device::sim_faults()?;
        // A shared device: the cores are reserved here (libnrt's nrt_init), held until close.
        let opened = crate::device::platforms(
            &crate::device::from_env()?,
            &crate::device::reserve_of(&cfg),
            cfg.lnc.map(|l| l.size),
        )?;
        let (devices, cfg) = crate::device::device_setup(&opened, cfg, hal::DeviceOptions::default());
        rt().init_devices(devices, cfg)?;
        // Simulator faults of NEURON_VFIO_SIM_FAULT: a bad NC undoes the init.
        if let Err(e) = crate::device::arm(rt(), &opened, faults) {
            if let Err(c) = rt().close() {
                log_error("nrt_init", &c);
            }
            return Err(e);
        }
        crate::device::hold(opened);
        // NEURON_RT_INSPECT_ENABLE: the run's system trace (written at nrt_close).
        if let Err(e) = crate::sys_trace::inspect_run_begin() {
            if let Err(c) = rt().close() {
                log_error("nrt_init", &c);
            }
            crate::device::release();
            return Err(e);
        }
        Ok(())
    })
}

/// `nrt_close`: unload every model and release the devices.
#[no_mangle]
pub extern "C" fn nrt_close() {
    entry_value((), || {
        let _serial = lock(&LIFECYCLE);
        // Before init, after close and in a forked child, nrt_close does nothing.
        if rt().guard().is_err() {
            return;
        }
        // What the areas started (execution-unit workers, communicators) stops first.
        crate::base::shutdown::run_all();
        if let Err(e) = rt().close() {
            log_error("nrt_close", &e);
        }
        if let Err(e) = crate::sys_trace::inspect_run_end() {
            log_error("nrt_close", &e);
        }
        // The devices are closed: give shared devices' cores back.
        crate::device::release();
        // Every handle dies with the runtime (the device is closed for good).
        crate::base::registry::clear_all();
    })
}
