//! metadata (skeleton; see docs/DESIGN.md)
