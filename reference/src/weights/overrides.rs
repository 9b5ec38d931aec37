//! Weights that stand in for the checkpoint's: a quantized export's matrices, dequantized, so
//! that the reference computes the function the export claims to compute (the export against
//! the float checkpoint would mix the quantization's cost with the export's bugs).
//!
//! Keys are the text model's parameter names below its prefix (`layers.0.self_attn.q_proj.weight`,
//! `embed_tokens.weight`, `embed_tokens_per_layer.weight`, `per_layer_model_projection.weight`)
//! and `lm_head.weight` for a tied head quantized apart from the embedding. A module name matches
//! a key when it ends with it at a name boundary (`model.language_model.layers.0.…` and
//! `model.layers.0.…` both end with `layers.0.…`), outside the vision tower. Every override must
//! be used by the model; [`crate::Gemma4::load_with_overrides`] fails naming the ones that were not.
//!
//! The data is shared (`Arc`): the f32 reference, the f64 arbiter and the floor of one case read
//! one copy — of the export's packed payload ([`OverrideData::Packed`]), dequantized row by row
//! as a model loads it, so a quantized build costs its own size beside the model, not an f32 copy
//! of every matrix and table (the E2B-width int4 build's tables alone are 4.3 GB in f32).

use std::collections::BTreeMap;
use std::sync::Arc;

use super::activations::MatmulActivations;

/// Rows of a quantized matrix, dequantized on demand from the export's packed payload.
pub trait DequantRows: Send + Sync + std::fmt::Debug {
    /// Rows `start..start + count` into `out` (`count × cols`, row-major, `cols` the matrix's);
    /// an error when the payload cannot be read (it may be read from its file on demand).
    fn rows_into(&self, start: usize, count: usize, out: &mut [f32]) -> std::io::Result<()>;
}

/// An override's values.
#[derive(Debug, Clone)]
pub enum OverrideData {
    /// Row-major f32 values.
    Dense(Arc<Vec<f32>>),
    /// The packed payload, dequantized when read.
    Packed(Arc<dyn DequantRows>),
}

/// One dequantized matrix or table.
#[derive(Debug, Clone)]
pub struct Override {
    /// `[rows, cols]` as the checkpoint stores it (`[out, in]` for a linear weight).
    pub shape: Vec<usize>,
    pub data: OverrideData,
    /// How the export rounds this matmul's activations (MLAS's int8 blocks at MatMulNBits
    /// `accuracy_level` 4, a DynamicQuantizeLinear, a static build's QuantizeLinear on its input
    /// and output): the reference does the same around its matmul ([`super::activations`]).
    pub activations: MatmulActivations,
    /// What the export calls it (the initializer or node), for messages.
    pub source: String,
}

impl Override {
    /// Columns (the second axis).
    pub fn cols(&self) -> usize {
        self.shape.get(1).copied().unwrap_or(1)
    }

    /// The whole matrix in f32, row-major or `transposed`, dequantized a band of rows at a time
    /// straight into the returned buffer; a band is transposed in tiles of columns side by side
    /// (each value is copied, so the layout does not change a bit of it).
    pub(super) fn decode(&self, transposed: bool) -> Result<Vec<f32>, OverrideReadError> {
        use rayon::prelude::*;
        const BAND: usize = 1024;
        const TILE: usize = 64;
        let (rows, cols) = (self.shape[0], self.cols());
        let mut out = vec![0f32; rows * cols];
        if !transposed {
            for (k, dst) in out.chunks_mut(BAND * cols.max(1)).enumerate() {
                self.rows_into(k * BAND, dst.len() / cols.max(1), dst)?;
            }
            return Ok(out);
        }
        let mut band = vec![0f32; BAND * cols];
        for start in (0..rows).step_by(BAND) {
            let n = BAND.min(rows - start);
            self.rows_into(start, n, &mut band[..n * cols])?;
            let band = &band[..n * cols];
            // Output row c (input column c) takes band[i·cols + c] at start + i: a tile of output
            // rows reads each band row's few contiguous columns.
            out.par_chunks_mut(TILE * rows.max(1)).enumerate().for_each(|(t, tile)| {
                let c0 = t * TILE;
                for (i, row) in band.chunks_exact(cols.max(1)).enumerate() {
                    for (dc, out_row) in tile.chunks_exact_mut(rows.max(1)).enumerate() {
                        out_row[start + i] = row[c0 + dc];
                    }
                }
            });
        }
        Ok(out)
    }

    /// Rows `start..start + count` into `out` (`count × cols`, row-major).
    pub fn rows_into(&self, start: usize, count: usize, out: &mut [f32]) -> Result<(), OverrideReadError> {
        let cols = self.cols();
        let read = match &self.data {
            OverrideData::Dense(d) => match d.get(start * cols..(start + count) * cols) {
                Some(rows) => {
                    out.copy_from_slice(rows);
                    Ok(())
                }
                None => Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    format!("rows {start}..{} of {:?}", start + count, self.shape),
                )),
            },
            OverrideData::Packed(p) => p.rows_into(start, count, out),
        };
        read.map_err(|source| OverrideReadError { source_name: self.source.clone(), source })
    }

    /// Rows `start..start + count`, row-major.
    pub fn rows(&self, start: usize, count: usize) -> Result<Vec<f32>, OverrideReadError> {
        let mut out = vec![0f32; count * self.cols()];
        self.rows_into(start, count, &mut out)?;
        Ok(out)
    }
}

