//! The precision modes the harness's calibrated L3 rule is built on (docs/design.md §2b):
//! the f64 arbiter (matrices kept f32, upcast one matmul at a time, yet still HF's f64 function),
//! the half-precision reference (weights and activations rounded to f16 / bf16, each op
//! evaluated in f32 — what an f16 export computes at best), and local layer runs fed another
//! run's residual streams.

mod common;

use anyhow::Result;
use candle_core::{DType, Tensor};
use common::{fixture_dir, load_fixture, max_abs_diff};
use onnx_parity_reference::model::LocalPle;
use onnx_parity_reference::Gemma4;

fn logits(name: &str, dtype: DType) -> Result<Tensor> {
    let f = load_fixture(name)?;
    let model = Gemma4::load_with_dtype(&fixture_dir(name).join("checkpoint"), dtype)?;
    Ok(model.prefill(&f.inputs, model.hf_forward_scope())?.to_dtype(DType::F32)?)
}

/// Guards the arbiter: f64 compute with f32-held matrices is far closer to the f32 reference
/// than f16 is, and the half modes are not silently f32 (they differ from it by far more than
/// f32 rounding). Measured on unified-vision: f64 vs f32 ~1e-6, f16 vs f32 ~1e-2.
#[test]
fn precision_modes_order_by_their_rounding() -> Result<()> {
    for name in ["unified-vision", "unified-text-kvshare", "gemma4-text-ple", "gemma4-text-moe"] {
        let f32_logits = logits(name, DType::F32)?;
        let f64_d = max_abs_diff(&logits(name, DType::F64)?, &f32_logits)?;
        let f16_d = max_abs_diff(&logits(name, DType::F16)?, &f32_logits)?;
        let bf16_d = max_abs_diff(&logits(name, DType::BF16)?, &f32_logits)?;
        eprintln!("{name}: |f64 − f32| {f64_d:.2e}, |f16 − f32| {f16_d:.2e}, |bf16 − f32| {bf16_d:.2e}");
        assert!(f64_d.is_finite() && f64_d > 0.0 && f64_d < 1e-3, "{name}: f64 vs f32 {f64_d:e}");
        assert!(f16_d.is_finite() && f16_d > 50.0 * f64_d, "{name}: f16 vs f32 {f16_d:e} (f64 {f64_d:e})");
        assert!(bf16_d.is_finite() && bf16_d > f16_d, "{name}: bf16 vs f32 {bf16_d:e}, f16 {f16_d:e}");
    }
    Ok(())
}

/// Guards local layer runs: fed the run's own streams, each layer reproduces the propagated
/// output bit for bit (KV-shared layers included), with the per-layer inputs given or computed
/// from the stream entering layer 0; fed another stream, a layer's output moves.
#[test]
fn local_layers_fed_their_own_streams_reproduce_the_run() -> Result<()> {
    for name in ["unified-text-kvshare", "gemma4-text-ple", "unified-vision"] {
        let f = load_fixture(name)?;
        let model = Gemma4::load(&fixture_dir(name).join("checkpoint"))?;
        let scope = model.hf_forward_scope();
        let prepared = model.embed(&f.inputs)?;
        let states = model.layer_outputs(&prepared, scope)?;
        let mut streams = vec![prepared.inputs_embeds.clone()];
        streams.extend(states[..states.len() - 1].iter().cloned());
        let (local, modules) = model.local_layers(&prepared, scope, &streams, LocalPle::Given)?;
        assert_eq!(local.len(), states.len());
        assert_eq!(modules.len(), states.len());
        let (from_stream, _) = model.local_layers(&prepared, scope, &streams, LocalPle::FromStream)?;
        for (i, ((l, f), s)) in local.iter().zip(&from_stream).zip(&states).enumerate() {
            assert_eq!(max_abs_diff(&l.unsqueeze(0)?, s)?, 0.0, "{name}: layer {i}");
            assert_eq!(max_abs_diff(&f.unsqueeze(0)?, s)?, 0.0, "{name}: layer {i}, per-layer inputs from the stream");
        }
        // A perturbed stream entering layer 1 changes layer 1's local output only there.
        let mut moved = streams.clone();
        moved[1] = (&moved[1] * 1.01)?;
        let (local2, _) = model.local_layers(&prepared, scope, &moved, LocalPle::Given)?;
        assert!(max_abs_diff(&local2[1], &local[1])? > 0.0, "{name}");
        assert_eq!(max_abs_diff(&local2[0], &local[0])?, 0.0, "{name}");
    }
    Ok(())
}

