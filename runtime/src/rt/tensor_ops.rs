//! Tensor operations beyond read/write: views (slices), caller-owned storage, empty tensors,
//! copies, fills, placement queries and the output-completion counter — libnrt's
//! `nrt_tensor_allocate_slice`, `nrt_tensor_allocate_empty`, `nrt_tensor_attach_buffer`,
//! `nrt_tensor_copy`, `nrt_tensor_memset`, `nrt_tensor_get_va`,
//! `nrt_tensor_get_device_allocation_info` and `nrt_tensor_{check,reset}_output_completion`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use hal::{Device, Xfer};

use super::{RtError, Tensor, TensorMem};
use crate::error::{RtErrorKind, TensorAccess};

/// Caller memory behind an attached buffer (`nrt_tensor_attach_buffer`). The C ABI
/// implements it over the caller's pointer (the only place that may touch raw memory);
/// offsets it receives are already checked against [`CallerMemory::len`].
pub trait CallerMemory: Send + Sync {
    /// Bytes available.
    fn len(&self) -> usize;
    /// Whether the buffer is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The buffer's address in the caller's address space (`nrt_tensor_get_va`).
    fn va(&self) -> usize;
    /// Copy `data` in at `off` (`off + data.len() <= len()`).
    fn write_at(&self, off: usize, data: &[u8]);
    /// Copy out at `off` (`off + out.len() <= len()`).
    fn read_at(&self, off: usize, out: &mut [u8]);
}

/// Caller memory used as a tensor's storage. The caller keeps it valid for the tensor's
/// lifetime (nrt.h's contract for attached buffers).
pub struct UserBuf {
    mem: Box<dyn CallerMemory>,
}

impl UserBuf {
    /// Use `mem` as a tensor's storage.
    pub fn new(mem: Box<dyn CallerMemory>) -> Self {
        Self { mem }
    }

    fn range(&self, off: u64, len: usize) -> Result<usize, RtError> {
        let size = self.mem.len();
        match usize::try_from(off).ok().and_then(|o| o.checked_add(len).map(|e| (o, e))) {
            Some((o, e)) if e <= size => Ok(o),
            _ => Err(RtError::from(RtErrorKind::AttachedRange { off, len, size })),
        }
    }

    /// Copy `data` in at `off`.
    pub fn write(&self, off: u64, data: &[u8]) -> Result<(), RtError> {
        let o = self.range(off, data.len())?;
        self.mem.write_at(o, data);
        Ok(())
    }

    /// Copy out at `off`.
    pub fn read(&self, off: u64, out: &mut [u8]) -> Result<(), RtError> {
        let o = self.range(off, out.len())?;
        self.mem.read_at(o, out);
        Ok(())
    }
}

/// Refuse tensors a DMA engine cannot reach (caller memory, no storage) as execution inputs
/// or outputs.
pub fn check_dma(t: &Tensor) -> Result<(), RtError> {
    if t.dma_capable() {
        Ok(())
    } else {
        Err(not_dma(t))
    }
}

/// [`check_dma`]'s refusal, out of line (it is on the execute path's bind).
#[cold]
#[inline(never)]
fn not_dma(t: &Tensor) -> RtError {
    RtError::from(RtErrorKind::NotDmaCapable { tensor: t.name.clone() })
}

/// Chunk size of host-bounced copies and fills.
const CHUNK: usize = 1 << 20;

/// Device placement of a device tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceAllocation {
    /// Device address of byte 0.
    pub addr: u64,
    /// Bytes of the underlying allocation (≥ the tensor's size for a whole tensor).
    pub len: u64,
    /// HBM channel.
    pub hbm: usize,
}

impl Tensor {
    /// A tensor without storage on `dev` (size 0).
    pub fn empty(dev: Device, name: &str) -> Arc<Tensor> {
        Arc::new(Tensor {
            name: name.to_string(),
            size: 0,
            mem: TensorMem::Empty,
            dev,
            nc: 0,
            completions: AtomicU64::new(0),
            _acct: None,
        })
    }

    /// This tensor with `buf` as its storage (`nrt_tensor_attach_buffer`): a new tensor of
    /// the same name, device and NC; the old storage is released when the old tensor is.
    pub fn with_user_buffer(&self, buf: UserBuf) -> Arc<Tensor> {
        Arc::new(Tensor {
            name: self.name.clone(),
            size: buf.mem.len() as u64,
            mem: TensorMem::User(buf),
            dev: self.dev.clone(),
            nc: self.nc,
            completions: AtomicU64::new(0),
            _acct: None,
        })
    }

    /// A view of `size` bytes at `offset` of `parent` (no copy).
    pub fn slice(parent: &Arc<Tensor>, offset: u64, size: u64, name: &str) -> Result<Arc<Tensor>, RtError> {
        if offset.checked_add(size).is_none_or(|e| e > parent.size) {
            return Err(RtError::from(RtErrorKind::TensorRange {
                access: TensorAccess::Slice,
                tensor: parent.name.clone(),
                off: offset,
                len: size,
                size: parent.size,
            }));
        }
        if matches!(parent.mem, TensorMem::Empty) {
            return Err(RtError::from(RtErrorKind::NoStorage { tensor: parent.name.clone() }));
        }
        Ok(Arc::new(Tensor {
            name: name.to_string(),
            size,
            mem: TensorMem::Slice { parent: parent.clone(), offset },
            dev: parent.dev.clone(),
            nc: parent.nc,
            completions: AtomicU64::new(0),
            _acct: None,
        }))
    }

