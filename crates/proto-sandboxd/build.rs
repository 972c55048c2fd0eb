//! Generates `process.v1` (messages, the client stubs, the server stubs with feature `server`)
//! from the published proto, parsed by protox: no system protoc at build time.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let server = std::env::var_os("CARGO_FEATURE_SERVER").is_some();
    let descriptors = protox::compile(["process/v1/process.proto"], ["proto"])?;
    // `google.protobuf.Empty` is generated as well: no prost-types dependency.
    let builder = tonic_prost_build::configure()
        .compile_well_known_types(true)
        .bytes(".")
        .build_server(server)
        .build_client(true);
    builder.compile_fds(descriptors)?;
    Ok(())
}
