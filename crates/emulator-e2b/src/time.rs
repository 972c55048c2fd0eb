//! RFC 3339 timestamps as protojson writes `google.protobuf.Timestamp` (UTC, `Z`, 0/3/6/9
//! fractional digits) and as the control plane writes `date-time`.

use std::time::SystemTime;

use execseam_emulator_kit::clock::{self, Fraction};

/// Formats a time as protojson does.
pub fn rfc3339(t: SystemTime) -> String {
    clock::rfc3339(t, Fraction::Protojson)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use std::time::UNIX_EPOCH;

    #[test]
    fn formats_like_protojson() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00Z");
        assert_eq!(
            rfc3339(UNIX_EPOCH + Duration::new(1_704_067_200, 0)),
            "2024-01-01T00:00:00Z"
        );
        assert_eq!(
            rfc3339(UNIX_EPOCH + Duration::new(951_782_400 + 3661, 5_000_000)),
            "2000-02-29T01:01:01.005Z"
        );
        assert_eq!(
            rfc3339(UNIX_EPOCH + Duration::new(0, 1_500)),
            "1970-01-01T00:00:00.000001500Z"
        );
    }
}
