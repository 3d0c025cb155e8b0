//! The FW-IO mailbox (new protocol, FW API ≥ 7) and the reset sequences
//! (docs/facts/hardware.md §6.2-6.3).

use std::time::{Duration, Instant};

use csr_maps::blocks::misc_ram as mr;
use csr_maps::consts::fwio as fwc;
use csr_maps::formats::fwio::FwHeader;
use csr_maps::{Arch, Regs};

use crate::error::{HalError, Result};

/// Poll periods. The defaults are the kmod's: 1 ms for FW-IO, the arch's `reset_poll_ms`
/// (100 ms) for resets, after the arch's initial wait, and the probe's 1 s device-id poll. A
/// simulator or a fast device can use shorter ones; the timeouts stay the arch's.
#[derive(Debug, Clone, Copy)]
pub struct PollTiming {
    pub fwio: Duration,
    /// Reset poll period and initial wait (`None`: the arch's `reset_poll_ms` and
    /// `reset_initial_wait_ms`).
    pub reset: Option<Duration>,
    /// Device-id poll period at open.
    pub ready: Duration,
}

impl Default for PollTiming {
    fn default() -> Self {
        Self {
            fwio: Duration::from_millis(fwc::POLL_MS),
            reset: None,
            ready: Duration::from_millis(fwc::READY_POLL_MS),
        }
    }
}

impl PollTiming {
    /// Fast polling for a simulated device (1 ms everywhere).
    pub fn fast() -> Self {
        let ms = Duration::from_millis(1);
        Self { fwio: ms, reset: Some(ms), ready: ms }
    }
    fn reset_period(&self, arch: &Arch) -> Duration {
        self.reset.unwrap_or(Duration::from_millis(arch.consts.reset_poll_ms))
    }
    fn reset_initial_wait(&self, arch: &Arch) -> Duration {
        self.reset.unwrap_or(Duration::from_millis(arch.consts.reset_initial_wait_ms))
    }
}

/// Read a misc-RAM register the way the kmod does while the firmware may be busy: a value of
/// 0xDEADBEEF means "not ready" and the read is retried every `period` for up to
/// [`fwc::NOT_READY_WINDOWS`] windows of [`fwc::NOT_READY_WINDOW_MS`].
fn read_ready(read: impl Fn() -> Result<u32>, period: Duration) -> Result<u32> {
    let start = Instant::now();
    let budget = Duration::from_millis(fwc::NOT_READY_WINDOWS as u64 * fwc::NOT_READY_WINDOW_MS);
    loop {
        let v = read()?;
        if v != fwc::NOT_READY {
            return Ok(v);
        }
        if start.elapsed() > budget {
            return Err(HalError::NotReady { waited_ms: start.elapsed().as_millis() as u64, value: v });
        }
        std::thread::sleep(period);
    }
}

/// The reset-map LOW value of a TPB reset of the NCs in `ncs` (bit n = NC n), with the
/// arch's groups: the TPB bit, the NC's SDMA group (V3/V4) and its TOP_SP bits
/// (`nr_get_tpb_reset_map` in the kmod's `neuron_dhal_v2.c` / `neuron_dhal_v3.c`).
pub fn tpb_reset_map(arch: &Arch, ncs: u32) -> u32 {
    let c = &arch.consts;
    let mut map = 0u64;
    for n in (0..arch.counts.ncs.min(32)).filter(|n| ncs & (1 << n) != 0) {
        map |= 1 << n;
        if c.reset_sdma_group_shift != 0 {
            map |= 1 << (c.reset_sdma_group_shift + n);
        }
        let per = c.reset_topsp_bits_per_nc;
        map |= ((1u64 << per) - 1) << (c.reset_topsp_shift + n * per);
    }
    map as u32
}

