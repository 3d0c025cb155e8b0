//! IOVA allocation inside the ranges the IOMMU declares valid.

use std::collections::BTreeMap;

use crate::error::{Error, Result};

/// An inclusive IOVA range `[start, last]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IovaRange {
    pub start: u64,
    pub last: u64,
}

impl IovaRange {
    /// `[start, start + len)` as an inclusive range; `None` if empty or overflowing.
    pub fn with_len(start: u64, len: u64) -> Option<Self> {
        let last = start.checked_add(len.checked_sub(1)?)?;
        Some(Self { start, last })
    }
    fn intersect(&self, o: &IovaRange) -> Option<IovaRange> {
        let start = self.start.max(o.start);
        let last = self.last.min(o.last);
        (start <= last).then_some(IovaRange { start, last })
    }
}

/// First-fit allocator of aligned IOVA blocks within the valid ranges (and an optional
/// window, for devices that can address only part of the space).
#[derive(Debug, Clone)]
pub struct IovaAllocator {
    ranges: Vec<IovaRange>,
    used: BTreeMap<u64, u64>,
}

fn align_up(v: u64, align: u64) -> Option<u64> {
    let mask = align - 1;
    v.checked_add(mask).map(|x| x & !mask)
}

impl IovaAllocator {
    /// An allocator over `valid` ranges, clipped to `window` when given. Page 0 is never
    /// handed out, so an IOVA of 0 always means "none".
    pub fn new(valid: &[IovaRange], window: Option<IovaRange>) -> Self {
        let mut ranges: Vec<IovaRange> = valid
            .iter()
            .filter_map(|r| match window {
                Some(w) => r.intersect(&w),
                None => Some(*r),
            })
            .filter_map(
                |r| if r.start == 0 { (r.last >= 4096).then_some(IovaRange { start: 4096, ..r }) } else { Some(r) },
            )
            .collect();
        ranges.sort_by_key(|r| r.start);
        Self { ranges, used: BTreeMap::new() }
    }

    /// The usable ranges.
    pub fn ranges(&self) -> &[IovaRange] {
        &self.ranges
    }

    /// Allocate `len` bytes aligned to `align` (a power of two).
    pub fn alloc(&mut self, len: u64, align: u64) -> Result<u64> {
        let exhausted = Error::IovaExhausted { len, align };
        if len == 0 || !align.is_power_of_two() {
            return Err(exhausted);
        }
        for r in &self.ranges {
            let Some(mut cand) = align_up(r.start, align) else { continue };
            while let Some(end) = cand.checked_add(len - 1) {
                if end > r.last {
                    break;
                }
                // The closest used block at or before `end` that overlaps [cand, end]?
                match self.used.range(..=end).next_back() {
                    Some((&s, &l)) if s + (l - 1) >= cand => match s.checked_add(l).and_then(|e| align_up(e, align)) {
                        Some(next) => cand = next,
                        None => break,
                    },
                    _ => {
                        self.used.insert(cand, len);
                        return Ok(cand);
                    }
                }
            }
        }
        Err(exhausted)
    }

    /// Return a block given by [`alloc`](Self::alloc). Unknown addresses are ignored.
    pub fn free(&mut self, iova: u64) -> bool {
        self.used.remove(&iova).is_some()
    }

    /// Bytes allocated now.
    pub fn allocated(&self) -> u64 {
        self.used.values().sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(start: u64, last: u64) -> IovaRange {
        IovaRange { start, last }
    }

    #[test]
    fn respects_reserved_holes() {
        // The ranges an Intel IOMMU reports: the MSI window 0xfee00000-0xfeefffff is reserved.
        let mut a = IovaAllocator::new(&[r(0, 0xfedf_ffff), r(0xfef0_0000, 0x7f_ffff_ffff)], None);
        assert_eq!(a.alloc(4096, 4096).unwrap(), 4096, "page 0 is skipped");
        let big = a.alloc(0xfed0_0000, 4096).unwrap();
        assert_eq!(big, 8192);
        // The next block does not fit below the hole and must land above it.
        let above = a.alloc(0x10_0000, 0x10_0000).unwrap();
        assert!(above >= 0xfef0_0000, "{above:#x}");
        assert!(!(0xfee0_0000..=0xfeef_ffff).contains(&above));
    }

    #[test]
    fn aligns_and_reuses_freed_blocks() {
        let mut a = IovaAllocator::new(&[r(0, (1 << 32) - 1)], None);
        let x = a.alloc(4096, 4096).unwrap();
        let y = a.alloc(2 << 20, 2 << 20).unwrap();
        assert_eq!(y % (2 << 20), 0);
        let z = a.alloc(4096, 4096).unwrap();
        assert!(z > x && z < y, "small blocks fill the gap before the aligned one");
        assert!(a.free(x));
        assert!(!a.free(x));
        assert_eq!(a.alloc(4096, 4096).unwrap(), x);
        assert_eq!(a.allocated(), 4096 * 2 + (2 << 20));
    }

    #[test]
    fn window_and_exhaustion() {
        let mut a = IovaAllocator::new(&[r(0, u64::MAX)], Some(r(0x10_0000, 0x1000_0000 - 1)));
        assert_eq!(a.ranges(), &[r(0x10_0000, 0x0fff_ffff)]);
        let b = a.alloc(0x0ff0_0000, 4096).unwrap();
        assert_eq!(b, 0x10_0000);
        let e = a.alloc(4096, 4096).unwrap_err();
        assert!(e.to_string().contains("exhausted"), "{e}");
        assert!(a.alloc(0, 4096).is_err());
        assert!(a.alloc(4096, 3).is_err());
        let mut top = IovaAllocator::new(&[r(u64::MAX - 0xfff, u64::MAX)], None);
        assert_eq!(top.alloc(4096, 4096).unwrap(), u64::MAX - 0xfff);
        assert!(top.alloc(4096, 4096).is_err());
        assert_eq!(IovaRange::with_len(4096, 0), None);
        assert_eq!(IovaRange::with_len(u64::MAX, 2), None);
    }
}
