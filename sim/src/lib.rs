//! sim (see DESIGN.md)
