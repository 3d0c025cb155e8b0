//! The rest of nrt_experimental.h and nrt.h's communicator set-up. The single worker
//! `g_device_id` 0 of `g_device_count` 1 needs no transport; more workers form a global
//! communicator across processes and hosts with the `fabric` feature (`crate::global`,
//! docs/fabric.md) and are NRT_INVALID without it.

use std::ffi::{c_char, c_int, c_void};

use neff::NrtStatus;
use runtime::RtError;

use crate::base::{entry, entry_value, err, guard, need, NRT_STATUS};

/// `nrt_ucode_img`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct nrt_ucode_img {
    pub bin: *mut u8,
    pub size: usize,
}

/// `nrt_ucode_info`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct nrt_ucode_info {
    pub iram: nrt_ucode_img,
    pub dram: nrt_ucode_img,
}

fn one_worker(vnc: i64, id: u32, count: u32) -> Result<(), RtError> {
    guard()?;
    let v = usize::try_from(vnc).map_err(|_| err(NrtStatus::Invalid, format!("bad vnc {vnc}")))?;
    if crate::base::rt().device_of_vnc(v).is_err() {
        return Err(err(NrtStatus::Invalid, format!("no vnc {vnc}")));
    }
    if count != 1 || id != 0 {
        #[cfg(feature = "fabric")]
        return crate::global::global().ensure(id, count);
        #[cfg(not(feature = "fabric"))]
        return Err(err(
            NrtStatus::Invalid,
            format!("worker {id} of {count}: built without the fabric feature, only a single-worker communicator (0 of 1) is supported"),
        ));
    }
    Ok(())
}

/// `nrt_build_global_comm`.
#[no_mangle]
pub extern "C" fn nrt_build_global_comm(vnc: i32, g_device_id: u32, g_device_count: u32) -> NRT_STATUS {
    entry("nrt_build_global_comm", || one_worker(vnc.into(), g_device_id, g_device_count))
}

/// `nrt_cc_global_comm_init`.
#[no_mangle]
pub extern "C" fn nrt_cc_global_comm_init(vnc: u32, g_device_id: u32, g_device_count: u32) -> NRT_STATUS {
    entry("nrt_cc_global_comm_init", || one_worker(vnc.into(), g_device_id, g_device_count))
}

/// `nrt_barrier`: with one worker the barrier is reached immediately; with more (feature
/// `fabric`) every worker of the global communicator meets over its out-of-band channel.
#[no_mangle]
pub extern "C" fn nrt_barrier(vnc: i32, g_device_id: u32, g_device_count: u32) -> NRT_STATUS {
    entry("nrt_barrier", || {
        one_worker(vnc.into(), g_device_id, g_device_count)?;
        #[cfg(feature = "fabric")]
        if !crate::global::Global::single(g_device_id, g_device_count) {
            return crate::global::global().barrier(g_device_id, g_device_count);
        }
        Ok(())
    })
}

/// `nrt_all_gather`: with one worker the output is the input; with more (feature `fabric`)
/// every worker's input in rank order.
///
/// # Safety
/// `input` has `rank_input_size` readable bytes, `output` `g_device_count × rank_input_size`
/// writable bytes (NULL rejected).
#[no_mangle]
pub unsafe extern "C" fn nrt_all_gather(
    vnc: i32,
    g_device_id: u32,
    g_device_count: u32,
    rank_input_size: u32,
    input: *mut c_void,
    output: *mut c_void,
) -> NRT_STATUS {
    entry("nrt_all_gather", || {
        one_worker(vnc.into(), g_device_id, g_device_count)?;
        need(input, "input")?;
        need(output, "output")?;
        #[cfg(feature = "fabric")]
        if !crate::global::Global::single(g_device_id, g_device_count) {
            // SAFETY: non-null; `rank_input_size` readable bytes per nrt_experimental.h.
            let mine = unsafe { std::slice::from_raw_parts(input.cast::<u8>(), rank_input_size as usize) }.to_vec();
            let all = crate::global::global().all_gather(g_device_id, g_device_count, &mine)?;
            // SAFETY: non-null; `g_device_count × rank_input_size` writable bytes per
            // nrt_experimental.h (`all` has exactly that many).
            unsafe { std::ptr::copy_nonoverlapping(all.as_ptr(), output.cast::<u8>(), all.len()) };
            return Ok(());
        }
        // SAFETY: non-null; sizes per nrt_experimental.h; `copy` allows overlap.
        unsafe { std::ptr::copy(input.cast::<u8>(), output.cast::<u8>(), rank_input_size as usize) };
        Ok(())
    })
}

