//! Simulated HBM that costs host memory only for what is written.
//!
//! Each stack is one private anonymous host mapping reserved lazily (`MAP_NORESERVE`): a page
//! the device never wrote reads as zeros (the kernel's shared zero page) and costs nothing.
//! What would still fill it is writing zeros, and the driver writes a lot of them: every
//! allocation is zeroed before it reaches a new owner (the trust rule), by DMA from a zeroed
//! host buffer, as on hardware. So every write into HBM — DMA (UDMA copies, sequencer writes,
//! collectives) and BAR4 MMIO alike — goes through [`store`], which keeps, per 64 KiB granule,
//! whether the granule may hold a non-zero byte (one bit per granule, in the device state:
//! every HBM write happens under the device lock):
//!
//! - a piece of at least [`ZERO_MIN`] bytes whose source is all zeros, into a granule that
//!   holds only zeros, is not written (no page is touched);
//! - zeros over whole granules that may hold data make them clean again: a run of at least
//!   [`DROP_MIN`] bytes (in one store: one DMA packet) gives its pages back to the kernel (`MADV_DONTNEED`: they read as zeros
//!   and cost nothing until written again), a shorter one is zeroed in place;
//! - anything else is copied and its granules marked.
//!
//! Reads are plain copies. Writes below [`ZERO_MIN`] (the execute path's descriptors, records
//! and small tensors) are copied without looking at their bytes: one bit set per granule.

use std::ptr::NonNull;

use platform::{HostMem, PageSize};

use crate::SimError;

/// The tracking granule: 64 KiB (a multiple of every host base page size Linux uses).
pub(crate) const GRANULE: usize = 64 << 10;
/// Writes shorter than this are copied without a look at their bytes.
pub(crate) const ZERO_MIN: usize = 4 << 10;
/// Runs of zeroed granules at least this long give their pages back; shorter ones are zeroed
/// in place (a model that clears a small scratch tile every execute keeps its pages, rather
/// than paying a system call and the page faults of refilling them). A zero run that
/// continues the last one zeroed in place joins it (`Written::pending`), so a driver's zero
/// fill, one 64 KiB packet at a time, gives its pages back once 512 KiB of it are zeroed.
pub(crate) const DROP_MIN: usize = 512 << 10;

/// A page of zeros to compare sources against.
static ZEROS: [u8; 4096] = [0; 4096];

/// One HBM stack: `len` bytes of sparse host memory.
pub(crate) struct Stack {
    mem: HostMem,
    len: u64,
}

impl Stack {
    /// A stack of `len` bytes, all zero, no host page allocated.
    pub fn new(len: u64) -> Result<Self, SimError> {
        let n = usize::try_from(len.max(1)).map_err(|_| SimError::HbmSize(len))?;
        Ok(Self { mem: HostMem::alloc_with(n, PageSize::Base4K)?, len })
    }

    /// Host address of byte 0.
    #[inline]
    pub fn base(&self) -> usize {
        self.mem.as_ptr() as usize
    }

    fn granules(&self) -> usize {
        (self.len as usize).div_ceil(GRANULE)
    }

    /// Read `buf.len()` bytes at `off` (out of range: `None`).
    pub fn read(&self, off: u64, buf: &mut [u8]) -> Option<()> {
        let end = off.checked_add(buf.len() as u64)?;
        if end > self.len {
            return None;
        }
        self.mem.read(off as usize, buf).ok()
    }
}

/// Per stack and granule: whether the granule may hold a non-zero byte; and what [`store`]
/// saved. Lives in the device state (under its lock).
#[derive(Default)]
pub(crate) struct Written {
    bits: Vec<Vec<u64>>,
    /// Bytes of pages given back to the kernel by zero writes.
    pub dropped: u64,
    /// Zero bytes not written because their granule held only zeros.
    pub skipped: u64,
    /// The last run of granules zeroed in place because it was shorter than [`DROP_MIN`]:
    /// (stack, offset, bytes). A zero run that continues it (the next packet of a zero fill
    /// written one packet per 64 KiB descriptor, as the kmod and hal write copies) joins it,
    /// and once together they reach [`DROP_MIN`] their pages are given back. Any other write
    /// into its range forgets it.
    pending: Option<(usize, usize, usize)>,
}

