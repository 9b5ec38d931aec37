//! The gemma4 family's image path: the ViT tower `Gemma4VisionModel` and the multimodal
//! embedder `embed_vision` (modeling_gemma4.py M:579-1071, M:2017-2109).
//!
//! ```text
//! per image, valid patches only (both coordinates −1 = padding, dropped first):
//! x  = (2·(pixels − 0.5)) @ input_projᵀ + (pos_x[x] + pos_y[y])          no LayerNorm anywhere
//! x  = encoder layers: x + post_attn_norm(attn(input_norm(x))), x + post_ff_norm(mlp(pre_ff_norm(x)))
//!      attention: q/k RMS-normed per head, 2-D RoPE (θ 100; first half of each head rotates with
//!      x, second half with y), scale-free v norm, scaling 1.0, bidirectional over the image
//! out[j] = Σ_{patches p in kernel j} fl(1/k²)·x_p     k×k kernels over the patch grid, FMA in patch order
//! out = out · f32(√hidden)  →  (out − std_bias) · std_scale (standardize)
//! features = RMSNorm_noscale(out) @ embed_vision.embedding_projectionᵀ
//! ```
//! Every linear of the tower is a (bias-free) clippable linear.
//!
//! Dropping padding before the encoder is exact: HF masks padding keys (probability exactly 0),
//! zeroes padding rows before pooling, and pooling never reads them otherwise. Pooling
//! accumulates `fma(x_p, 1/k², acc)` in ascending patch order, which is bit-equal to the f32 bmm
//! torch runs as long as MKL does not split the patch axis (it does above ~192 patches, where the
//! two differ by about one ulp).

use candle_core::{DType, Tensor};

use crate::config::{Activation, VisionTowerConfig};
use crate::config::{RopeKind, RopeSpec};
use crate::error::{Error, Result};
use crate::nn::linear::{ClippableLinear, Linear};
use crate::nn::norm::RmsNorm;
use crate::nn::ops::gated_activation;
use crate::nn::rope::Rope;
use crate::text::grouped_attention;
use crate::weights::Weights;

#[derive(Debug)]
struct VisionAttention {
    q_proj: ClippableLinear,
    k_proj: ClippableLinear,
    v_proj: ClippableLinear,
    o_proj: ClippableLinear,
    q_norm: RmsNorm,
    k_norm: RmsNorm,
    v_norm: RmsNorm,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
}

/// Per-axis half-width RoPE tables of one image: `(cos_x, sin_x, cos_y, sin_y)`, each
/// `[N, head_dim/4]`.
struct Rope2d {
    x: (Tensor, Tensor),
    y: (Tensor, Tensor),
}

impl VisionAttention {
    fn load(cfg: &VisionTowerConfig, w: &Weights, prefix: &str) -> Result<Self> {
        let (h, nh, nkv, hd, clip) =
            (cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim, cfg.use_clipped_linears);
        let lin = |name: &str, i, o| ClippableLinear::load(w, &format!("{prefix}.{name}"), i, o, clip);
        Ok(Self {
            q_proj: lin("q_proj", h, nh * hd)?,
            k_proj: lin("k_proj", h, nkv * hd)?,
            v_proj: lin("v_proj", h, nkv * hd)?,
            o_proj: lin("o_proj", nh * hd, h)?,
            q_norm: RmsNorm::load(w, &format!("{prefix}.q_norm"), hd, cfg.rms_norm_eps)?,
            k_norm: RmsNorm::load(w, &format!("{prefix}.k_norm"), hd, cfg.rms_norm_eps)?,
            v_norm: RmsNorm::scale_free(cfg.rms_norm_eps),
            heads: nh,
            kv_heads: nkv,
            head_dim: hd,
        })
    }

    /// `apply_multidimensional_rope` for `x` `[1, N, heads, hd]`: channels `[0, hd/2)` rotate with
    /// the x tables, `[hd/2, hd)` with the y tables, each half with its own `rotate_half`.
    fn rope(x: &Tensor, r: &Rope2d, hd: usize) -> Result<Tensor> {
        let half = hd / 2;
        let a = Rope::apply(&x.narrow(3, 0, half)?, &r.x.0, &r.x.1)?;
        let b = Rope::apply(&x.narrow(3, half, half)?, &r.y.0, &r.y.1)?;
        Ok(Tensor::cat(&[&a, &b], 3)?)
    }

