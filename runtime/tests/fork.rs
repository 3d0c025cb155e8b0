//! A forked child sees NRT_STATE_CHILD: it cannot drive the devices it inherited
//! (every API call returns NRT_UNINITIALIZED, docs/facts/libnrt-runtime-model.md §A.1.1), while the parent carries on.

use std::sync::Arc;

use csr_maps::SUNDA;
use neff::builder;
use platform::Platform;
use runtime::{NrtStatus, Runtime, RuntimeConfig, TensorSet};
use sim::{SimConfig, SimDevice, Timing};

#[test]
fn forked_child_cannot_drive_devices() {
    let sim = SimDevice::new(SimConfig::new(&SUNDA).timing(Timing::Inline).hbm_bytes(1 << 28)).unwrap();
    let rt = Runtime::new();
    let opts = hal::DeviceOptions { hbm_limit: Some(1 << 28), ..Default::default() };
    rt.init(vec![Arc::new(sim.clone()) as Arc<dyn Platform>], RuntimeConfig::physical(), opts).unwrap();
    let bytes = builder::single_nc_allreduce().build().unwrap();
    let m = rt.load(&bytes, None, None).unwrap();
    // SAFETY: the child only calls into this runtime (no other thread uses it) and leaves
    // with _exit, never returning into the test harness.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let load = rt.load(&bytes, None, None).map(|_| ()).map_err(|e| e.status);
        let exec = rt.execute(&m, &TensorSet::new(), &TensorSet::new()).map(|_| ()).map_err(|e| e.status);
        let ok = load == Err(NrtStatus::Uninitialized) && exec == Err(NrtStatus::Uninitialized);
        // SAFETY: terminate the child immediately, without running the parent's destructors.
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    let mut status = 0;
    // SAFETY: waiting for the child we just forked.
    let r = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(r, pid);
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "child was not fenced (status {status})");
    // The parent still drives the device.
    let ti = rt.alloc_tensor("input", 128, false, 0).unwrap();
    ti.write(0, &[7u8; 128]).unwrap();
    let to = rt.alloc_tensor("output", 128, false, 0).unwrap();
    let mut i = TensorSet::new();
    i.add("input", ti);
    let mut o = TensorSet::new();
    o.add("output", to.clone());
    assert_eq!(rt.execute(&m, &i, &o).unwrap().0, NrtStatus::Success);
    assert_eq!(to.to_vec().unwrap(), vec![7u8; 128]);
    rt.unload(&m).unwrap();
    rt.close().unwrap();
}
