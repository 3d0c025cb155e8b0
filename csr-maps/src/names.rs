//! Register names: paths (`udma[33].m2s.q[0].tail_inc`) and BAR offsets, both ways.
//!
//! [`Arch::registers`] lists every register instance of an arch with its canonical path;
//! [`Arch::resolve`] turns a path into the register, [`Arch::lookup`] a BAR offset;
//! [`Arch::register`] takes either (what a user types), and [`Arch::registers_under`] a path
//! prefix (`udma[33].m2s`, every instance when an index is left out).

use platform::Mmio;

use crate::meta::{self, Access, BlockDef, FieldDef, RegDef};
use crate::{Arch, CsrError};

/// One register instance, fully placed: what `csr list` prints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegInstance {
    /// Path such as `udma[33].m2s.q[0].tail_inc`.
    pub name: String,
    pub bar: u8,
    /// Absolute byte offset in the BAR.
    pub offset: u64,
    pub def: &'static RegDef,
    /// Whether the register's placement or layout is modeled (a project choice where the
    /// public sources are silent): the register, its block or the instance placing it.
    pub modeled: bool,
}

impl RegInstance {
    /// Width in bits.
    pub fn width(&self) -> u8 {
        self.def.width
    }
    /// Access type.
    pub fn access(&self) -> Access {
        self.def.access
    }
    /// Fields.
    pub fn fields(&self) -> &'static [FieldDef] {
        self.def.fields
    }
    /// Read through `mmio`.
    pub fn read(&self, mmio: &dyn Mmio) -> Result<u64, CsrError> {
        Ok(if self.def.width == 64 { mmio.read64(self.offset)? } else { mmio.read32(self.offset)? as u64 })
    }
    /// Write through `mmio`.
    pub fn write(&self, mmio: &dyn Mmio, value: u64) -> Result<(), CsrError> {
        if self.def.width == 64 {
            mmio.write64(self.offset, value)?
        } else {
            mmio.write32(self.offset, value as u32)?
        }
        Ok(())
    }
    /// Decode `value` into (field name, field value) pairs.
    pub fn decode(&self, value: u64) -> Vec<(&'static str, u64)> {
        self.def.fields.iter().map(|f| (f.name, f.get(value))).collect()
    }
}

impl Arch {
    /// Every register instance on this arch, in description order.
    pub fn registers(&self) -> Vec<RegInstance> {
        let mut out = Vec::new();
        for inst in self.instances {
            let Some(b) = meta::block(inst.block) else { continue };
            let single = inst.count() == 1;
            for i in inst.indices() {
                let Some(base) = inst.base(i) else { continue };
                let prefix = if single && i == 0 { inst.name.to_string() } else { format!("{}[{i}]", inst.name) };
                self.walk(b, base, inst.bar, &prefix, inst.modeled, &mut out);
            }
        }
        out
    }

    #[allow(clippy::too_many_arguments)]
    fn walk(&self, b: &'static BlockDef, base: u64, bar: u8, prefix: &str, modeled: bool, out: &mut Vec<RegInstance>) {
        let modeled = modeled || b.modeled;
        for r in b.regs.iter().filter(|r| r.on_arch(self.name)) {
            for k in 0..r.count {
                let name =
                    if r.count > 1 { format!("{prefix}.{}[{k}]", r.name) } else { format!("{prefix}.{}", r.name) };
                let offset = base + r.offset + k * r.stride;
                out.push(RegInstance { name, bar, offset, def: r, modeled: modeled || r.modeled });
            }
        }
        for s in b.subs {
            let Some(sb) = meta::block(s.block) else { continue };
            for k in 0..s.count {
                let p = if s.count > 1 { format!("{prefix}.{}[{k}]", s.name) } else { format!("{prefix}.{}", s.name) };
                self.walk(sb, base + s.offset + k * s.stride, bar, &p, modeled, out);
            }
        }
    }

