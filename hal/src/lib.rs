//! hal (see DESIGN.md)
