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
//! Where ([`HwErrLog`], `NEURON_VFIO_HW_ERR_LOG`): by default (`auto`) a real (VFIO) device's
//! lines go to `/dev/kmsg` when this process may write it (the kernel log, which the detector's
//! `kmsg` source reads), else to the system log socket `/dev/log` (the journal); a simulated
//! device's go nowhere — its errors are injected by tests, which must not fill the host's kernel
//! log — unless the variable names a destination (`kmsg`, `journal`, `stderr`, a file).

use crate::env::HwErrLog;
use nrt_status::NrtStatus;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The kernel log device.
const KMSG: &str = "/dev/kmsg";
/// The system log socket (the journal listens on it).
const SYSLOG: &str = "/dev/log";

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

/// The line for a failed execution on physical cores `ncs` (logical `vncs`) of `device` (its
/// platform location: a PCI address, `sim:shared:ARCH:K`, `simN`), or None when the status is
/// not a hardware error. The detector's rules want a word before the key and a space after its
/// value.
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

/// Whether a platform location is a simulated device (`sim0`, `sim:shared:cayman:0`, …; a real
/// device's is its PCI address).
pub fn simulated(location: &str) -> bool {
    location.starts_with("sim")
}

/// One place a line can go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sink {
    Kmsg,
    Journal,
    Stderr,
    File(PathBuf),
}

/// Where the lines go for a device, in the order tried (the first that takes the line is the
/// only one written); empty: nowhere.
pub fn sinks(setting: &HwErrLog, simulated: bool) -> Vec<Sink> {
    match setting {
        HwErrLog::Auto if simulated => vec![],
        HwErrLog::Auto => vec![Sink::Kmsg, Sink::Journal],
        HwErrLog::Kmsg => vec![Sink::Kmsg],
        HwErrLog::Journal => vec![Sink::Journal],
        HwErrLog::Stderr => vec![Sink::Stderr],
        HwErrLog::Off => vec![],
        HwErrLog::File(p) => vec![Sink::File(p.clone())],
    }
}

/// Write the line for a failed execution on `devices` (nothing for a status that is not a
/// hardware error). Failing to write it is logged, never an error of the execution.
pub fn report(status: NrtStatus, vncs: &[usize], ncs: &[usize], devices: &[hal::Device]) {
    if kind(status).is_none() {
        return;
    }
    // One entry per device the model's cores are on (a device named once).
    let mut locations: Vec<String> = Vec::new();
    for d in devices {
        let l = d.platform().identity().location;
        if !locations.contains(&l) {
            locations.push(l);
        }
    }
    let device = if locations.is_empty() { "unknown".to_string() } else { locations.join(",") };
    let Some(l) = line(status, vncs, ncs, &device) else { return };
    tracing::error!("{l}");
    // A bad value was refused at init (RuntimeConfig::from_env); one set since is the default.
    let setting = crate::env::hw_err_log_from_env().unwrap_or_default();
    let sim = !locations.is_empty() && locations.iter().all(|l| simulated(l));
    let mut last = None;
    for sink in sinks(&setting, sim) {
        match write(&sink, &l) {
            Ok(()) => return,
            Err(e) => last = Some((sink, e)),
        }
    }
    if let Some((sink, e)) = last {
        tracing::warn!("the hardware error line could not be written ({sink:?}): {e}");
    }
}

/// One record: a kernel log record at level 3 (err) for /dev/kmsg, an RFC 3164 message
/// (facility user, severity err) to the journal, a plain line elsewhere.
fn write(sink: &Sink, l: &str) -> std::io::Result<()> {
    match sink {
        Sink::Kmsg => append(Path::new(KMSG), &format!("<3>{l}\n")),
        Sink::Journal => {
            let s = std::os::unix::net::UnixDatagram::unbound()?;
            s.send_to(format!("<11>{l}").as_bytes(), SYSLOG).map(|_| ())
        }
        Sink::Stderr => std::io::stderr().lock().write_all(format!("{l}\n").as_bytes()),
        Sink::File(p) => append(p, &format!("{l}\n")),
    }
}

fn append(path: &Path, rec: &str) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new().append(true).create(path != Path::new(KMSG)).open(path)?;
    f.write_all(rec.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env::parse_hw_err_log;

    #[test]
    fn hardware_statuses_have_a_kind_and_others_none() {
        assert_eq!(kind(NrtStatus::ExecHwErrHbmUe), Some("HBM_UNCORRECTABLE_ERROR"));
        assert_eq!(kind(NrtStatus::ExecHwErrRepairableHbmUe), Some("HBM_UNCORRECTABLE_ERROR"));
        assert_eq!(kind(NrtStatus::ExecHwErrNcUe), Some("SRAM_UNCORRECTABLE_ERROR"));
        assert_eq!(kind(NrtStatus::ExecHwErrDmaAbort), Some("DMA_ERROR"));
        assert_eq!(kind(NrtStatus::Timeout), Some("NC_UNCORRECTABLE_ERROR"));
        assert_eq!(kind(NrtStatus::Success), None);
        assert_eq!(kind(NrtStatus::ExecSwNqOverflow), None);
        let l = line(NrtStatus::ExecHwErrDmaAbort, &[1], &[2, 3], "sim:shared:cayman:0").expect("line");
        assert!(l.contains(" NEURON_HW_ERR=DMA_ERROR device=sim:shared:cayman:0 nc=2,3 vnc=1 "), "{l}");
    }

    #[test]
    fn a_simulated_device_writes_to_the_kernel_log_only_when_asked() {
        let parse = |v: &str| parse_hw_err_log(Some(v)).expect(v);
        // Unset or auto: a real device to kmsg, else the journal; a simulated one nowhere.
        assert_eq!(parse_hw_err_log(None), Ok(HwErrLog::Auto));
        assert_eq!(parse(""), HwErrLog::Auto);
        assert_eq!(sinks(&HwErrLog::Auto, false), [Sink::Kmsg, Sink::Journal]);
        assert!(sinks(&HwErrLog::Auto, true).is_empty());
        assert!(simulated("sim0") && simulated("sim:shared:cayman:0"));
        assert!(!simulated("0000:00:1e.0"));
        // Named destinations apply to either.
        for sim in [false, true] {
            assert_eq!(sinks(&parse("KMSG"), sim), [Sink::Kmsg]);
            assert_eq!(sinks(&parse("journal"), sim), [Sink::Journal]);
            assert_eq!(sinks(&parse(" stderr "), sim), [Sink::Stderr]);
            assert!(sinks(&parse("off"), sim).is_empty());
            assert_eq!(sinks(&parse("/tmp/x.log"), sim), [Sink::File("/tmp/x.log".into())]);
        }
        // Anything else is refused by name (nrt_init fails with NRT_INVALID).
        for bad in ["dmesg", "x.log", "1"] {
            let e = parse_hw_err_log(Some(bad)).expect_err(bad);
            assert!(e.to_string().contains("NEURON_VFIO_HW_ERR_LOG"), "{e}");
        }
    }
}