    /// `x` `[N, hidden]` of one image → `[N, hidden]`; every patch sees every patch.
    fn forward(&self, x: &Tensor, rope: &Rope2d) -> Result<Tensor> {
        let n = x.dim(0)?;
        let (nh, nkv, hd) = (self.heads, self.kv_heads, self.head_dim);
        let q = self.q_norm.forward(&self.q_proj.forward(x)?.reshape((1, n, nh, hd))?)?;
        let q = Self::rope(&q, rope, hd)?.squeeze(0)?.transpose(0, 1)?.contiguous()?;
        let k = self.k_norm.forward(&self.k_proj.forward(x)?.reshape((1, n, nkv, hd))?)?;
        let k = Self::rope(&k, rope, hd)?.squeeze(0)?.transpose(0, 1)?.contiguous()?;
        let v = self.v_norm.forward(&self.v_proj.forward(x)?.reshape((1, n, nkv, hd))?)?;
        let v = v.squeeze(0)?.transpose(0, 1)?.contiguous()?;
        let out = grouped_attention(&q, &k, &v, None, nh, nkv)?;
        self.o_proj.forward(&out)
    }
}

#[derive(Debug)]
struct VisionMlp {
    gate_proj: ClippableLinear,
    up_proj: ClippableLinear,
    down_proj: ClippableLinear,
    act: Activation,
}

impl VisionMlp {
    fn load(cfg: &VisionTowerConfig, w: &Weights, prefix: &str) -> Result<Self> {
        let (h, i, clip) = (cfg.hidden_size, cfg.intermediate_size, cfg.use_clipped_linears);
        let lin = |name: &str, a, b| ClippableLinear::load(w, &format!("{prefix}.{name}"), a, b, clip);
        Ok(Self {
            gate_proj: lin("gate_proj", h, i)?,
            up_proj: lin("up_proj", h, i)?,
            down_proj: lin("down_proj", i, h)?,
            act: cfg.activation()?,
        })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let hidden = gated_activation(self.act, self.gate_proj.forward(x)?, &self.up_proj.forward(x)?)?;
        self.down_proj.forward(&hidden)
    }
}

#[derive(Debug)]
struct EncoderLayer {
    attn: VisionAttention,
    mlp: VisionMlp,
    input_layernorm: RmsNorm,
    post_attention_layernorm: RmsNorm,
    pre_feedforward_layernorm: RmsNorm,
    post_feedforward_layernorm: RmsNorm,
}

impl EncoderLayer {
    fn load(cfg: &VisionTowerConfig, w: &Weights, prefix: &str) -> Result<Self> {
        let norm = |name: &str| RmsNorm::load(w, &format!("{prefix}.{name}"), cfg.hidden_size, cfg.rms_norm_eps);
        Ok(Self {
            attn: VisionAttention::load(cfg, w, &format!("{prefix}.self_attn"))?,
            mlp: VisionMlp::load(cfg, w, &format!("{prefix}.mlp"))?,
            input_layernorm: norm("input_layernorm")?,
            post_attention_layernorm: norm("post_attention_layernorm")?,
            pre_feedforward_layernorm: norm("pre_feedforward_layernorm")?,
            post_feedforward_layernorm: norm("post_feedforward_layernorm")?,
        })
    }

    fn forward(&self, x: &Tensor, rope: &Rope2d) -> Result<Tensor> {
        let h = self.post_attention_layernorm.forward(&self.attn.forward(&self.input_layernorm.forward(x)?, rope)?)?;
        let x = (x + h)?;
        let h = self.post_feedforward_layernorm.forward(&self.mlp.forward(&self.pre_feedforward_layernorm.forward(&x)?)?)?;
        Ok((x + h)?)
    }
}

/// The valid patches of one image: their rows in `pixel_values` and their grid positions.
struct ImagePatches {
    rows: Vec<u32>,
    xs: Vec<usize>,
    ys: Vec<usize>,
    /// Whether the image has padding rows (HF's pooler then also marks kernel 0 as present).
    padded: bool,
}

/// `Gemma4VisionModel` + `embed_vision`.
#[derive(Debug)]
pub struct VisionTower {
    input_proj: Linear,
    /// `position_embedding_table[0]` and `[1]`: `[position_embedding_size, hidden]` each.
    pos_x: Tensor,
    pos_y: Tensor,
    layers: Vec<EncoderLayer>,
    rope: Rope,
    /// `(std_bias, std_scale)` with `standardize`.
    standardize: Option<(Tensor, Tensor)>,
    pre_projection_norm: RmsNorm,
    embedding_projection: Linear,
    patch_dim: usize,
    kernel: usize,
    position_embedding_size: usize,
    hidden: usize,
}

