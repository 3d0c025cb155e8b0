//! `NRT_STATUS`, libnrt's single flat status enum (docs/facts/libnrt-runtime-model.md §A.4.1,
//! docs/facts/libnrt.md §5.6), and [`Status`]: the one way any error of the workspace names
//! the status a front end returns for it.
//!
//! This crate is a leaf (no dependencies) so that every layer — csr-maps, hal, neff, select,
//! fabric, the runtime — can give its error type a `status()` and every front end (the CLI's
//! `--json` status and exit code, libnrt.so's return codes) reads that one mapping instead of
//! matching foreign error types itself. The mapping decisions are recorded in
//! docs/facts/libnrt.md ("Which status each error maps to").

/// An error that knows the `NRT_STATUS` libnrt returns for it.
///
/// Each error type has exactly one mapping (an exhaustive `match` in its own crate); front ends
/// use it, never a match of their own.
pub trait Status {
    /// The status a front end reports for this error.
    fn status(&self) -> NrtStatus;
}

impl<T: Status + ?Sized> Status for Box<T> {
    fn status(&self) -> NrtStatus {
        (**self).status()
    }
}

impl<T: Status + ?Sized> Status for &T {
    fn status(&self) -> NrtStatus {
        (**self).status()
    }
}

impl Status for NrtStatus {
    fn status(&self) -> NrtStatus {
        *self
    }
}

