//! TEMPORARY: where does prefill's peak RSS come from?
use onnx_parity_reference::{BidirectionalScope, Gemma4Unified, ModelInputs};
fn st(k: &str) -> f64 { std::fs::read_to_string("/proc/self/status").unwrap().lines().find(|l| l.starts_with(k)).unwrap().split_whitespace().nth(1).unwrap().parse::<f64>().unwrap() / 1024.0 }
fn main() -> anyhow::Result<()> {
    std::env::set_var("RAYON_NUM_THREADS", "2");
    let m = Gemma4Unified::load(std::path::Path::new("/tmp/gemma4-bench"))?;
    println!("load: rss {:.0} hwm {:.0}", st("VmRSS:"), st("VmHWM:"));
    let input_ids: Vec<i64> = std::iter::once(2).chain((1..256usize).map(|i| 16 + ((i * 7919) % 32000) as i64)).collect();
    let inputs = ModelInputs { input_ids, ..Default::default() };
    let e = m.embed(&inputs)?;
    let h = m.layer_outputs(&e, None, BidirectionalScope::AllLayers)?;
    println!("layers: rss {:.0} hwm {:.0}", st("VmRSS:"), st("VmHWM:"));
    drop(h);
    for _ in 0..4 {
    let l = m.prefill(&inputs, BidirectionalScope::AllLayers)?;
    println!("prefill: rss {:.0} hwm {:.0}", st("VmRSS:"), st("VmHWM:"));
    drop(l);
    println!("dropped: rss {:.0} hwm {:.0}", st("VmRSS:"), st("VmHWM:"));
    }
    Ok(())
}
