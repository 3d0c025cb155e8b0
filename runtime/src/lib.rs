//! runtime (see DESIGN.md)