/// Guards the streamed logits: the final hidden state kept instead of the all-position logits,
/// with the head read again slice by slice after the model is dropped, gives the logits the run
/// computes (f64 and f32; softcapped and not; tied heads), and `Run::logits` is then the last
/// position's.
#[test]
fn logits_head_remakes_the_runs_logits_after_the_model_is_gone() -> Result<()> {
    use onnx_parity_reference::GenerateOptions;
    for name in ["unified-vision", "gemma4-text-ple", "gemma4-text-moe"] {
        let f = load_fixture(name)?;
        for dtype in [DType::F64, DType::F32] {
            let model = Gemma4::load_with_dtype(&fixture_dir(name).join("checkpoint"), dtype)?;
            let opts = |final_hidden| GenerateOptions {
                scope: model.hf_forward_scope(),
                max_new_tokens: 0,
                eos: &[],
                forced: None,
                all_position_logits: true,
                layer_outputs: false,
                final_hidden,
            };
            let full = model.generate(&f.inputs, &opts(false))?.logits.squeeze(0)?;
            let kept = model.generate(&f.inputs, &opts(true))?;
            let head = model.logits_head();
            drop(model);
            let hidden = kept.final_hidden.expect("final hidden kept");
            let (seq, vocab) = full.dims2()?;
            assert_eq!(kept.logits.dims(), &[1, 1, vocab], "{name}");
            assert_eq!(head.vocab(), vocab);
            let mut parts = Vec::new();
            for start in (0..vocab).step_by(100) {
                parts.push(head.columns(&hidden, start, 100.min(vocab - start))?);
            }
            let remade = Tensor::cat(&parts, 1)?;
            assert_eq!(remade.dims(), &[seq, vocab]);
            let d = (remade.to_dtype(DType::F64)? - full.to_dtype(DType::F64)?)?.abs()?.flatten_all()?.max(0)?.to_scalar::<f64>()?;
            let bound = if dtype == DType::F64 { 1e-12 } else { 1e-5 };
            assert!(d <= bound, "{name} {dtype:?}: remade logits {d:e} off");
            let last = (kept.logits.squeeze(0)?.to_dtype(DType::F64)? - full.narrow(0, seq - 1, 1)?.to_dtype(DType::F64)?)?;
            assert_eq!(last.abs()?.flatten_all()?.max(0)?.to_scalar::<f64>()?, 0.0, "{name} {dtype:?}");
        }
    }
    Ok(())
}

