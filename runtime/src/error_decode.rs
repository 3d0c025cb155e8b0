//! TPB error-ring decode (docs/facts/libnrt-runtime-model.md §A.4.5 `v2_error_get_infer_error_subtype`, docs/facts/libnrt-runtime-model.md §B.4
//! `notification_consume_error_block`, docs/facts/libnrt.md §5.5).
//!
//! Record → `INFER_ERROR_SUBTYPE`:
//! * `error_id > 11` → NONE.
//! * `error_id == 4` (MEMORY_ERROR): `mask = record bits 23:8` (= `metadata_lo`);
//!   `mask & 0xFD6B != 0` → MEMORY_ERROR (3) else TRANSIENT (2).
//! * `error_id == 1` (FP_NAN): NUMERICAL (1) iff `mask & !(dve_spurious_mask | 0x7E00) != 0`,
//!   else NONE. docs/facts/libnrt-runtime-model.md §A.4.5 gives the formula for SUNDA only and elides the per-arch mask value
//!   and the CAYMAN/MARIANA branches; we apply the same formula on every arch with a
//!   configurable mask ([`ErrorDecodeConfig::dve_spurious_mask`], default 0).
//! * otherwise the SUNDA remap table `{0,1,0,0,3,4,5,6,7,2,8,0}`.
//!
//! Subtype → status: NUMERICAL → 1003; TRANSIENT, MEMORY_ERROR, SW_FAKE, SW_SEMAPHORE,
//! SW_EVENT, SW_PSUM_COLLISION, SW_SEQUENCER → 1004; NONE → no status.
//!
//! The error ring also carries NeuronCore memory ECC records (libnrt's consume stage: a
//! corrected error is logged, an uncorrectable one is NRT_EXEC_HW_ERR_NC_UE, 1202, with the
//! "Uncorrectable memory error … metadata" message). They are told apart by their notific
//! type (`ntype::ECC`, an encoding the public sources do not give: modeled, docs/records.md
//! §1) and never go through the subtype table. 1202 is fatal: once seen, later subtype records
//! of the block no longer change its status.
//!
//! Within one NC's error block libnrt de-duplicates by subtype (`already_logged[]`) and each
//! first occurrence *assigns* the block status, so the last newly-seen subtype decides the
//! block's status ([`ErrorBlock`]). The block status is then merged into the NC's result by
//! priority (see `completion`).

use crate::status::NrtStatus;
use csr_maps::formats::error::TpbErrorRecord;
use neff::Arch;

/// `INFER_ERROR_SUBTYPE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum InferErrorSubtype {
    None = 0,
    Numerical = 1,
    Transient = 2,
    MemoryError = 3,
    SwFakeError = 4,
    SwSemaphoreError = 5,
    SwEventError = 6,
    SwPsumCollisionError = 7,
    SwSequencerError = 8,
}

/// `INFER_ERROR_SUBTYPE_MAX`: the size of the per-NC `kbl_infer_errors.infer_error_flags`.
pub const INFER_ERROR_SUBTYPE_MAX: usize = 9;

/// SUNDA `error_id → subtype` table (ids 0..=11).
pub const SUNDA_ERROR_SUBTYPES: [u8; 12] = [0, 1, 0, 0, 3, 4, 5, 6, 7, 2, 8, 0];

/// The mask bit of an ECC record that makes it uncorrectable (modeled, csr-maps).
pub use csr_maps::consts::seq::error_mask::ECC_UNCORRECTABLE;
/// Mask bits of a MEMORY_ERROR record that make it a memory error rather than transient
/// (defined with the record format in csr-maps).
pub use csr_maps::formats::error::MEMORY_ERROR_MASK;
/// Mask bits always ignored when deciding whether an FP_NAN record is numerical (defined with
/// the record format in csr-maps).
pub use csr_maps::formats::error::NAN_IGNORED_MASK;
/// The notific type of an NC memory ECC record (modeled, defined with the record types in
/// csr-maps).
pub use csr_maps::formats::notify::ntype::ECC as ECC_RECORD;