impl VisionTower {
    /// Loads `{tower}.patch_embedder`, `{tower}.encoder.layers.*`, the standardize buffers and
    /// `{embedder}.embedding_projection`.
    pub fn load(cfg: &VisionTowerConfig, text_hidden: usize, w: &Weights, tower: &str, embedder: &str) -> Result<Self> {
        let (h, size) = (cfg.hidden_size, cfg.position_embedding_size);
        let table = w.get(&format!("{tower}.patch_embedder.position_embedding_table"), &[2, size, h])?;
        let standardize = if cfg.standardize {
            Some((w.get(&format!("{tower}.std_bias"), &[h])?, w.get(&format!("{tower}.std_scale"), &[h])?))
        } else {
            None
        };
        Ok(Self {
            input_proj: Linear::load(w, &format!("{tower}.patch_embedder.input_proj"), cfg.patch_dim(), h, false)?,
            pos_x: table.get(0)?.contiguous()?,
            pos_y: table.get(1)?.contiguous()?,
            layers: (0..cfg.num_hidden_layers)
                .map(|i| EncoderLayer::load(cfg, w, &format!("{tower}.encoder.layers.{i}")))
                .collect::<Result<Vec<_>>>()?,
            rope: Rope::new(&RopeSpec {
                kind: RopeKind::Default,
                theta: cfg.rope_theta()?,
                // Each spatial axis gets its own frequencies over head_dim / 2 (M:752-758).
                dim: cfg.head_dim / 2,
                partial_rotary_factor: 1.0,
                factor: 1.0,
            }),
            standardize,
            pre_projection_norm: RmsNorm::scale_free(cfg.rms_norm_eps),
            embedding_projection: Linear::load(w, &format!("{embedder}.embedding_projection"), h, text_hidden, false)?,
            patch_dim: cfg.patch_dim(),
            kernel: cfg.pooling_kernel_size,
            position_embedding_size: size,
            hidden: h,
        })
    }

    /// `pixel_values` `[n_img, max_patches, 3·p²]` and `image_position_ids` `[n_img,
    /// max_patches, 2]` → features `[n_tokens, text_hidden]`: per image the pooled soft tokens
    /// in row-major kernel order, images in order (HF's `hidden_states[pooler_mask]`).
    pub fn forward(&self, pixel_values: &Tensor, image_position_ids: &Tensor) -> Result<Tensor> {
        let (n_img, max_patches) = super::patches::check_patch_inputs(pixel_values, image_position_ids, self.patch_dim, "3·patch_size²")?;
        let patch_dim = self.patch_dim;
        let k2 = self.kernel * self.kernel;
        if max_patches == 0 || !max_patches.is_multiple_of(k2) {
            return Err(Error::input(format!(
                "{max_patches} patches per image cannot be pooled by {}×{} kernels (HF: k² · output_length must equal the patch count)",
                self.kernel, self.kernel
            )));
        }
        let length = max_patches / k2;
        let pos: Vec<i64> = image_position_ids.to_dtype(DType::I64)?.flatten_all()?.to_vec1()?;
        let pixels = pixel_values.to_dtype(self.pos_x.dtype())?;
        let mut features = Vec::with_capacity(n_img);
        for img in 0..n_img {
            let patches = self.valid_patches(&pos[img * max_patches * 2..(img + 1) * max_patches * 2], img * max_patches)?;
            if patches.rows.is_empty() {
                return Err(Error::input(format!("image {img} has only padding patches")));
            }
            let rows = Tensor::from_vec(patches.rows.clone(), patches.rows.len(), pixels.device())?;
            let x = pixels.reshape((n_img * max_patches, patch_dim))?.index_select(&rows, 0)?;
            let h = self.encode(&x, &patches)?;
            features.push(self.pool(&h, &patches, length)?);
        }
        let pooled = Tensor::cat(&features, 0)?;
        let pooled = match &self.standardize {
            Some((bias, scale)) => pooled.broadcast_sub(bias)?.broadcast_mul(scale)?,
            None => pooled,
        };
        self.embedding_projection.forward(&self.pre_projection_norm.forward(&pooled)?)
    }

