//! The 64-byte sequencer slot: header, 8-byte events block, instruction payloads (NRT_FACTS.md §2).
