//! Status names, instance/model/memory information and device-id queries of nrt.h and
//! nrt_experimental.h.

use std::collections::BTreeMap;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::OnceLock;

use neff::NrtStatus;
use runtime::RtError;

use crate::base::{copy_cstr, entry, err, guard, model_of, need, nrt_model_t, put, rt, NRT_STATUS};

/// `nrt_instance_info_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct nrt_instance_info_t {
    pub family: u32,
    pub size: u32,
    pub arch_name: [c_char; 16],
    pub device_revision: [c_char; 8],
}

/// `NRT_INSTANCE_TRN1`, `NRT_INSTANCE_TRN2`, `NRT_INSTANCE_TRN3` (nrt.h's family enum).
pub const NRT_INSTANCE_TRN1: u32 = 2;
pub const NRT_INSTANCE_TRN2: u32 = 5;
pub const NRT_INSTANCE_TRN3: u32 = 14;
/// `NRT_INSTANCE_SIZE_UNKNOWN`.
pub const NRT_INSTANCE_SIZE_UNKNOWN: u32 = 9;

/// `nrt_vnc_memory_stats_t`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct nrt_vnc_memory_stats_t {
    pub bytes_used: usize,
    pub bytes_limit: usize,
}

/// `nrt_model_info_t`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct nrt_model_info_t {
    pub vnc: u32,
}

fn status_names() -> &'static BTreeMap<u32, CString> {
    static NAMES: OnceLock<BTreeMap<u32, CString>> = OnceLock::new();
    NAMES.get_or_init(|| {
        NrtStatus::ALL.iter().filter_map(|s| CString::new(s.name()).ok().map(|c| (s.code(), c))).collect()
    })
}

/// `nrt_get_status_as_str`: the enumerator name of `status` (a static string), or
/// "NRT_UNKNOWN_STATUS" for a value nrt_status.h does not define.
#[no_mangle]
pub extern "C" fn nrt_get_status_as_str(status: NRT_STATUS) -> *const c_char {
    const UNKNOWN: &CStr = c"NRT_UNKNOWN_STATUS";
    crate::base::entry_value(UNKNOWN.as_ptr(), || {
        u32::try_from(status).ok().and_then(|c| status_names().get(&c)).map_or(UNKNOWN.as_ptr(), |s| s.as_ptr())
    })
}

/// Copy `v` into the first `n` bytes of `out` (≤ size_of::<T>()).
///
/// # Safety
/// `out` is non-null and has `n` writable bytes.
unsafe fn put_prefix<T>(out: *mut T, v: &T, n: usize) {
    let n = n.min(std::mem::size_of::<T>());
    // SAFETY: by this function's contract; `v` is a distinct local of at least `n` bytes.
    unsafe { std::ptr::copy_nonoverlapping((v as *const T).cast::<u8>(), out.cast::<u8>(), n) };
}

/// `nrt_get_instance_info`: the family of the opened device's generation (NC v2 → TRN1,
/// v3 → TRN2, v4 → TRN3), size unknown (a VFIO host sees devices, not the instance type),
/// `arch_name` the family name, `device_revision` the kmod's generation name.
///
/// # Safety
/// `info` is NULL or has `instance_info_len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn nrt_get_instance_info(info: *mut nrt_instance_info_t, instance_info_len: usize) -> NRT_STATUS {
    entry("nrt_get_instance_info", || {
        guard()?;
        need(info, "info")?;
        let (dev, _) = rt().device_of_vnc(0).map_err(|_| err(NrtStatus::Failure, "no device"))?;
        let arch = dev.arch();
        let (family, name) = match arch.nc_version {
            2 => (NRT_INSTANCE_TRN1, "trn1"),
            3 => (NRT_INSTANCE_TRN2, "trn2"),
            _ => (NRT_INSTANCE_TRN3, "trn3"),
        };
        let mut v = nrt_instance_info_t {
            family,
            size: NRT_INSTANCE_SIZE_UNKNOWN,
            arch_name: [0; 16],
            device_revision: [0; 8],
        };
        copy_cstr(&mut v.arch_name, name);
        copy_cstr(&mut v.device_revision, &arch.kmod_name.to_ascii_lowercase());
        // SAFETY: checked non-null; nrt.h: `info` has `instance_info_len` writable bytes.
        unsafe { put_prefix(info, &v, instance_info_len) };
        Ok(())
    })
}

