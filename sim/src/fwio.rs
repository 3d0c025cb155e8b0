//! Misc RAM: the firmware side of the FW-IO mailbox (new protocol, FW API ≥ 7) and the
//! reset requests (the kmod's `neuron_fw_io.c` and `neuron_reset.c`).

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
    let hdr = FwHeader::decode(dev.reg_value(st, m.req_hdr0().offset()));
    let crc = dev.reg_value(st, m.req_hdr1().offset());
    let ack = dev.reg_value(st, m.ack().offset());
    let words: Vec<u32> = (0..32).filter_map(|i| m.data(i).ok()).map(|r| dev.reg_value(st, r.offset())).collect();
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    let plen = (hdr.size as usize).saturating_sub(fwc::NEW_HEADER_BYTES as usize);
    if dev.cfg.fw_api_version < dev.arch.consts.fwio_api_new as u32 {
        // Legacy firmware reads 0x1F0..0x1FC as host request/response buffer addresses and
        // DMAs there (`neuron_fw_io.c`); a new-protocol header in them is garbage. Record the
        // driver bug and never answer.
        dev.n.fwio_legacy_misuse.fetch_add(1, Ordering::Relaxed);
        tracing::debug!("sim: new-protocol FW-IO request on firmware API < 7 (legacy protocol): not answered");
        return;
    }
    let (err, reply): (u8, Vec<u8>) =
        if hdr.seq == 0 || plen > fwc::MAX_PAYLOAD || ack != 1 || hdr.request_crc(&bytes[..plen]) != crc {
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