/// Guards shared matrices: an f64 arbiter and an f32 model loaded after an f32 reference
/// through one `SharedMatrices` take its matrices (none read again) and compute the same bits as
/// models loaded on their own; a handle for another checkpoint shares nothing.
#[test]
fn models_sharing_matrices_compute_the_same_bits() -> Result<()> {
    use candle_core::Device;
    use onnx_parity_reference::weights::SharedMatrices;
    for name in ["unified-vision", "gemma4-text-ple", "gemma4-text-moe"] {
        let f = load_fixture(name)?;
        let dir = fixture_dir(name).join("checkpoint");
        let shared = SharedMatrices::new(&dir);
        let bits = |t: Tensor| -> Result<Vec<u64>> {
            Ok(t.to_dtype(DType::F64)?.flatten_all()?.to_vec1::<f64>()?.iter().map(|x| x.to_bits()).collect())
        };
        let run = |m: &Gemma4| -> Result<Vec<u64>> { bits(m.prefill(&f.inputs, m.hf_forward_scope())?) };
        let first = Gemma4::load_shared(&dir, DType::F32, &Device::Cpu, &shared)?;
        let held = shared.len();
        assert!(held > 0, "{name}: the f32 reference shared no matrix");
        assert_eq!(run(&first)?, run(&Gemma4::load_with_dtype(&dir, DType::F32)?)?, "{name}: f32");
        drop(first);
        let arbiter = Gemma4::load_shared(&dir, DType::F64, &Device::Cpu, &shared)?;
        assert_eq!(shared.len(), held, "{name}: the arbiter read a matrix the reference had loaded");
        assert_eq!(run(&arbiter)?, run(&Gemma4::load_with_dtype(&dir, DType::F64)?)?, "{name}: f64");
        let again = Gemma4::load_shared(&dir, DType::F32, &Device::Cpu, &shared)?;
        assert_eq!(run(&again)?, run(&Gemma4::load_with_dtype(&dir, DType::F32)?)?, "{name}: f32 again");
        let elsewhere = SharedMatrices::new(&fixture_dir(name));
        Gemma4::load_shared(&dir, DType::F32, &Device::Cpu, &elsewhere)?;
        assert!(elsewhere.is_empty(), "{name}: matrices shared under another checkpoint's handle");
    }
    Ok(())
}

/// Guards a quantized build's shared matrices: models loaded on one build's overrides through a
/// handle for that build (the reference, the f64 arbiter, the floors conditioned on a candidate's
/// steps) dequantize each matrix once — the override's and the checkpoint's own alike — and
/// compute the bits of models loaded on their own, every override still counted as read; a
/// handle for the checkpoint's own weights or for another build, overrides of no recorded build,
/// and a model on the checkpoint's weights under a build's handle share nothing.
#[test]
fn models_on_one_build_share_its_matrices() -> Result<()> {
    use candle_core::Device;
    use onnx_parity_reference::weights::{MatmulActivations, Override, OverrideData, Overrides, SharedMatrices, Weights};
    let name = "gemma4-text-ple";
    let f = load_fixture(name)?;
    let dir = fixture_dir(name).join("checkpoint");
    let header = Weights::open(&dir)?;
    // Two matrices of layer 0 stand in for a build's (one with its activations rounded to int8
    // blocks, as at accuracy_level 4): values unlike the checkpoint's, so taking the wrong ones shows.
    let mut unrecorded = Overrides::default();
    for (i, module) in ["layers.0.mlp.gate_proj.weight", "layers.0.self_attn.q_proj.weight"].into_iter().enumerate() {
        let stored = header.names().find(|n| n.ends_with(&format!(".{module}"))).expect("the checkpoint has it").to_string();
        let shape = header.shape_of(&stored).expect("shape").to_vec();
        let values: Vec<f32> = (0..shape.iter().product::<usize>()).map(|j| ((j * 7 + i) % 13) as f32 * 0.01 - 0.06).collect();
        let activations = if i == 0 { MatmulActivations::blocks(32) } else { MatmulActivations::default() };
        let o = Override { shape, data: OverrideData::Dense(std::sync::Arc::new(values)), activations, source: format!("test {module}") };
        unrecorded.insert(module, o).expect("one each");
    }
    let build = std::path::Path::new("/builds/int4");
    let overrides = unrecorded.clone().with_origin(build);
    let bits = |m: &Gemma4| -> Result<Vec<u64>> {
        let t = m.prefill(&f.inputs, m.hf_forward_scope())?.to_dtype(DType::F64)?;
        Ok(t.flatten_all()?.to_vec1::<f64>()?.iter().map(|x| x.to_bits()).collect())
    };
    let alone = |dtype: DType| -> Result<Vec<u64>> { bits(&Gemma4::load_with_overrides(&dir, dtype, &Device::Cpu, overrides.clone())?) };
    let (f32_bits, f64_bits) = (alone(DType::F32)?, alone(DType::F64)?);
    assert_ne!(f32_bits, bits(&Gemma4::load_with_dtype(&dir, DType::F32)?)?, "the overrides change the model");
    let shared = SharedMatrices::for_build(&dir, build);
    let on =
        |dtype: DType, o: &Overrides, s: &SharedMatrices| Gemma4::load_with_overrides_shared(&dir, dtype, &Device::Cpu, o.clone(), Some(s));
    assert_eq!(bits(&on(DType::F32, &overrides, &shared)?)?, f32_bits, "f32 through the handle");
    let held = shared.len();
    assert!(held > 2, "the build's models shared {held} matrices");
    assert_eq!(bits(&on(DType::F64, &overrides, &shared)?)?, f64_bits, "f64 through the handle");
    assert_eq!(bits(&on(DType::F32, &overrides, &shared)?)?, f32_bits, "f32 again");
    assert_eq!(shared.len(), held, "a later model of the build dequantized a matrix again");
    for (what, o, s) in [
        ("the checkpoint's handle", &overrides, SharedMatrices::new(&dir)),
        ("another build's handle", &overrides, SharedMatrices::for_build(&dir, std::path::Path::new("/builds/int8"))),
        ("overrides of no recorded build", &unrecorded, SharedMatrices::for_build(&dir, build)),
    ] {
        on(DType::F32, o, &s)?;
        assert!(s.is_empty(), "{what}: {} matrices shared", s.len());
    }
    let own = SharedMatrices::for_build(&dir, build);
    Gemma4::load_shared(&dir, DType::F32, &Device::Cpu, &own)?;
    assert!(own.is_empty(), "the checkpoint's own weights shared under a build's handle");
    Ok(())
}

