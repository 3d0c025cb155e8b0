//! nrt.h's tensor operations beyond allocate/read/write: batches, copy, memset, slices,
//! empty tensors with attached buffers, addresses and output completion.

use std::ffi::{c_char, c_int, c_void};
use std::sync::Arc;
use std::time::{Duration, Instant};

use neff::NrtStatus;
use runtime::tensor_ops::{CallerMemory, UserBuf};
use runtime::{RtError, Tensor};

use crate::base::{
    entry, entry_value, err, guard, need, nrt_tensor_placement_t, nrt_tensor_t, opt_cstr, put, rt, tensor_of, CTensor,
    NRT_STATUS, NRT_TENSOR_PLACEMENT_DEVICE, NRT_TENSOR_PLACEMENT_HOST, TENSORS,
};

/// `nrt_tensor_batch_op_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct nrt_tensor_batch_op_t {
    pub offset: u64,
    pub size: u64,
    pub buffer: *mut c_void,
}

/// `nrt_tensor_batch_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct nrt_tensor_batch_t {
    pub tensor: *const nrt_tensor_t,
    pub ops: *const nrt_tensor_batch_op_t,
    pub num_ops: u32,
}

/// `nrt_tensor_device_allocation_info_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct nrt_tensor_device_allocation_info_t {
    pub physical_address: u64,
    pub size: usize,
    pub hbm_index: c_int,
}

fn range(t: &Tensor, off: u64, size: u64) -> Result<usize, RtError> {
    let n = usize::try_from(size).ok().filter(|&n| n <= isize::MAX as usize);
    match n {
        Some(n) if off.checked_add(size).is_some_and(|e| e <= t.size) => Ok(n),
        _ => {
            Err(err(NrtStatus::Invalid, format!("{size} bytes at {off} outside tensor {} ({} bytes)", t.name, t.size)))
        }
    }
}

/// # Safety
/// `batches` is NULL or `num_batches` readable batches whose ops arrays and buffers are valid
/// as nrt.h describes.
unsafe fn batch(func: &str, batches: *const nrt_tensor_batch_t, num_batches: u64, write: bool) -> NRT_STATUS {
    entry(func, || {
        guard()?;
        if num_batches == 0 {
            return Ok(());
        }
        need(batches, "batches")?;
        let nb = usize::try_from(num_batches).map_err(|_| err(NrtStatus::Invalid, "num_batches overflows"))?;
        // SAFETY: non-null; nrt.h: `num_batches` readable entries.
        let batches = unsafe { std::slice::from_raw_parts(batches, nb) };
        // Validate every batch before touching any tensor.
        let mut work = Vec::with_capacity(nb);
        for (i, b) in batches.iter().enumerate() {
            let t = tensor_of(b.tensor)?;
            if b.num_ops == 0 {
                continue;
            }
            need(b.ops, "ops")?;
            // SAFETY: non-null; nrt.h: `num_ops` readable ops.
            let ops = unsafe { std::slice::from_raw_parts(b.ops, b.num_ops as usize) };
            for (k, op) in ops.iter().enumerate() {
                let n = range(&t.tensor, op.offset, op.size)?;
                if n > 0 && op.buffer.is_null() {
                    return Err(err(NrtStatus::Invalid, format!("batch {i} op {k}: NULL buffer")));
                }
            }
            work.push((t, ops));
        }
        for (t, ops) in work {
            for op in ops {
                let n = op.size as usize;
                if n == 0 {
                    continue;
                }
                if write {
                    // SAFETY: non-null (checked); nrt.h: `size` readable bytes.
                    let data = unsafe { std::slice::from_raw_parts(op.buffer.cast::<u8>(), n) };
                    t.tensor.write(op.offset, data)?;
                } else {
                    // SAFETY: non-null (checked); nrt.h: `size` writable bytes, unaliased.
                    let out = unsafe { std::slice::from_raw_parts_mut(op.buffer.cast::<u8>(), n) };
                    t.tensor.read(op.offset, out)?;
                }
            }
        }
        Ok(())
    })
}