    /// Resolve a register path (`udma[33].m2s.q[0].tail_inc`, `tpb_sem[1].sem_inc[5]`;
    /// the index of a single-instance element may be omitted).
    pub fn resolve(&self, path: &str) -> Result<RegInstance, CsrError> {
        let parts = parse_path(path)?;
        let bad = |reason: String| CsrError::BadPath { path: path.to_string(), reason };
        let (first, idx0) = &parts[0];
        let inst = self.instance(first).ok_or_else(|| CsrError::UnknownName(path.to_string()))?;
        let i = match idx0 {
            Some(i) => *i,
            None if inst.count() == 1 => inst.indices()[0],
            None => return Err(bad(format!("`{first}` has {} instances: give an index", inst.count()))),
        };
        let mut base = inst.base(i).ok_or_else(|| CsrError::NoInstance { name: first.clone(), index: i })?;
        let mut block = meta::block(inst.block).ok_or_else(|| CsrError::UnknownName(path.to_string()))?;
        let mut canon = if inst.count() == 1 && i == 0 { first.clone() } else { format!("{first}[{i}]") };
        let mut modeled = inst.modeled || block.modeled;
        for (n, (name, idx)) in parts.iter().enumerate().skip(1) {
            let last = n == parts.len() - 1;
            if let Some(s) = block.subs.iter().find(|s| s.name == name.as_str()) {
                let k = elem_index(name, *idx, s.count).map_err(bad)?;
                base += s.offset + k * s.stride;
                canon = if s.count > 1 { format!("{canon}.{name}[{k}]") } else { format!("{canon}.{name}") };
                block = meta::block(s.block).ok_or_else(|| CsrError::UnknownName(path.to_string()))?;
                modeled |= block.modeled;
                if last {
                    return Err(bad(format!("`{name}` is a block, not a register")));
                }
                continue;
            }
            if let Some(r) = block.regs.iter().find(|r| r.name == name.as_str() && r.on_arch(self.name)) {
                if !last {
                    return Err(bad(format!("`{name}` is a register and has no members")));
                }
                let k = elem_index(name, *idx, r.count).map_err(bad)?;
                let name = if r.count > 1 { format!("{canon}.{name}[{k}]") } else { format!("{canon}.{name}") };
                let offset = base + r.offset + k * r.stride;
                return Ok(RegInstance { name, bar: inst.bar, offset, def: r, modeled: modeled || r.modeled });
            }
            let known: Vec<&str> = block.regs.iter().map(|r| r.name).chain(block.subs.iter().map(|s| s.name)).collect();
            return Err(bad(format!("`{name}` is not in block `{}` (has: {})", block.name, known.join(", "))));
        }
        Err(bad("names a block, not a register".to_string()))
    }

    /// The register at BAR `bar` offset `offset` (exact start of a register).
    pub fn lookup(&self, bar: u8, offset: u64) -> Result<RegInstance, CsrError> {
        for inst in self.instances.iter().filter(|i| i.bar == bar) {
            let Some(b) = meta::block(inst.block) else { continue };
            for i in inst.indices() {
                let Some(base) = inst.base(i) else { continue };
                if offset < base || offset >= base + b.size {
                    continue;
                }
                let single = inst.count() == 1;
                let prefix = if single && i == 0 { inst.name.to_string() } else { format!("{}[{i}]", inst.name) };
                if let Some(r) = self.find_in(b, base, inst.bar, offset, &prefix, inst.modeled) {
                    return Ok(r);
                }
            }
        }
        Err(CsrError::NoRegisterAt { bar, offset })
    }

    fn find_in(
        &self,
        b: &'static BlockDef,
        base: u64,
        bar: u8,
        off: u64,
        prefix: &str,
        modeled: bool,
    ) -> Option<RegInstance> {
        let modeled = modeled || b.modeled;
        let rel = off - base;
        for r in b.regs.iter().filter(|r| r.on_arch(self.name)) {
            if rel < r.offset {
                continue;
            }
            let d = rel - r.offset;
            let k = if r.count > 1 { d / r.stride } else { 0 };
            if k < r.count && d == k * r.stride {
                let name =
                    if r.count > 1 { format!("{prefix}.{}[{k}]", r.name) } else { format!("{prefix}.{}", r.name) };
                return Some(RegInstance { name, bar, offset: off, def: r, modeled: modeled || r.modeled });
            }
        }
        for s in b.subs {
            let sb = meta::block(s.block)?;
            if rel < s.offset {
                continue;
            }
            let d = rel - s.offset;
            let k = if s.count > 1 { d / s.stride } else { 0 };
            if k < s.count && d - k * s.stride < sb.size {
                let p = if s.count > 1 { format!("{prefix}.{}[{k}]", s.name) } else { format!("{prefix}.{}", s.name) };
                if let Some(r) = self.find_in(sb, base + s.offset + k * s.stride, bar, off, &p, modeled) {
                    return Some(r);
                }
            }
        }
        None
    }

