//! Names, UIDs and the agent-sandbox hash.

/// agent-sandbox's `NameHash` (`controllers/sandbox_controller.go`): FNV-1a, 32 bits, as 8
/// lower-case hex digits.
pub fn name_hash(s: &str) -> String {
    let h = s.bytes().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    });
    format!("{h:08x}")
}

fn random(n: usize) -> u64 {
    execseam_emulator_kit::clock::random_u64() % n as u64
}

/// The 5 characters `generateName` appends (`apiserver/pkg/storage/names/generate.go`, the
/// alphabet of `apimachinery/pkg/util/rand`: no vowels, no confusable digits).
pub fn suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    (0..5)
        .map(|_| ALPHABET[random(ALPHABET.len()) as usize] as char)
        .collect()
}

/// `n` lower-case hex digits.
pub fn hex(n: usize) -> String {
    const HEX: &[u8] = b"0123456789abcdef";
    (0..n).map(|_| HEX[random(16) as usize] as char).collect()
}

/// A version-4 UUID.
pub fn uuid() -> String {
    let h = hex(32);
    let variant = ["8", "9", "a", "b"][random(4) as usize];
    format!(
        "{}-{}-4{}-{}{}-{}",
        &h[0..8],
        &h[8..12],
        &h[13..16],
        variant,
        &h[17..20],
        &h[20..32]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_research_notes_vectors() {
        assert_eq!(name_hash(""), "811c9dc5");
        assert_eq!(name_hash("a"), "e40c292c");
        assert_eq!(name_hash("python-sandbox-pool"), "00375482");
        assert_eq!(name_hash("python-sandbox-template"), "d274c066");
        assert_eq!(name_hash("sandbox-claim-1234abcd"), "fb126098");
        let s = suffix();
        assert_eq!(s.len(), 5);
        let u = uuid();
        assert_eq!(u.len(), 36);
        assert_eq!(&u[14..15], "4");
    }
}