/// `nrt_tensor_read_batch`: every op of every batch, in order; all ops are validated first.
///
/// # Safety
/// As nrt.h: `batches` has `num_batches` entries, each with `num_ops` ops whose buffers have
/// `size` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn nrt_tensor_read_batch(
    batches: *const nrt_tensor_batch_t,
    num_batches: u64,
    unsafe_: bool,
) -> NRT_STATUS {
    let _ = unsafe_;
    // SAFETY: forwarded from this function's contract.
    unsafe { batch("nrt_tensor_read_batch", batches, num_batches, false) }
}

/// `nrt_tensor_write_batch`.
///
/// # Safety
/// As nrt.h: `batches` has `num_batches` entries, each with `num_ops` ops whose buffers have
/// `size` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn nrt_tensor_write_batch(
    batches: *const nrt_tensor_batch_t,
    num_batches: u64,
    unsafe_: bool,
) -> NRT_STATUS {
    let _ = unsafe_;
    // SAFETY: forwarded from this function's contract.
    unsafe { batch("nrt_tensor_write_batch", batches, num_batches, true) }
}

/// `nrt_tensor_copy`: device tensors must share a NeuronCore (NRT_INVALID otherwise).
#[no_mangle]
pub extern "C" fn nrt_tensor_copy(
    src: *const nrt_tensor_t,
    src_offset: usize,
    dst: *mut nrt_tensor_t,
    dst_offset: usize,
    size: usize,
) -> NRT_STATUS {
    entry("nrt_tensor_copy", || {
        guard()?;
        let (s, d) = (tensor_of(src)?, tensor_of(dst)?);
        runtime::tensor_ops::copy(&s.tensor, src_offset as u64, &d.tensor, dst_offset as u64, size as u64)
    })
}

/// `nrt_tensor_memset`: `size` bytes at `offset` set to `(unsigned char)value`.
#[no_mangle]
pub extern "C" fn nrt_tensor_memset(tensor: *mut nrt_tensor_t, offset: u64, value: c_int, size: usize) -> NRT_STATUS {
    entry("nrt_tensor_memset", || {
        guard()?;
        let t = tensor_of(tensor)?;
        t.tensor.fill(offset, size as u64, value as u8)
    })
}

fn insert(t: Arc<Tensor>, placement: nrt_tensor_placement_t, attached: bool) -> *mut nrt_tensor_t {
    TENSORS.insert(Arc::new(CTensor { tensor: t, placement, attached }))
}

/// `nrt_tensor_allocate_empty`: a tensor without storage (size 0).
///
/// # Safety
/// `name` is NULL or NUL-terminated; `tensor` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn nrt_tensor_allocate_empty(name: *const c_char, tensor: *mut *mut nrt_tensor_t) -> NRT_STATUS {
    entry("nrt_tensor_allocate_empty", || {
        guard()?;
        need(tensor, "tensor")?;
        // SAFETY: nrt.h: NULL or NUL-terminated.
        let name = unsafe { opt_cstr(name) }.unwrap_or_default();
        let (dev, _) = rt().device_of_vnc(0).map_err(|_| err(NrtStatus::Failure, "no device"))?;
        let h = insert(Tensor::empty(dev, &name), NRT_TENSOR_PLACEMENT_HOST, false);
        // SAFETY: checked non-null.
        unsafe { put(tensor, h) };
        Ok(())
    })
}

