//! Run-time metadata: every block, register, field, instance and region, with
//! its source. Generated from the same descriptions as the typed API.

use serde::Serialize;

/// Access type of a register.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Access {
    /// Read/write.
    #[serde(rename = "rw")]
    ReadWrite,
    /// Read-only.
    #[serde(rename = "ro")]
    ReadOnly,
    /// Write-only (reads return 0 or are undefined).
    #[serde(rename = "wo")]
    WriteOnly,
    /// Write 1 to clear.
    #[serde(rename = "w1c")]
    WriteOneToClear,
    /// Write 1 to set.
    #[serde(rename = "w1s")]
    WriteOneToSet,
    /// Write 0 to clear (writing 1 has no effect): the IOFIC `cause` registers.
    #[serde(rename = "w0c")]
    WriteZeroToClear,
}

impl Access {
    /// Short name (`rw`, `ro`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Access::ReadWrite => "rw",
            Access::ReadOnly => "ro",
            Access::WriteOnly => "wo",
            Access::WriteOneToClear => "w1c",
            Access::WriteOneToSet => "w1s",
            Access::WriteZeroToClear => "w0c",
        }
    }
    /// Whether a read returns the register's content.
    pub fn readable(self) -> bool {
        !matches!(self, Access::WriteOnly)
    }
    /// Whether writes have any effect.
    pub fn writable(self) -> bool {
        !matches!(self, Access::ReadOnly)
    }
}

/// Why `csr write` refuses a register without `--force` (the `guard` attribute of a
/// register or field in `blocks/*.toml`): writing it lets the writer aim the device at memory
/// or state it does not own, or disrupt another user of the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Guard {
    /// Holds a device address the device will DMA to or fetch from (descriptor, completion
    /// and notification ring bases, instruction-fetch bases, Q7/NX log and library addresses).
    DmaAddress,
    /// Resets the device, a NeuronCore or an engine.
    Reset,
    /// Starts, stops or redirects a sequencer engine.
    SequencerControl,
    /// Sets a semaphore other engines or another model wait on.
    Semaphore,
}

impl Guard {
    /// The TOML spelling (`dma-address`, `reset`, `sequencer-control`, `semaphore`).
    pub fn as_str(self) -> &'static str {
        match self {
            Guard::DmaAddress => "dma-address",
            Guard::Reset => "reset",
            Guard::SequencerControl => "sequencer-control",
            Guard::Semaphore => "semaphore",
        }
    }
    /// One line saying what a write could do.
    pub fn reason(self) -> &'static str {
        match self {
            Guard::DmaAddress => "it holds a DMA address: the device would read or write wherever it points",
            Guard::Reset => "it is a reset control: writing it resets the device or a NeuronCore under its users",
            Guard::SequencerControl => {
                "it controls a sequencer engine: writing it starts, stops or redirects a program"
            }
            Guard::Semaphore => "it sets a semaphore: engines and models waiting on it would run on a forged count",
        }
    }
}

/// A bit field of a register.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct FieldDef {
    pub name: &'static str,
    pub lsb: u8,
    pub width: u8,
    #[serde(skip)]
    pub desc: &'static str,
    /// Guard class of this field (see [`Guard`]); a register with a guarded field is guarded.
    pub guard: Option<Guard>,
}

impl FieldDef {
    /// Extract this field from a register value.
    pub fn get(&self, value: u64) -> u64 {
        let mask = if self.width >= 64 { u64::MAX } else { (1u64 << self.width) - 1 };
        (value >> self.lsb) & mask
    }
    /// Replace this field in a register value.
    pub fn set(&self, value: u64, field: u64) -> u64 {
        let mask = if self.width >= 64 { u64::MAX } else { (1u64 << self.width) - 1 };
        (value & !(mask << self.lsb)) | ((field & mask) << self.lsb)
    }
}

/// A register (or register array) of a block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegDef {
    pub name: &'static str,
    pub offset: u64,
    pub width: u8,
    pub access: Access,
    pub reset: u64,
    pub count: u64,
    pub stride: u64,
    /// User writes are refused unless forced (the kmod blocks them).
    pub blocked: bool,
    /// Guard class of the register itself (see [`Guard`]; [`RegDef::guard`] also looks at
    /// the fields).
    pub guard: Option<Guard>,
    pub modeled: bool,
    pub source: &'static str,
    pub desc: &'static str,
    /// Arches where the register exists (empty = all).
    pub arches: &'static [&'static str],
    pub fields: &'static [FieldDef],
}