impl InferErrorSubtype {
    /// From the numeric value (0..=8).
    pub fn from_value(v: u8) -> Option<Self> {
        use InferErrorSubtype::*;
        Some(match v {
            0 => None,
            1 => Numerical,
            2 => Transient,
            3 => MemoryError,
            4 => SwFakeError,
            5 => SwSemaphoreError,
            6 => SwEventError,
            7 => SwPsumCollisionError,
            8 => SwSequencerError,
            _ => return Option::None,
        })
    }
    /// Index into the per-NC flag row.
    pub fn index(self) -> usize {
        self as usize
    }
    /// The status this subtype sets (None for NONE).
    pub fn status(self) -> Option<NrtStatus> {
        match self {
            InferErrorSubtype::None => None,
            InferErrorSubtype::Numerical => Some(NrtStatus::ExecCompletedWithNumErr),
            _ => Some(NrtStatus::ExecCompletedWithErr),
        }
    }
}

/// Decoder parameters libnrt's description leaves open (docs/facts/libnrt-runtime-model.md §A.4.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ErrorDecodeConfig {
    /// `*_NOTIFICATION_DVE_SPRUIOUS_ERROR_MASK` (value not given in docs/facts/libnrt-runtime-model.md §A.4.5; default 0).
    pub dve_spurious_mask: u16,
}

/// `v2_error_get_infer_error_subtype`.
pub fn infer_error_subtype(rec: &TpbErrorRecord, _arch: &Arch, cfg: &ErrorDecodeConfig) -> InferErrorSubtype {
    let id = rec.error_id;
    let mask = rec.metadata_lo;
    if id > 11 {
        return InferErrorSubtype::None;
    }
    if id == 4 {
        return if mask & MEMORY_ERROR_MASK != 0 {
            InferErrorSubtype::MemoryError
        } else {
            InferErrorSubtype::Transient
        };
    }
    if id == 1 {
        return if mask & !(cfg.dve_spurious_mask | NAN_IGNORED_MASK) != 0 {
            InferErrorSubtype::Numerical
        } else {
            InferErrorSubtype::None
        };
    }
    InferErrorSubtype::from_value(SUNDA_ERROR_SUBTYPES[id as usize]).unwrap_or(InferErrorSubtype::None)
}

/// One NC's error-block consumption state (`notification_consume_error_block`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ErrorBlock {
    /// `already_logged` / `infer_error_flags`: subtypes seen.
    pub flags: [bool; INFER_ERROR_SUBTYPE_MAX],
    /// Block status (None = success).
    pub status: Option<NrtStatus>,
    /// Records consumed.
    pub records: u64,
    /// An uncorrectable NC memory ECC record was seen (status 1202).
    pub nc_ue: bool,
    /// Corrected NC memory ECC records seen (logged only).
    pub ecc_corrected: u64,
}

