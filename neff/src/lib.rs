//! neff: the NEFF model container (docs/facts/libnrt.md §1-§2) — a streaming, hardened reader that
//! reproduces libnrt's gates and statuses, a writer/builder for pkg-2 NEFFs, and a
//! disassembler printing the producer's `.asm` syntax.
//!
//! ```text
//! bytes ─► header gates (2..7) ─► digest (8, parallel with inflate) ─► gzip inflate (capped)
//!       ─► tar walk (9) ─► neff.json/kelp.json (10) ─► KELF + target gate (11)
//!       ─► def.json per graph (12..15) ─► engine jsons, DMA blocks, 64-byte slots
//! ```
//!
//! One tar walk ([`stream`]) serves both readers: [`Neff::parse`] / [`Neff::parse_reader`] are
//! [`Neff::parse_streaming`] with a sink that takes no member, so they accept and refuse the same
//! bytes with the same status.
//!
//! Memory: the members' bodies live in one buffer (members and `.npy` weights are zero-copy
//! [`Blob`] slices of it) and the inflater may never produce more than
//! [`ReadOptions::mem_cap`] bytes ([`DEFAULT_MEM_CAP`] = 4 GiB), so a gzip bomb or a tar
//! header claiming a huge size is rejected with NRT_INVALID before anything that large is
//! allocated. [`Neff::parse_reader`] streams the compressed bytes in 1 MiB chunks; with
//! `verify` a second thread hashes them while the caller's thread inflates.
//!
//! Test models (feature `test-models`): `builder::single_nc_allreduce`,
//! `builder::two_nc_allreduce`, `builder::weights_model`.
#![forbid(unsafe_code)]

pub mod arch;
pub mod builder;
pub mod container;
pub mod disasm;
pub mod error;
pub mod header;
pub mod manifest;
pub mod model;
pub mod npy;
pub mod status;
pub mod stream;

use std::io::Read;

pub use arch::{arch_by_name, Arch, Target};
pub use container::{Blob, MemberInfo, ReadOptions, DEFAULT_MEM_CAP, STREAM_PREFIX};
pub use error::NeffError;
pub use header::NeffHeader;
pub use isa::slot::{Instruction, SpSlot};
pub use model::*;
pub use status::{NrtStatus, Status};
pub use stream::{MemberSink, SinkError};

impl Neff {
    /// Parses and validates a NEFF held in memory.
    pub fn parse(bytes: &[u8], opts: &ReadOptions) -> Result<Neff, NeffError> {
        Self::parse_reader(bytes, bytes.len() as u64, opts)
    }

    /// Parses a NEFF streamed from `r`, whose total length is `file_size` (e.g. a `File` and
    /// its metadata length). The compressed bytes are never held in memory at once.
    pub fn parse_reader<R: Read + Send>(r: R, file_size: u64, opts: &ReadOptions) -> Result<Neff, NeffError> {
        let c = stream::read_container(r, file_size, opts)?;
        manifest::build(&c, opts)
    }

    /// Parses a NEFF streamed from `r` (length `file_size`) with the bodies of the members
    /// `sink` wants sent to it in bounded chunks rather than held in host memory
    /// ([`stream`]); every gate and the manifest budget apply as in [`Neff::parse_reader`].
    /// A var whose weights were streamed carries [`Var::streamed`] instead of `data`.
    pub fn parse_streaming<R: Read + Send>(
        r: R,
        file_size: u64,
        opts: &ReadOptions,
        sink: &mut dyn MemberSink,
    ) -> Result<Neff, NeffError> {
        let c = stream::read_container_streaming(r, file_size, opts, sink)?;
        manifest::build(&c, opts)
    }

    /// A member's bytes (zero-copy), by stripped name (None for a streamed member).
    pub fn member(&self, name: &str) -> Option<Blob> {
        let m = self.members.iter().find(|m| m.name == name && !m.streamed)?;
        self.payload.slice(m.range.clone())
    }

    /// Bytes of the inflated payload.
    pub fn payload_len(&self) -> usize {
        self.payload.len()
    }
}
