//! Guards issue 45's EP axis at the runtime: the process's ONNX Runtime is loaded for the EPs the
//! plan selects (`runtime::provision::select`), not for a second reading of the environment; an
//! EP selected after the runtime was loaded without it is refused naming both, never run on the
//! wrong library. Its own process: it loads ONNX Runtime.

use onnx_parity::eps::RunEp;
use onnx_parity::runtime::provision::{environment, select, selected, RuntimeError};

#[test]
fn the_runtime_follows_the_selection_and_refuses_a_late_ep() {
    assert_eq!(selected(), vec![RunEp::Cpu], "nothing selected: the CPU alone");
    select(&[RunEp::Cpu]).expect("the CPU, before the runtime is loaded");
    environment().expect("ONNX Runtime loads for the CPU");
    select(&[RunEp::Cpu]).expect("what it was loaded for is still served");
    match select(&[RunEp::Cpu, RunEp::Cuda(0)]) {
        Err(e @ RuntimeError::AlreadyLoaded { .. }) => {
            let text = e.to_string();
            assert!(text.contains("cpu") && text.contains("cuda:0"), "{text}");
        }
        other => panic!("a CUDA EP after a CPU-only load must be refused: {other:?}"),
    }
    assert_eq!(selected(), vec![RunEp::Cpu], "the refused EP is not recorded as loaded");
}