/// `nrt_get_vnc_memory_stats`: device memory used on / capacity of the HBM serving `vnc`.
///
/// # Safety
/// `stats` is NULL or has `stats_size_in` writable bytes; `stats_size_out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn nrt_get_vnc_memory_stats(
    vnc: u32,
    stats: *mut nrt_vnc_memory_stats_t,
    stats_size_in: usize,
    stats_size_out: *mut usize,
) -> NRT_STATUS {
    entry("nrt_get_vnc_memory_stats", || {
        guard()?;
        need(stats, "stats")?;
        need(stats_size_out, "stats_size_out")?;
        let (dev, local) =
            rt().device_of_vnc(vnc as usize).map_err(|_| err(NrtStatus::Invalid, format!("no vnc {vnc}")))?;
        let u = dev
            .allocator()
            .usage(dev.hbm_for_nc(local))
            .ok_or_else(|| err(NrtStatus::Failure, format!("no HBM for vnc {vnc}")))?;
        let v = nrt_vnc_memory_stats_t { bytes_used: u.used as usize, bytes_limit: u.capacity as usize };
        let n = stats_size_in.min(std::mem::size_of::<nrt_vnc_memory_stats_t>());
        // SAFETY: both checked non-null; nrt.h: `stats` has `stats_size_in` writable bytes
        // and `stats_size_out` is a writable size_t.
        unsafe {
            put_prefix(stats, &v, n);
            put(stats_size_out, n);
        }
        Ok(())
    })
}

/// `nrt_get_model_instance_count`: 1 — executions of a model are serialized on its cores.
///
/// # Safety
/// `instance_count` is NULL or a writable `uint32_t`.
#[no_mangle]
pub unsafe extern "C" fn nrt_get_model_instance_count(model: *mut nrt_model_t, instance_count: *mut u32) -> NRT_STATUS {
    entry("nrt_get_model_instance_count", || {
        guard()?;
        model_of(model)?;
        need(instance_count, "instance_count")?;
        // SAFETY: checked non-null; a writable uint32_t per nrt_experimental.h.
        unsafe { put(instance_count, 1) };
        Ok(())
    })
}

/// `nrt_get_model_info`: the model's first core.
///
/// # Safety
/// `info` is NULL or has `info_size_in` writable bytes; `info_size_out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn nrt_get_model_info(
    model: *const nrt_model_t,
    info: *mut nrt_model_info_t,
    info_size_in: usize,
    info_size_out: *mut usize,
) -> NRT_STATUS {
    entry("nrt_get_model_info", || {
        guard()?;
        let m = model_of(model)?;
        need(info, "info")?;
        need(info_size_out, "info_size_out")?;
        // The caller's numbering: the logical core of the model's first (global) NC.
        let first = m.ncs.first().copied().unwrap_or(0);
        let vnc = rt().logical_nc(first).ok_or_else(|| err(NrtStatus::Failure, "model on no visible core"))?;
        let v = nrt_model_info_t { vnc: u32::try_from(vnc).map_err(|_| err(NrtStatus::Failure, "vnc overflows"))? };
        let n = info_size_in.min(std::mem::size_of::<nrt_model_info_t>());
        // SAFETY: both checked non-null; sizes per nrt_experimental.h.
        unsafe {
            put_prefix(info, &v, n);
            put(info_size_out, n);
        }
        Ok(())
    })
}

fn device_count() -> usize {
    let mut n = 0;
    while rt().device_of(n).is_some() {
        n += 1;
    }
    // `device_of` walks NCs; count distinct devices.
    let mut devs: Vec<hal::Device> = Vec::new();
    for nc in 0..n {
        if let Some((d, _)) = rt().device_of(nc) {
            if !devs.iter().any(|x| x.same(&d)) {
                devs.push(d);
            }
        }
    }
    devs.len()
}

/// `nrt_host_device_id_get`: device ids are not remapped (no container id translation).
///
/// # Safety
/// `host_device_id` is NULL or a writable `uint32_t`.
#[no_mangle]
pub unsafe extern "C" fn nrt_host_device_id_get(neuron_dev: c_int, host_device_id: *mut u32) -> NRT_STATUS {
    entry("nrt_host_device_id_get", || {
        guard()?;
        need(host_device_id, "host_device_id")?;
        let n = device_count();
        let id = u32::try_from(neuron_dev)
            .ok()
            .filter(|&d| (d as usize) < n)
            .ok_or_else(|| err(NrtStatus::Invalid, format!("no device {neuron_dev} ({n} opened)")))?;
        // SAFETY: checked non-null.
        unsafe { put(host_device_id, id) };
        Ok(())
    })
}

