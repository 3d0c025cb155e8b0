//! The 1024-byte NEFF header (NRT_FACTS.md §1.1).
