//! Property tests inside an async suite: `proptest!` does not combine with async tests, so each
//! property runs on a blocking thread and drives every case with the runtime's handle.

use std::fmt::Debug;
use std::future::Future;

use proptest::strategy::Strategy;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestError, TestRng, TestRunner};

use crate::{Outcome, Target};

fn cases(target: &Target) -> u32 {
    std::env::var("EXECSEAM_PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(target.proptest_cases)
}

fn seed() -> [u8; 32] {
    let n: u64 = std::env::var("EXECSEAM_PROPTEST_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x5eed_0fe7_ec5e_a3a3);
    let mut s = [0u8; 32];
    for (i, chunk) in s.chunks_mut(8).enumerate() {
        chunk.copy_from_slice(&(n.rotate_left(i as u32 * 8)).to_le_bytes());
    }
    s
}

/// Checks `check` for `cases` generated values; on failure, reports the shrunk input.
///
/// The strategy is built by `make` on the blocking thread (proptest's boxed strategies are not
/// `Send`).
pub(crate) async fn check<M, S, F, Fut>(target: &Target, make: M, check: F) -> Result<(), Outcome>
where
    M: FnOnce() -> S + Send + 'static,
    S: Strategy,
    S::Value: Debug,
    F: Fn(S::Value) -> Fut + Send + 'static,
    Fut: Future<Output = Result<(), String>>,
{
    let config = Config {
        cases: cases(target),
        max_shrink_iters: 32,
        failure_persistence: None,
        ..Config::default()
    };
    let handle = tokio::runtime::Handle::current();
    let result = tokio::task::spawn_blocking(move || {
        let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &seed());
        let mut runner = TestRunner::new_with_rng(config, rng);
        runner
            .run(&make(), |value| {
                handle.block_on(check(value)).map_err(TestCaseError::fail)
            })
            .map_err(|e| match e {
                TestError::Fail(why, value) => format!("{why}; minimal input: {value:?}"),
                TestError::Abort(why) => format!("aborted: {why}"),
            })
    })
    .await
    .map_err(|e| Outcome::Fail(format!("property panicked: {e}")))?;
    result.map_err(Outcome::Fail)
}
