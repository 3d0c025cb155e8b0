//! The collective fabric: participants of a collective (NCs on one or several devices)
//! meet by (comm id, sequence number); the last arrival computes the result and every
//! participant receives its output.

use std::collections::HashMap;
use std::sync::{Mutex, Weak};

use isa::device_ops::{alu, ctype, dtype};

use crate::device::Dev;

/// Output for one participant, written by `Dev::deliver`.
pub(crate) struct Delivery {
    pub dev: Weak<Dev>,
    pub nc: usize,
    pub engine: usize,
    pub dst: u64,
    pub data: Vec<u8>,
}

struct Part {
    dev: Weak<Dev>,
    nc: usize,
    engine: usize,
    dst: u64,
    data: Vec<u8>,
}

struct Rendezvous {
    size: usize,
    op: u8,
    dtype: u8,
    ctype: u8,
    parts: Vec<Option<Part>>,
}

/// An arrival.
pub(crate) struct Arrival {
    pub comm: u32,
    pub seq: u32,
    pub rank: usize,
    pub size: usize,
    pub op: u8,
    pub dtype: u8,
    pub ctype: u8,
    pub dev: Weak<Dev>,
    pub nc: usize,
    pub engine: usize,
    pub dst: u64,
    pub data: Vec<u8>,
}

/// Why a collective cannot run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CollError {
    BadGroup,
    Mismatch,
    BadType,
}

#[derive(Default)]
pub(crate) struct Hub {
    pending: Mutex<HashMap<(u32, u32), Rendezvous>>,
}

impl Hub {
    /// Register an arrival; when the group is complete, return every participant's output.
    pub fn arrive(&self, a: Arrival) -> Result<Vec<Delivery>, CollError> {
        if a.size == 0 || a.rank >= a.size {
            return Err(CollError::BadGroup);
        }
        let esize = dtype::size(a.dtype).ok_or(CollError::BadType)?;
        if !a.data.len().is_multiple_of(esize) || !matches!(a.op, alu::ADD | alu::MAX | alu::MIN) {
            return Err(CollError::BadType);
        }
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let key = (a.comm, a.seq);
        let r = p.entry(key).or_insert_with(|| Rendezvous {
            size: a.size,
            op: a.op,
            dtype: a.dtype,
            ctype: a.ctype,
            parts: (0..a.size).map(|_| None).collect(),
        });
        if r.size != a.size || r.op != a.op || r.dtype != a.dtype || r.ctype != a.ctype || r.parts[a.rank].is_some() {
            return Err(CollError::Mismatch);
        }
        if let Some(first) = r.parts.iter().flatten().next() {
            if first.data.len() != a.data.len() {
                return Err(CollError::Mismatch);
            }
        }
        r.parts[a.rank] = Some(Part { dev: a.dev, nc: a.nc, engine: a.engine, dst: a.dst, data: a.data });
        if r.parts.iter().any(|x| x.is_none()) {
            return Ok(Vec::new());
        }
        let Some(r) = p.remove(&key) else { return Ok(Vec::new()) };
        drop(p);
        let parts: Vec<Part> = r.parts.into_iter().flatten().collect();
        let n = parts.len();
        let out: Vec<Vec<u8>> = match r.ctype {
            ctype::ALL_GATHER => {
                let all: Vec<u8> = parts.iter().flat_map(|p| p.data.iter().copied()).collect();
                vec![all; n]
            }
            ctype::REDUCE_SCATTER => {
                let red = reduce(&parts, r.op, r.dtype, esize);
                let chunk = (red.len() / esize / n) * esize;
                (0..n).map(|i| red[i * chunk..(i + 1) * chunk].to_vec()).collect()
            }
            _ => {
                let red = reduce(&parts, r.op, r.dtype, esize);
                vec![red; n]
            }
        };
        Ok(parts
            .into_iter()
            .zip(out)
            .map(|(p, data)| Delivery { dev: p.dev, nc: p.nc, engine: p.engine, dst: p.dst, data })
            .collect())
    }

    /// Drop any half-formed rendezvous of a device that was reset.
    pub fn forget(&self, dev: &Weak<Dev>) {
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        p.retain(|_, r| !r.parts.iter().flatten().any(|x| x.dev.ptr_eq(dev)));
    }
}

fn reduce(parts: &[Part], op: u8, dt: u8, esize: usize) -> Vec<u8> {
    let mut acc = parts[0].data.clone();
    for p in &parts[1..] {
        for (a, b) in acc.chunks_exact_mut(esize).zip(p.data.chunks_exact(esize)) {
            combine(a, b, op, dt);
        }
    }
    acc
}

