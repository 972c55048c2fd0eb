//! The `/executions` contract as a server keeps it: moved to
//! [`execseam_chrono::contract`], shared with `execseam serve`; re-exported here.

pub use execseam_chrono::contract::*;
