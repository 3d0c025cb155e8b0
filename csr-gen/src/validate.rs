//! The consistency checks: what the TOML shape cannot say. Every size sum is checked
//! arithmetic, so a description with huge numbers is an error, not an overflow.

use std::collections::{BTreeMap, BTreeSet};

use crate::model::{ArchFile, BlockFile};
use crate::GenError;

fn invalid<T>(msg: String) -> Result<T, GenError> {
    Err(GenError::Invalid(msg))
}

/// Byte just past the last element of `count` items of `size` bytes, `stride` apart, from
/// `offset`; `None` when `count` is 0 or the sum overflows.
fn end_of(offset: u64, count: u64, stride: u64, size: u64) -> Option<u64> {
    count.checked_sub(1)?.checked_mul(stride)?.checked_add(offset)?.checked_add(size)
}

/// Checks every block, every arch, and the arches against each other.
pub(crate) fn all(blocks: &BTreeMap<String, BlockFile>, arches: &[ArchFile]) -> Result<(), GenError> {
    for b in blocks.values() {
        block(b, blocks)?;
    }
    let Some(first) = arches.first() else { return invalid("no arch descriptions".into()) };
    // Every arch must declare the same counts, consts, bars keys (values differ).
    let key_sets = |a: &ArchFile| {
        (
            a.counts.keys().cloned().collect::<Vec<_>>(),
            a.consts.keys().cloned().collect::<Vec<_>>(),
            a.bars.keys().cloned().collect::<Vec<_>>(),
        )
    };
    let want = key_sets(first);
    for a in arches {
        if key_sets(a) != want {
            return invalid(format!("arch {} declares different counts/consts/bars keys than {}", a.name, first.name));
        }
        for i in &a.instance {
            let Some(b) = blocks.get(&i.block) else {
                return invalid(format!("{}: instance {} of unknown block", a.name, i.name));
            };
            for g in &i.groups {
                if g.count > 1 && g.stride < b.size {
                    return invalid(format!("{}: instance {} stride below block size", a.name, i.name));
                }
            }
        }
    }
    let mut inst_blocks: BTreeMap<&str, &str> = BTreeMap::new();
    for a in arches {
        for i in &a.instance {
            if let Some(prev) = inst_blocks.insert(&i.name, &i.block) {
                if prev != i.block {
                    return invalid(format!("instance {} has different blocks across arches", i.name));
                }
            }
        }
    }
    Ok(())
}

fn block(b: &BlockFile, blocks: &BTreeMap<String, BlockFile>) -> Result<(), GenError> {
    let mut names = BTreeSet::new();
    for r in &b.reg {
        if !names.insert(r.name.clone()) {
            return invalid(format!("{}: duplicate name {}", b.name, r.name));
        }
        if r.width != 32 && r.width != 64 {
            return invalid(format!("{}.{}: width must be 32 or 64", b.name, r.name));
        }
        if !["rw", "ro", "wo", "w1c", "w1s", "w0c"].contains(&r.access.as_str()) {
            return invalid(format!("{}.{}: bad access {}", b.name, r.name, r.access));
        }
        let bytes = r.width as u64 / 8;
        if r.offset % bytes != 0 {
            return invalid(format!("{}.{}: misaligned offset", b.name, r.name));
        }
        if r.count > 1 && r.stride < bytes {
            return invalid(format!("{}.{}: array stride too small", b.name, r.name));
        }
        let Some(end) = end_of(r.offset, r.count, r.stride, bytes) else {
            return invalid(format!(
                "{}.{}: count must be at least 1 and the array must fit in 64 bits",
                b.name, r.name
            ));
        };
        if end > b.size {
            return invalid(format!("{}.{}: ends at {end:#x} beyond block size {:#x}", b.name, r.name, b.size));
        }
        let mut used = 0u64;
        let mut fnames = BTreeSet::new();
        for f in &r.fields {
            if f.width == 0 || f.lsb as u32 + f.width as u32 > r.width as u32 {
                return invalid(format!("{}.{}.{}: field exceeds register", b.name, r.name, f.name));
            }
            let mask = if f.width == 64 { u64::MAX } else { ((1u64 << f.width) - 1) << f.lsb };
            if used & mask != 0 {
                return invalid(format!("{}.{}.{}: overlapping field", b.name, r.name, f.name));
            }
            used |= mask;
            if !fnames.insert(f.name.clone()) {
                return invalid(format!("{}.{}: duplicate field {}", b.name, r.name, f.name));
            }
        }
    }
    for s in &b.sub {
        if !names.insert(s.name.clone()) {
            return invalid(format!("{}: duplicate name {}", b.name, s.name));
        }
        let Some(sb) = blocks.get(&s.block) else {
            return invalid(format!("{}.{}: unknown block {}", b.name, s.name, s.block));
        };
        if s.count > 1 && s.stride < sb.size {
            return invalid(format!("{}.{}: stride smaller than block", b.name, s.name));
        }
        match end_of(s.offset, s.count, s.stride, sb.size) {
            None => {
                return invalid(format!(
                    "{}.{}: count must be at least 1 and the array must fit in 64 bits",
                    b.name, s.name
                ))
            }
            Some(end) if end > b.size => return invalid(format!("{}.{}: sub-block exceeds parent", b.name, s.name)),
            Some(_) => {}
        }
    }
    Ok(())
}
