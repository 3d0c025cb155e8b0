//! Register values the device publishes to other processes: the registers the driver reads
//! on the execute path of a shared device (every NC's interrupt controller, `nc_intc`: the
//! fatal causes at the end of an execution, the overflow line), kept in shared memory so that
//! a client of the device's host reads them without a message (docs/sharing.md, "What an
//! execute costs").
//!
//! The words are a [`platform::Publisher`] (a sequence lock, one 32-bit word per register, in
//! the order of [`RegisterMirror::offsets`]). The device opens a change whenever it takes its
//! state lock and closes it when it releases it, republishing the groups whose registers
//! changed ([`crate::regfile`]) in between: a reader sees the registers as a read under the
//! lock would — between two critical sections, never in one — and a reader that has seen a
//! notification record the device wrote in a critical section sees that section's register
//! changes. Only registers whose reads have no side effect and no block-specific value are
//! published (each is what `Dev::generic_read` returns).

use std::os::fd::{BorrowedFd, OwnedFd};

use csr_maps::{InstanceId, RegId};
use platform::{Publisher, SharedMemError};

use crate::decode::{Decoder, Hit};

/// The published registers and their memory.
pub(crate) struct Mirror {
    out: Publisher,
    /// Per group (NC): its registers and their data word indices.
    pub groups: Vec<Vec<(usize, Hit)>>,
    /// Every published register's BAR0 offset, by data word.
    offsets: Vec<u64>,
}

impl Mirror {
    /// The registers of every NC's interrupt controller, each NC a group.
    pub fn new(dec: &Decoder, ncs: usize) -> Result<Self, SharedMemError> {
        let mut groups = Vec::new();
        let mut offsets = Vec::new();
        for nc in 0..ncs {
            let mut g = Vec::new();
            if let Some((start, end)) = dec.span(InstanceId::NcIntc, nc as u32) {
                for off in (start..end).step_by(4) {
                    if let Some(hit) = dec.decode(off).filter(|h| matches!(h.id, RegId::NcIntc(..))) {
                        g.push((offsets.len(), hit));
                        offsets.push(off);
                    }
                }
            }
            groups.push(g);
        }
        let out = Publisher::create(offsets.len().max(1))?;
        Ok(Self { out, groups, offsets })
    }

    /// Every published offset with its group, for the register file's watch list.
    pub fn watched(&self) -> Vec<(u64, usize)> {
        self.groups.iter().enumerate().flat_map(|(g, regs)| regs.iter().map(move |(_, h)| (h.off, g))).collect()
    }

    pub fn begin(&self) {
        self.out.begin();
    }

    pub fn store(&self, word: usize, v: u32) {
        self.out.store(word, v);
    }

    pub fn end(&self) {
        self.out.end();
    }

    /// What a reader in another process needs.
    pub fn handle(&self) -> std::io::Result<RegisterMirror> {
        Ok(RegisterMirror { fd: self.out.fd().try_clone_to_owned()?, offsets: self.offsets.clone() })
    }
}

/// The registers a device publishes, as a reader maps them: the descriptor of the memory
/// (mappable read-only only; a [`platform::Subscriber`] of [`RegisterMirror::offsets`]`.len()`
/// words) and the BAR0 offset of each data word, ascending.
#[derive(Debug)]
pub struct RegisterMirror {
    fd: OwnedFd,
    offsets: Vec<u64>,
}

impl RegisterMirror {
    /// The memory's descriptor.
    pub fn fd(&self) -> BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.fd.as_fd()
    }

    /// The BAR0 offset of each data word (32-bit registers), ascending.
    pub fn offsets(&self) -> &[u64] {
        &self.offsets
    }
}