/// `nrt_get_libnccl_net`: NULL with `*err` = 1 and a message — this runtime loads no NCCL
/// network plugin (collectives run between the cores of one process).
///
/// # Safety
/// `err` is NULL or writable; `err_msg` NULL or `err_msg_size` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn nrt_get_libnccl_net(
    err_: *mut c_int,
    err_msg: *mut c_char,
    err_msg_size: usize,
) -> *mut c_void {
    entry_value(std::ptr::null_mut(), || {
        if !err_.is_null() {
            // SAFETY: non-null, writable per nrt_experimental.h.
            unsafe { err_.write(1) };
        }
        if !err_msg.is_null() && err_msg_size > 0 {
            let msg = "neuron-vfio loads no NCCL network plugin";
            // SAFETY: non-null with `err_msg_size` writable bytes.
            let dst = unsafe { std::slice::from_raw_parts_mut(err_msg, err_msg_size) };
            crate::base::copy_cstr(dst, msg);
        }
        std::ptr::null_mut()
    })
}

/// `nrt_set_pool_eng_ucode`: NRT_INVALID after `nrt_init` (as libnrt: images load once, at
/// init); before it NRT_FAILURE — the pooling-engine microcode image format is not public,
/// so this runtime cannot load caller images (docs/capi.md).
///
/// # Safety
/// `ucode_info` is NULL or readable.
#[no_mangle]
pub unsafe extern "C" fn nrt_set_pool_eng_ucode(ucode_info: *const nrt_ucode_info) -> NRT_STATUS {
    entry("nrt_set_pool_eng_ucode", || {
        need(ucode_info, "ucode_info")?;
        if guard().is_ok() {
            return Err(err(NrtStatus::Invalid, "must be called before nrt_init"));
        }
        // SAFETY: non-null, readable per nrt_experimental.h.
        let u = unsafe { ucode_info.read() };
        Err(err(
            NrtStatus::Failure,
            format!(
                "pool-engine microcode ({} B iram, {} B dram) cannot be loaded: the image format is not public",
                u.iram.size, u.dram.size
            ),
        ))
    })
}

/// `nrt_memcpy_to_device`: `dest` must lie inside memory returned by `nrt_tensor_get_va`
/// (NRT_INVALID otherwise); the bytes are written through the tensor.
///
/// # Safety
/// `src` has `size` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn nrt_memcpy_to_device(dest: *mut c_void, src: *const c_void, size: usize) -> NRT_STATUS {
    entry("nrt_memcpy_to_device", || {
        guard()?;
        need(dest, "dest")?;
        if size == 0 {
            return Ok(());
        }
        need(src, "src")?;
        if size > isize::MAX as usize {
            return Err(err(NrtStatus::Invalid, format!("bad size {size}")));
        }
        let (t, off) = crate::tensor_ops::find_by_address(dest as u64, size as u64)
            .filter(|(t, _)| t.host_va().is_some())
            .ok_or_else(|| err(NrtStatus::Invalid, format!("{dest:p}: not inside memory from nrt_tensor_get_va")))?;
        // SAFETY: non-null; `size` readable bytes per nrt_experimental.h.
        let data = unsafe { std::slice::from_raw_parts(src.cast::<u8>(), size) };
        t.write(off, data)
    })
}
