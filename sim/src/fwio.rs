//! Misc RAM: the firmware side of the FW-IO mailbox and the reset requests (the kmod's
//! `neuron_fw_io.c` and `neuron_reset.c`).
//!
//! Two protocols share the doorbell (`trigger`, misc RAM 0x800):
//! - **legacy** (every FW API; the only one the 2.24 kmod speaks): the host puts the request
//!   — header {seq u8, cmd u8, size u16 (header included), CRC-32C u32 over the whole
//!   request with the CRC field zero}, then the payload — in host memory, writes that
//!   buffer's bus address to 0x1F0 (high) / 0x1F4 (low) and the response buffer's to 0x1F8
//!   (high) / 0x1FC (low), and rings. The firmware reads the request by DMA and writes the
//!   response — {seq, error, size u16 (4-byte header included)}, then the data — into the
//!   response buffer, sequence byte last: the host polls it. Commands: READ (N × u64 device
//!   addresses → N × u32 values) and POST_TO_CW (a metrics blob, also copied to misc RAM
//!   0x100 by the host).
//! - **new** (FW API ≥ 7, the 2.25 kmod's `fw_io_execute_request_new`): header and CRC in
//!   0x1F0/0x1F4, payload in the data words, ACK (0xF0) = 1, then the doorbell; the firmware
//!   answers in the same registers and clears the doorbell.
//!
//! Modeled: firmware of API ≥ 7 tells them apart by the ACK word (the new protocol writes 1
//! there before ringing, the legacy one never writes it; the sources do not say how real
//! firmware decides). Firmware below API 7 knows only the legacy protocol.

use std::sync::atomic::Ordering;

use csr_maps::blocks::misc_ram::RegId as M;
use csr_maps::consts::fwio as fwc;
use csr_maps::formats::fwio::FwHeader;

use crate::decode::Hit;
use crate::device::{Dev, State};

pub(crate) fn reg_read(dev: &Dev, st: &mut State, hit: &Hit, r: M) -> u32 {
    // While the firmware is resetting, misc RAM reads 0xDEADBEEF (`neuron_fw_io.c`).
    if st.fw_busy_until.is_some_and(|t| std::time::Instant::now() < t) {
        return fwc::NOT_READY;
    }
    st.fw_busy_until = None;
    if r == M::FwStatus {
        return 0;
    }
    dev.generic_read(st, hit)
}

fn start_busy(dev: &Dev, st: &mut State) {
    if dev.cfg.reset_busy_ms > 0 {
        st.fw_busy_until = Some(std::time::Instant::now() + std::time::Duration::from_millis(dev.cfg.reset_busy_ms));
    }
}

pub(crate) fn reg_write(dev: &Dev, st: &mut State, hit: &Hit, r: M, val: u32) {
    match r {
        M::Trigger if val & 1 != 0 => {
            dev.generic_write(st, hit, val);
            request(dev, st);
        }
        M::ResetRequest if val == fwc::RESET_DEVICE || val == fwc::RESET_TPB => {
            // The firmware takes the request (clears it) and performs the reset.
            let m = dev.misc_ram();
            if val == fwc::RESET_DEVICE {
                dev.reset_all(st);
                dev.hub.forget(&dev.me);
            } else {
                let map = dev.reg_value(st, m.reset_map().offset());
                dev.n.last_reset_map.store(map, Ordering::Relaxed);
                dev.reset_units(st, map);
                dev.n.resets.fetch_add(1, Ordering::Relaxed);
            }
            st.regs.insert(hit.off, 0);
            start_busy(dev, st);
        }
        _ => dev.generic_write(st, hit, val),
    }
}

fn request(dev: &Dev, st: &mut State) {
    let m = dev.misc_ram();
    dev.n.fwio.fetch_add(1, Ordering::Relaxed);
    let ack = dev.reg_value(st, m.ack().offset());
    let new_fw = dev.cfg.fw_api_version >= dev.arch.consts.fwio_api_new as u32;
    if ack != 1 {
        legacy(dev, st);
        st.regs.insert(m.trigger().offset(), 0);
        return;
    }
    if !new_fw {
        // Legacy firmware reads 0x1F0..0x1FC as host request/response buffer addresses and
        // DMAs there (`neuron_fw_io.c`); a new-protocol header in them is garbage. Record the
        // driver bug and never answer.
        dev.n.fwio_legacy_misuse.fetch_add(1, Ordering::Relaxed);
        tracing::debug!("sim: new-protocol FW-IO request on firmware API < 7 (legacy protocol): not answered");
        return;
    }
    let hdr = FwHeader::decode(dev.reg_value(st, m.req_hdr0().offset()));
    let crc = dev.reg_value(st, m.req_hdr1().offset());
    let words: Vec<u32> = (0..32).filter_map(|i| m.data(i).ok()).map(|r| dev.reg_value(st, r.offset())).collect();
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    let plen = (hdr.size as usize).saturating_sub(fwc::NEW_HEADER_BYTES as usize);
    let (err, reply): (u8, Vec<u8>) =
        if hdr.seq == 0 || plen > fwc::MAX_PAYLOAD || hdr.request_crc(&bytes[..plen]) != crc {
            (fwc::ERR_FAILED, vec![])
        } else {
            let p = &bytes[..plen];
            match hdr.code {
                fwc::CMD_SET_POWER_PROFILE if plen == 8 => (fwc::ERR_SUCCESS, vec![]),
                fwc::CMD_SET_FEATURE if plen >= 1 => (fwc::ERR_SUCCESS, vec![]),
                fwc::CMD_GET_DATA if plen >= 1 => match p[0] {
                    // Current performance profile: 4 reserved, profile, voltage margin, frequency, OCW.
                    fwc::GET_DATA_PERF_PROFILE => (fwc::ERR_SUCCESS, vec![0, 0, 0, 0, 0, 0, 0, 0]),
                    // Available profiles: count + 32-byte bitmap (profile 0 only).
                    fwc::GET_DATA_AVAILABLE_PROFILES => {
                        let mut v = vec![1u8];
                        v.extend_from_slice(&[1u8]);
                        v.extend_from_slice(&[0u8; 31]);
                        (fwc::ERR_SUCCESS, v)
                    }
                    // Switch-fabric BAR info: none on a simulated device.
                    fwc::GET_DATA_BAR_INFO => (fwc::ERR_SUCCESS, vec![]),
                    _ => (fwc::ERR_FAILED, vec![]),
                },
                _ => (fwc::ERR_UNKNOWN_CMD, vec![]),
            }
        };
    for (i, c) in reply.chunks(4).enumerate() {
        let mut w = [0u8; 4];
        w[..c.len()].copy_from_slice(c);
        if let Ok(r) = m.data(i as u64) {
            st.regs.insert(r.offset(), u32::from_le_bytes(w));
        }
    }
    let resp = FwHeader { seq: hdr.seq, code: err, size: fwc::NEW_HEADER_BYTES + reply.len() as u16 };
    st.regs.insert(m.req_hdr0().offset(), resp.encode());
    st.regs.insert(m.trigger().offset(), 0);
    st.regs.insert(m.ack().offset(), 0);
}

