//! The hardware errors an execution ends with, written where the node's problem detector reads
//! them: as the Neuron kernel driver's `NEURON_HW_ERR=<KIND>` kernel-log lines, which the Neuron
//! node problem detector's rules match (docs/kubernetes.md). One line per failed execution whose
//! status is a hardware error:
//!
//! | status | `NEURON_HW_ERR=` |
//! |---|---|
//! | NRT_EXEC_HW_ERR_HBM_UE (1201), NRT_EXEC_HW_ERR_REPAIRABLE_HBM_UE (1205) | `HBM_UNCORRECTABLE_ERROR` |
//! | NRT_EXEC_HW_ERR_NC_UE (1202): the NC's on-chip memory (SRAM ECC) | `SRAM_UNCORRECTABLE_ERROR` |
//! | NRT_EXEC_HW_ERR_DMA_ABORT (1203) | `DMA_ERROR` |
//! | NRT_TIMEOUT (5): an NC that stopped (hang) | `NC_UNCORRECTABLE_ERROR` |
//!
//! Where: `NEURON_VFIO_HW_ERR_LOG` when set (a file appended to, e.g. `/dev/kmsg`; `off`: nowhere),
//! else `/dev/kmsg` when this process may write it (the kernel log, which the detector's `kmsg`
//! source reads), else the system log socket `/dev/log` (the journal).

use nrt_status::NrtStatus;
use std::io::Write;

/// The variable naming where the lines go.
pub const LOG_VAR: &str = "NEURON_VFIO_HW_ERR_LOG";

/// The `NEURON_HW_ERR` kind of an execution's status (None: not a hardware error).
pub fn kind(status: NrtStatus) -> Option<&'static str> {
    Some(match status {
        NrtStatus::ExecHwErrHbmUe | NrtStatus::ExecHwErrRepairableHbmUe => "HBM_UNCORRECTABLE_ERROR",
        NrtStatus::ExecHwErrNcUe => "SRAM_UNCORRECTABLE_ERROR",
        NrtStatus::ExecHwErrDmaAbort => "DMA_ERROR",
        NrtStatus::Timeout => "NC_UNCORRECTABLE_ERROR",
        _ => return None,
    })
}

/// The line for a failed execution on physical cores `ncs` (logical `vncs`), or None when the
/// status is not a hardware error. The detector's rules want a word before the key and a space
/// after its value.
pub fn line(status: NrtStatus, vncs: &[usize], ncs: &[usize], device: &str) -> Option<String> {
    let kind = kind(status)?;
    let list = |v: &[usize]| v.iter().map(usize::to_string).collect::<Vec<_>>().join(",");
    Some(format!(
        "neuron-vfio[{}]: NEURON_HW_ERR={kind} device={device} nc={} vnc={} status={}({})",
        std::process::id(),
        list(ncs),
        list(vncs),
        status.name(),
        status.code(),
    ))
}

/// Write the line for a failed execution (nothing for a status that is not a hardware error).
/// Failing to write it is logged, never an error of the execution.
pub fn report(status: NrtStatus, vncs: &[usize], ncs: &[usize]) {
    let device = std::env::var("NEURON_VFIO_DEVICE").unwrap_or_else(|_| "default".into());
    let Some(l) = line(status, vncs, ncs, &device) else { return };
    tracing::error!("{l}");
    let r = match std::env::var(LOG_VAR) {
        Ok(v) if v == "off" => Ok(()),
        Ok(path) if !path.is_empty() => append(&path, &l),
        _ => append("/dev/kmsg", &l).or_else(|_| syslog(&l)),
    };
    if let Err(e) = r {
        tracing::warn!("the hardware error line could not be written: {e}");
    }
}

/// One record: a kernel log record at level 3 (err) for /dev/kmsg, a plain line elsewhere.
fn append(path: &str, l: &str) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new().append(true).open(path)?;
    let rec = if path == "/dev/kmsg" { format!("<3>{l}\n") } else { format!("{l}\n") };
    f.write_all(rec.as_bytes())
}

/// An RFC 3164 message to the system log socket: facility user, severity err.
fn syslog(l: &str) -> std::io::Result<()> {
    let s = std::os::unix::net::UnixDatagram::unbound()?;
    s.send_to(format!("<11>{l}").as_bytes(), "/dev/log").map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hardware_statuses_have_a_kind_and_others_none() {
        assert_eq!(kind(NrtStatus::ExecHwErrHbmUe), Some("HBM_UNCORRECTABLE_ERROR"));
        assert_eq!(kind(NrtStatus::ExecHwErrRepairableHbmUe), Some("HBM_UNCORRECTABLE_ERROR"));
        assert_eq!(kind(NrtStatus::ExecHwErrNcUe), Some("SRAM_UNCORRECTABLE_ERROR"));
        assert_eq!(kind(NrtStatus::ExecHwErrDmaAbort), Some("DMA_ERROR"));
        assert_eq!(kind(NrtStatus::Timeout), Some("NC_UNCORRECTABLE_ERROR"));
        assert_eq!(kind(NrtStatus::Success), None);
        assert_eq!(kind(NrtStatus::ExecSwNqOverflow), None);
        let l = line(NrtStatus::ExecHwErrDmaAbort, &[1], &[2, 3], "sim:shared:cayman").expect("line");
        assert!(l.contains(" NEURON_HW_ERR=DMA_ERROR device=sim:shared:cayman nc=2,3 vnc=1 "), "{l}");
    }
}