impl RegDef {
    /// What a read of the register does besides returning its value, when its description
    /// says so (`"clear-on-read"`). The descriptions carry no separate attribute for it: the
    /// only such registers are the ones whose `desc` says "clear on read" (the UDMA AXI
    /// per-queue error status). `None`: a read has no side effect as far as the sources say.
    pub fn read_side_effect(&self) -> Option<&'static str> {
        let d = self.desc.to_ascii_lowercase();
        ["clear on read", "clear-on-read", "cleared on read", "cleared by read"]
            .iter()
            .any(|p| d.contains(p))
            .then_some("clear-on-read")
    }

    /// Whether the register exists on `arch`.
    pub fn on_arch(&self, arch: &str) -> bool {
        self.arches.is_empty() || self.arches.contains(&arch)
    }
    /// The guard that makes `csr write` refuse the register without `--force`: the
    /// register's own, else the first guarded field's (with the field's name).
    pub fn guard(&self) -> Option<(Guard, Option<&'static str>)> {
        if let Some(g) = self.guard {
            return Some((g, None));
        }
        self.fields.iter().find_map(|f| f.guard.map(|g| (g, Some(f.name))))
    }
    /// Width in bytes.
    pub fn bytes(&self) -> u64 {
        self.width as u64 / 8
    }
}

/// A sub-block (or sub-block array) inside a block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SubDef {
    pub name: &'static str,
    pub block: &'static str,
    pub offset: u64,
    pub count: u64,
    pub stride: u64,
}

/// A register block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockDef {
    pub name: &'static str,
    pub description: &'static str,
    pub size: u64,
    pub source: &'static str,
    pub modeled: bool,
    pub regs: &'static [RegDef],
    pub subs: &'static [SubDef],
}

/// A run of instances: indices `first..first+count` at `base + (i-first)*stride`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Group {
    pub first: u64,
    pub count: u64,
    pub base: u64,
    pub stride: u64,
}

/// Where the instances of a block sit in a BAR on one arch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InstanceDef {
    pub name: &'static str,
    /// Typed identity of the instance name (for `match`).
    pub id: crate::InstanceId,
    pub block: &'static str,
    pub bar: u8,
    pub source: &'static str,
    pub modeled: bool,
    pub desc: &'static str,
    pub groups: &'static [Group],
}

impl InstanceDef {
    /// BAR offset of instance `i`, if it exists.
    pub fn base(&self, i: u64) -> Option<u64> {
        self.groups.iter().find(|g| i >= g.first && i < g.first + g.count).map(|g| g.base + (i - g.first) * g.stride)
    }
    /// Every instance index, ascending.
    pub fn indices(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self.groups.iter().flat_map(|g| g.first..g.first + g.count).collect();
        v.sort_unstable();
        v
    }
    /// Number of instances.
    pub fn count(&self) -> u64 {
        self.groups.iter().map(|g| g.count).sum()
    }
}

/// A memory window (state buffer, HBM aperture, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegionDef {
    pub name: &'static str,
    pub bar: u8,
    pub size: u64,
    pub source: &'static str,
    pub desc: &'static str,
    /// Device (chip) address of each instance, where the sources give it.
    pub dev_bases: &'static [u64],
    pub groups: &'static [Group],
}

impl RegionDef {
    /// Device address of instance `i`.
    pub fn dev_base(&self, i: u64) -> Option<u64> {
        self.dev_bases.get(i as usize).copied()
    }
    /// Number of instances.
    pub fn count(&self) -> u64 {
        self.groups.iter().map(|g| g.count).sum()
    }
    /// BAR offset of region instance `i`.
    pub fn base(&self, i: u64) -> Option<u64> {
        self.groups.iter().find(|g| i >= g.first && i < g.first + g.count).map(|g| g.base + (i - g.first) * g.stride)
    }
}

/// A named per-arch constant with its source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConstDef {
    pub name: &'static str,
    pub value: u64,
    pub source: &'static str,
    pub desc: &'static str,
}

/// Look up a block's metadata by name.
pub fn block(name: &str) -> Option<&'static BlockDef> {
    crate::BLOCKS.iter().find(|b| b.name == name)
}
