//! Memory: a host DMA pool (chunks mapped once, sub-allocated: no mapping on the hot
//! path) and a buddy allocator per HBM channel (firmware carve-out reserved, accounting,
//! predictable fragmentation).

use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use platform::{DmaDir, DmaMapping, HostMem, Platform};

use crate::error::{HalError, Result};

/// Sub-allocation granule of host chunks (cache line).
const HOST_GRANULE: usize = 64;

struct Chunk {
    map: DmaMapping,
    /// Free ranges: offset → length.
    free: Mutex<BTreeMap<usize, usize>>,
    dedicated: bool,
}

/// Host memory the device can reach: chunks of `chunk_bytes` are DMA-mapped once and
/// sub-allocated; larger requests get a dedicated mapping.
pub struct HostPool {
    platform: Arc<dyn Platform>,
    chunk_bytes: usize,
    chunks: Mutex<Vec<Arc<Chunk>>>,
    /// Bytes zeroed when recycled ranges were handed out.
    zeroed: std::sync::atomic::AtomicU64,
}

/// A buffer in host memory with a device-visible IOVA. Freed (returned to its chunk,
/// or unmapped if dedicated) on drop.
pub struct HostBuf {
    chunk: Arc<Chunk>,
    off: usize,
    len: usize,
}

impl HostBuf {
    /// IOVA of byte 0 (OR the arch's host window bit in to get the device address).
    pub fn iova(&self) -> u64 {
        self.chunk.map.iova() + self.off as u64
    }
    /// Host virtual address of byte 0 (the device may access the bytes concurrently).
    pub fn host_ptr(&self) -> *mut u8 {
        self.mem().as_ptr().wrapping_add(self.off)
    }
    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether the buffer is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    fn mem(&self) -> &HostMem {
        self.chunk.map.mem()
    }
    fn range(&self, off: usize, len: usize) -> std::result::Result<usize, platform::HostMemError> {
        match off.checked_add(len) {
            Some(end) if end <= self.len => Ok(self.off + off),
            _ => Err(platform::HostMemError::OutOfRange { offset: off, len, size: self.len }),
        }
    }
    /// Copy out.
    pub fn read(&self, off: usize, buf: &mut [u8]) -> Result<()> {
        let o = self.range(off, buf.len())?;
        Ok(self.mem().read(o, buf)?)
    }
    /// Copy in.
    pub fn write(&self, off: usize, data: &[u8]) -> Result<()> {
        let o = self.range(off, data.len())?;
        Ok(self.mem().write(o, data)?)
    }
    /// Fill.
    pub fn fill(&self, off: usize, len: usize, b: u8) -> Result<()> {
        let o = self.range(off, len)?;
        Ok(self.mem().fill(o, len, b)?)
    }
    /// Little-endian u32.
    pub fn read_u32(&self, off: usize) -> Result<u32> {
        let o = self.range(off, 4)?;
        Ok(self.mem().read_u32(o)?)
    }
    /// Little-endian u32.
    pub fn write_u32(&self, off: usize, v: u32) -> Result<()> {
        let o = self.range(off, 4)?;
        Ok(self.mem().write_u32(o, v)?)
    }
    /// Atomic view of an aligned word the device writes (completion markers, NQ records).
    pub fn atomic_u32(&self, off: usize) -> Result<&std::sync::atomic::AtomicU32> {
        let o = self.range(off, 4)?;
        Ok(self.mem().atomic_u32(o)?)
    }
    /// Atomic view of an aligned 64-bit word.
    pub fn atomic_u64(&self, off: usize) -> Result<&std::sync::atomic::AtomicU64> {
        let o = self.range(off, 8)?;
        Ok(self.mem().atomic_u64(o)?)
    }
}

impl Drop for HostBuf {
    fn drop(&mut self) {
        if self.chunk.dedicated {
            return; // the chunk (and its mapping) goes with the last Arc
        }
        let mut free = platform::sync::lock(&self.chunk.free);
        insert_free(&mut free, self.off, self.len.div_ceil(HOST_GRANULE) * HOST_GRANULE);
    }
}