impl Written {
    pub fn new(stacks: &[Stack]) -> Self {
        Self { bits: stacks.iter().map(|s| vec![0u64; s.granules().div_ceil(64)]).collect(), ..Self::default() }
    }

    #[inline]
    fn set(&mut self, k: usize, g: usize) {
        if let Some(w) = self.bits.get_mut(k).and_then(|b| b.get_mut(g / 64)) {
            *w |= 1 << (g % 64);
        }
    }

    #[inline]
    fn clear(&mut self, k: usize, g: usize) {
        if let Some(w) = self.bits.get_mut(k).and_then(|b| b.get_mut(g / 64)) {
            *w &= !(1 << (g % 64));
        }
    }

    /// Whether granule `g` of stack `k` holds only zeros (an unknown granule: no).
    #[inline]
    fn clean(&self, k: usize, g: usize) -> bool {
        self.bits.get(k).and_then(|b| b.get(g / 64)).is_some_and(|w| w & (1 << (g % 64)) == 0)
    }

    /// Mark every granule `[off, off + n)` touches.
    #[inline]
    pub fn mark(&mut self, k: usize, off: usize, n: usize) {
        if n == 0 {
            return;
        }
        for g in off / GRANULE..=(off + n - 1) / GRANULE {
            self.set(k, g);
        }
    }

    /// Bytes in granules that may hold data: at most what the written HBM costs the host
    /// (pages zeroed in place stay allocated without being counted).
    pub fn bytes(&self) -> u64 {
        let n: u64 = self.bits.iter().flatten().map(|w| u64::from(w.count_ones())).sum();
        n * GRANULE as u64
    }
}

/// Whether the `n` bytes at `p` are all zero.
///
/// # Safety
/// `p..p + n` must be readable.
unsafe fn is_zero(p: *const u8, n: usize) -> bool {
    let mut o = 0;
    while o < n {
        let k = (n - o).min(ZEROS.len());
        // SAFETY: `p + o .. p + o + k` is inside the readable range the caller vouches for;
        // `ZEROS` holds at least `k` bytes. memcmp only reads.
        if unsafe { nix::libc::memcmp(p.add(o).cast(), ZEROS.as_ptr().cast(), k) } != 0 {
            return false;
        }
        o += k;
    }
    true
}

/// Write `n` bytes from `src` at offset `off` of stack `k` (`stack` is `k`), tracking and
/// saving zeros as the module documentation says. The caller has range-checked `off + n`
/// against the stack and holds the device lock (`written` is the state's).
///
/// # Safety
/// `src..src + n` must be readable. It may overlap the destination (a device-to-device copy):
/// then it is moved like `memmove`, without the zero tracking.
pub(crate) unsafe fn store(stack: &Stack, written: &mut Written, k: usize, off: usize, src: *const u8, n: usize) {
    if let Some((pk, po, pl)) = written.pending {
        if pk == k && off < po + pl && po < off + n {
            written.pending = None;
        }
    }
    let dst = stack.base() + off;
    let (s, d) = (src as usize, dst);
    let overlap = s < d + n && d < s + n;
    if n < ZERO_MIN || overlap {
        written.mark(k, off, n);
        // SAFETY: the destination lies in the stack's live mapping (range checked by the
        // caller); the source is readable (caller); `copy` allows overlap.
        unsafe { std::ptr::copy(src, dst as *mut u8, n) };
        return;
    }
    // A run of whole granules that may hold data and are to be zeroed: (offset, bytes).
    let mut run: Option<(usize, usize)> = None;
    let mut o = 0;
    while o < n {
        let at = off + o;
        let g = at / GRANULE;
        let piece = (GRANULE - at % GRANULE).min(n - o);
        // SAFETY: `src + o .. src + o + piece` is inside the caller's readable source.
        let zero = unsafe { is_zero(src.add(o), piece) };
        if zero && written.clean(k, g) {
            written.skipped += piece as u64;
            flush(stack, written, k, run.take());
        } else if zero && piece == GRANULE {
            run = match run {
                Some((start, len)) => Some((start, len + GRANULE)),
                None => Some((at, GRANULE)),
            };
        } else {
            flush(stack, written, k, run.take());
            if !zero {
                written.set(k, g);
            }
            // SAFETY: source readable (caller), destination inside the stack, no overlap
            // (checked above).
            unsafe { std::ptr::copy_nonoverlapping(src.add(o), (dst + o) as *mut u8, piece) };
        }
        o += piece;
    }
    flush(stack, written, k, run);
}

