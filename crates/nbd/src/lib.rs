//! nbd (skeleton; see docs/DESIGN.md)
