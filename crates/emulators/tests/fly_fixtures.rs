//! Fly Machines emulator fixtures (written below).
