//! Architectures and the KELF `target` gate (NRT_FACTS.md §1.7).

use std::fmt;

/// NeuronCore generations (`al_hal_tpb_arch_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Arch {
    /// NeuronCore-v2 (Trn1, Inf2), arch_type 2.
    Sunda,
    /// NeuronCore-v3 (Trn2), arch_type 3.
    Cayman,
    /// NeuronCore-v4, arch_type 4.
    Mariana,
}

impl Arch {
    /// `al_hal_tpb_arch_type` value.
    pub fn arch_type(self) -> u32 {
        match self {
            Arch::Sunda => 2,
            Arch::Cayman => 3,
            Arch::Mariana => 4,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Arch::Sunda => "sunda",
            Arch::Cayman => "cayman",
            Arch::Mariana => "mariana",
        }
    }
    /// Parses an arch name (`sunda`/`v2`, `cayman`/`v3`, `mariana`/`v4`).
    pub fn from_name(s: &str) -> Option<Self> {
        match s {
            "sunda" | "v2" => Some(Arch::Sunda),
            "cayman" | "v3" => Some(Arch::Cayman),
            "mariana" | "v4" => Some(Arch::Mariana),
            _ => None,
        }
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What a KELF `target` string selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Target {
    /// One architecture (`""` means Sunda).
    Arch(Arch),
    /// `"*"`: whatever the hardware is.
    Any,
}

impl Target {
    /// Parses a KELF `target`; `None` for an invalid target ("Invalid target" → NRT_INVALID).
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "*" => Some(Target::Any),
            "" => Some(Target::Arch(Arch::Sunda)),
            s => Arch::from_name(s).map(Target::Arch),
        }
    }
    pub fn matches(self, arch: Arch) -> bool {
        match self {
            Target::Any => true,
            Target::Arch(a) => a == arch,
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Any => f.write_str("*"),
            Target::Arch(a) => a.fmt(f),
        }
    }
}
