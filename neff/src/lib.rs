//! neff (see DESIGN.md)
