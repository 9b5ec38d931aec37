//! Candle reference of Gemma4Unified.
