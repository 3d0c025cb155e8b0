//! Typed reader errors; each maps to the `NRT_STATUS` libnrt returns for the same input.

use crate::status::{NrtStatus, Status};

/// Why a NEFF was rejected. [`NeffError::status`] gives the exact `NRT_STATUS`; the message
/// names the field and the values involved.
#[derive(Debug, thiserror::Error)]
pub enum NeffError {
    /// Gate 2 (docs/facts/libnrt.md §1.3): fewer than 1024 bytes.
    #[error("NEFF is {size} bytes, the header alone needs 1024")]
    TooShort { size: u64 },
    /// Gate 3: `header_size` not below the file size.
    #[error("header_size {header_size} is not below the file size {file_size}")]
    HeaderSize { header_size: u64, file_size: u64 },
    /// Gate 4: `neff_version_major` above 2.
    #[error("neff_version_major {major} (minor {minor}) not supported, accepted 0.x-2.x")]
    Version { major: u64, minor: u64 },
    /// Gate 5: trapdoor feature bits for major 2.
    #[error(
        "feature_bits {bits:#x} has bits {trapdoor:#x} in the mask 0x7FFFFFFFF8000000: compiled by a newer \
         compiler; runtime supports 0x7FFFFFF"
    )]
    FeatureBits { bits: u64, trapdoor: u64 },
    /// Gate 6.
    #[error("Invalid NEFF data size: data_size {data_size} exceeds file size {file_size} - 1024")]
    DataSize { data_size: u64, file_size: u64 },
    /// Gate 7.
    #[error("Unsupported NEFF packager: pkg_version {pkg_version} (accepted 1, 2)")]
    Packager { pkg_version: u64 },
    /// The digest input must be non-empty (libnrt asserts).
    #[error("data_size is 0: pkg_version {pkg_version} needs a non-empty payload")]
    EmptyData { pkg_version: u64 },
    /// Gate 8.
    #[error("{algo} mismatch! header hash {expected}, payload hashes to {actual}")]
    Digest { algo: &'static str, expected: String, actual: String },
    /// Gate 9: inflate or tar failure (truncation, bad CRC, bad header, inconsistent size...).
    #[error("archive: {0}")]
    Archive(String),
    /// The inflated payload would exceed the configured memory cap.
    #[error("inflated payload exceeds the memory cap of {cap} bytes (ReadOptions::mem_cap)")]
    MemCap { cap: u64 },
    /// A host allocation failed for a payload within the cap.
    #[error("host allocation of {bytes} bytes failed")]
    HostAlloc { bytes: u64 },
    /// Gate 10.
    #[error("neff.json is missing (no neff.json or kelp.json member)")]
    MissingNeffJson,
    /// A member referenced by a manifest is absent (and is not an optional one).
    #[error("member {name:?} referenced by {referrer} ({field}) is missing")]
    MissingMember { name: String, referrer: String, field: String },
    /// A manifest rule failed (gates 10-15 and the structural rules).
    #[error("{member}: {field}: {reason}")]
    Manifest { member: String, field: String, reason: String },
    /// Gate 11: a `target` that names no architecture.
    #[error("Invalid target {target:?} in {member}")]
    InvalidTarget { target: String, member: String },
    /// Gate 11: the NEFF targets another architecture.
    #[error("NEFF_ARCH_INCOMPAT: {member} target {target:?} is for {neff_arch}, this device is {device_arch}")]
    ArchIncompat { target: String, member: String, neff_arch: String, device_arch: String },
    /// The sink a large member was streamed to (device memory) refused it.
    #[error("streaming member {member:?}: {message}")]
    Sink { member: String, status: NrtStatus, message: String },
    /// Reading the source failed for a reason other than its content.
    #[error("reading the NEFF: {0}")]
    Io(std::io::Error),
}

impl NeffError {
    /// The `NRT_STATUS` libnrt returns for this failure (the one mapping; exhaustive, so a
    /// new variant must choose its status).
    pub fn status(&self) -> NrtStatus {
        match self {
            NeffError::Version { .. } | NeffError::FeatureBits { .. } | NeffError::Packager { .. } => {
                NrtStatus::UnsupportedNeffVersion
            }
            NeffError::HostAlloc { .. } => NrtStatus::FailHostMemAlloc,
            NeffError::Io(_) => NrtStatus::Failure,
            NeffError::Sink { status, .. } => *status,
            NeffError::TooShort { .. }
            | NeffError::HeaderSize { .. }
            | NeffError::DataSize { .. }
            | NeffError::EmptyData { .. }
            | NeffError::Digest { .. }
            | NeffError::Archive(_)
            | NeffError::MemCap { .. }
            | NeffError::MissingNeffJson
            | NeffError::MissingMember { .. }
            | NeffError::Manifest { .. }
            | NeffError::InvalidTarget { .. }
            | NeffError::ArchIncompat { .. } => NrtStatus::Invalid,
        }
    }

    pub(crate) fn manifest(member: &str, field: &str, reason: impl Into<String>) -> Self {
        NeffError::Manifest { member: member.to_string(), field: field.to_string(), reason: reason.into() }
    }
}

impl Status for NeffError {
    fn status(&self) -> NrtStatus {
        NeffError::status(self)
    }
}
