//! Which ids to prefer for an allocation (GetPreferredAllocation): a contiguous run of logical
//! cores within one device first (a lease is one contiguous range per device, and a NEFF's
//! cores must be adjacent), the run that fits the tightest so larger runs stay whole; else a
//! run over adjacent devices (global numbering continues from one device to the next); else
//! the must-include ids and the lowest others. The same choice serves whole devices.

/// Choose `size` ids from `available` (sorted or not) that include every id of `must`.
/// `group` gives an id's device; `busy` says an id is leased right now (avoided while others
/// fit). Returns fewer than `size` only when `available` has fewer.
pub fn prefer(
    available: &[u32],
    must: &[u32],
    size: usize,
    group: impl Fn(u32) -> u32,
    busy: impl Fn(u32) -> bool,
) -> Vec<u32> {
    let mut avail: Vec<u32> = available.to_vec();
    avail.sort_unstable();
    avail.dedup();
    let mut must: Vec<u32> = must.iter().copied().filter(|m| avail.contains(m)).collect();
    must.sort_unstable();
    must.dedup();
    if size == 0 || must.len() >= size {
        must.truncate(size.max(must.len()));
        return must;
    }
    // Free ids first; ids held right now only when nothing else fits.
    let free: Vec<u32> = avail.iter().copied().filter(|&i| !busy(i) || must.contains(&i)).collect();
    for pool in [&free, &avail] {
        if let Some(w) = best_window(pool, &must, size, &group, true) {
            return w;
        }
        if let Some(w) = best_window(pool, &must, size, &group, false) {
            return w;
        }
    }
    let mut out = must.clone();
    for &i in free.iter().chain(avail.iter()) {
        if out.len() == size {
            break;
        }
        if !out.contains(&i) {
            out.push(i);
        }
    }
    out.sort_unstable();
    out
}

/// The best window of `size` consecutive ids within `pool` containing `must`: within one group
/// when `same_group`; among candidates the one whose maximal run is shortest (best fit), then
/// the lowest.
fn best_window(
    pool: &[u32],
    must: &[u32],
    size: usize,
    group: &impl Fn(u32) -> u32,
    same_group: bool,
) -> Option<Vec<u32>> {
    // Maximal runs of consecutive ids (and, when asked, of one group).
    let mut runs: Vec<&[u32]> = Vec::new();
    let mut start = 0;
    for i in 1..=pool.len() {
        let breaks =
            i == pool.len() || pool[i] != pool[i - 1] + 1 || (same_group && group(pool[i]) != group(pool[i - 1]));
        if breaks {
            runs.push(&pool[start..i]);
            start = i;
        }
    }
    let mut best: Option<(usize, &[u32])> = None;
    for run in runs.into_iter().filter(|r| r.len() >= size) {
        for w in run.windows(size) {
            if must.iter().all(|m| w.contains(m)) {
                if best.is_none_or(|(len, _)| run.len() < len) {
                    best = Some((run.len(), w));
                }
                break;
            }
        }
    }
    best.map(|(_, w)| w.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dev4(i: u32) -> u32 {
        i / 4
    }

    #[test]
    fn contiguous_cores_within_one_device_first() {
        let none = |_| false;
        assert_eq!(prefer(&[0, 1, 2, 3], &[], 2, dev4, none), vec![0, 1]);
        // 1 taken: the run 2-3 fits exactly, better than breaking 4-7.
        assert_eq!(prefer(&[0, 2, 3, 4, 5, 6, 7], &[], 2, dev4, none), vec![2, 3]);
        // Never across the device boundary while one device has room.
        assert_eq!(prefer(&[2, 3, 4, 5, 6], &[], 3, dev4, none), vec![4, 5, 6]);
        // Only across it when no device has room: adjacent devices.
        assert_eq!(prefer(&[2, 3, 4, 5], &[], 3, dev4, none), vec![2, 3, 4]);
        // Must-include ids are in the window.
        assert_eq!(prefer(&[0, 1, 2, 3], &[2], 2, dev4, none), vec![1, 2]);
        // Nothing contiguous: the must-include ids and the lowest others.
        assert_eq!(prefer(&[0, 2, 5, 7], &[5], 3, dev4, none), vec![0, 2, 5]);
        // Cores a process leases right now are avoided.
        assert_eq!(prefer(&[0, 1, 2, 3], &[], 2, dev4, |i| i < 2), vec![2, 3]);
        // ...unless nothing else fits.
        assert_eq!(prefer(&[0, 1, 2, 3], &[], 3, dev4, |i| i < 2), vec![0, 1, 2]);
        // Fewer available than asked: all of them.
        assert_eq!(prefer(&[3], &[], 2, dev4, none), vec![3]);
        // Must-include ids not available are ignored; size 0 gives nothing.
        assert_eq!(prefer(&[0, 1], &[9], 1, dev4, none), vec![0]);
        assert!(prefer(&[0, 1], &[], 0, dev4, none).is_empty());
    }
}