    /// Whether a DMA engine can reach the bytes (host DMA memory or device memory).
    pub fn dma_capable(&self) -> bool {
        match &self.mem {
            TensorMem::Host(_) | TensorMem::Device(_) => true,
            TensorMem::Slice { parent, .. } => parent.dma_capable(),
            TensorMem::User(_) | TensorMem::Empty => false,
        }
    }

    /// Whether the tensor has no storage.
    pub fn is_empty_storage(&self) -> bool {
        matches!(self.mem, TensorMem::Empty)
    }

    /// NC (on the tensor's device) it was allocated for.
    pub fn nc(&self) -> usize {
        self.nc
    }

    /// Whether the tensor lives on `dev`.
    pub fn on_device(&self, dev: &Device) -> bool {
        self.dev.same(dev)
    }

    /// Whether `other` lives on the same device.
    pub fn same_device(&self, other: &Tensor) -> bool {
        self.dev.same(&other.dev)
    }

    /// Host virtual address of byte 0 — host DMA memory and attached buffers; None for
    /// device memory (not mapped into the process) and empty tensors.
    pub fn host_va(&self) -> Option<*mut u8> {
        match &self.mem {
            TensorMem::Host(b) => Some(b.host_ptr()),
            TensorMem::User(u) => Some(u.mem.va() as *mut u8),
            TensorMem::Slice { parent, offset } => {
                parent.host_va().map(|p| p.wrapping_add(usize::try_from(*offset).unwrap_or(usize::MAX)))
            }
            TensorMem::Device(_) | TensorMem::Empty => None,
        }
    }

    /// Device placement (None for tensors not in device memory).
    pub fn device_allocation(&self) -> Option<DeviceAllocation> {
        match &self.mem {
            TensorMem::Device(d) => Some(DeviceAllocation { addr: d.addr(), len: d.len(), hbm: d.chan() }),
            TensorMem::Slice { parent, offset } => parent.device_allocation().map(|a| DeviceAllocation {
                addr: a.addr + offset,
                len: self.size,
                hbm: a.hbm,
            }),
            _ => None,
        }
    }

    /// Executions that wrote this tensor as an output since the last reset.
    pub fn completions(&self) -> u64 {
        self.completions.load(Ordering::Acquire)
    }

    /// Reset the output-completion counter.
    pub fn reset_completions(&self) {
        self.completions.store(0, Ordering::Release);
    }

    /// Fill `len` bytes at `off` with `byte`.
    pub fn fill(&self, off: u64, len: u64, byte: u8) -> Result<(), RtError> {
        if off.checked_add(len).is_none_or(|e| e > self.size) {
            return Err(RtError::from(RtErrorKind::TensorRange {
                access: TensorAccess::Memset,
                tensor: self.name.clone(),
                off,
                len,
                size: self.size,
            }));
        }
        let chunk = vec![byte; (len as usize).min(CHUNK)];
        let mut done = 0u64;
        while done < len {
            let n = (len - done).min(chunk.len() as u64) as usize;
            self.write(off + done, &chunk[..n])?;
            done += n as u64;
        }
        Ok(())
    }
}

/// Copy `size` bytes from `src` at `src_off` to `dst` at `dst_off` (`nrt_tensor_copy`). Two
/// device tensors must be on the same NC; DMA-reachable tensors of one device are copied by
/// the device's DMA engine, anything else is bounced through host memory.
pub fn copy(src: &Tensor, src_off: u64, dst: &Tensor, dst_off: u64, size: u64) -> Result<(), RtError> {
    if src_off.checked_add(size).is_none_or(|e| e > src.size) {
        return Err(RtError::from(RtErrorKind::TensorRange {
            access: TensorAccess::CopySource,
            tensor: src.name.clone(),
            off: src_off,
            len: size,
            size: src.size,
        }));
    }
    if dst_off.checked_add(size).is_none_or(|e| e > dst.size) {
        return Err(RtError::from(RtErrorKind::TensorRange {
            access: TensorAccess::CopyDestination,
            tensor: dst.name.clone(),
            off: dst_off,
            len: size,
            size: dst.size,
        }));
    }
    let (sd, dd) = (src.device_allocation().is_some(), dst.device_allocation().is_some());
    if sd && dd && (!src.same_device(dst) || src.nc != dst.nc) {
        return Err(RtError::from(RtErrorKind::DifferentNcs { src: src.name.clone(), dst: dst.name.clone() }));
    }
    if size == 0 {
        return Ok(());
    }
    if src.dma_capable() && dst.dma_capable() && src.same_device(dst) {
        let x = Xfer { src: src.dev_addr() + src_off, dst: dst.dev_addr() + dst_off, len: size };
        src.dev.copy(src.nc, &[x])?;
        return Ok(());
    }
    let mut buf = vec![0u8; (size as usize).min(CHUNK)];
    let mut done = 0u64;
    while done < size {
        let n = (size - done).min(buf.len() as u64) as usize;
        src.read(src_off + done, &mut buf[..n])?;
        dst.write(dst_off + done, &buf[..n])?;
        done += n as u64;
    }
    Ok(())
}
