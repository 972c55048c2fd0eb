//! Interop: the official `e2b` Python SDK against the E2B emulator (written below).
