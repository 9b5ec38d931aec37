//! Tiers L1..L5.
