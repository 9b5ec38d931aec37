//! ONNX side: runtime provisioning, package layout, graph inspection.