/// Guards outputs kept in f32 (what the harness asks of an f64 model): the collected layer and
/// module outputs and the all-position logits come in f32, the bits of the f64 run's converted
/// afterwards, and the run computes in f64 as before (the same tokens and step logits).
#[test]
fn an_f64_run_keeps_its_outputs_in_f32_as_the_same_bits() -> Result<()> {
    use onnx_parity_reference::GenerateOptions;
    let bits = |t: &Tensor| -> Result<Vec<u32>> {
        Ok(t.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?.iter().map(|x| x.to_bits()).collect())
    };
    for name in ["unified-vision", "gemma4-text-ple"] {
        let f = load_fixture(name)?;
        let dir = fixture_dir(name).join("checkpoint");
        let whole = Gemma4::load_with_dtype(&dir, DType::F64)?;
        let mut kept = Gemma4::load_with_dtype(&dir, DType::F64)?;
        kept.keep_outputs_in(DType::F32);
        let opts = GenerateOptions {
            scope: whole.hf_forward_scope(),
            max_new_tokens: 2,
            eos: &[],
            forced: None,
            all_position_logits: true,
            layer_outputs: true,
            final_hidden: false,
        };
        let (a, b) = (whole.generate(&f.inputs, &opts)?, kept.generate(&f.inputs, &opts)?);
        assert_eq!((a.logits.dtype(), b.logits.dtype()), (DType::F64, DType::F32), "{name}");
        assert_eq!(bits(&b.logits)?, bits(&a.logits)?, "{name}: logits");
        assert_eq!(a.layers.len(), b.layers.len());
        for (x, y) in a.layers.iter().zip(&b.layers) {
            assert_eq!(y.dtype(), DType::F32);
            assert_eq!(bits(y)?, bits(x)?, "{name}: a layer");
        }
        for (x, y) in a.modules.iter().flatten().zip(b.modules.iter().flatten()) {
            assert_eq!((x.0, y.1.dtype()), (y.0, DType::F32));
            assert_eq!(bits(&y.1)?, bits(&x.1)?, "{name}: {}", x.0);
        }
        assert_eq!(a.generation.tokens, b.generation.tokens, "{name}");
        assert_eq!(a.generation.step_logits, b.generation.step_logits, "{name}");
    }
    Ok(())
}
