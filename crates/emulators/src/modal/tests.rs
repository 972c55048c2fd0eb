//! Tests of the Modal emulator through generated tonic clients.