macro_rules! statuses {
    ($( $(#[$m:meta])* $var:ident = $code:literal => $name:literal, )*) => {
        /// libnrt's `NRT_STATUS` (28 values). The runtime re-exports it.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum NrtStatus {
            $( $(#[$m])* $var, )*
        }

        impl NrtStatus {
            /// Every status, in code order.
            pub const ALL: &'static [NrtStatus] = &[$(NrtStatus::$var,)*];

            /// The numeric `NRT_STATUS` value.
            pub fn code(self) -> u32 {
                match self {
                    $( NrtStatus::$var => $code, )*
                }
            }

            /// The C enumerator name, e.g. `"NRT_UNSUPPORTED_NEFF_VERSION"`.
            pub fn name(self) -> &'static str {
                match self {
                    $( NrtStatus::$var => $name, )*
                }
            }

            /// The status with this code, if libnrt defines one.
            pub fn from_code(code: u32) -> Option<Self> {
                match code {
                    $( $code => Some(NrtStatus::$var), )*
                    _ => None,
                }
            }

            /// The status with this C name.
            pub fn from_name(name: &str) -> Option<Self> {
                match name {
                    $( $name => Some(NrtStatus::$var), )*
                    _ => None,
                }
            }
        }
    };
}

statuses! {
    /// Call succeeded.
    Success = 0 => "NRT_SUCCESS",
    /// Generic unspecified failure.
    Failure = 1 => "NRT_FAILURE",
    /// Invalid argument / malformed input (e.g. NEFF).
    Invalid = 2 => "NRT_INVALID",
    /// Bad model handle.
    InvalidHandle = 3 => "NRT_INVALID_HANDLE",
    /// Out of a device resource.
    Resource = 4 => "NRT_RESOURCE",
    /// A wait timed out.
    Timeout = 5 => "NRT_TIMEOUT",
    /// Generic hardware error.
    HwError = 6 => "NRT_HW_ERROR",
    /// Submission queue full.
    QueueFull = 7 => "NRT_QUEUE_FULL",
    /// Load: too few NeuronCores.
    LoadNotEnoughNc = 9 => "NRT_LOAD_NOT_ENOUGH_NC",
    /// Load: NEFF version / packager / feature-bits gate failed.
    UnsupportedNeffVersion = 10 => "NRT_UNSUPPORTED_NEFF_VERSION",
    /// Host allocation failure.
    FailHostMemAlloc = 11 => "NRT_FAIL_HOST_MEM_ALLOC",
    /// API called before `nrt_init`.
    Uninitialized = 13 => "NRT_UNINITIALIZED",
    /// API called after `nrt_close`.
    Closed = 14 => "NRT_CLOSED",
    /// Async poll: no completion ready.
    QueueEmpty = 15 => "NRT_QUEUE_EMPTY",
    /// The execution unit is permanently wedged.
    ExecUnitUnrecoverable = 101 => "NRT_EXEC_UNIT_UNRECOVERABLE",
    /// Bad input tensor.
    ExecBadInput = 1002 => "NRT_EXEC_BAD_INPUT",
    /// Completed with numerical errors.
    ExecCompletedWithNumErr = 1003 => "NRT_EXEC_COMPLETED_WITH_NUM_ERR",
    /// Completed but flagged an error.
    ExecCompletedWithErr = 1004 => "NRT_EXEC_COMPLETED_WITH_ERR",
    /// The NeuronCore is busy.
    ExecNcBusy = 1005 => "NRT_EXEC_NC_BUSY",
    /// Out-of-bounds access.
    ExecOob = 1006 => "NRT_EXEC_OOB",
    /// Collectives still pending.
    CollPending = 1100 => "NRT_COLL_PENDING",
    /// Collectives / fabric hardware fault.
    ExecHwErrCollectives = 1200 => "NRT_EXEC_HW_ERR_COLLECTIVES",
    /// Uncorrectable HBM error.
    ExecHwErrHbmUe = 1201 => "NRT_EXEC_HW_ERR_HBM_UE",
    /// Uncorrectable NeuronCore memory error.
    ExecHwErrNcUe = 1202 => "NRT_EXEC_HW_ERR_NC_UE",
    /// DMA engine aborted.
    ExecHwErrDmaAbort = 1203 => "NRT_EXEC_HW_ERR_DMA_ABORT",
    /// Host notification-queue overflow.
    ExecSwNqOverflow = 1204 => "NRT_EXEC_SW_NQ_OVERFLOW",
    /// HBM UE in a repairable region.
    ExecHwErrRepairableHbmUe = 1205 => "NRT_EXEC_HW_ERR_REPAIRABLE_HBM_UE",
    /// Network-proxy failure.
    NetworkProxyFailure = 1206 => "NRT_NETWORK_PROXY_FAILURE",
}

impl std::fmt::Display for NrtStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.name(), self.code())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn twenty_eight_statuses_with_exact_codes() {
        assert_eq!(NrtStatus::ALL.len(), 28);
        let codes: Vec<u32> = NrtStatus::ALL.iter().map(|s| s.code()).collect();
        assert_eq!(
            codes,
            [
                0, 1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 13, 14, 15, 101, 1002, 1003, 1004, 1005, 1006, 1100, 1200, 1201,
                1202, 1203, 1204, 1205, 1206
            ]
        );
        for &s in NrtStatus::ALL {
            assert_eq!(NrtStatus::from_code(s.code()), Some(s));
            assert_eq!(NrtStatus::from_name(s.name()), Some(s));
            assert!(s.name().starts_with("NRT_"));
        }
        assert_eq!(NrtStatus::UnsupportedNeffVersion.name(), "NRT_UNSUPPORTED_NEFF_VERSION");
        assert_eq!(NrtStatus::from_code(8), None);
        assert_eq!(NrtStatus::from_code(1207), None);
    }

    #[derive(Debug)]
    struct Refused;
    impl Status for Refused {
        fn status(&self) -> NrtStatus {
            NrtStatus::Invalid
        }
    }

    #[test]
    fn status_passes_through_references_and_boxes() {
        let b: Box<dyn Status> = Box::new(Refused);
        assert_eq!(b.status(), NrtStatus::Invalid);
        fn of<T: Status>(t: T) -> NrtStatus {
            t.status()
        }
        assert_eq!(of(&Refused), NrtStatus::Invalid);
        assert_eq!(of(Box::new(Refused)), NrtStatus::Invalid);
        assert_eq!(NrtStatus::Timeout.status(), NrtStatus::Timeout);
    }
}