/// `nrt_tensor_attach_buffer`: `buffer` (valid for the tensor's lifetime) becomes the
/// tensor's storage; storage the tensor owned is released.
///
/// # Safety
/// `buffer` is NULL or `size` bytes readable and writable until the tensor is freed.
#[no_mangle]
pub unsafe extern "C" fn nrt_tensor_attach_buffer(
    tensor: *mut nrt_tensor_t,
    buffer: *mut c_void,
    size: usize,
) -> NRT_STATUS {
    entry("nrt_tensor_attach_buffer", || {
        guard()?;
        let t = tensor_of(tensor)?;
        need(buffer, "buffer")?;
        if size > isize::MAX as usize {
            return Err(err(NrtStatus::Invalid, format!("bad size {size}")));
        }
        // SAFETY: nrt.h: the caller keeps `size` bytes at `buffer` valid for the tensor's life.
        let ub = UserBuf::new(Box::new(unsafe { CallerBuf::new(buffer.cast(), size) }));
        let nt = t.tensor.with_user_buffer(ub);
        if !TENSORS
            .replace(tensor, Arc::new(CTensor { tensor: nt, placement: NRT_TENSOR_PLACEMENT_HOST, attached: true }))
        {
            return Err(err(NrtStatus::InvalidHandle, "tensor freed concurrently"));
        }
        Ok(())
    })
}

/// `nrt_tensor_allocate_slice`: a tensor viewing `size` bytes at `offset` of the source.
///
/// # Safety
/// `name` is NULL or NUL-terminated; `tensor_slice` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn nrt_tensor_allocate_slice(
    tensor_source: *const nrt_tensor_t,
    offset: usize,
    size: usize,
    name: *const c_char,
    tensor_slice: *mut *mut nrt_tensor_t,
) -> NRT_STATUS {
    entry("nrt_tensor_allocate_slice", || {
        guard()?;
        let src = tensor_of(tensor_source)?;
        need(tensor_slice, "tensor_slice")?;
        // SAFETY: nrt.h: NULL or NUL-terminated.
        let name = unsafe { opt_cstr(name) }.unwrap_or_else(|| src.tensor.name.clone());
        let s = Tensor::slice(&src.tensor, offset as u64, size as u64, &name)?;
        let h = insert(s, src.placement, false);
        // SAFETY: checked non-null.
        unsafe { put(tensor_slice, h) };
        Ok(())
    })
}

/// `nrt_tensor_get_va`: host address of the bytes (host tensors, attached buffers, their
/// slices); NULL for device tensors (device memory is not mapped into the process) and
/// invalid or empty tensors.
#[no_mangle]
pub extern "C" fn nrt_tensor_get_va(tensor: *const nrt_tensor_t) -> *mut c_void {
    entry_value(std::ptr::null_mut(), || {
        if guard().is_err() {
            return std::ptr::null_mut();
        }
        match tensor_of(tensor) {
            Ok(t) => match t.tensor.host_va() {
                Some(p) => p.cast(),
                None => {
                    if t.placement == NRT_TENSOR_PLACEMENT_DEVICE {
                        tracing::info!(
                            "nrt_tensor_get_va: {} is in device memory, which is not mapped into the process",
                            t.tensor.name
                        );
                    }
                    std::ptr::null_mut()
                }
            },
            Err(_) => std::ptr::null_mut(),
        }
    })
}

/// `nrt_tensor_get_device_allocation_info`: device address, allocation size and HBM of a
/// device tensor (NRT_INVALID for tensors not in device memory).
///
/// # Safety
/// `alloc_info` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn nrt_tensor_get_device_allocation_info(
    tensor: *const nrt_tensor_t,
    alloc_info: *mut nrt_tensor_device_allocation_info_t,
) -> NRT_STATUS {
    entry("nrt_tensor_get_device_allocation_info", || {
        guard()?;
        let t = tensor_of(tensor)?;
        need(alloc_info, "alloc_info")?;
        let a = t
            .tensor
            .device_allocation()
            .ok_or_else(|| err(NrtStatus::Invalid, format!("tensor {} is not in device memory", t.tensor.name)))?;
        let v = nrt_tensor_device_allocation_info_t {
            physical_address: a.addr,
            size: a.len as usize,
            hbm_index: c_int::try_from(a.hbm).unwrap_or(c_int::MAX),
        };
        // SAFETY: checked non-null.
        unsafe { put(alloc_info, v) };
        Ok(())
    })
}

