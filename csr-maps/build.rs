//! Turns the declarative register descriptions (blocks/*.toml, arch/*.toml) into
//! typed Rust: one module per block with register value types and block handles,
//! static metadata tables, and per-arch data.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;

use serde::Deserialize;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BlockFile {
    name: String,
    description: String,
    size: u64,
    source: String,
    #[serde(default)]
    modeled: bool,
    #[serde(default)]
    reg: Vec<RegFile>,
    #[serde(default)]
    sub: Vec<SubFile>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RegFile {
    name: String,
    offset: u64,
    #[serde(default = "w32")]
    width: u8,
    access: String,
    #[serde(default)]
    reset: u64,
    #[serde(default = "one")]
    count: u64,
    #[serde(default)]
    stride: u64,
    #[serde(default)]
    blocked: bool,
    /// Guard class (`dma-address`, `reset`, `sequencer-control`, `semaphore`): `csr write`
    /// refuses the register without `--force`.
    guard: Option<String>,
    #[serde(default)]
    modeled: bool,
    source: Option<String>,
    desc: String,
    #[serde(default)]
    arches: Vec<String>,
    #[serde(default)]
    fields: Vec<FieldFile>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FieldFile {
    name: String,
    lsb: u8,
    #[serde(default = "one_u8")]
    width: u8,
    #[serde(default)]
    desc: String,
    /// Guard class of the field (as for a register): a register with a guarded field is
    /// guarded as a whole.
    guard: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SubFile {
    name: String,
    block: String,
    offset: u64,
    #[serde(default = "one")]
    count: u64,
    #[serde(default)]
    stride: u64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ArchFile {
    name: String,
    kmod_name: String,
    nc_version: u8,
    aliases: Vec<String>,
    pci_vendor: u16,
    pci_devices: Vec<u16>,
    source: String,
    bars: BTreeMap<String, u8>,
    counts: BTreeMap<String, u64>,
    consts: BTreeMap<String, ConstFile>,
    #[serde(default)]
    instance: Vec<InstanceFile>,
    #[serde(default)]
    region: Vec<RegionFile>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ConstFile {
    value: u64,
    source: String,
    desc: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GroupFile {
    first: u64,
    #[serde(default = "one")]
    count: u64,
    base: u64,
    #[serde(default)]
    stride: u64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct InstanceFile {
    name: String,
    block: String,
    bar: u8,
    source: String,
    #[serde(default)]
    modeled: bool,
    desc: String,
    groups: Vec<GroupFile>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RegionFile {
    name: String,
    bar: u8,
    size: u64,
    #[serde(default)]
    dev_bases: Vec<u64>,
    source: String,
    desc: String,
    groups: Vec<GroupFile>,
}

fn w32() -> u8 {
    32
}
fn one() -> u64 {
    1
}
fn one_u8() -> u8 {
    1
}

fn camel(s: &str) -> String {
    s.split('_')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let mut c = p.chars();
            match c.next() {
                Some(f) => f.to_ascii_uppercase().to_string() + c.as_str(),
                None => String::new(),
            }
        })
        .collect()
}

fn ident(s: &str) -> String {
    match s {
        "type" | "match" | "ref" | "mod" | "loop" | "self" | "struct" | "enum" | "fn" | "use" | "move" | "static" => {
            format!("r#{s}")
        }
        _ => s.to_string(),
    }
}

fn read_dir(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    v.sort();
    v
}

/// The `crate::meta::Guard` variant of a TOML guard class.
fn guard_variant(g: &Option<String>, what: &str) -> String {
    match g.as_deref() {
        None => "None".into(),
        Some("dma-address") => "Some(crate::meta::Guard::DmaAddress)".into(),
        Some("reset") => "Some(crate::meta::Guard::Reset)".into(),
        Some("sequencer-control") => "Some(crate::meta::Guard::SequencerControl)".into(),
        Some("semaphore") => "Some(crate::meta::Guard::Semaphore)".into(),
        Some(o) => fail(format!("{what}: unknown guard `{o}` (dma-address, reset, sequencer-control, semaphore)")),
    }
}

fn fail(msg: String) -> ! {
    panic!("csr-maps description error: {msg}")
}

fn validate_block(b: &BlockFile, blocks: &BTreeMap<String, BlockFile>) {
    let mut names = BTreeSet::new();
    for r in &b.reg {
        if !names.insert(r.name.clone()) {
            fail(format!("{}: duplicate name {}", b.name, r.name));
        }
        if r.width != 32 && r.width != 64 {
            fail(format!("{}.{}: width must be 32 or 64", b.name, r.name));
        }
        if !["rw", "ro", "wo", "w1c", "w1s", "w0c"].contains(&r.access.as_str()) {
            fail(format!("{}.{}: bad access {}", b.name, r.name, r.access));
        }
        let bytes = r.width as u64 / 8;
        if r.offset % bytes != 0 {
            fail(format!("{}.{}: misaligned offset", b.name, r.name));
        }
        if r.count > 1 && r.stride < bytes {
            fail(format!("{}.{}: array stride too small", b.name, r.name));
        }
        let end = r.offset + (r.count - 1) * r.stride + bytes;
        if end > b.size {
            fail(format!("{}.{}: ends at {end:#x} beyond block size {:#x}", b.name, r.name, b.size));
        }
        let mut used = 0u64;
        let mut fnames = BTreeSet::new();
        for f in &r.fields {
            if f.width == 0 || f.lsb as u32 + f.width as u32 > r.width as u32 {
                fail(format!("{}.{}.{}: field exceeds register", b.name, r.name, f.name));
            }
            let mask = if f.width == 64 { u64::MAX } else { ((1u64 << f.width) - 1) << f.lsb };
            if used & mask != 0 {
                fail(format!("{}.{}.{}: overlapping field", b.name, r.name, f.name));
            }
            used |= mask;
            if !fnames.insert(f.name.clone()) {
                fail(format!("{}.{}: duplicate field {}", b.name, r.name, f.name));
            }
        }
    }
    for s in &b.sub {
        if !names.insert(s.name.clone()) {
            fail(format!("{}: duplicate name {}", b.name, s.name));
        }
        let Some(sb) = blocks.get(&s.block) else { fail(format!("{}.{}: unknown block {}", b.name, s.name, s.block)) };
        if s.count > 1 && s.stride < sb.size {
            fail(format!("{}.{}: stride smaller than block", b.name, s.name));
        }
        if s.offset + (s.count - 1) * s.stride + sb.size > b.size {
            fail(format!("{}.{}: sub-block exceeds parent", b.name, s.name));
        }
    }
}

fn main() {
    // At run time, not compile time: a build-script binary reused from another checkout (a
    // shared or copied target directory) must still read this checkout's descriptions.
    let manifest = std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_else(|| fail("CARGO_MANIFEST_DIR not set".into()));
    let root = Path::new(&manifest);
    println!("cargo:rerun-if-changed=blocks");
    println!("cargo:rerun-if-changed=arch");
    let mut blocks = BTreeMap::new();
    for p in read_dir(&root.join("blocks")) {
        println!("cargo:rerun-if-changed={}", p.display());
        let text = std::fs::read_to_string(&p).expect("read block");
        let b: BlockFile = toml::from_str(&text).unwrap_or_else(|e| fail(format!("{}: {e}", p.display())));
        if p.file_stem().and_then(|s| s.to_str()) != Some(b.name.as_str()) {
            fail(format!("{}: file name must equal block name {}", p.display(), b.name));
        }
        blocks.insert(b.name.clone(), b);
    }
    for b in blocks.values() {
        validate_block(b, &blocks);
    }
    let mut arches = Vec::new();
    for p in read_dir(&root.join("arch")) {
        println!("cargo:rerun-if-changed={}", p.display());
        let text = std::fs::read_to_string(&p).expect("read arch");
        let a: ArchFile = toml::from_str(&text).unwrap_or_else(|e| fail(format!("{}: {e}", p.display())));
        arches.push(a);
    }
    // Every arch must declare the same counts, consts, bars, instances and regions (values differ).
    let key_sets = |a: &ArchFile| {
        (
            a.counts.keys().cloned().collect::<Vec<_>>(),
            a.consts.keys().cloned().collect::<Vec<_>>(),
            a.bars.keys().cloned().collect::<Vec<_>>(),
        )
    };
    let first = key_sets(&arches[0]);
    for a in &arches {
        if key_sets(a) != first {
            fail(format!("arch {} declares different counts/consts/bars keys than {}", a.name, arches[0].name));
        }
        for i in &a.instance {
            let Some(b) = blocks.get(&i.block) else {
                fail(format!("{}: instance {} of unknown block", a.name, i.name))
            };
            for g in &i.groups {
                if g.count > 1 && g.stride < b.size {
                    fail(format!("{}: instance {} stride below block size", a.name, i.name));
                }
            }
        }
    }
    let mut inst_names: BTreeMap<String, String> = BTreeMap::new();
    for a in &arches {
        for i in &a.instance {
            if let Some(prev) = inst_names.insert(i.name.clone(), i.block.clone()) {
                if prev != i.block {
                    fail(format!("instance {} has different blocks across arches", i.name));
                }
            }
        }
    }

    let mut out = String::new();
    out.push_str("// @generated by csr-maps/build.rs from blocks/*.toml and arch/*.toml. Do not edit.\n\n");

    // ---- Block modules ----
    out.push_str("/// One module per register block: register value types with typed fields, and a block handle.\npub mod blocks {\n");
    for b in blocks.values() {
        let _ = writeln!(
            out,
            "/// {} (source: {}{})",
            md(&b.description),
            md(&b.source),
            if b.modeled { "; modeled" } else { "" }
        );
        let _ = writeln!(out, "pub mod {} {{", b.name);
        out.push_str("#![allow(clippy::identity_op, clippy::unusual_byte_groupings)]\n#[allow(unused_imports)]\nuse crate::regs::{Reg, RegArray, RegValue};\nuse platform::Mmio;\n\n");
        let _ = writeln!(out, "/// Size of the block in bytes.\npub const SIZE: u64 = {:#x};", b.size);
        for r in &b.reg {
            let ty = camel(&r.name);
            let raw = if r.width == 64 { "u64" } else { "u32" };
            let _ = writeln!(out, "/// `{}`: {}", r.name, md(&r.desc));
            let _ = writeln!(out, "#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]\npub struct {ty}(pub {raw});");
            let _ = writeln!(out, "impl RegValue for {ty} {{\n    const WIDTH: u8 = {};\n    const RESET: u64 = {:#x};\n    fn from_bits(bits: u64) -> Self {{ Self(bits as {raw}) }}\n    fn bits(&self) -> u64 {{ self.0 as u64 }}\n}}", r.width, r.reset);
            let _ = writeln!(out, "impl {ty} {{");
            let _ = writeln!(
                out,
                "    /// The reset value.\n    pub const fn reset_value() -> Self {{ Self({:#x}) }}",
                r.reset
            );
            for f in &r.fields {
                let mask: u64 = if f.width == 64 { u64::MAX } else { (1u64 << f.width) - 1 };
                let fid = ident(&f.name);
                let _ = writeln!(
                    out,
                    "    /// Field `{}` `[{}:{}]`. {}",
                    f.name,
                    f.lsb as u32 + f.width as u32 - 1,
                    f.lsb,
                    md(&f.desc)
                );
                let _ = writeln!(out, "    pub const fn {fid}(self) -> {raw} {{ (self.0 >> {}) & {mask:#x} }}", f.lsb);
                let _ = writeln!(out, "    /// Set field `{}` (excess bits are masked off).", f.name);
                let _ = writeln!(out, "    #[must_use]\n    pub const fn with_{}(self, v: {raw}) -> Self {{ Self((self.0 & !({mask:#x} << {lsb})) | ((v & {mask:#x}) << {lsb})) }}", f.name, lsb = f.lsb);
            }
            let _ = writeln!(out, "}}");
            let _ = writeln!(
                out,
                "/// Offset of `{}` within the block.\npub const {}_OFFSET: u64 = {:#x};",
                r.name,
                r.name.to_uppercase(),
                r.offset
            );
            if r.count > 1 {
                let _ = writeln!(out, "/// Elements in the `{}` array.\npub const {}_COUNT: u64 = {};\n/// Stride of the `{}` array.\npub const {}_STRIDE: u64 = {:#x};", r.name, r.name.to_uppercase(), r.count, r.name, r.name.to_uppercase(), r.stride);
            }
        }
        emit_reg_id(&mut out, b, &blocks);
        let _ = writeln!(out, "/// Handle on one instance of the `{}` block.\n#[derive(Clone, Copy)]\npub struct Block<'a> {{ mmio: &'a dyn Mmio, base: u64 }}", b.name);
        let _ = writeln!(out, "impl<'a> Block<'a> {{");
        let _ = writeln!(out, "    /// The block at byte `base` of `mmio`.\n    pub fn at(mmio: &'a dyn Mmio, base: u64) -> Self {{ Self {{ mmio, base }} }}");
        let _ = writeln!(
            out,
            "    /// Byte offset of the block in its BAR.\n    pub fn base(&self) -> u64 {{ self.base }}"
        );
        for r in &b.reg {
            let ty = camel(&r.name);
            let fid = ident(&r.name);
            if r.count > 1 {
                let _ = writeln!(out, "    /// Register array `{}[{}]`.\n    pub fn {fid}(&self, i: u64) -> Result<Reg<'a, {ty}>, CsrError> {{ RegArray::new(self.mmio, self.base + {:#x}, {}, {:#x}, \"{}\").get(i) }}", r.name, r.count, r.offset, r.count, r.stride, r.name);
            } else {
                let _ = writeln!(out, "    /// Register `{}`.\n    pub fn {fid}(&self) -> Reg<'a, {ty}> {{ Reg::new(self.mmio, self.base + {:#x}) }}", r.name, r.offset);
            }
        }
        for s in &b.sub {
            let fid = ident(&s.name);
            if s.count > 1 {
                let _ = writeln!(out, "    /// Sub-block array `{}[{}]`.\n    pub fn {fid}(&self, i: u64) -> Result<super::{}::Block<'a>, CsrError> {{ if i >= {} {{ return Err(crate::CsrError::Index {{ what: \"{}\", index: i, count: {} }}); }} Ok(super::{}::Block::at(self.mmio, self.base + {:#x} + i * {:#x})) }}", s.name, s.count, s.block, s.count, s.name, s.count, s.block, s.offset, s.stride);
            } else {
                let _ = writeln!(out, "    /// Sub-block `{}`.\n    pub fn {fid}(&self) -> super::{}::Block<'a> {{ super::{}::Block::at(self.mmio, self.base + {:#x}) }}", s.name, s.block, s.block, s.offset);
            }
        }
        let _ = writeln!(out, "}}\n}}");
    }
    out.push_str("}\n\n");

    // ---- Static metadata ----
    out.push_str("/// Metadata of every block (run-time view of the same descriptions).\npub static BLOCKS: &[crate::meta::BlockDef] = &[\n");
    for b in blocks.values() {
        let _ = writeln!(
            out,
            "crate::meta::BlockDef {{ name: {:?}, description: {:?}, size: {:#x}, source: {:?}, modeled: {}, regs: &blocks::{}::REGS, subs: &[",
            b.name, b.description, b.size, b.source, b.modeled, b.name
        );
        for s in &b.sub {
            let _ = write!(
                out,
                "crate::meta::SubDef {{ name: {:?}, block: {:?}, offset: {:#x}, count: {}, stride: {:#x} }},",
                s.name, s.block, s.offset, s.count, s.stride
            );
        }
        out.push_str("] },\n");
    }
    out.push_str("];\n\n");
    emit_instance_ids(&mut out, &blocks, &inst_names);

    // ---- Arch data ----
    let a0 = &arches[0];
    out.push_str("/// Per-arch counts (one field per `[counts]` key of the arch descriptions).\n#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]\npub struct Counts {\n");
    for k in a0.counts.keys() {
        let _ = writeln!(out, "    pub {}: u64,", ident(k));
    }
    out.push_str("}\n/// Per-arch constants: addresses, sizes, masks (one field per `[consts]` key).\n#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]\npub struct Consts {\n");
    for (k, c) in &a0.consts {
        let _ = writeln!(out, "    /// {}\n    pub {}: u64,", md(&c.desc), ident(k));
    }
    out.push_str(
        "}\n/// BAR roles.\n#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]\npub struct Bars {\n",
    );
    for k in a0.bars.keys() {
        let _ = writeln!(out, "    pub {}: u8,", ident(k));
    }
    out.push_str("}\n");
    // Instance accessor struct: typed entry points per instance name.
    out.push_str("impl<'a> crate::Regs<'a> {\n");
    for (n, blk) in &inst_names {
        let _ = writeln!(out, "    /// Instance `{n}[i]` of block `{blk}`.\n    pub fn {}(&self, i: u64) -> Result<blocks::{blk}::Block<'a>, CsrError> {{ let base = self.arch.instance_base({n:?}, i)?; Ok(blocks::{blk}::Block::at(self.mmio, base)) }}", ident(n));
    }
    out.push_str("}\n");
    for a in &arches {
        let up = a.name.to_uppercase();
        let _ = writeln!(out, "/// The `{}` arch (NeuronCore-v{}, kmod {}).", a.name, a.nc_version, a.kmod_name);
        let _ = writeln!(out, "pub static {up}: crate::Arch = crate::Arch {{ name: {:?}, kmod_name: {:?}, nc_version: {}, aliases: &{:?}, pci_vendor: {:#x}, pci_devices: &{:?}, source: {:?},", a.name, a.kmod_name, a.nc_version, a.aliases, a.pci_vendor, a.pci_devices, a.source);
        out.push_str("bars: Bars {");
        for (k, v) in &a.bars {
            let _ = write!(out, "{}: {v},", ident(k));
        }
        out.push_str("}, counts: Counts {");
        for (k, v) in &a.counts {
            let _ = write!(out, "{}: {v},", ident(k));
        }
        out.push_str("}, consts: Consts {");
        for (k, c) in &a.consts {
            let _ = write!(out, "{}: {:#x},", ident(k), c.value);
        }
        out.push_str("}, const_meta: &[");
        for (k, c) in &a.consts {
            let _ = write!(
                out,
                "crate::meta::ConstDef {{ name: {k:?}, value: {:#x}, source: {:?}, desc: {:?} }},",
                c.value, c.source, c.desc
            );
        }
        out.push_str("], instances: &[");
        for i in &a.instance {
            let _ = write!(out, "crate::meta::InstanceDef {{ name: {:?}, id: crate::InstanceId::{}, block: {:?}, bar: {}, source: {:?}, modeled: {}, desc: {:?}, groups: &[", i.name, camel(&i.name), i.block, i.bar, i.source, i.modeled, i.desc);
            for g in &i.groups {
                let _ = write!(
                    out,
                    "crate::meta::Group {{ first: {}, count: {}, base: {:#x}, stride: {:#x} }},",
                    g.first, g.count, g.base, g.stride
                );
            }
            out.push_str("] },");
        }
        out.push_str("], regions: &[");
        for r in &a.region {
            let _ = write!(out, "crate::meta::RegionDef {{ name: {:?}, bar: {}, size: {:#x}, source: {:?}, desc: {:?}, dev_bases: &{:?}, groups: &[", r.name, r.bar, r.size, r.source, r.desc, r.dev_bases);
            for g in &r.groups {
                let _ = write!(
                    out,
                    "crate::meta::Group {{ first: {}, count: {}, base: {:#x}, stride: {:#x} }},",
                    g.first, g.count, g.base, g.stride
                );
            }
            out.push_str("] },");
        }
        out.push_str("] };\n");
    }
    let _ = writeln!(out, "/// Every arch, oldest first.\npub static ARCHES: &[&crate::Arch] = &[{}];", {
        let mut v: Vec<_> = arches.iter().collect();
        v.sort_by_key(|a| a.nc_version);
        v.iter().map(|a| format!("&{}", a.name.to_uppercase())).collect::<Vec<_>>().join(", ")
    });
    out = out.replace("CsrError>", "crate::CsrError>");
    let dst = Path::new(&std::env::var("OUT_DIR").expect("OUT_DIR")).join("generated.rs");
    std::fs::write(dst, out).expect("write generated.rs");
}

/// A description as one line of rustdoc Markdown: brackets and angle brackets escaped (they
/// are register paths and ranges, not links or HTML).
fn md(s: &str) -> String {
    s.replace('\n', " ").replace('[', "\\[").replace(']', "\\]").replace('<', "&lt;").replace('>', "&gt;")
}

/// The `RegDef` table of block `b` (what `BLOCKS[..].regs` points at and `RegId::def` indexes).
fn emit_reg_defs(out: &mut String, b: &BlockFile) {
    let _ = writeln!(out, "/// Metadata of the registers of this block, in description order.\npub static REGS: [crate::meta::RegDef; {}] = [", b.reg.len());
    {
        for r in &b.reg {
            let access = match r.access.as_str() {
                "rw" => "ReadWrite",
                "ro" => "ReadOnly",
                "wo" => "WriteOnly",
                "w1c" => "WriteOneToClear",
                "w0c" => "WriteZeroToClear",
                _ => "WriteOneToSet",
            };
            let _ = write!(out, "crate::meta::RegDef {{ name: {:?}, offset: {:#x}, width: {}, access: crate::meta::Access::{access}, reset: {:#x}, count: {}, stride: {:#x}, blocked: {}, guard: {}, modeled: {}, source: {:?}, desc: {:?}, arches: &{:?}, fields: &[", r.name, r.offset, r.width, r.reset, r.count, r.stride, r.blocked, guard_variant(&r.guard, &format!("{}.{}", b.name, r.name)), r.modeled || b.modeled, r.source.clone().unwrap_or_else(|| b.source.clone()), r.desc, r.arches);
            for f in &r.fields {
                let _ = write!(
                    out,
                    "crate::meta::FieldDef {{ name: {:?}, lsb: {}, width: {}, desc: {:?}, guard: {} }},",
                    f.name,
                    f.lsb,
                    f.width,
                    f.desc,
                    guard_variant(&f.guard, &format!("{}.{}.{}", b.name, r.name, f.name))
                );
            }
            out.push_str("] },\n");
        }
    }
    out.push_str("];\n");
}

/// Block `b`'s register identities: `enum RegId` (one variant per register, carrying the
/// element index of an array, and per sub-block, carrying its index and the register in it),
/// the offset decoder `RegId::at` and the way back (`offset`, `def`, `leaf`), so that code
/// can `match` on registers and a renamed register is a compile error.
fn emit_reg_id(out: &mut String, b: &BlockFile, blocks: &BTreeMap<String, BlockFile>) {
    emit_reg_defs(out, b);
    out.push_str("/// Identity of a register of this block: one variant per register (with the element index of\n/// an array) and per sub-block (with its index, if an array, and the register inside it).\n#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]\npub enum RegId {\n");
    for r in &b.reg {
        let idx = if r.count > 1 { "(u32)" } else { "" };
        let _ = writeln!(
            out,
            "    /// Register `{}`{}.\n    {}{idx},",
            r.name,
            if r.count > 1 { "`[i]`" } else { "" },
            camel(&r.name)
        );
    }
    for s in &b.sub {
        let inner = format!("super::{}::RegId", s.block);
        let fields = if s.count > 1 { format!("(u32, {inner})") } else { format!("({inner})") };
        let _ = writeln!(
            out,
            "    /// A register of sub-block `{}` (block `{}`).\n    {}{fields},",
            s.name,
            s.block,
            camel(&s.name)
        );
    }
    out.push_str("}\n\nimpl RegId {\n");
    // at
    out.push_str("    /// The register starting at byte `rel` of the block, if one does (whatever the arch:\n    /// see [`crate::meta::RegDef::on_arch`]).\n    pub fn at(rel: u64) -> Option<Self> {\n");
    let singles: Vec<&RegFile> = b.reg.iter().filter(|r| r.count == 1).collect();
    if !singles.is_empty() {
        out.push_str("        match rel {\n");
        for r in &singles {
            let _ = writeln!(out, "            {:#x} => return Some(Self::{}),", r.offset, camel(&r.name));
        }
        out.push_str("            _ => {}\n        }\n");
    }
    for r in b.reg.iter().filter(|r| r.count > 1) {
        let _ = writeln!(
            out,
            "        if let Some(d) = rel.checked_sub({off:#x}) {{ if d < {span:#x} && d % {st:#x} == 0 {{ return Some(Self::{v}((d / {st:#x}) as u32)); }} }}",
            off = r.offset,
            span = r.count * r.stride,
            st = r.stride,
            v = camel(&r.name)
        );
    }
    for s in &b.sub {
        let sb = &blocks[&s.block];
        if s.count > 1 {
            let _ = writeln!(
                out,
                "        if let Some(d) = rel.checked_sub({off:#x}) {{ let k = d / {st:#x}; if k < {n} && d - k * {st:#x} < {size:#x} {{ if let Some(r) = super::{blk}::RegId::at(d - k * {st:#x}) {{ return Some(Self::{v}(k as u32, r)); }} }} }}",
                off = s.offset,
                st = s.stride,
                n = s.count,
                size = sb.size,
                blk = s.block,
                v = camel(&s.name)
            );
        } else {
            let _ = writeln!(
                out,
                "        if let Some(d) = rel.checked_sub({off:#x}) {{ if d < {size:#x} {{ if let Some(r) = super::{blk}::RegId::at(d) {{ return Some(Self::{v}(r)); }} }} }}",
                off = s.offset,
                size = sb.size,
                blk = s.block,
                v = camel(&s.name)
            );
        }
    }
    out.push_str("        None\n    }\n");
    // offset
    out.push_str("    /// Byte offset of the register within the block.\n    pub fn offset(self) -> u64 {\n        match self {\n");
    for r in &b.reg {
        if r.count > 1 {
            let _ = writeln!(
                out,
                "            Self::{}(i) => {:#x} + i as u64 * {:#x},",
                camel(&r.name),
                r.offset,
                r.stride
            );
        } else {
            let _ = writeln!(out, "            Self::{} => {:#x},", camel(&r.name), r.offset);
        }
    }
    for s in &b.sub {
        if s.count > 1 {
            let _ = writeln!(
                out,
                "            Self::{}(k, r) => {:#x} + k as u64 * {:#x} + r.offset(),",
                camel(&s.name),
                s.offset,
                s.stride
            );
        } else {
            let _ = writeln!(out, "            Self::{}(r) => {:#x} + r.offset(),", camel(&s.name), s.offset);
        }
    }
    out.push_str("        }\n    }\n");
    // def
    out.push_str("    /// The register's description.\n    pub fn def(self) -> &'static crate::meta::RegDef {\n        match self {\n");
    for (j, r) in b.reg.iter().enumerate() {
        let pat = if r.count > 1 { "(_)" } else { "" };
        let _ = writeln!(out, "            Self::{}{pat} => &REGS[{j}],", camel(&r.name));
    }
    for s in &b.sub {
        let pat = if s.count > 1 { "(_, r)" } else { "(r)" };
        let _ = writeln!(out, "            Self::{}{pat} => r.def(),", camel(&s.name));
    }
    out.push_str("        }\n    }\n");
    // elem
    out.push_str("    /// Element index of a register array (0 for a single register), innermost block.\n    pub fn elem(self) -> u32 {\n        match self {\n");
    for r in &b.reg {
        if r.count > 1 {
            let _ = writeln!(out, "            Self::{}(i) => i,", camel(&r.name));
        } else {
            let _ = writeln!(out, "            Self::{} => 0,", camel(&r.name));
        }
    }
    for s in &b.sub {
        let pat = if s.count > 1 { "(_, r)" } else { "(r)" };
        let _ = writeln!(out, "            Self::{}{pat} => r.elem(),", camel(&s.name));
    }
    out.push_str("        }\n    }\n");
    // leaf
    out.push_str("    /// The register as a member of its innermost block.\n    pub fn leaf(self) -> crate::LeafReg {\n        match self {\n");
    for s in &b.sub {
        let pat = if s.count > 1 { "(_, r)" } else { "(r)" };
        let _ = writeln!(out, "            Self::{}{pat} => r.leaf(),", camel(&s.name));
    }
    if !b.reg.is_empty() {
        let _ = writeln!(out, "            own => crate::LeafReg::{}(own),", camel(&b.name));
    }
    out.push_str("        }\n    }\n}\n");
}

/// Instance identities (`InstanceId`), placed-register identities (`RegId`: instance, index,
/// register within the block) and innermost-block identities (`LeafReg`).
fn emit_instance_ids(out: &mut String, blocks: &BTreeMap<String, BlockFile>, inst_names: &BTreeMap<String, String>) {
    out.push_str("/// Every named block instance of the arch descriptions (`[[instance]]`, over all arches).\n#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]\npub enum InstanceId {\n");
    for (n, blk) in inst_names {
        let _ = writeln!(out, "    /// `{n}[i]` (block `{blk}`).\n    {},", camel(n));
    }
    out.push_str("}\n\n/// A register of a placed block instance: the instance, its index and the register within\n/// the block. Built from a BAR offset by [`RegId::new`] after the instance is found.\n#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]\npub enum RegId {\n");
    for (n, blk) in inst_names {
        let _ = writeln!(out, "    /// A register of `{n}[i]`.\n    {}(u32, blocks::{blk}::RegId),", camel(n));
    }
    out.push_str("}\n\nimpl RegId {\n    /// The register at byte `rel` of instance `index` of `inst`, if one starts there.\n    pub fn new(inst: InstanceId, index: u32, rel: u64) -> Option<Self> {\n        match inst {\n");
    for (n, blk) in inst_names {
        let v = camel(n);
        let _ =
            writeln!(out, "            InstanceId::{v} => blocks::{blk}::RegId::at(rel).map(|r| Self::{v}(index, r)),");
    }
    out.push_str("        }\n    }\n    /// The instance the register belongs to.\n    pub fn instance(self) -> InstanceId {\n        match self {\n");
    for n in inst_names.keys() {
        let v = camel(n);
        let _ = writeln!(out, "            Self::{v}(..) => InstanceId::{v},");
    }
    out.push_str(
        "        }\n    }\n    /// Index of the instance.\n    pub fn index(self) -> u32 {\n        match self {\n",
    );
    for n in inst_names.keys() {
        let _ = writeln!(out, "            Self::{}(i, _) => i,", camel(n));
    }
    for (name, expr) in [
        ("/// Byte offset of the register within its instance.\n    pub fn offset(self) -> u64", "r.offset()"),
        ("/// The register's description.\n    pub fn def(self) -> &'static crate::meta::RegDef", "r.def()"),
        ("/// The register as a member of its innermost block.\n    pub fn leaf(self) -> LeafReg", "r.leaf()"),
        ("/// Element index of a register array (0 for a single register), innermost block.\n    pub fn elem(self) -> u32", "r.elem()"),
    ] {
        let _ = writeln!(out, "        }}\n    }}\n    {name} {{\n        match self {{");
        for n in inst_names.keys() {
            let _ = writeln!(out, "            Self::{}(_, r) => {expr},", camel(n));
        }
    }
    out.push_str("        }\n    }\n}\n\n/// A register as a member of its innermost block (one variant per block with registers):\n/// what code that models a block's layout, whatever contains it, matches on.\n#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]\npub enum LeafReg {\n");
    for b in blocks.values().filter(|b| !b.reg.is_empty()) {
        let _ = writeln!(
            out,
            "    /// A register of block `{}`.\n    {}(blocks::{}::RegId),",
            b.name,
            camel(&b.name),
            b.name
        );
    }
    out.push_str("}\n\n");
}
