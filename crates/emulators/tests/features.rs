//! `cargo test -p execseam-emulators` must not skip the interop and wire targets quietly: each
//! needs its provider's feature (all are on by default). Built with some off, this test fails and
//! names them, unless `EXECSEAM_EMULATORS_PARTIAL=1` says the skip is deliberate.

#[test]
fn every_provider_feature_is_on() {
    let features = [
        ("fly", cfg!(feature = "fly")),
        ("sprites", cfg!(feature = "sprites")),
        ("agentcore", cfg!(feature = "agentcore")),
        ("cloudflare", cfg!(feature = "cloudflare")),
        ("ax", cfg!(feature = "ax")),
        ("daytona", cfg!(feature = "daytona")),
        ("modal", cfg!(feature = "modal")),
        ("chrono", cfg!(feature = "chrono")),
        ("e2b", cfg!(feature = "e2b")),
    ];
    let off: Vec<&str> = features.iter().filter(|f| !f.1).map(|f| f.0).collect();
    if off.is_empty() || std::env::var("EXECSEAM_EMULATORS_PARTIAL").as_deref() == Ok("1") {
        return;
    }
    panic!(
        "features {off:?} are off, so their interop and wire tests were not built; run \
         `cargo test -p execseam-emulators` with the default features (or --all-features), or \
         set EXECSEAM_EMULATORS_PARTIAL=1 to skip them on purpose"
    );
}
