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
    /// Buffers kept between collectives, so a collective in steady state allocates nothing.
    pool: Mutex<Pool>,
}

/// Reusable buffers: collective data, rendezvous part lists and delivery lists.
#[derive(Default)]
struct Pool {
    bytes: Vec<Vec<u8>>,
    parts: Vec<Vec<Option<Part>>>,
    deliveries: Vec<Vec<Delivery>>,
}

/// Buffers kept per kind; data buffers above [`POOL_MAX_BYTES`] are freed, not kept.
const POOL_DEPTH: usize = 64;
const POOL_MAX_BYTES: usize = 16 << 20;

impl Hub {
    fn pool(&self) -> std::sync::MutexGuard<'_, Pool> {
        self.pool.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A zeroed data buffer of `len` bytes (pooled).
    pub fn take_bytes(&self, len: usize) -> Vec<u8> {
        let mut b = self.pool().bytes.pop().unwrap_or_default();
        b.clear();
        b.resize(len, 0);
        b
    }

    /// Give a data buffer back to the pool.
    pub fn put_bytes(&self, b: Vec<u8>) {
        if b.capacity() <= POOL_MAX_BYTES {
            let mut p = self.pool();
            if p.bytes.len() < POOL_DEPTH {
                p.bytes.push(b);
            }
        }
    }

    /// An empty delivery list (pooled).
    pub fn take_deliveries(&self) -> Vec<Delivery> {
        self.pool().deliveries.pop().unwrap_or_default()
    }

    /// Give a delivery list back (its data buffers go back too).
    pub fn put_deliveries(&self, mut v: Vec<Delivery>) {
        for d in v.drain(..) {
            self.put_bytes(d.data);
        }
        let mut p = self.pool();
        if p.deliveries.len() < POOL_DEPTH {
            p.deliveries.push(v);
        }
    }

    /// Register an arrival; when the group is complete, push every participant's output to
    /// `out`. Allocates nothing in steady state (buffers come from the pool; the arrival's
    /// data buffer becomes its owner's output where the sizes allow).
    pub fn arrive(&self, a: Arrival, out: &mut Vec<Delivery>) -> Result<(), CollError> {
        if a.size == 0 || a.rank >= a.size {
            return Err(CollError::BadGroup);
        }
        let esize = dtype::size(a.dtype).ok_or(CollError::BadType)?;
        if !a.data.len().is_multiple_of(esize) || !matches!(a.op, alu::ADD | alu::MAX | alu::MIN) {
            return Err(CollError::BadType);
        }
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let key = (a.comm, a.seq);
        let r = match p.entry(key) {
            std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => {
                let mut parts = self.pool().parts.pop().unwrap_or_default();
                parts.clear();
                parts.resize_with(a.size, || None);
                v.insert(Rendezvous { size: a.size, op: a.op, dtype: a.dtype, ctype: a.ctype, parts })
            }
        };
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
            return Ok(());
        }
        let Some(mut r) = p.remove(&key) else { return Ok(()) };
        drop(p);
        let n = r.parts.len();
        let first = out.len();
        for part in r.parts.drain(..).flatten() {
            out.push(Delivery { dev: part.dev, nc: part.nc, engine: part.engine, dst: part.dst, data: part.data });
        }
        {
            let mut pool = self.pool();
            if pool.parts.len() < POOL_DEPTH {
                pool.parts.push(r.parts);
            }
        }
        let ds = &mut out[first..];
        match r.ctype {
            ctype::ALL_GATHER => {
                let len = ds.first().map_or(0, |d| d.data.len());
                let mut all = self.take_bytes(0);
                all.reserve(len * n);
                for d in ds.iter() {
                    all.extend_from_slice(&d.data);
                }
                for d in ds.iter_mut() {
                    d.data.clear();
                    d.data.extend_from_slice(&all);
                }
                self.put_bytes(all);
            }
            ctype::REDUCE_SCATTER => {
                reduce(ds, r.op, r.dtype, esize);
                let chunk = (ds[0].data.len() / esize / n) * esize;
                let (head, rest) = ds.split_at_mut(1);
                let red = &head[0].data;
                for (i, d) in rest.iter_mut().enumerate() {
                    d.data.clear();
                    d.data.extend_from_slice(&red[(i + 1) * chunk..(i + 2) * chunk]);
                }
                head[0].data.truncate(chunk);
            }
            _ => {
                reduce(ds, r.op, r.dtype, esize);
                let (head, rest) = ds.split_at_mut(1);
                for d in rest {
                    d.data.copy_from_slice(&head[0].data);
                }
            }
        }
        Ok(())
    }

    /// Drop any half-formed rendezvous of a device that was reset.
    pub fn forget(&self, dev: &Weak<Dev>) {
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        p.retain(|_, r| !r.parts.iter().flatten().any(|x| x.dev.ptr_eq(dev)));
    }
}

/// Reduce every participant's data into the first one's buffer, in place.
fn reduce(ds: &mut [Delivery], op: u8, dt: u8, esize: usize) {
    let Some((acc, rest)) = ds.split_first_mut() else { return };
    for p in rest.iter() {
        for (a, b) in acc.data.chunks_exact_mut(esize).zip(p.data.chunks_exact(esize)) {
            combine(a, b, op, dt);
        }
    }
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
