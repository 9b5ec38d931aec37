//! One safetensors file of a checkpoint, mapped: what both the weight loader and the row tables
//! (PLE rows read through the mapping) hold on to.

use std::path::PathBuf;

use memmap2::Mmap;

/// One safetensors file.
pub(crate) struct Shard {
    pub(crate) path: PathBuf,
    /// `None` for a headers-only source.
    pub(crate) mmap: Option<Mmap>,
    /// Offset of the data section (8-byte length + JSON header).
    pub(crate) data_start: usize,
}