/// `nrt_host_device_id_rid_map_get`: routing id = host device id (one host, no fabric
/// routing table from a driver).
///
/// # Safety
/// `count` is NULL or a readable/writable `uint32_t`; `host_did_to_rid_map` NULL or `*count`
/// writable entries.
#[no_mangle]
pub unsafe extern "C" fn nrt_host_device_id_rid_map_get(count: *mut u32, host_did_to_rid_map: *mut u32) -> NRT_STATUS {
    entry("nrt_host_device_id_rid_map_get", || {
        guard()?;
        need(count, "count")?;
        need(host_did_to_rid_map, "host_did_to_rid_map")?;
        let n = device_count();
        // SAFETY: checked non-null; readable per nrt.h.
        let cap = unsafe { count.read() } as usize;
        if cap < n {
            return Err(err(NrtStatus::Invalid, format!("map of {cap} entries, {n} devices")));
        }
        for i in 0..n {
            // SAFETY: i < n ≤ *count entries are writable per nrt.h.
            unsafe { host_did_to_rid_map.add(i).write(i as u32) };
        }
        // SAFETY: checked non-null.
        unsafe { put(count, n as u32) };
        Ok(())
    })
}

/// `nrt_get_hbm_mmap_va`: NRT_INVALID ("the interface isn't supported", as nrt.h documents):
/// this runtime never maps HBM into the process; device memory is reached by DMA.
///
/// # Safety
/// Pointers are not dereferenced.
#[no_mangle]
pub unsafe extern "C" fn nrt_get_hbm_mmap_va(
    device_id: c_int,
    hbm_idx: c_int,
    addr: *mut *mut c_void,
    size: *mut usize,
) -> NRT_STATUS {
    entry("nrt_get_hbm_mmap_va", || {
        guard()?;
        need(addr, "addr")?;
        need(size, "size")?;
        Err(err(
            NrtStatus::Invalid,
            format!("device {device_id} HBM {hbm_idx}: HBM is not mapped into the process (reached by DMA only)"),
        ))
    })
}

/// `nrt_get_attached_efa_bdf`: NRT_FAILURE — no EFA device is attached to a VFIO-bound or
/// simulated Neuron device in this runtime.
///
/// # Safety
/// Pointers are not dereferenced.
#[no_mangle]
pub unsafe extern "C" fn nrt_get_attached_efa_bdf(
    va: *const c_void,
    efa_bdf: *mut c_char,
    len: *mut usize,
) -> NRT_STATUS {
    entry("nrt_get_attached_efa_bdf", || {
        guard()?;
        need(efa_bdf, "efa_bdf")?;
        need(len, "len")?;
        Err(err(NrtStatus::Failure, format!("{va:p}: no EFA device is attached to this runtime's Neuron devices")))
    })
}

/// `nrt_get_dmabuf_fd`: a memfd holding a copy of `size` bytes of the tensor memory at `va`
/// (a device address from `nrt_tensor_get_device_allocation_info` or a host address from
/// `nrt_tensor_get_va`). See docs/capi.md: the kmod's dma-buf exports device memory for EFA
/// peer-direct; without EFA the fd carries the bytes.
///
/// # Safety
/// `fd` is NULL or a writable `int`.
#[no_mangle]
pub unsafe extern "C" fn nrt_get_dmabuf_fd(va: u64, size: u64, fd: *mut c_int) -> NRT_STATUS {
    entry("nrt_get_dmabuf_fd", || {
        guard()?;
        need(fd, "fd")?;
        if size == 0 {
            return Err(err(NrtStatus::Invalid, "size 0"));
        }
        let (t, off) = crate::tensor_ops::find_by_address(va, size)
            .ok_or_else(|| err(NrtStatus::Invalid, format!("{size} bytes at {va:#x} are not inside a live tensor")))?;
        let mut bytes = vec![0u8; size as usize];
        t.read(off, &mut bytes)?;
        let f = memfd_with(&bytes)?;
        // SAFETY: checked non-null.
        unsafe { put(fd, f) };
        Ok(())
    })
}

fn memfd_with(bytes: &[u8]) -> Result<c_int, RtError> {
    let os = |what: &str| err(NrtStatus::Failure, format!("{what}: {}", std::io::Error::last_os_error()));
    // SAFETY: a NUL-terminated name and valid flags; the result is checked.
    let fd = unsafe { libc::memfd_create(c"nrt-dmabuf".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(os("memfd_create"));
    }
    let mut done = 0usize;
    while done < bytes.len() {
        // SAFETY: `fd` is ours; the pointer/length are a live slice.
        let n = unsafe { libc::write(fd, bytes[done..].as_ptr().cast(), bytes.len() - done) };
        if n <= 0 {
            let e = os("write to memfd");
            // SAFETY: closing our own fd once.
            unsafe { libc::close(fd) };
            return Err(e);
        }
        done += n as usize;
    }
    Ok(fd)
}
