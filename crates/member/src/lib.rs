//! member (skeleton; see docs/DESIGN.md)
