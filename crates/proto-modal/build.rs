//! Generates the prost messages and tonic client stubs (server stubs too with feature `server`)
//! from `proto/modal-1.6.4.binpb`, the `FileDescriptorSet` that `proto/export.py` exports from
//! the pinned `modal` wheel. No protoc and no `.proto` parsing: the descriptors are the wheel's.

use prost::Message;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    const SET: &str = "proto/modal-1.6.4.binpb";
    println!("cargo:rerun-if-changed={SET}");
    let fds = tonic_prost_build::FileDescriptorSet::decode(std::fs::read(SET)?.as_slice())?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(std::env::var_os("CARGO_FEATURE_SERVER").is_some())
        // Any and Empty are generated too, so no prost-types dependency is needed.
        .compile_well_known_types(true)
        .bytes(".")
        .compile_fds(fds)?;
    Ok(())
}
