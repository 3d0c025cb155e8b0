//! Architectures and the KELF `target` gate (docs/facts/libnrt.md §1.7).
//!
//! The architecture is csr-maps' [`Arch`] (one description per NeuronCore generation); a KELF
//! `target` names one by codename or generation (`sunda`/`v2`, `cayman`/`v3`, `mariana`/`v4`).
//! A generation csr-maps does not describe is an invalid target, never a guess.

use std::fmt;

pub use csr_maps::Arch;

/// The arch a KELF `target` (or a tool's `--arch`) names: a codename or `v<generation>`;
/// `None` for anything else (an unknown generation included).
pub fn arch_by_name(s: &str) -> Option<&'static Arch> {
    let generation = s.strip_prefix('v').and_then(|v| v.parse::<u8>().ok());
    csr_maps::ARCHES.iter().copied().find(|a| a.name == s || generation == Some(a.nc_version))
}

/// What a KELF `target` string selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// One architecture (`""` means Sunda).
    Arch(&'static Arch),
    /// `"*"`: whatever the hardware is.
    Any,
}

impl Target {
    /// Parses a KELF `target`; `None` for an invalid target ("Invalid target" → NRT_INVALID).
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "*" => Some(Target::Any),
            "" => Some(Target::Arch(&csr_maps::SUNDA)),
            s => arch_by_name(s).map(Target::Arch),
        }
    }
    pub fn matches(self, arch: &Arch) -> bool {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_name_known_generations_only() {
        assert_eq!(Target::parse(""), Some(Target::Arch(&csr_maps::SUNDA)));
        assert_eq!(Target::parse("v3"), Some(Target::Arch(&csr_maps::CAYMAN)));
        assert_eq!(Target::parse("mariana"), Some(Target::Arch(&csr_maps::MARIANA)));
        assert_eq!(Target::parse("*"), Some(Target::Any));
        for bad in ["v1", "v5", "v9", "v", "trn1", "sunda2"] {
            assert_eq!(Target::parse(bad), None, "{bad}");
        }
    }
}