/// A quantized build's weight whose payload could not be read (defined with the crate's errors).
pub use crate::error::OverrideReadError;

/// Two of a build's weights claim the same reference parameter.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{first}` and `{second}` both stand for `{key}`")]
pub struct DuplicateOverride {
    pub key: String,
    pub first: String,
    pub second: String,
}

/// The set of overrides of one model.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    by_key: BTreeMap<String, Override>,
    /// The build they were read from (its folder), when they are all of one: models loaded on
    /// overrides of the same build may share their dequantized matrices
    /// ([`super::SharedMatrices::for_build`]).
    origin: Option<std::path::PathBuf>,
}

impl Overrides {
    /// Adds `key`'s override; a second one for the same key is an error naming both sources.
    pub fn insert(&mut self, key: &str, o: Override) -> Result<(), DuplicateOverride> {
        if let Some(prev) = self.by_key.get(key) {
            return Err(DuplicateOverride { key: key.to_string(), first: prev.source.clone(), second: o.source });
        }
        self.by_key.insert(key.to_string(), o);
        Ok(())
    }

    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }

    /// These overrides, read from the build at `origin` (its folder): every set read from it has
    /// the same matrices, whatever its activations' rounding.
    pub fn with_origin(mut self, origin: impl Into<std::path::PathBuf>) -> Self {
        self.origin = Some(origin.into());
        self
    }

    /// The build these overrides were read from, when recorded ([`Overrides::with_origin`]).
    pub fn origin(&self) -> Option<&std::path::Path> {
        self.origin.as_deref()
    }

    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    /// The override stored under `key`.
    pub fn get(&self, key: &str) -> Option<&Override> {
        self.by_key.get(key)
    }

    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.by_key.keys().map(String::as_str)
    }

    /// The override `module_name` reads, with its key.
    pub(crate) fn lookup(&self, module_name: &str) -> Option<(&str, &Override)> {
        self.by_key.iter().find_map(|(key, o)| stands_for(key, module_name).then_some((key.as_str(), o)))
    }
}

/// Whether `name` (a module or checkpoint name) is the text model's parameter `key`: it ends
/// with `key` at a name boundary, outside the vision and audio towers.
pub fn stands_for(key: &str, name: &str) -> bool {
    if name.contains("vision") || name.contains("audio") {
        return false;
    }
    name == key || (name.ends_with(key) && name[..name.len() - key.len()].ends_with('.'))
}

/// The name among `names` that parameter `key` stands for; a tied `lm_head.weight` the
/// checkpoint does not hold stands for the token embedding.
pub fn name_for<'a>(key: &str, names: impl Iterator<Item = &'a str> + Clone) -> Option<&'a str> {
    let find = |k: &str| names.clone().find(|n| stands_for(k, n));
    find(key).or_else(|| (key == "lm_head.weight").then(|| find("embed_tokens.weight")).flatten())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Guards the lookup: a key matches at a name boundary under either text prefix, never a
    /// longer name nor the vision tower.
    #[test]
    fn keys_match_module_names_at_a_boundary() {
        let mut o = Overrides::default();
        let one = |s: &str| Override {
            shape: vec![1, 1],
            data: OverrideData::Dense(Arc::new(vec![0.0])),
            activations: Default::default(),
            source: s.into(),
        };
        o.insert("layers.1.mlp.up_proj.weight", one("a")).unwrap();
        o.insert("lm_head.weight", one("b")).unwrap();
        assert!(o.lookup("model.language_model.layers.1.mlp.up_proj.weight").is_some());
        assert!(o.lookup("model.layers.1.mlp.up_proj.weight").is_some());
        assert!(o.lookup("model.layers.11.mlp.up_proj.weight").is_none());
        assert!(o.lookup("model.vision_tower.layers.1.mlp.up_proj.weight").is_none());
        assert!(o.lookup("lm_head.weight").is_some());
        assert!(o.insert("lm_head.weight", one("c")).unwrap_err().to_string().contains("`b` and `c`"));
    }

    /// Guards the transposed decode: bands and tiles of any shape (rows past a band, columns
    /// past a tile, a single row or column) give the element-by-element transpose.
    #[test]
    fn a_transposed_decode_is_the_transpose() {
        for (rows, cols) in [(1, 1), (3, 70), (1030, 5), (2049, 129), (64, 64)] {
            let values: Vec<f32> = (0..rows * cols).map(|i| i as f32 * 0.5 - 7.0).collect();
            let o = Override {
                shape: vec![rows, cols],
                data: OverrideData::Dense(Arc::new(values.clone())),
                activations: Default::default(),
                source: "test".into(),
            };
            let t = o.decode(true).unwrap();
            let mut want = vec![0f32; rows * cols];
            for r in 0..rows {
                for c in 0..cols {
                    want[c * rows + r] = values[r * cols + c];
                }
            }
            assert_eq!(t, want, "{rows} x {cols}");
            assert_eq!(o.decode(false).unwrap(), values, "{rows} x {cols} row-major");
        }
    }
}
