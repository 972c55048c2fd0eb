//! [`excerpt`]: a provider's plain-text error body as the message of an error.

/// The start of a body that is not the provider's JSON error, as an error's message: invalid
/// UTF-8 replaced, white space trimmed, at most `max_chars` characters. `None` for an empty (or
/// all white space) body, where the caller names the status instead.
pub fn excerpt(body: &[u8], max_chars: usize) -> Option<String> {
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    (!text.is_empty()).then(|| text.chars().take(max_chars).collect())
}

#[cfg(test)]
mod tests {
    use super::excerpt;

    #[test]
    fn a_body_is_trimmed_and_cut_in_characters() {
        assert_eq!(
            excerpt(b"  bad gateway\n", 300).as_deref(),
            Some("bad gateway")
        );
        assert_eq!(excerpt("ééé".as_bytes(), 2).as_deref(), Some("éé"));
        assert_eq!(excerpt(b"\xffx", 10).as_deref(), Some("\u{fffd}x"));
        assert_eq!(excerpt(b" \n\t", 10), None);
        assert_eq!(excerpt(b"", 10), None);
    }
}
