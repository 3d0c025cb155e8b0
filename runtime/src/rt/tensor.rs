//! Tensors (named bytes in host DMA memory or device memory), tensor sets, and their
//! allocation on the device of a global NC.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use hal::{DevBuf, Device, HostBuf};

use super::{RtError, RtErrorKind, Runtime};
use crate::error::TensorAccess;

/// Where a tensor lives.
pub enum TensorMem {
    Host(HostBuf),
    Device(DevBuf),
    /// A view of another tensor's bytes (`nrt_tensor_allocate_slice`).
    Slice {
        parent: Arc<Tensor>,
        offset: u64,
    },
    /// Caller memory (`nrt_tensor_attach_buffer`): no device address.
    User(super::tensor_ops::UserBuf),
    /// No storage (`nrt_tensor_allocate_empty`).
    Empty,
}

/// A tensor: named bytes in host DMA memory or device memory.
pub struct Tensor {
    pub name: String,
    pub size: u64,
    pub(crate) mem: TensorMem,
    pub(crate) dev: Device,
    /// NC (local to `dev`) the tensor was allocated for.
    pub(crate) nc: usize,
    /// Executions that wrote this tensor as an output (`nrt_tensor_check_output_completion`).
    pub(crate) completions: AtomicU64,
    /// The tensor reported to the observers (monitoring), its release reported on drop.
    pub(crate) _acct: Option<crate::observe::TensorAcct>,
}

impl Tensor {
    /// Device address (host window bit included for host tensors).
    pub fn dev_addr(&self) -> u64 {
        match &self.mem {
            TensorMem::Host(b) => self.dev.host_addr(b),
            TensorMem::Device(d) => d.addr(),
            TensorMem::Slice { parent, offset } => parent.dev_addr() + offset,
            TensorMem::User(_) | TensorMem::Empty => 0,
        }
    }
    /// Whether the tensor is in host memory.
    pub fn is_host(&self) -> bool {
        match &self.mem {
            TensorMem::Host(_) | TensorMem::User(_) => true,
            TensorMem::Slice { parent, .. } => parent.is_host(),
            TensorMem::Device(_) | TensorMem::Empty => false,
        }
    }
    /// Write `data` at `off`.
    pub fn write(&self, off: u64, data: &[u8]) -> Result<(), RtError> {
        if off.checked_add(data.len() as u64).is_none_or(|e| e > self.size) {
            return Err(RtError::from(RtErrorKind::TensorRange {
                access: TensorAccess::Write,
                tensor: self.name.clone(),
                off,
                len: data.len() as u64,
                size: self.size,
            }));
        }
        match &self.mem {
            TensorMem::Host(b) => b.write(off as usize, data)?,
            TensorMem::Device(d) => self.dev.write_device(self.nc, d.addr() + off, data)?,
            TensorMem::Slice { parent, offset } => parent.write(offset + off, data)?,
            TensorMem::User(u) => u.write(off, data)?,
            TensorMem::Empty => {}
        }
        Ok(())
    }
    /// Read into `out` from `off`.
    pub fn read(&self, off: u64, out: &mut [u8]) -> Result<(), RtError> {
        if off.checked_add(out.len() as u64).is_none_or(|e| e > self.size) {
            return Err(RtError::from(RtErrorKind::TensorRange {
                access: TensorAccess::Read,
                tensor: self.name.clone(),
                off,
                len: out.len() as u64,
                size: self.size,
            }));
        }
        match &self.mem {
            TensorMem::Host(b) => b.read(off as usize, out)?,
            TensorMem::Device(d) => self.dev.read_device(self.nc, d.addr() + off, out)?,
            TensorMem::Slice { parent, offset } => parent.read(offset + off, out)?,
            TensorMem::User(u) => u.read(off, out)?,
            TensorMem::Empty => {}
        }
        Ok(())
    }
    /// The whole tensor.
    pub fn to_vec(&self) -> Result<Vec<u8>, RtError> {
        let mut v = vec![0u8; self.size as usize];
        self.read(0, &mut v)?;
        Ok(v)
    }
}

/// Named tensors bound to a model's inputs or outputs.
#[derive(Default, Clone)]
pub struct TensorSet {
    tensors: Vec<(String, Arc<Tensor>)>,
}

impl TensorSet {
    pub fn new() -> Self {
        Self::default()
    }
    /// Bind `t` under `name` (replacing an earlier binding).
    pub fn add(&mut self, name: &str, t: Arc<Tensor>) {
        self.tensors.retain(|(n, _)| n != name);
        self.tensors.push((name.to_string(), t));
    }
    /// The tensor bound to `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<Tensor>> {
        self.tensors.iter().find(|(n, _)| n == name).map(|(_, t)| t)
    }
    /// Number of tensors.
    pub fn len(&self) -> usize {
        self.tensors.len()
    }
    pub fn is_empty(&self) -> bool {
        self.tensors.is_empty()
    }
}

impl Runtime {
    /// Allocate a tensor for logical NC `vnc` (host DMA memory or HBM of its device). Its
    /// I/O runs on that NC's host-transfer ring.
    pub fn alloc_tensor(&self, name: &str, size: u64, on_device: bool, vnc: usize) -> Result<Arc<Tensor>, RtError> {
        self.guard()?;
        let session = self.current()?;
        let nc = session.global_nc(vnc)?;
        let (dev, local) = session.device_of(nc).ok_or_else(|| RtError::from(RtErrorKind::NoDeviceForNc { nc }))?;
        // No memory can hold more than isize::MAX bytes; refuse before any size is rounded.
        if size > isize::MAX as u64 {
            return Err(RtError::from(RtErrorKind::TensorTooLarge { name: name.to_string(), size }));
        }
        // Both allocators hand out zeroed memory: a tensor never shows an earlier owner's bytes.
        let mem = if on_device {
            TensorMem::Device(dev.alloc_device(dev.hbm_for_nc(local), size.max(1), 64)?)
        } else {
            TensorMem::Host(dev.alloc_host(size.max(1) as usize, 64)?)
        };
        let acct = session.observers.tensor(nc, size, on_device);
        Ok(Arc::new(Tensor {
            name: name.to_string(),
            size,
            mem,
            dev,
            nc: local,
            completions: AtomicU64::new(0),
            _acct: acct,
        }))
    }
}
