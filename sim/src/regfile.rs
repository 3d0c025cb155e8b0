//! The stored register values of a device (what a register without block-specific behaviour
//! reads back), by BAR0 offset, and which of them changed since the device last published the
//! registers it publishes to other processes ([`crate::mirror`]).
//!
//! A change to a watched register marks its group (an NC's interrupt controller) dirty; the
//! device republishes dirty groups when its state lock is released.

use rustc_hash::FxHashMap;

#[derive(Default)]
pub(crate) struct RegFile {
    map: FxHashMap<u64, u32>,
    /// Watched offsets, sorted, each with its group.
    watch: Vec<(u64, usize)>,
    /// The watched span `[lo, hi)`: most offsets are outside it and cost one comparison.
    span: (u64, u64),
    /// Per group: changed since last published.
    dirty: Vec<bool>,
    any_dirty: bool,
}

impl RegFile {
    /// The stored value at `off`, if any.
    #[inline]
    pub fn get(&self, off: &u64) -> Option<&u32> {
        self.map.get(off)
    }

    /// Store `v` at `off`.
    #[inline]
    pub fn insert(&mut self, off: u64, v: u32) -> Option<u32> {
        if off >= self.span.0 && off < self.span.1 {
            self.touch(off);
        }
        self.map.insert(off, v)
    }

    /// Forget every stored value (each register reads its reset value again).
    pub fn clear(&mut self) {
        self.map.clear();
        self.all_dirty();
    }

    /// Keep only the values `keep` accepts.
    pub fn retain(&mut self, keep: impl FnMut(&u64, &mut u32) -> bool) {
        self.map.retain(keep);
        self.all_dirty();
    }

    /// Watch `offsets` (each with its group, `< groups`) from now on; every group starts
    /// dirty (to be published).
    pub fn watch(&mut self, mut offsets: Vec<(u64, usize)>, groups: usize) {
        offsets.sort_unstable();
        self.span = match (offsets.first(), offsets.last()) {
            (Some(&(lo, _)), Some(&(hi, _))) => (lo, hi + 1),
            _ => (0, 0),
        };
        self.watch = offsets;
        self.dirty = vec![false; groups];
        self.all_dirty();
    }

    /// The groups changed since the last call, in order (each once); empty (nothing
    /// allocated) when none did.
    pub fn dirty_groups(&mut self) -> Vec<usize> {
        if !std::mem::take(&mut self.any_dirty) {
            return Vec::new();
        }
        self.dirty.iter_mut().enumerate().filter_map(|(g, d)| std::mem::take(d).then_some(g)).collect()
    }

    fn touch(&mut self, off: u64) {
        if let Ok(i) = self.watch.binary_search_by_key(&off, |&(o, _)| o) {
            if let Some(d) = self.watch.get(i).and_then(|&(_, g)| self.dirty.get_mut(g)) {
                *d = true;
                self.any_dirty = true;
            }
        }
    }

    fn all_dirty(&mut self) {
        self.dirty.iter_mut().for_each(|d| *d = true);
        self.any_dirty = !self.dirty.is_empty();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dirty(r: &mut RegFile) -> Vec<usize> {
        r.dirty_groups()
    }

    #[test]
    fn a_change_to_a_watched_register_marks_its_group_once() {
        let mut r = RegFile::default();
        r.insert(0x10, 1);
        assert!(dirty(&mut r).is_empty(), "nothing watched");
        r.watch(vec![(0x100, 1), (0x40, 0), (0x48, 0)], 2);
        assert_eq!(dirty(&mut r), vec![0, 1], "everything starts to be published");
        assert!(dirty(&mut r).is_empty());
        r.insert(0x44, 7); // inside the span, not watched
        r.insert(0x10, 7); // outside
        assert!(dirty(&mut r).is_empty());
        r.insert(0x48, 7);
        r.insert(0x40, 7);
        assert_eq!(dirty(&mut r), vec![0]);
        assert_eq!(r.get(&0x48), Some(&7));
        r.retain(|&k, _| k != 0x48);
        assert_eq!(r.get(&0x48), None);
        assert_eq!(dirty(&mut r), vec![0, 1], "a reset republishes every group");
        r.clear();
        assert_eq!(r.get(&0x40), None);
        assert_eq!(dirty(&mut r), vec![0, 1]);
    }
}
