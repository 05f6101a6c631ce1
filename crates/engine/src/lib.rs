//! engine (skeleton; see docs/DESIGN.md)