/// `nrt_tensor_check_output_completion`: wait (polling, `timeout` µs; negative = unbounded,
/// with a warning after 30 s) until executions wrote the tensor `expected_completion_count`
/// times since the last reset; NRT_TIMEOUT otherwise.
#[no_mangle]
pub extern "C" fn nrt_tensor_check_output_completion(
    output_tensor: *const nrt_tensor_t,
    timeout: i64,
    expected_completion_count: u64,
) -> NRT_STATUS {
    entry("nrt_tensor_check_output_completion", || {
        guard()?;
        let t = tensor_of(output_tensor)?;
        let t0 = Instant::now();
        let limit = u64::try_from(timeout).ok().map(Duration::from_micros);
        let mut warned = false;
        loop {
            let n = t.tensor.completions();
            if n >= expected_completion_count {
                return Ok(());
            }
            let waited = t0.elapsed();
            if limit.is_some_and(|l| waited >= l) {
                return Err(err(
                    NrtStatus::Timeout,
                    format!(
                        "tensor {}: {n} of {expected_completion_count} completions after {timeout} us",
                        t.tensor.name
                    ),
                ));
            }
            if limit.is_none() && !warned && waited >= Duration::from_secs(30) {
                warned = true;
                tracing::warn!("nrt_tensor_check_output_completion: waiting 30 s for tensor {}", t.tensor.name);
            }
            std::thread::sleep(Duration::from_micros(20));
        }
    })
}

/// `nrt_tensor_reset_output_completion`.
#[no_mangle]
pub extern "C" fn nrt_tensor_reset_output_completion(output_tensor: *mut nrt_tensor_t) -> NRT_STATUS {
    entry("nrt_tensor_reset_output_completion", || {
        guard()?;
        tensor_of(output_tensor)?.tensor.reset_completions();
        Ok(())
    })
}

/// The live tensor holding `[addr, addr + size)` — `addr` a device address or a host
/// address of the tensor's bytes — and the offset in it.
pub(crate) fn find_by_address(addr: u64, size: u64) -> Option<(Arc<Tensor>, u64)> {
    let end = addr.checked_add(size)?;
    TENSORS.values().into_iter().find_map(|c| {
        let t = &c.tensor;
        let bases = [t.device_allocation().map(|a| a.addr), t.host_va().map(|p| p as u64)];
        bases
            .into_iter()
            .flatten()
            .find_map(|b| (addr >= b && end <= b.checked_add(t.size)?).then(|| (t.clone(), addr - b)))
    })
}

/// The caller's memory behind `nrt_tensor_attach_buffer` (an address kept as an integer so
/// the tensor stays `Send`; the runtime checks every range against `len` first).
struct CallerBuf {
    ptr: usize,
    len: usize,
}

impl CallerBuf {
    /// # Safety
    /// `ptr` points to `len` bytes readable and writable for as long as any tensor using
    /// this buffer lives.
    unsafe fn new(ptr: *mut u8, len: usize) -> Self {
        Self { ptr: ptr as usize, len }
    }
}

impl CallerMemory for CallerBuf {
    fn len(&self) -> usize {
        self.len
    }
    fn va(&self) -> usize {
        self.ptr
    }
    fn write_at(&self, off: usize, data: &[u8]) {
        // SAFETY: the runtime checked `off + data.len() <= len`; `new`'s contract makes the
        // range writable; `data` is a distinct Rust slice (a caller cannot pass a slice of its
        // own attached buffer through the C API without breaking that contract).
        unsafe { std::ptr::copy(data.as_ptr(), (self.ptr as *mut u8).add(off), data.len()) };
    }
    fn read_at(&self, off: usize, out: &mut [u8]) {
        // SAFETY: as in `write_at`: in bounds and readable.
        unsafe { std::ptr::copy((self.ptr as *const u8).add(off), out.as_mut_ptr(), out.len()) };
    }
}