impl ErrorBlock {
    /// Fresh state.
    pub fn new() -> Self {
        Self::default()
    }
    /// Consume one record.
    pub fn consume(&mut self, rec: &TpbErrorRecord, arch: &Arch, cfg: &ErrorDecodeConfig) -> InferErrorSubtype {
        self.records += 1;
        if crate::records::header(rec.header).ntype == ECC_RECORD {
            if rec.metadata_lo & ECC_UNCORRECTABLE == 0 {
                self.ecc_corrected += 1;
                tracing::warn!(metadata = rec.metadata_hi, "Correctable memory error is detected");
            } else if !self.nc_ue {
                self.nc_ue = true;
                self.status = Some(NrtStatus::ExecHwErrNcUe);
                tracing::error!(
                    "(FATAL-RT-UNDEFINED-STATE) Uncorrectable memory error is detected, metadata: {:#x}",
                    rec.metadata_hi
                );
            }
            return InferErrorSubtype::None;
        }
        let sub = infer_error_subtype(rec, arch, cfg);
        if sub == InferErrorSubtype::None || self.flags[sub.index()] {
            return sub;
        }
        self.flags[sub.index()] = true;
        if !self.nc_ue {
            self.status = sub.status();
        }
        tracing::warn!(error_id = rec.error_id, subtype = ?sub, metadata = rec.metadata_lo, "TPB error notification");
        sub
    }
    /// Has this subtype been seen?
    pub fn seen(&self, sub: InferErrorSubtype) -> bool {
        self.flags[sub.index()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(id: u8, mask: u16) -> TpbErrorRecord {
        TpbErrorRecord { error_id: id, metadata_lo: mask, ..Default::default() }
    }

    #[test]
    fn table_and_special_cases() {
        let c = ErrorDecodeConfig::default();
        let s = |id, m| infer_error_subtype(&rec(id, m), &csr_maps::SUNDA, &c) as u8;
        assert_eq!(
            (0..12)
                .map(|id| if id == 1 || id == 4 { SUNDA_ERROR_SUBTYPES[id as usize] } else { s(id, 0) })
                .collect::<Vec<_>>(),
            SUNDA_ERROR_SUBTYPES.to_vec()
        );
        assert_eq!(s(4, 0), 2);
        assert_eq!(s(4, 0x0001), 3);
        assert_eq!(s(4, 0x0294), 2); // bits outside 0xFD6B
        assert_eq!(s(1, 0), 0);
        assert_eq!(s(1, 0x7E00), 0);
        assert_eq!(s(1, 0x0001), 1);
        assert_eq!(s(12, 0xFFFF), 0);
        let c2 = ErrorDecodeConfig { dve_spurious_mask: 0x0001 };
        assert_eq!(infer_error_subtype(&rec(1, 0x0001), &csr_maps::SUNDA, &c2), InferErrorSubtype::None);
    }

    #[test]
    fn block_dedups_and_last_new_subtype_assigns() {
        let c = ErrorDecodeConfig::default();
        let mut b = ErrorBlock::new();
        b.consume(&rec(9, 0), &csr_maps::SUNDA, &c); // transient → 1004
        assert_eq!(b.status, Some(NrtStatus::ExecCompletedWithErr));
        b.consume(&rec(1, 1), &csr_maps::SUNDA, &c); // numerical → 1003
        assert_eq!(b.status, Some(NrtStatus::ExecCompletedWithNumErr));
        b.consume(&rec(9, 0), &csr_maps::SUNDA, &c); // already logged → unchanged
        assert_eq!(b.status, Some(NrtStatus::ExecCompletedWithNumErr));
        assert!(b.seen(InferErrorSubtype::Transient) && b.seen(InferErrorSubtype::Numerical));
        assert_eq!(b.records, 3);
    }

    #[test]
    fn ecc_records_take_their_own_lane() {
        let c = ErrorDecodeConfig::default();
        let ecc =
            |mask| TpbErrorRecord { error_id: 1, metadata_lo: mask, header: 0x80 | ECC_RECORD, ..Default::default() };
        let mut b = ErrorBlock::new();
        // A corrected error is only counted, whatever its error id byte says.
        assert_eq!(b.consume(&ecc(0), &csr_maps::SUNDA, &c), InferErrorSubtype::None);
        assert_eq!((b.status, b.ecc_corrected, b.nc_ue), (None, 1, false));
        b.consume(&rec(1, 1), &csr_maps::SUNDA, &c);
        assert_eq!(b.status, Some(NrtStatus::ExecCompletedWithNumErr));
        b.consume(&ecc(ECC_UNCORRECTABLE), &csr_maps::SUNDA, &c);
        assert_eq!(b.status, Some(NrtStatus::ExecHwErrNcUe));
        // A later new subtype does not downgrade the fatal 1202.
        b.consume(&rec(9, 0), &csr_maps::SUNDA, &c);
        assert_eq!(b.status, Some(NrtStatus::ExecHwErrNcUe));
        assert!(b.nc_ue && b.seen(InferErrorSubtype::Transient));
    }
}
