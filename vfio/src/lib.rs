//! vfio (see DESIGN.md)
