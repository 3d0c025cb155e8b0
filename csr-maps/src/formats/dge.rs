//! The 4-byte DGE mailbox entry and its gate rule (docs/facts/libnrt.md §6.1, docs/facts/libnrt-runtime-model.md §C).
//!
//! ```text
//! byte 0 reserved (0) | byte 1 priority (higher = lower priority; default 0xFF) | bytes 2-3 bitmask (16 DMA channels; default 0xFFFF)
//! ```

/// Mailboxes per Q7 core.
pub const MAILBOXES: usize = 4;
/// Priority classes a core can carry (ISA classes 1..4; class 0 is the firmware default).
pub const PRIORITY_CLASSES: usize = 4;
/// The value an unused mailbox is reset to (`get_dge_mailbox_addr` resets entries ≥ n).
pub const MAILBOX_RESET: u32 = 0xFFFF_FF00;
/// Highest priority class a DGE op may carry.
pub const MAX_PRIORITY_CLASS: u8 = 4;

/// One mailbox entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DgeMailbox {
    pub reserved: u8,
    /// Higher value = lower priority.
    pub priority: u8,
    /// Enabled DMA channels (bit i = channel i).
    pub bitmask: u16,
}

impl Default for DgeMailbox {
    fn default() -> Self {
        Self::decode(MAILBOX_RESET)
    }
}

impl DgeMailbox {
    /// Encode as the little-endian u32 stored in device DRAM.
    pub fn encode(&self) -> u32 {
        self.reserved as u32 | (self.priority as u32) << 8 | (self.bitmask as u32) << 16
    }
    /// Decode (total).
    pub fn decode(v: u32) -> Self {
        Self { reserved: v as u8, priority: (v >> 8) as u8, bitmask: (v >> 16) as u16 }
    }
}

/// The gate rule: start with all 16 channels enabled; every mailbox whose priority is
/// below the op's (`op_priority > mailbox.priority`) ANDs its bitmask in.
pub fn allowed_channels(op_priority: u8, mailboxes: &[DgeMailbox]) -> u16 {
    mailboxes.iter().filter(|m| op_priority > m.priority).fold(0xFFFF, |acc, m| acc & m.bitmask)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn layout_and_gate() {
        assert_eq!(DgeMailbox::default(), DgeMailbox { reserved: 0, priority: 0xFF, bitmask: 0xFFFF });
        assert_eq!(DgeMailbox { reserved: 0, priority: 2, bitmask: 0x00F0 }.encode(), 0x00F0_0200);
        let mb = [
            DgeMailbox { reserved: 0, priority: 2, bitmask: 0x00FF },
            DgeMailbox { reserved: 0, priority: 5, bitmask: 0x0F0F },
        ];
        assert_eq!(allowed_channels(1, &mb), 0xFFFF);
        assert_eq!(allowed_channels(3, &mb), 0x00FF);
        assert_eq!(allowed_channels(6, &mb), 0x000F);
        assert_eq!(allowed_channels(0xFF, &[DgeMailbox::default()]), 0xFFFF);
    }

    proptest! {
        #[test]
        fn roundtrip(v: u32) {
            prop_assert_eq!(DgeMailbox::decode(v).encode(), v);
        }
    }
}