fn insert_free(free: &mut BTreeMap<usize, usize>, off: usize, len: usize) {
    let (mut s, mut l) = (off, len);
    if let Some((&ps, &pl)) = free.range(..off).next_back() {
        if ps + pl == off {
            free.remove(&ps);
            s = ps;
            l += pl;
        }
    }
    if let Some(&nl) = free.get(&(off + len)) {
        free.remove(&(off + len));
        l += nl;
    }
    free.insert(s, l);
}

impl HostPool {
    /// A pool over `platform` mapping chunks of `chunk_bytes`.
    pub fn new(platform: Arc<dyn Platform>, chunk_bytes: usize) -> Self {
        Self {
            platform,
            chunk_bytes: chunk_bytes.max(4096),
            chunks: Mutex::new(Vec::new()),
            zeroed: Default::default(),
        }
    }

    /// Bytes zeroed so far for new owners of recycled ranges.
    pub fn zeroed_bytes(&self) -> u64 {
        self.zeroed.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Allocate `len` bytes aligned to `align` (≤ 4096; power of two).
    pub fn alloc(&self, len: usize, align: usize) -> Result<HostBuf> {
        platform::failpoint::hit("hal.alloc.host")?;
        if !align.is_power_of_two() || align > 4096 {
            return Err(HalError::BadAlignment(align as u64));
        }
        let len = len.max(1);
        // Checked: a size near usize::MAX must be refused, never rounded to a tiny block.
        let need = len
            .checked_next_multiple_of(HOST_GRANULE)
            .ok_or(HalError::TooLarge { what: "host buffer", size: len as u64 })?;
        if need > self.chunk_bytes / 2 {
            // A fresh anonymous mapping: zero-filled by the kernel.
            let map = self.platform.dma_map(HostMem::alloc(len)?, DmaDir::Bidirectional)?;
            let chunk = Arc::new(Chunk { map, free: Mutex::new(BTreeMap::new()), dedicated: true });
            return Ok(HostBuf { chunk, off: 0, len });
        }
        let mut chunks = platform::sync::lock(&self.chunks);
        for c in chunks.iter() {
            if let Some(off) = take(&c.free, need, align) {
                // A recycled range: zero it so no earlier owner's bytes reach the new one.
                let b = HostBuf { chunk: c.clone(), off, len };
                b.fill(0, len, 0)?;
                self.zeroed.fetch_add(len as u64, std::sync::atomic::Ordering::Relaxed);
                return Ok(b);
            }
        }
        let map = self.platform.dma_map(HostMem::alloc(self.chunk_bytes)?, DmaDir::Bidirectional)?;
        let mut free = BTreeMap::new();
        free.insert(0, map.len());
        let c = Arc::new(Chunk { map, free: Mutex::new(free), dedicated: false });
        let off = take(&c.free, need, align).ok_or(HalError::BadAlignment(align as u64))?;
        chunks.push(c.clone());
        Ok(HostBuf { chunk: c, off, len })
    }

    /// Unmap chunks with no live buffers.
    pub fn trim(&self) {
        let mut chunks = platform::sync::lock(&self.chunks);
        chunks.retain(|c| Arc::strong_count(c) > 1);
    }

    /// Copy out `out.len()` bytes at IOVA `iova` when they lie inside one of the pool's shared
    /// chunks (small buffers: notification rings, completion markers); `false` when they do
    /// not (dedicated mappings are not searched). Nothing is written.
    pub fn read_iova(&self, iova: u64, out: &mut [u8]) -> Result<bool> {
        let chunks = platform::sync::lock(&self.chunks);
        for c in chunks.iter() {
            let base = c.map.iova();
            let Some(off) = iova.checked_sub(base) else { continue };
            let Some(end) = off.checked_add(out.len() as u64) else { continue };
            if end <= c.map.len() as u64 {
                c.map.mem().read(off as usize, out)?;
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// (chunks mapped, bytes mapped).
    pub fn usage(&self) -> (usize, usize) {
        let chunks = platform::sync::lock(&self.chunks);
        (chunks.len(), chunks.iter().map(|c| c.map.len()).sum())
    }
}

fn take(free: &Mutex<BTreeMap<usize, usize>>, need: usize, align: usize) -> Option<usize> {
    let mut f = platform::sync::lock(free);
    let (start, size, at) = f.iter().find_map(|(&s, &l)| {
        let at = s.checked_next_multiple_of(align)?;
        (at.checked_add(need)? <= s + l).then_some((s, l, at))
    })?;
    f.remove(&start);
    if at > start {
        f.insert(start, at - start);
    }
    if at + need < start + size {
        f.insert(at + need, start + size - at - need);
    }
    Some(at)
}

// ------------------------------------------------------------------------- device memory

/// One HBM channel: binary buddy allocator over `[base, base + size)`.
struct Buddy {
    base: u64,
    min_order: u32,
    /// Free blocks per order (offsets relative to base).
    free: Vec<BTreeSet<u64>>,
    /// Live allocations: offset → order.
    live: BTreeMap<u64, u32>,
    used: u64,
    capacity: u64,
}

impl Buddy {
    fn new(base: u64, size: u64, min_order: u32) -> Self {
        let max_order = 63 - size.max(1).leading_zeros();
        let mut free = vec![BTreeSet::new(); max_order as usize + 1];
        // Carve [0, size) into maximal aligned power-of-two blocks.
        let mut off = 0u64;
        while off < size {
            let mut o = max_order;
            while o > min_order && (!off.is_multiple_of(1 << o) || off + (1 << o) > size) {
                o -= 1;
            }
            if off + (1 << o) > size {
                break;
            }
            free[o as usize].insert(off);
            off += 1 << o;
        }
        let capacity = off;
        Self { base, min_order, free, live: BTreeMap::new(), used: 0, capacity }
    }

    fn alloc(&mut self, size: u64, align: u64) -> Option<u64> {
        // Checked: `next_power_of_two` of a size above 2^63 would wrap to a tiny block.
        let need = size.max(1).checked_next_power_of_two()?.max(align).max(1 << self.min_order);
        let order = need.trailing_zeros();
        let from = (order as usize..self.free.len()).find(|&o| !self.free[o].is_empty())?;
        let off = *self.free[from].iter().next()?;
        self.free[from].remove(&off);
        let mut o = from;
        while o > order as usize {
            o -= 1;
            self.free[o].insert(off + (1 << o));
        }
        self.live.insert(off, order);
        self.used += 1 << order;
        Some(self.base + off)
    }

    /// Take exactly the block `[addr, addr + size)` (`size` a power of two of at least the
    /// granule, `addr` aligned to it), if all of it is free: split the free block holding it
    /// down to that size. `None` when any part of it is allocated or outside the channel.
    fn alloc_at(&mut self, addr: u64, size: u64) -> Option<u64> {
        if !size.is_power_of_two() || size < 1 << self.min_order {
            return None;
        }
        let off = addr.checked_sub(self.base)?;
        let order = size.trailing_zeros();
        if !off.is_multiple_of(size) || off.checked_add(size)? > self.capacity {
            return None;
        }
        // The free block containing it: at most one order holds an ancestor of the block.
        let (from, start) = (order as usize..self.free.len()).find_map(|o| {
            let start = off & !((1u64 << o) - 1);
            self.free[o].contains(&start).then_some((o, start))
        })?;
        self.free[from].remove(&start);
        let (mut o, mut cur) = (from, start);
        while o > order as usize {
            o -= 1;
            // Keep the half holding the block, free the other.
            let (lo, hi) = (cur, cur + (1 << o));
            if off >= hi {
                self.free[o].insert(lo);
                cur = hi;
            } else {
                self.free[o].insert(hi);
                cur = lo;
            }
        }
        self.live.insert(off, order);
        self.used += size;
        Some(self.base + off)
    }

    fn free(&mut self, addr: u64) -> Option<u64> {
        let mut off = addr.checked_sub(self.base)?;
        let mut order = self.live.remove(&off)?;
        let bytes = 1u64 << order;
        self.used -= bytes;
        while (order as usize) + 1 < self.free.len() {
            let buddy = off ^ (1 << order);
            if !self.free[order as usize].remove(&buddy) {
                break;
            }
            off = off.min(buddy);
            order += 1;
        }
        self.free[order as usize].insert(off);
        Some(bytes)
    }

    fn largest_free(&self) -> u64 {
        self.free.iter().enumerate().rev().find(|(_, s)| !s.is_empty()).map(|(o, _)| 1u64 << o).unwrap_or(0)
    }
}

/// Device-memory allocator: one buddy per HBM channel, firmware carve-out skipped.
pub struct DevAllocator {
    chans: Vec<Mutex<Buddy>>,
    platform: Arc<dyn Platform>,
}

/// A device-memory allocation; freed on drop.
pub struct DevBuf {
    alloc: Arc<DevAllocator>,
    chan: usize,
    addr: u64,
    len: u64,
}

impl DevBuf {
    /// Device (chip) address.
    pub fn addr(&self) -> u64 {
        self.addr
    }
    /// Requested length.
    pub fn len(&self) -> u64 {
        self.len
    }
    /// Whether empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// HBM channel.
    pub fn chan(&self) -> usize {
        self.chan
    }
}

impl Drop for DevBuf {
    fn drop(&mut self) {
        self.alloc.platform.device_memory_freed(self.addr, self.len);
        let mut b = platform::sync::lock(&self.alloc.chans[self.chan]);
        if let Some(bytes) = b.free(self.addr) {
            self.alloc.platform.account_device_memory(-(bytes as i64));
        }
    }
}

/// Usage of one channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChanUsage {
    pub capacity: u64,
    pub used: u64,
    pub largest_free: u64,
    pub allocations: usize,
}

impl DevAllocator {
    /// Channels at `bases` (device addresses) of `size` bytes each; the first `carveout`
    /// bytes of every channel are the firmware's; `min_alloc` is the granule.
    pub fn new(platform: Arc<dyn Platform>, bases: &[u64], size: u64, carveout: u64, min_alloc: u64) -> Self {
        // A granule above 2^63 cannot be rounded up: use the largest power of two.
        let min_order = min_alloc.max(1).checked_next_power_of_two().map_or(63, |g| g.trailing_zeros());
        let chans = bases
            .iter()
            .map(|&b| Mutex::new(Buddy::new(b + carveout, size.saturating_sub(carveout), min_order)))
            .collect();
        Self { chans, platform }
    }

    /// `channels` channels of which only the given ranges are allocatable (a process on a
    /// shared device: the memory the broker granted it, one range per channel at most); the
    /// other channels are empty. A second range for a channel, or a channel out of range, is
    /// [`HalError::DeviceRange`].
    pub fn from_ranges(
        platform: Arc<dyn Platform>,
        channels: usize,
        ranges: &[crate::HbmRange],
        min_alloc: u64,
    ) -> Result<Self> {
        let min_order = min_alloc.max(1).checked_next_power_of_two().map_or(63, |g| g.trailing_zeros());
        let mut chans: Vec<Option<Buddy>> = (0..channels).map(|_| None).collect();
        for r in ranges {
            let slot = chans.get_mut(r.chan).ok_or(HalError::DeviceRange { addr: r.addr, len: r.len })?;
            if slot.is_some() || r.addr.checked_add(r.len).is_none() {
                return Err(HalError::DeviceRange { addr: r.addr, len: r.len });
            }
            *slot = Some(Buddy::new(r.addr, r.len, min_order));
        }
        let chans = chans.into_iter().map(|b| Mutex::new(b.unwrap_or_else(|| Buddy::new(0, 0, min_order)))).collect();
        Ok(Self { chans, platform })
    }

    /// Allocate `len` bytes aligned to `align` on channel `chan`.
    pub fn alloc(self: &Arc<Self>, chan: usize, len: u64, align: u64) -> Result<DevBuf> {
        platform::failpoint::hit("hal.alloc.hbm")?;
        if !align.is_power_of_two() {
            return Err(HalError::BadAlignment(align));
        }
        let c = self.chans.get(chan).ok_or(HalError::OutOfDeviceMemory { chan, size: len, free: 0 })?;
        let mut b = platform::sync::lock(c);
        let addr =
            b.alloc(len, align).ok_or(HalError::OutOfDeviceMemory { chan, size: len, free: b.capacity - b.used })?;
        let bytes = 1u64 << b.live.get(&(addr - b.base)).copied().unwrap_or(0);
        drop(b);
        self.platform.account_device_memory(bytes as i64);
        Ok(DevBuf { alloc: self.clone(), chan, addr, len })
    }

    /// Take exactly `[addr, addr + len)` on channel `chan` (`len` a power of two, `addr`
    /// aligned to it): memory granted before this allocator existed — a restarted broker
    /// re-registering what its predecessor granted to processes that still use it. Memory any
    /// part of which is already taken, or outside the channel, is [`HalError::DeviceRange`].
    pub fn reserve(self: &Arc<Self>, chan: usize, addr: u64, len: u64) -> Result<DevBuf> {
        let c = self.chans.get(chan).ok_or(HalError::DeviceRange { addr, len })?;
        let mut b = platform::sync::lock(c);
        let at = b.alloc_at(addr, len).ok_or(HalError::DeviceRange { addr, len })?;
        drop(b);
        self.platform.account_device_memory(len as i64);
        Ok(DevBuf { alloc: self.clone(), chan, addr: at, len })
    }

    /// Number of channels.
    pub fn channels(&self) -> usize {
        self.chans.len()
    }

    /// Usage of channel `chan`.
    pub fn usage(&self, chan: usize) -> Option<ChanUsage> {
        let b = platform::sync::lock(self.chans.get(chan)?);
        Some(ChanUsage {
            capacity: b.capacity,
            used: b.used,
            largest_free: b.largest_free(),
            allocations: b.live.len(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_process_allocates_only_in_its_granted_ranges() {
        let sim = sim::SimDevice::new(sim::SimConfig::new(&csr_maps::CAYMAN).hbm_bytes(1 << 26)).unwrap();
        let p: Arc<dyn Platform> = Arc::new(sim);
        let r = |chan, addr, len| crate::HbmRange { chan, addr, len };
        let a = Arc::new(DevAllocator::from_ranges(p.clone(), 4, &[r(1, 0x1000_0000, 1 << 20)], 4096).unwrap());
        assert!(a.alloc(0, 4096, 64).is_err(), "no range on channel 0");
        let b = a.alloc(1, 4096, 64).unwrap();
        assert!(b.addr() >= 0x1000_0000 && b.addr() + 4096 <= 0x1000_0000 + (1 << 20));
        assert!(a.alloc(1, 2 << 20, 64).is_err(), "larger than the grant");
        assert_eq!(a.usage(1).map(|u| u.capacity), Some(1 << 20));
        assert!(DevAllocator::from_ranges(p.clone(), 4, &[r(1, 0, 4096), r(1, 8192, 4096)], 4096).is_err());
        assert!(DevAllocator::from_ranges(p.clone(), 4, &[r(4, 0, 4096)], 4096).is_err());
        assert!(DevAllocator::from_ranges(p, 4, &[r(0, u64::MAX, 2)], 4096).is_err());
    }

    #[test]
    fn buddy_splits_and_coalesces() {
        let mut b = Buddy::new(0x100_0000, 1 << 20, 12);
        let a = b.alloc(4096, 1).unwrap();
        let c = b.alloc(5000, 1).unwrap();
        assert_eq!(a, 0x100_0000);
        assert_eq!(c, 0x100_2000, "8 KiB block, 8 KiB aligned");
        assert_eq!(b.used, 4096 + 8192);
        assert_eq!(b.alloc(1 << 20, 1), None);
        b.free(a).unwrap();
        b.free(c).unwrap();
        assert_eq!(b.used, 0);
        assert_eq!(b.largest_free(), 1 << 20, "fully coalesced");
        assert!(b.free(0x100_0000).is_none(), "double free refused");
        let big = b.alloc(3 << 18, 1 << 19).unwrap();
        assert_eq!(big % (1 << 19), 0);
    }

    #[test]
    fn a_block_is_reserved_where_it_is_asked_for() {
        let mut b = Buddy::new(0x100_0000, 1 << 20, 12);
        assert_eq!(b.alloc_at(0x100_0000 + (3 << 16), 1 << 16), Some(0x100_0000 + (3 << 16)));
        assert_eq!(b.used, 1 << 16);
        assert_eq!(b.alloc_at(0x100_0000 + (3 << 16), 1 << 12), None, "inside a taken block");
        assert_eq!(b.alloc_at(0x100_0000, 1 << 20), None, "overlaps a taken block");
        assert_eq!(b.alloc_at(0x100_0000 + 4096, 1 << 16), None, "misaligned");
        assert_eq!(b.alloc_at(0x100_0000, 3 << 12), None, "not a power of two");
        assert_eq!(b.alloc_at(0x100_0000 + (1 << 20), 1 << 12), None, "outside");
        assert_eq!(b.alloc_at(0xff_f000, 1 << 12), None, "below the base");
        // The rest stays allocatable: fifteen 64 KiB blocks.
        for _ in 0..15 {
            assert!(b.alloc(1 << 16, 1 << 16).is_some());
        }
        assert_eq!(b.alloc(1 << 12, 1), None);
        b.free(0x100_0000 + (3 << 16)).unwrap();
        assert_eq!(b.alloc(1 << 16, 1), Some(0x100_0000 + (3 << 16)));
    }

    #[test]
    fn non_power_of_two_capacity() {
        let b = Buddy::new(0, 24 << 30, 12);
        assert_eq!(b.capacity, 24 << 30);
        assert_eq!(b.largest_free(), 16 << 30);
    }

    proptest! {
        #[test]
        fn buddy_never_overlaps(ops in proptest::collection::vec((1u64..100_000, 0u32..4, any::<bool>()), 1..200)) {
            let mut b = Buddy::new(0x1000_0000, 4 << 20, 12);
            let mut live: Vec<(u64, u64)> = vec![];
            for (size, al, free) in ops {
                if free && !live.is_empty() {
                    let (a, _) = live.remove(size as usize % live.len());
                    prop_assert!(b.free(a).is_some());
                } else if let Some(a) = b.alloc(size, 1 << (al * 4)) {
                    prop_assert_eq!(a % (1 << (al * 4)), 0);
                    for &(x, l) in &live {
                        prop_assert!(a + size <= x || x + l <= a, "overlap");
                    }
                    live.push((a, size));
                }
            }
            for (a, _) in live { b.free(a); }
            prop_assert_eq!(b.used, 0);
            prop_assert_eq!(b.largest_free(), 4 << 20);
        }

        /// A block asked for at an address is given exactly when no live block overlaps it,
        /// and never overlaps one; what is freed coalesces back to one block.
        #[test]
        fn reserved_blocks_never_overlap(ops in proptest::collection::vec((0u64..1024, 12u32..18, 0u8..3), 1..200)) {
            let base = 0x1000_0000;
            let mut b = Buddy::new(base, 4 << 20, 12);
            let mut live: Vec<(u64, u64)> = vec![];
            for (at, order, op) in ops {
                let size = 1u64 << order;
                match op {
                    0 if !live.is_empty() => {
                        let (a, _) = live.remove(at as usize % live.len());
                        prop_assert!(b.free(a).is_some());
                    }
                    1 => {
                        if let Some(a) = b.alloc(size, 1) {
                            live.push((a, size));
                        }
                    }
                    _ => {
                        let a = base + (at << 12) / size * size;
                        let free = a + size <= base + (4 << 20) && live.iter().all(|&(x, l)| a + size <= x || x + l <= a);
                        let got = b.alloc_at(a, size);
                        prop_assert_eq!(got.is_some(), free, "at {:#x} size {:#x}", a, size);
                        if got.is_some() {
                            live.push((a, size));
                        }
                    }
                }
                for (i, &(x, l)) in live.iter().enumerate() {
                    for &(y, m) in &live[i + 1..] {
                        prop_assert!(x + l <= y || y + m <= x, "overlap");
                    }
                }
            }
            for (a, _) in live { b.free(a); }
            prop_assert_eq!(b.used, 0);
            prop_assert_eq!(b.largest_free(), 4 << 20);
        }
    }
}