/// Zero a run of whole granules (offset, bytes) of stack `k` and mark it clean: pages given
/// back for a run of at least [`DROP_MIN`] bytes, else zeroed in place.
fn flush(stack: &Stack, written: &mut Written, k: usize, run: Option<(usize, usize)>) {
    let Some((off, len)) = run else { return };
    for g in off / GRANULE..(off + len) / GRANULE {
        written.clear(k, g);
    }
    // A run continuing the last one zeroed in place joins it.
    let (start, total) = match written.pending.take() {
        Some((pk, po, pl)) if pk == k && po + pl == off => (po, pl + len),
        _ => (off, len),
    };
    if total < DROP_MIN {
        // SAFETY: inside the stack's mapping (whole granules of the range `store` checked).
        unsafe { std::ptr::write_bytes((stack.base() + off) as *mut u8, 0, len) };
        written.pending = Some((k, start, total));
        return;
    }
    let (off, len) = (start, total);
    let p = (stack.base() + off) as *mut u8;
    let dropped = len >= DROP_MIN
        && NonNull::new(p.cast::<std::ffi::c_void>()).is_some_and(|a| {
            // SAFETY: `[p, p + len)` is whole granules inside the stack's mapping, which this
            // module alone owns: a private anonymous mapping (`HostMem::alloc_with`, 4 KiB
            // pages), never shared with another process or mapped for a real device's DMA, and
            // never referenced as a Rust slice (every access is a raw copy). MADV_DONTNEED on
            // such a mapping makes the range read as zeros from its next access on; the
            // mapping itself stays valid, so a concurrent raw read sees old bytes or zeros.
            // Granules are 64 KiB from a page-aligned base: the range is page aligned.
            unsafe { nix::sys::mman::madvise(a, len, nix::sys::mman::MmapAdvise::MADV_DONTNEED) }.is_ok()
        });
    if dropped {
        written.dropped += len as u64;
    } else {
        // SAFETY: inside the stack's mapping (as above).
        unsafe { std::ptr::write_bytes(p, 0, len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(s: &Stack, w: &mut Written, off: usize, data: &[u8]) {
        assert!(off + data.len() <= s.len as usize);
        // SAFETY: `data` is a live slice; the range is checked above.
        unsafe { store(s, w, 0, off, data.as_ptr(), data.len()) };
    }

    fn get(s: &Stack, off: usize, n: usize) -> Vec<u8> {
        let mut b = vec![0u8; n];
        s.read(off as u64, &mut b).unwrap();
        b
    }

    #[test]
    fn zeros_into_clean_granules_are_not_written() {
        let s = Stack::new(8 << 20).unwrap();
        let mut w = Written::new(std::slice::from_ref(&s));
        put(&s, &mut w, 12345, &vec![0u8; 3 << 20]);
        assert_eq!(w.bytes(), 0);
        assert_eq!(w.skipped, 3 << 20);
        assert!(get(&s, 0, 8 << 20).iter().all(|&b| b == 0));
    }

    #[test]
    fn data_round_trips_and_zeroing_cleans_it() {
        let s = Stack::new(8 << 20).unwrap();
        let mut w = Written::new(std::slice::from_ref(&s));
        let data: Vec<u8> = (0..(2 << 20) + 777).map(|i| (i % 251) as u8 + 1).collect();
        put(&s, &mut w, 100, &data);
        assert_eq!(get(&s, 100, data.len()), data);
        // Marked: every granule the data touches (an unaligned start spans one more).
        assert_eq!(w.bytes(), (data.len() + 100).div_ceil(GRANULE) as u64 * GRANULE as u64);
        // Zeros over all of it: the whole granules are dropped (a run over 512 KiB), the
        // partial first and last granule zeroed in place (still marked).
        put(&s, &mut w, 100, &vec![0u8; data.len()]);
        assert!(get(&s, 0, 4 << 20).iter().all(|&b| b == 0));
        assert_eq!(w.bytes(), 2 * GRANULE as u64);
        assert!(w.dropped >= (2 << 20) - 2 * GRANULE as u64);
        // The dropped range is writable again.
        put(&s, &mut w, 1 << 20, &[7u8; 8192]);
        assert_eq!(get(&s, 1 << 20, 8192), vec![7u8; 8192]);
    }

    #[test]
    fn short_zero_runs_are_zeroed_in_place() {
        let s = Stack::new(1 << 20).unwrap();
        let mut w = Written::new(std::slice::from_ref(&s));
        put(&s, &mut w, 0, &[9u8; 4 * GRANULE]);
        put(&s, &mut w, 0, &vec![0u8; 4 * GRANULE]);
        assert_eq!((w.bytes(), w.dropped), (0, 0));
        assert!(get(&s, 0, 4 * GRANULE).iter().all(|&b| b == 0));
    }

    #[test]
    fn a_zero_fill_written_one_granule_at_a_time_gives_its_pages_back() {
        // The kmod's and hal's copies are one 64 KiB descriptor per packet: a zero fill
        // reaches the stack one granule per store.
        let s = Stack::new(8 << 20).unwrap();
        let mut w = Written::new(std::slice::from_ref(&s));
        put(&s, &mut w, 0, &vec![7u8; 2 << 20]);
        for g in 0..(2 << 20) / GRANULE {
            put(&s, &mut w, g * GRANULE, &vec![0u8; GRANULE]);
        }
        assert!(get(&s, 0, 2 << 20).iter().all(|&b| b == 0));
        assert_eq!(w.bytes(), 0);
        assert!(w.dropped >= (2 << 20) - DROP_MIN as u64, "dropped {}", w.dropped);
    }

    #[test]
    fn data_written_into_a_run_zeroed_in_place_is_never_given_back() {
        let s = Stack::new(8 << 20).unwrap();
        let mut w = Written::new(std::slice::from_ref(&s));
        put(&s, &mut w, 0, &vec![7u8; 2 << 20]);
        // Zero four granules in place (a pending run), write data into the second, then
        // continue the zero fill past the run's end: the data stays.
        for g in 0..4 {
            put(&s, &mut w, g * GRANULE, &vec![0u8; GRANULE]);
        }
        put(&s, &mut w, GRANULE, &[9u8; 4096]);
        for g in 4..(2 << 20) / GRANULE {
            put(&s, &mut w, g * GRANULE, &vec![0u8; GRANULE]);
        }
        assert_eq!(get(&s, GRANULE, 4096), vec![9u8; 4096]);
        assert!(get(&s, 4 * GRANULE, (2 << 20) - 4 * GRANULE).iter().all(|&b| b == 0));
    }

    #[test]
    fn a_zero_tail_after_data_keeps_the_data() {
        let s = Stack::new(1 << 20).unwrap();
        let mut w = Written::new(std::slice::from_ref(&s));
        put(&s, &mut w, 0, &[5u8; 2 * GRANULE]);
        // Half data, half zeros, in one write: the data granule keeps its bytes, the other
        // becomes zeros.
        let mut mixed = vec![3u8; GRANULE];
        mixed.extend(std::iter::repeat_n(0u8, GRANULE));
        put(&s, &mut w, 0, &mixed);
        assert_eq!(get(&s, 0, 2 * GRANULE), mixed);
        assert_eq!(w.bytes(), GRANULE as u64);
    }

    #[test]
    fn small_writes_are_marked_even_when_zero() {
        let s = Stack::new(1 << 20).unwrap();
        let mut w = Written::new(std::slice::from_ref(&s));
        put(&s, &mut w, GRANULE - 2, &[0u8; 4]);
        assert_eq!(w.bytes(), 2 * GRANULE as u64);
    }

    #[test]
    fn overlapping_moves_are_memmove() {
        let s = Stack::new(1 << 20).unwrap();
        let mut w = Written::new(std::slice::from_ref(&s));
        let data: Vec<u8> = (0..3 * GRANULE).map(|i| (i % 13) as u8).collect();
        put(&s, &mut w, 0, &data);
        // Move [0, 3G) to [G, 4G) within the stack.
        // SAFETY: both ranges inside the 1 MiB stack.
        unsafe { store(&s, &mut w, 0, GRANULE, s.base() as *const u8, 3 * GRANULE) };
        assert_eq!(get(&s, GRANULE, 3 * GRANULE), data);
    }
}
