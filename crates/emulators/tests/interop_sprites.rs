//! Interop: the official sprites-py SDK against the Sprites emulator (written below).
