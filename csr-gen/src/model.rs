//! The description files as data: what `blocks/*.toml` and `arch/*.toml` may say. Unknown keys
//! are refused (`deny_unknown_fields`), so a misspelt key is an error, not a silent default.

use std::collections::BTreeMap;

use serde::Deserialize;

/// Guard class of a register or field: `csr write` refuses the register without `--force`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Guard {
    /// `dma-address`: the register holds an address the device will DMA to or from.
    DmaAddress,
    /// `reset`: the register resets (part of) the device.
    Reset,
    /// `sequencer-control`: the register starts, stops or redirects a sequencer.
    SequencerControl,
    /// `semaphore`: the register is a semaphore the running model synchronises on.
    Semaphore,
}

impl Guard {
    /// The `csr_maps::meta::Guard` variant name.
    pub fn variant(self) -> &'static str {
        match self {
            Guard::DmaAddress => "DmaAddress",
            Guard::Reset => "Reset",
            Guard::SequencerControl => "SequencerControl",
            Guard::Semaphore => "Semaphore",
        }
    }
}

/// One register block (`blocks/<name>.toml`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BlockFile {
    pub name: String,
    pub description: String,
    pub size: u64,
    pub source: String,
    #[serde(default)]
    pub modeled: bool,
    #[serde(default)]
    pub reg: Vec<RegFile>,
    #[serde(default)]
    pub sub: Vec<SubFile>,
}

/// One register (or register array) of a block (`[[reg]]`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegFile {
    pub name: String,
    pub offset: u64,
    #[serde(default = "w32")]
    pub width: u8,
    pub access: String,
    #[serde(default)]
    pub reset: u64,
    #[serde(default = "one")]
    pub count: u64,
    #[serde(default)]
    pub stride: u64,
    #[serde(default)]
    pub blocked: bool,
    /// Guard class (`dma-address`, `reset`, `sequencer-control`, `semaphore`): `csr write`
    /// refuses the register without `--force`.
    pub guard: Option<Guard>,
    #[serde(default)]
    pub modeled: bool,
    pub source: Option<String>,
    pub desc: String,
    #[serde(default)]
    pub arches: Vec<String>,
    #[serde(default)]
    pub fields: Vec<FieldFile>,
}

/// One bit field of a register (`fields = [...]`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FieldFile {
    pub name: String,
    pub lsb: u8,
    #[serde(default = "one_u8")]
    pub width: u8,
    #[serde(default)]
    pub desc: String,
    /// Guard class of the field (as for a register): a register with a guarded field is
    /// guarded as a whole.
    pub guard: Option<Guard>,
}

/// A sub-block placed inside a block (`[[sub]]`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubFile {
    pub name: String,
    pub block: String,
    pub offset: u64,
    #[serde(default = "one")]
    pub count: u64,
    #[serde(default)]
    pub stride: u64,
}

/// One arch (`arch/<name>.toml`): BAR roles, counts, constants, block instances, regions.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArchFile {
    pub name: String,
    pub kmod_name: String,
    pub nc_version: u8,
    pub aliases: Vec<String>,
    pub pci_vendor: u16,
    pub pci_devices: Vec<u16>,
    pub source: String,
    pub bars: BTreeMap<String, u8>,
    pub counts: BTreeMap<String, u64>,
    pub consts: BTreeMap<String, ConstFile>,
    #[serde(default)]
    pub instance: Vec<InstanceFile>,
    #[serde(default)]
    pub region: Vec<RegionFile>,
}

/// A per-arch constant with its provenance.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConstFile {
    pub value: u64,
    pub source: String,
    pub desc: String,
}

/// A run of instances: indices `first..first+count` at `base + k * stride`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupFile {
    pub first: u64,
    #[serde(default = "one")]
    pub count: u64,
    pub base: u64,
    #[serde(default)]
    pub stride: u64,
}

/// A named placement of a block in a BAR (`[[instance]]`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InstanceFile {
    pub name: String,
    pub block: String,
    pub bar: u8,
    pub source: String,
    #[serde(default)]
    pub modeled: bool,
    pub desc: String,
    pub groups: Vec<GroupFile>,
}

/// A named memory region of a BAR (`[[region]]`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegionFile {
    pub name: String,
    pub bar: u8,
    pub size: u64,
    #[serde(default)]
    pub dev_bases: Vec<u64>,
    pub source: String,
    pub desc: String,
    pub groups: Vec<GroupFile>,
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