fn f32_of(dt: u8, b: &[u8]) -> f32 {
    match dt {
        dtype::FP32 => f32::from_le_bytes([b[0], b[1], b[2], b[3]]),
        dtype::BF16 => f32::from_bits((u16::from_le_bytes([b[0], b[1]]) as u32) << 16),
        _ => f16_to_f32(u16::from_le_bytes([b[0], b[1]])),
    }
}

fn store_f32(dt: u8, v: f32, out: &mut [u8]) {
    match dt {
        dtype::FP32 => out.copy_from_slice(&v.to_le_bytes()),
        dtype::BF16 => {
            // Round to nearest even.
            let bits = v.to_bits();
            let r = bits.wrapping_add(0x7FFF + ((bits >> 16) & 1));
            out.copy_from_slice(&((r >> 16) as u16).to_le_bytes())
        }
        _ => out.copy_from_slice(&f32_to_f16(v).to_le_bytes()),
    }
}

fn combine(a: &mut [u8], b: &[u8], op: u8, dt: u8) {
    if dt == dtype::INT32 {
        let x = i32::from_le_bytes([a[0], a[1], a[2], a[3]]);
        let y = i32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        let r = match op {
            alu::MAX => x.max(y),
            alu::MIN => x.min(y),
            _ => x.wrapping_add(y),
        };
        a.copy_from_slice(&r.to_le_bytes());
        return;
    }
    let (x, y) = (f32_of(dt, a), f32_of(dt, b));
    let r = match op {
        alu::MAX => x.max(y),
        alu::MIN => x.min(y),
        _ => x + y,
    };
    store_f32(dt, r, a);
}

fn f16_to_f32(h: u16) -> f32 {
    let s = ((h >> 15) as u32) << 31;
    let e = ((h >> 10) & 0x1F) as u32;
    let m = (h & 0x3FF) as u32;
    let bits = if e == 0 {
        if m == 0 {
            s
        } else {
            // Subnormal: normalise.
            let mut e2 = 127 - 15 + 1;
            let mut m2 = m;
            while m2 & 0x400 == 0 {
                m2 <<= 1;
                e2 -= 1;
            }
            s | ((e2 as u32) << 23) | ((m2 & 0x3FF) << 13)
        }
    } else if e == 0x1F {
        s | 0x7F80_0000 | (m << 13)
    } else {
        s | ((e + 127 - 15) << 23) | (m << 13)
    };
    f32::from_bits(bits)
}

fn f32_to_f16(v: f32) -> u16 {
    let b = v.to_bits();
    let s = ((b >> 16) & 0x8000) as u16;
    let e = ((b >> 23) & 0xFF) as i32;
    let m = b & 0x7F_FFFF;
    if e == 0xFF {
        return s | 0x7C00 | if m != 0 { 0x200 } else { 0 };
    }
    let e2 = e - 127 + 15;
    if e2 >= 0x1F {
        return s | 0x7C00;
    }
    if e2 <= 0 {
        if e2 < -10 {
            return s;
        }
        let m2 = (m | 0x80_0000) >> (1 - e2);
        let r = (m2 + 0x1000 + ((m2 >> 13) & 1)) >> 13;
        return s | r as u16;
    }
    let r = m + 0xFFF + ((m >> 13) & 1);
    if r & 0x80_0000 != 0 {
        return s | (((e2 + 1) as u16) << 10);
    }
    s | ((e2 as u16) << 10) | (r >> 13) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_conversions() {
        for v in [0.0f32, 1.0, -2.5, 65504.0, 0.000061035156, 3.140625] {
            assert_eq!(f16_to_f32(f32_to_f16(v)), v, "{v}");
        }
        let mut a = 1.5f32.to_le_bytes();
        combine(&mut a, &2.25f32.to_le_bytes(), alu::ADD, dtype::FP32);
        assert_eq!(f32::from_le_bytes(a), 3.75);
        let mut a = [0u8; 2];
        store_f32(dtype::BF16, 2.0, &mut a);
        combine(
            &mut a,
            &{
                let mut b = [0u8; 2];
                store_f32(dtype::BF16, 3.0, &mut b);
                b
            },
            alu::MAX,
            dtype::BF16,
        );
        assert_eq!(f32_of(dtype::BF16, &a), 3.0);
    }
}
