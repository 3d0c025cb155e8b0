//! `NRT_STATUS` and the multi-NC status-priority mapper (docs/facts/libnrt-runtime-model.md §A.4.1, §A.4.2).
//!
//! [`priority_of_code`] is a bit-exact reconstruction of libnrt's `nrt_get_status_priority`:
//!
//! | code(s) | priority |
//! |---|---|
//! | 0 | NONE |
//! | 5, 6 | HIGH |
//! | 1..=1003 except 5, 6 | MEDIUM |
//! | 1004 | CRITICAL |
//! | 1005..=1203 | CRITICAL |
//! | 1200, 1204 | HIGH |
//! | 1205 | CRITICAL |
//! | 1206 | HIGH |
//! | > 1206 | MEDIUM |
//!
//! [`worst`] reconciles per-NC results the way the FINALIZE loop does: start from
//! `NRT_SUCCESS` and replace the running result only when a later status has a **strictly
//! greater** priority. On a tie the earlier status (the lower NC index) wins.

pub use nrt_status::{NrtStatus, Status};

/// `nrt_status_priority_t` (docs/facts/libnrt-runtime-model.md §A.4.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum Priority {
    /// `NRT_STATUS_PRIORITY_NONE` = 0.
    None = 0,
    /// `NRT_STATUS_PRIORITY_MEDIUM` = 1.
    Medium = 1,
    /// `NRT_STATUS_PRIORITY_HIGH` = 2.
    High = 2,
    /// `NRT_STATUS_PRIORITY_CRITICAL` = 3.
    Critical = 3,
}

impl Priority {
    /// The numeric enumerator value.
    pub fn value(self) -> u8 {
        self as u8
    }
}

/// `nrt_get_status_priority` on a raw status code (total over `u32`, like the unsigned
/// compares of the original).
pub fn priority_of_code(s: u32) -> Priority {
    const COMPLETED_WITH_ERR: u32 = 1004;
    const COLLECTIVES: u32 = 1200;
    const SW_NQ_OVERFLOW: u32 = 1204;
    const REPAIRABLE_HBM_UE: u32 = 1205;
    const NETWORK_PROXY: u32 = 1206;
    if s == COMPLETED_WITH_ERR {
        return Priority::Critical;
    }
    if s <= COMPLETED_WITH_ERR {
        if s == 0 {
            return Priority::None;
        }
        return if s.wrapping_sub(5) < 2 { Priority::High } else { Priority::Medium };
    }
    if s == REPAIRABLE_HBM_UE {
        return Priority::Critical;
    }
    if s > REPAIRABLE_HBM_UE {
        return if s == NETWORK_PROXY { Priority::High } else { Priority::Medium };
    }
    if s == SW_NQ_OVERFLOW || s == COLLECTIVES {
        Priority::High
    } else {
        Priority::Critical
    }
}

/// Priority of a status.
pub fn priority(s: NrtStatus) -> Priority {
    priority_of_code(s.code())
}

/// One step of the FINALIZE reconciliation: `candidate` replaces `current` only if its
/// priority is strictly greater.
pub fn worse(current: NrtStatus, candidate: NrtStatus) -> NrtStatus {
    if priority(candidate) > priority(current) {
        candidate
    } else {
        current
    }
}

/// Reconcile several statuses (one per NC, in NC order) into the one libnrt returns.
/// Empty input gives `NRT_SUCCESS`; ties keep the earliest.
pub fn worst<I: IntoIterator<Item = NrtStatus>>(statuses: I) -> NrtStatus {
    statuses.into_iter().fold(NrtStatus::Success, worse)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boundary_codes() {
        assert_eq!(priority_of_code(0), Priority::None);
        assert_eq!(priority_of_code(4), Priority::Medium);
        assert_eq!(priority_of_code(5), Priority::High);
        assert_eq!(priority_of_code(6), Priority::High);
        assert_eq!(priority_of_code(7), Priority::Medium);
        assert_eq!(priority_of_code(1003), Priority::Medium);
        assert_eq!(priority_of_code(1004), Priority::Critical);
        assert_eq!(priority_of_code(1005), Priority::Critical);
        assert_eq!(priority_of_code(1199), Priority::Critical);
        assert_eq!(priority_of_code(1200), Priority::High);
        assert_eq!(priority_of_code(1204), Priority::High);
        assert_eq!(priority_of_code(1205), Priority::Critical);
        assert_eq!(priority_of_code(1206), Priority::High);
        assert_eq!(priority_of_code(1207), Priority::Medium);
        assert_eq!(priority_of_code(u32::MAX), Priority::Medium);
        assert_eq!(Priority::Critical.value(), 3);
    }
}
