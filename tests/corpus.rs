//! (in progress: being written)
