//! Gemma4Unified prompt processing (stub; see issue).