/// Send `cmd` with `payload`; return the response payload. Retries per the command's
/// budget with a fresh sequence number; error code 2 (unknown command) stops retrying.
/// Refused without touching the mailbox when the firmware's API version predates the
/// protocol (on older firmware the header registers are the legacy protocol's host-buffer
/// addresses: `neuron_fw_io.c`).
pub fn request(
    arch: &Arch,
    regs: &Regs<'_>,
    seq: &mut u8,
    cmd: u8,
    payload: &[u8],
    poll: &PollTiming,
) -> Result<Vec<u8>> {
    if payload.len() > fwc::MAX_PAYLOAD {
        return Err(HalError::FwioPayload(payload.len()));
    }
    let m = regs.misc_ram(0)?;
    let version = read_ready(|| Ok(m.fw_api_version().read()?.0), poll.fwio)?;
    let needed = arch.consts.fwio_api_new as u32;
    if version < needed {
        return Err(HalError::FwApiTooOld { version, needed });
    }
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
        // Poll until the firmware clears the trigger or the budget runs out, and decide on the
        // value polled last (as `fw_io_execute_request_new` does; no read after the loop).
        let start = Instant::now();
        let mut trigger = m.trigger().read()?.0;
        while trigger != 0 && start.elapsed() <= timeout {
            std::thread::sleep(poll.fwio);
            trigger = m.trigger().read()?.0;
        }
        if trigger != 0 {
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

/// Issue a reset and wait for it (`neuron_reset.c`): write the map with the arch's groups
/// and, where the arch has it, the HIGH map (TPB resets), the kind, ring the doorbell; wait
/// the arch's initial delay, then poll every `reset_poll_ms` until the firmware takes the
/// request (re-issuing after the arch's retry period), giving up after the arch's timeout;
/// then wait for fw_status bit 3 to clear (5 polls, 100·i ms apart). A read of 0xDEADBEEF
/// means the firmware is busy and is retried, as the kmod retries it.
pub fn reset(arch: &Arch, regs: &Regs<'_>, kind: ResetKind, poll: &PollTiming) -> Result<()> {
    let m = regs.misc_ram(0)?;
    let c = &arch.consts;
    let (name, value, retry) = match kind {
        ResetKind::Device => ("device", fwc::RESET_DEVICE, c.reset_retry_device_ms),
        ResetKind::Ncs(_) => ("NeuronCore", fwc::RESET_TPB, c.reset_retry_tpb_ms),
    };
    let issue = || -> Result<()> {
        if let ResetKind::Ncs(ncs) = kind {
            if c.reset_map_high != 0 {
                // Top-level DMA groups stay out unless asked for (the kmod's `reset_top_dma`).
                m.reset_map_high().write(mr::ResetMapHigh(0))?;
            }
            m.reset_map().write(mr::ResetMap(tpb_reset_map(arch, ncs)))?;
        }
        m.reset_request().write(mr::ResetRequest(value))?;
        m.trigger().write(mr::Trigger(1))?;
        Ok(())
    };
    let start = Instant::now();
    let give_up = Duration::from_millis(c.reset_timeout_ms);
    issue()?;
    let mut last_issue = Instant::now();
    std::thread::sleep(poll.reset_initial_wait(arch));
    let period = poll.reset_period(arch);
    // 0xDEADBEEF (firmware busy) is not 0: keep waiting.
    while m.reset_request().read()?.0 != 0 {
        if start.elapsed() > give_up {
            return Err(HalError::ResetTimeout { kind: name, waited_ms: start.elapsed().as_millis() as u64 });
        }
        if last_issue.elapsed() > Duration::from_millis(retry) {
            issue()?;
            last_issue = Instant::now();
        }
        std::thread::sleep(period);
    }
    for i in 0..fwc::RESET_DONE_POLLS {
        let status = mr::FwStatus(read_ready(|| Ok(m.fw_status().read()?.0), poll.fwio)?);
        if status.reset_in_progress() == 0 {
            return Ok(());
        }
        // The kmod sleeps 100·i ms before retry i; a faster poll scales it down.
        std::thread::sleep(period * i);
    }
    Err(HalError::ResetTimeout { kind: name, waited_ms: start.elapsed().as_millis() as u64 })
}