    /// Valid patches of one image (`pos`: its `[max_patches, 2]` positions; `base`: its first row).
    fn valid_patches(&self, pos: &[i64], base: usize) -> Result<ImagePatches> {
        let mut p = ImagePatches { rows: Vec::new(), xs: Vec::new(), ys: Vec::new(), padded: false };
        for (i, xy) in pos.chunks(2).enumerate() {
            let (x, y) = (xy[0], xy[1]);
            if x == -1 && y == -1 {
                p.padded = true;
                continue;
            }
            let in_table = |c: i64| usize::try_from(c).ok().filter(|&c| c < self.position_embedding_size);
            let (Some(xu), Some(yu)) = (in_table(x), in_table(y)) else {
                return Err(Error::input(format!(
                    "image_position_ids ({x}, {y}) at patch {i}: expected (−1, −1) padding or a grid position inside the \
                     position table 0..{} (position_embedding_size)",
                    self.position_embedding_size
                )));
            };
            p.rows.push((base + i) as u32);
            p.xs.push(xu);
            p.ys.push(yu);
        }
        Ok(p)
    }

    /// Patch embedding and the encoder for one image's valid patches `x` `[N, 3p²]`.
    fn encode(&self, x: &Tensor, p: &ImagePatches) -> Result<Tensor> {
        let dev = x.device();
        let n = p.rows.len();
        // `2 * (pixel_values - 0.5)`: the subtraction rounds, the doubling is exact.
        let x = x.affine(1.0, -0.5)?.affine(2.0, 0.0)?;
        let ex = self.pos_x.index_select(&Tensor::from_vec(p.xs.iter().map(|&v| v as u32).collect::<Vec<_>>(), n, dev)?, 0)?;
        let ey = self.pos_y.index_select(&Tensor::from_vec(p.ys.iter().map(|&v| v as u32).collect::<Vec<_>>(), n, dev)?, 0)?;
        let mut h = (self.input_proj.forward(&x)? + (ex + ey)?)?;
        let dtype = h.dtype();
        let (cx, sx) = self.rope.cos_sin(&p.xs, dtype, dev)?;
        let (cy, sy) = self.rope.cos_sin(&p.ys, dtype, dev)?;
        let rope = Rope2d { x: (cx, sx), y: (cy, sy) };
        for layer in &self.layers {
            h = layer.forward(&h, &rope)?;
        }
        Ok(h)
    }

    /// `Gemma4VisionPooler` for one image: the present k×k kernels of the patch grid, in kernel
    /// order, each `Σ fl(1/k²)·h_p` accumulated by FMA in patch order, then `· √hidden`.
    fn pool(&self, h: &Tensor, p: &ImagePatches, length: usize) -> Result<Tensor> {
        let k = self.kernel;
        let dim = self.hidden;
        // `max_x` over the clamped positions (padding clamps to 0) + 1.
        let max_x = p.xs.iter().copied().max().unwrap_or(0) + 1;
        let kernels: Vec<usize> = p.xs.iter().zip(&p.ys).map(|(&x, &y)| x / k + (max_x / k) * (y / k)).collect();
        if let Some(&bad) = kernels.iter().find(|&&j| j >= length) {
            return Err(Error::input(format!(
                "patch grid does not fit {length} soft tokens (kernel index {bad}): sides must be multiples of pooling_kernel_size = {k}"
            )));
        }
        let mut present = vec![false; length];
        for &j in &kernels {
            present[j] = true;
        }
        if p.padded {
            // Padding rows are clamped to (0, 0) and one-hot into kernel 0 (with value 0).
            present[0] = true;
        }
        let dev = h.device();
        let out = match h.dtype() {
            DType::F64 => {
                let hv = h.flatten_all()?.to_vec1::<f64>()?;
                let w = 1.0 / (k * k) as f64;
                let mut acc = vec![0f64; length * dim];
                for (row, &j) in hv.chunks(dim).zip(&kernels) {
                    for (a, &v) in acc[j * dim..(j + 1) * dim].iter_mut().zip(row) {
                        *a += v * w;
                    }
                }
                Tensor::from_vec(acc, (length, dim), dev)?
            }
            _ => {
                let hv = h.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
                let w = 1.0f32 / (k * k) as f32;
                let mut acc = vec![0f32; length * dim];
                for (row, &j) in hv.chunks(dim).zip(&kernels) {
                    for (a, &v) in acc[j * dim..(j + 1) * dim].iter_mut().zip(row) {
                        *a = v.mul_add(w, *a);
                    }
                }
                Tensor::from_vec(acc, (length, dim), dev)?
            }
        };
        let keep: Vec<u32> = (0..length).filter(|&j| present[j]).map(|j| j as u32).collect();
        let n = keep.len();
        let out = out.index_select(&Tensor::from_vec(keep, n, dev)?, 0)?;
        // `hidden_states.float() * self.root_hidden_size` (a Python float); back in the compute
        // dtype for the half-precision mode.
        Ok(out.affine((self.hidden as f64).sqrt(), 0.0)?.to_dtype(h.dtype())?)
    }
}
