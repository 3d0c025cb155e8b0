//! The FW-IO mailbox (new protocol, FW API ≥ 7) and the reset sequences
//! (NEURON_HW_FACTS §6.2-6.3).

use std::time::{Duration, Instant};

use csr_maps::blocks::misc_ram as mr;
use csr_maps::consts::fwio as fwc;
use csr_maps::formats::fwio::FwHeader;
use csr_maps::{Arch, Regs};

use crate::error::{HalError, Result};

/// Poll periods (the kmod's are 1 ms for FW-IO and 100 ms for resets; a simulator or a
/// fast device can use shorter ones — the timeouts stay the arch's).
#[derive(Debug, Clone, Copy)]
pub struct PollTiming {
    pub fwio: Duration,
    pub reset: Duration,
}

impl Default for PollTiming {
    fn default() -> Self {
        Self { fwio: Duration::from_millis(fwc::POLL_MS), reset: Duration::from_millis(1) }
    }
}

/// Send `cmd` with `payload`; return the response payload. Retries per the command's
/// budget with a fresh sequence number; error code 2 (unknown command) stops retrying.
pub fn request(regs: &Regs<'_>, seq: &mut u8, cmd: u8, payload: &[u8], poll: &PollTiming) -> Result<Vec<u8>> {
    if payload.len() > fwc::MAX_PAYLOAD {
        return Err(HalError::FwioPayload(payload.len()));
    }
    let m = regs.misc_ram(0)?;
    let idx = cmd as usize;
    let attempts = fwc::RETRIES.get(idx).copied().filter(|&r| r > 0).unwrap_or(3);
    let timeout = Duration::from_millis(fwc::TIMEOUT_MS.get(idx).copied().filter(|&t| t > 0).unwrap_or(1000));
    let mut last = None;
    for _ in 0..attempts {
        *seq = if *seq == u8::MAX { 1 } else { seq.wrapping_add(1).max(1) };
        let h = FwHeader { seq: *seq, code: cmd, size: fwc::NEW_HEADER_BYTES + payload.len() as u16 };
        for (i, c) in payload.chunks(4).enumerate() {
            let mut w = [0u8; 4];
            w[..c.len()].copy_from_slice(c);
            m.data(i as u64)?.write(mr::Data(u32::from_le_bytes(w)))?;
        }
        m.req_hdr0().write(mr::ReqHdr0(h.encode()))?;
        m.req_hdr1().write(mr::ReqHdr1(h.request_crc(payload)))?;
        m.resp_hi().write(mr::RespHi(0))?;
        m.resp_lo().write(mr::RespLo(0))?;
        m.ack().write(mr::Ack(1))?;
        m.trigger().write(mr::Trigger(1))?;
        let start = Instant::now();
        while m.trigger().read()?.0 != 0 {
            if start.elapsed() > timeout {
                break;
            }
            std::thread::sleep(poll.fwio);
        }
        if m.trigger().read()?.0 != 0 {
            last = Some(HalError::FwioTimeout { cmd, attempts });
            continue;
        }
        let r = FwHeader::decode(m.req_hdr0().read()?.0);
        if r.seq != h.seq {
            last = Some(HalError::FwioTimeout { cmd, attempts });
            continue;
        }
        match r.code {
            fwc::ERR_SUCCESS => {
                let n = (r.size as usize).saturating_sub(fwc::NEW_HEADER_BYTES as usize).min(fwc::MAX_PAYLOAD);
                let mut out = Vec::with_capacity(n);
                for i in 0..n.div_ceil(4) {
                    out.extend_from_slice(&m.data(i as u64)?.read()?.0.to_le_bytes());
                }
                out.truncate(n);
                return Ok(out);
            }
            fwc::ERR_UNKNOWN_CMD => return Err(HalError::Fwio { cmd, code: r.code }),
            code => last = Some(HalError::Fwio { cmd, code }),
        }
    }
    Err(last.unwrap_or(HalError::FwioTimeout { cmd, attempts }))
}

/// What to reset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResetKind {
    Device,
    /// NeuronCores by bitmap (bit n = NC n).
    Ncs(u32),
}

/// Issue a reset and wait for it: write the map (TPB resets), the kind, ring the doorbell;
/// poll until the firmware takes the request (re-issuing after the arch's retry period),
/// give up after the arch's timeout; then wait for fw_status bit 3 to clear.
pub fn reset(arch: &Arch, regs: &Regs<'_>, kind: ResetKind, poll: &PollTiming) -> Result<()> {
    let m = regs.misc_ram(0)?;
    let c = &arch.consts;
    let (name, value, retry) = match kind {
        ResetKind::Device => ("device", fwc::RESET_DEVICE, c.reset_retry_device_ms),
        ResetKind::Ncs(_) => ("NeuronCore", fwc::RESET_TPB, c.reset_retry_tpb_ms),
    };
    let issue = || -> Result<()> {
        if let ResetKind::Ncs(map) = kind {
            m.reset_map().write_with(|v| v.with_tpb(map))?;
        }
        m.reset_request().write(mr::ResetRequest(value))?;
        m.trigger().write(mr::Trigger(1))?;
        Ok(())
    };
    let start = Instant::now();
    let give_up = Duration::from_millis(c.reset_timeout_ms);
    issue()?;
    let mut last_issue = Instant::now();
    while m.reset_request().read()?.0 != 0 {
        if start.elapsed() > give_up {
            return Err(HalError::ResetTimeout { kind: name, waited_ms: start.elapsed().as_millis() as u64 });
        }
        if last_issue.elapsed() > Duration::from_millis(retry) {
            issue()?;
            last_issue = Instant::now();
        }
        std::thread::sleep(poll.reset);
    }
    for i in 0..fwc::RESET_DONE_POLLS {
        if m.fw_status().read()?.reset_in_progress() == 0 {
            return Ok(());
        }
        std::thread::sleep(poll.reset * (i + 1) * 100);
    }
    Err(HalError::ResetTimeout { kind: name, waited_ms: start.elapsed().as_millis() as u64 })
}