    /// Whether a user write to BAR offset `offset` must be refused (unless forced):
    /// registers the kmod blocks from userspace writes.
    pub fn write_blocked(&self, bar: u8, offset: u64) -> bool {
        self.lookup(bar, offset).map(|r| r.def.blocked).unwrap_or(false)
    }

    /// A register by path, or by absolute BAR0 offset (`0x…` or decimal: a name never starts
    /// with a digit).
    pub fn register(&self, reg: &str) -> Result<RegInstance, CsrError> {
        if reg.starts_with(|c: char| c.is_ascii_digit()) {
            let off = parse_u64(reg).ok_or_else(|| CsrError::BadOffset(reg.to_string()))?;
            return self.lookup(self.bars.apb, off);
        }
        self.resolve(reg)
    }

    /// Registers whose path is `prefix` or lies under it, in description order (an absolute
    /// offset: that register). An index left out of the prefix matches every instance.
    pub fn registers_under(&self, prefix: &str) -> Result<Vec<RegInstance>, CsrError> {
        let p = prefix.trim().trim_end_matches('.');
        if p.is_empty() {
            return Err(CsrError::EmptyPrefix);
        }
        if p.starts_with(|c: char| c.is_ascii_digit()) {
            return Ok(vec![self.register(p)?]);
        }
        let pc = components(p).ok_or_else(|| CsrError::BadPrefix(p.to_string()))?;
        let regs: Vec<RegInstance> = self.registers().into_iter().filter(|r| is_under(&pc, &r.name)).collect();
        if !regs.is_empty() {
            return Ok(regs);
        }
        // Nothing under it: the resolver says why (unknown name, index out of range, …).
        match self.resolve(p) {
            Ok(r) => Ok(vec![r]),
            Err(e @ CsrError::BadPath { .. }) if !e.to_string().contains("block") => Err(e),
            Err(CsrError::BadPath { .. }) => Err(CsrError::NothingUnder(p.to_string())),
            Err(e) => Err(e),
        }
    }
}

fn elem_index(name: &str, idx: Option<u64>, count: u64) -> Result<u64, String> {
    match idx {
        Some(k) if k < count => Ok(k),
        Some(k) => Err(format!("index {k} of `{name}` out of range (count {count})")),
        None if count == 1 => Ok(0),
        None => Err(format!("`{name}` is an array of {count}: give an index")),
    }
}

fn parse_path(path: &str) -> Result<Vec<(String, Option<u64>)>, CsrError> {
    let bad = |reason: &str| CsrError::BadPath { path: path.to_string(), reason: reason.to_string() };
    let mut out = Vec::new();
    for part in path.trim().split('.') {
        if part.is_empty() {
            return Err(bad("empty component"));
        }
        match part.find('[') {
            Some(p) => {
                let name = &part[..p];
                let rest = &part[p + 1..];
                let Some(num) = rest.strip_suffix(']') else { return Err(bad("missing `]`")) };
                let idx = parse_u64(num).ok_or_else(|| bad("index is not a number"))?;
                if name.is_empty() {
                    return Err(bad("index without a name"));
                }
                out.push((name.to_string(), Some(idx)));
            }
            None => out.push((part.to_string(), None)),
        }
    }
    Ok(out)
}

/// Parse a decimal or `0x` hexadecimal number.
pub fn parse_u64(s: &str) -> Option<u64> {
    let s = s.trim().replace('_', "");
    if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        u64::from_str_radix(h, 16).ok()
    } else {
        s.parse().ok()
    }
}

/// `name[idx]` components of a register path (indices decimal or hex).
fn components(path: &str) -> Option<Vec<(&str, Option<u64>)>> {
    path.split('.')
        .map(|part| match part.split_once('[') {
            Some((n, rest)) => Some((n, Some(parse_u64(rest.strip_suffix(']')?)?))),
            None => Some((part, None)),
        })
        .collect()
}

/// Whether register path `name` lies under `prefix`: components match in order; an index
/// left out of the prefix matches every instance, `[0]` matches a single element.
fn is_under(prefix: &[(&str, Option<u64>)], name: &str) -> bool {
    let Some(rc) = components(name) else { return false };
    rc.len() >= prefix.len()
        && prefix
            .iter()
            .zip(&rc)
            .all(|((pn, pi), (rn, ri))| pn == rn && (pi.is_none() || pi == ri || (*pi == Some(0) && ri.is_none())))
}

#[cfg(test)]
mod tests;
