//! Compiles `proto/ateenv/v1alpha/guest.proto` with protox (pure Rust, no system protoc) and
//! generates the prost messages and tonic client stubs (server stubs too with feature `server`).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let fds = protox::compile(["ateenv/v1alpha/guest.proto"], ["proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(std::env::var_os("CARGO_FEATURE_SERVER").is_some())
        // Timestamp and Duration are generated too, so no prost-types dependency is needed.
        .compile_well_known_types(true)
        .bytes(".")
        .compile_fds(fds)?;
    Ok(())
}
