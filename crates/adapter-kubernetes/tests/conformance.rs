//! The conformance suite against the Kubernetes adapter: against the emulator (not written yet),
//! or a real cluster with `EXECSEAM_LIVE=1`.
fn main() {}
