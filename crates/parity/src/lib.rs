//! parity (skeleton; see docs/DESIGN.md)
