//! layout (skeleton; see docs/DESIGN.md)
