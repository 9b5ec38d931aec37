//! (in progress: being written)
fn main() {}