/// The legacy protocol's request: read by DMA from the host buffer named in 0x1F0/0x1F4,
/// answered by DMA into the one named in 0x1F8/0x1FC (module doc). A request or response
/// buffer the IOMMU refuses is a DMA fault and gets no answer (the host times out).
fn legacy(dev: &Dev, st: &mut State) {
    let m = dev.misc_ram();
    let addr = |st: &State, hi: u64, lo: u64| (dev.reg_value(st, hi) as u64) << 32 | dev.reg_value(st, lo) as u64;
    let req_at = addr(st, m.req_hdr0().offset(), m.req_hdr1().offset());
    let resp_at = addr(st, m.resp_hi().offset(), m.resp_lo().offset());
    let mut head = [0u8; fwc::LEGACY_REQUEST_HEADER_BYTES];
    if dev.dev_read(st, req_at, &mut head).is_err() {
        dev.n.dma_faults.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(req_at, "sim: legacy FW-IO request buffer not readable by DMA");
        return;
    }
    let hdr = FwHeader::decode(u32::from_le_bytes([head[0], head[1], head[2], head[3]]));
    let crc = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
    let size = hdr.size as usize;
    let (err, reply) = if hdr.seq == 0 || size < head.len() || size > fwc::LEGACY_MAX_REQUEST {
        (fwc::ERR_FAILED, vec![])
    } else {
        let mut payload = vec![0u8; size - head.len()];
        if dev.dev_read(st, req_at + head.len() as u64, &mut payload).is_err() {
            dev.n.dma_faults.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(req_at, size, "sim: legacy FW-IO request payload not readable by DMA");
            return;
        }
        if hdr.request_crc(&payload) != crc {
            (fwc::ERR_FAILED, vec![])
        } else {
            legacy_command(dev, st, hdr.code, &payload)
        }
    };
    // Data first, then the header whose sequence byte the host polls.
    let resp = FwHeader { seq: hdr.seq, code: err, size: (fwc::LEGACY_RESPONSE_HEADER_BYTES + reply.len()) as u16 };
    let at = resp_at + fwc::LEGACY_RESPONSE_HEADER_BYTES as u64;
    if (!reply.is_empty() && dev.dev_write(st, at, &reply).is_err())
        || dev.dev_write(st, resp_at, &resp.encode().to_le_bytes()).is_err()
    {
        dev.n.dma_faults.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(resp_at, "sim: legacy FW-IO response buffer not writable by DMA");
    }
}

/// One legacy command: (error code, response data).
fn legacy_command(dev: &Dev, st: &mut State, cmd: u8, payload: &[u8]) -> (u8, Vec<u8>) {
    match cmd {
        fwc::CMD_READ if payload.len().is_multiple_of(8) && payload.len() / 8 <= fwc::LEGACY_MAX_READS => {
            let mut out = Vec::with_capacity(payload.len() / 2);
            for a in payload.chunks_exact(8) {
                let mut addr = [0u8; 8];
                addr.copy_from_slice(a);
                let mut v = [0u8; 4];
                // A device address the firmware cannot read fails the whole request.
                if dev.dev_read(st, u64::from_le_bytes(addr), &mut v).is_err() {
                    return (fwc::ERR_FAILED, vec![]);
                }
                out.extend_from_slice(&v);
            }
            (fwc::ERR_SUCCESS, out)
        }
        fwc::CMD_READ => (fwc::ERR_FAILED, vec![]),
        fwc::CMD_POST_TO_CW if payload.len() <= fwc::MAX_PAYLOAD => {
            // The firmware forwards the blob to the host's metrics service; a simulated
            // device keeps a count.
            dev.n.fwio_metrics.fetch_add(1, Ordering::Relaxed);
            (fwc::ERR_SUCCESS, vec![])
        }
        fwc::CMD_POST_TO_CW => (fwc::ERR_FAILED, vec![]),
        _ => (fwc::ERR_UNKNOWN_CMD, vec![]),
    }
}
