//! String fields of a JSON object, read as the answer arrives: their values (unescaped) go to
//! a sink piece by piece, the rest of the object is kept (with each field's value as `""`) for
//! an ordinary parse. For answers that carry a command's whole output in strings (Daytona's
//! `process/execute` and session exec): the answer is never held whole, only what the sink
//! keeps.

/// Why a scan failed.
#[derive(Debug)]
pub enum ScanError<E> {
    /// The answer is not a JSON object of the expected shape, or its other fields exceed
    /// their limit.
    Malformed(String),
    /// The sink refused a piece of the field.
    Sink(E),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum At {
    /// Before the top-level object.
    Start,
    /// Outside any string.
    Outside,
    /// In a string other than the field's value.
    InString { escaped: bool },
    /// In the field's value.
    InField,
    /// After the top-level object.
    End,
}

/// Scans a JSON object for the string fields it names (see the module docs).
#[derive(Debug)]
pub struct FieldScan {
    names: Vec<&'static str>,
    rest: Vec<u8>,
    rest_limit: usize,
    at: At,
    depth: usize,
    /// At depth 1, the next string is a key.
    key_next: bool,
    /// The key being read (at depth 1), then the last key, until its value begins.
    key: Vec<u8>,
    /// The last key was `names[i]`, and its value has not begun.
    value_next: Option<usize>,
    /// The field whose value is being read.
    field: usize,
    found: Vec<bool>,
    /// An escape in the field: the bytes after the backslash.
    escape: Option<Vec<u8>>,
    /// A high surrogate waiting for its low half.
    high: Option<u16>,
}

impl FieldScan {
    /// A scan for the field `name`, keeping at most `rest_limit` bytes of everything else.
    pub fn new(name: &'static str, rest_limit: usize) -> FieldScan {
        FieldScan::of(&[name], rest_limit)
    }

    /// A scan for each of the fields `names` (each at most once), keeping at most `rest_limit`
    /// bytes of everything else.
    pub fn of(names: &[&'static str], rest_limit: usize) -> FieldScan {
        FieldScan {
            names: names.to_vec(),
            rest: Vec::new(),
            rest_limit,
            at: At::Start,
            depth: 0,
            key_next: false,
            key: Vec::new(),
            value_next: None,
            field: 0,
            found: vec![false; names.len()],
            escape: None,
            high: None,
        }
    }

    /// Scans `chunk`, giving the field's unescaped bytes to `sink`.
    pub fn feed<E>(
        &mut self,
        chunk: &[u8],
        sink: &mut impl FnMut(&[u8]) -> Result<(), E>,
    ) -> Result<(), ScanError<E>> {
        self.feed_fields(chunk, &mut |_, b| sink(b))
    }

    /// Scans `chunk`, giving each field's unescaped bytes to `sink` with the field's index in
    /// `names`.
    pub fn feed_fields<E>(
        &mut self,
        chunk: &[u8],
        sink: &mut impl FnMut(usize, &[u8]) -> Result<(), E>,
    ) -> Result<(), ScanError<E>> {
        let mut i = 0;
        while i < chunk.len() {
            if self.at == At::InField && self.escape.is_none() {
                // The plain run up to the next quote, backslash or control byte, in one piece.
                let run = chunk[i..]
                    .iter()
                    .position(|&b| b == b'"' || b == b'\\' || b < 0x20)
                    .unwrap_or(chunk.len() - i);
                if run > 0 {
                    self.no_pending_high()?;
                    sink(self.field, &chunk[i..i + run]).map_err(ScanError::Sink)?;
                    i += run;
                    continue;
                }
            }
            self.byte(chunk[i], sink)?;
            i += 1;
        }
        Ok(())
    }

    fn no_pending_high<E>(&mut self) -> Result<(), ScanError<E>> {
        match self.high.take() {
            Some(_) => Err(malformed("a lone surrogate in a string")),
            None => Ok(()),
        }
    }

    fn keep<E>(&mut self, b: u8) -> Result<(), ScanError<E>> {
        if self.rest.len() >= self.rest_limit {
            return Err(malformed(format!(
                "the answer's fields other than `{}` exceed {} bytes",
                self.names.join("`, `"),
                self.rest_limit
            )));
        }
        self.rest.push(b);
        Ok(())
    }

    fn byte<E>(
        &mut self,
        b: u8,
        sink: &mut impl FnMut(usize, &[u8]) -> Result<(), E>,
    ) -> Result<(), ScanError<E>> {
        match self.at {
            At::Start | At::End if b.is_ascii_whitespace() => Ok(()),
            At::Start if b == b'{' => {
                self.at = At::Outside;
                self.depth = 1;
                self.key_next = true;
                self.keep(b)
            }
            At::Start => Err(malformed("the answer is not a JSON object")),
            At::End => Err(malformed("the answer goes on after its object")),
            At::Outside => self.outside(b),
            At::InString { escaped } => {
                if escaped {
                    self.at = At::InString { escaped: false };
                } else if b == b'\\' {
                    self.at = At::InString { escaped: true };
                } else if b == b'"' {
                    self.at = At::Outside;
                    if self.depth == 1 && self.key_next {
                        self.key_next = false;
                        self.value_next = self.names.iter().position(|n| self.key == n.as_bytes());
                    }
                } else if self.depth == 1 && self.key_next && self.key.len() <= self.longest() {
                    self.key.push(b);
                }
                self.keep(b)
            }
            At::InField => self.field_byte(b, sink),
        }
    }

    fn outside<E>(&mut self, b: u8) -> Result<(), ScanError<E>> {
        match b {
            b'"' if self.depth == 1 && self.value_next.is_some() => {
                let field = self.value_next.take().unwrap_or_default();
                if self.found[field] {
                    return Err(malformed(format!(
                        "the field `{}` twice",
                        self.names[field]
                    )));
                }
                self.found[field] = true;
                self.field = field;
                self.at = At::InField;
                // The value is kept as `""`: the closing quote is kept when it comes.
                return self.keep(b);
            }
            b'"' => {
                if self.depth == 1 && self.key_next {
                    self.key.clear();
                }
                self.at = At::InString { escaped: false };
            }
            b':' => {}
            _ if b.is_ascii_whitespace() => {}
            b'{' | b'[' => {
                self.value_next = None;
                self.depth += 1;
            }
            b'}' | b']' => {
                self.value_next = None;
                self.depth -= 1;
                if self.depth == 0 {
                    self.at = At::End;
                }
            }
            b',' => {
                self.value_next = None;
                if self.depth == 1 {
                    self.key_next = true;
                }
            }
            // A value other than a string began: not the field's.
            _ => self.value_next = None,
        }
        self.keep(b)
    }

    fn longest(&self) -> usize {
        self.names.iter().map(|n| n.len()).max().unwrap_or(0)
    }

    fn field_byte<E>(
        &mut self,
        b: u8,
        sink: &mut impl FnMut(usize, &[u8]) -> Result<(), E>,
    ) -> Result<(), ScanError<E>> {
        let Some(esc) = self.escape.as_mut() else {
            return match b {
                b'\\' => {
                    self.escape = Some(Vec::with_capacity(5));
                    Ok(())
                }
                b'"' => {
                    self.no_pending_high()?;
                    self.at = At::Outside;
                    self.keep(b)
                }
                _ => Err(malformed("a control character in a string")),
            };
        };
        esc.push(b);
        let simple = match esc[0] {
            b'"' => Some(b'"'),
            b'\\' => Some(b'\\'),
            b'/' => Some(b'/'),
            b'b' => Some(0x08),
            b'f' => Some(0x0c),
            b'n' => Some(b'\n'),
            b'r' => Some(b'\r'),
            b't' => Some(b'\t'),
            b'u' => None,
            _ => return Err(malformed("an unknown escape in a string")),
        };
        if let Some(c) = simple {
            self.escape = None;
            self.no_pending_high()?;
            return sink(self.field, &[c]).map_err(ScanError::Sink);
        }
        if esc.len() < 5 {
            return Ok(());
        }
        let hex = std::str::from_utf8(&esc[1..])
            .ok()
            .and_then(|h| u16::from_str_radix(h, 16).ok())
            .ok_or_else(|| malformed("a malformed \\u escape"))?;
        self.escape = None;
        let c = match (self.high.take(), hex) {
            (None, 0xD800..=0xDBFF) => {
                self.high = Some(hex);
                return Ok(());
            }
            (Some(h), 0xDC00..=0xDFFF) => char::from_u32(
                0x10000 + ((u32::from(h) - 0xD800) << 10) + (u32::from(hex) - 0xDC00),
            ),
            (None, _) => char::from_u32(u32::from(hex)),
            (Some(_), _) => None,
        }
        .ok_or_else(|| malformed("a lone surrogate in a string"))?;
        let mut buf = [0; 4];
        sink(self.field, c.encode_utf8(&mut buf).as_bytes()).map_err(ScanError::Sink)
    }

    /// The object with the field's value as `""`, once the answer has ended, and whether the
    /// (first) field was there.
    pub fn finish<E>(self) -> Result<(Vec<u8>, bool), ScanError<E>> {
        let (rest, found) = self.finish_fields()?;
        Ok((rest, found[0]))
    }

    /// The object with each field's value as `""`, once the answer has ended, and which of
    /// the fields (by index in `names`) were there.
    pub fn finish_fields<E>(self) -> Result<(Vec<u8>, Vec<bool>), ScanError<E>> {
        if self.at != At::End {
            return Err(malformed("the answer ended inside its object"));
        }
        Ok((self.rest, self.found))
    }

    /// The bytes of the answer this scan holds (the object without its fields' values).
    pub fn held(&self) -> usize {
        self.rest.len() + self.key.len()
    }
}

fn malformed<E>(why: impl Into<String>) -> ScanError<E> {
    ScanError::Malformed(why.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Scans `answer` in pieces of `n` bytes: the field's bytes and the rest.
    fn scan(answer: &str, n: usize) -> Result<(Vec<u8>, String, bool), String> {
        let mut s = FieldScan::new("result", 1024);
        let mut field = Vec::new();
        let mut sink = |b: &[u8]| -> Result<(), ()> {
            field.extend_from_slice(b);
            Ok(())
        };
        for piece in answer.as_bytes().chunks(n) {
            s.feed(piece, &mut sink).map_err(|e| format!("{e:?}"))?;
        }
        let (rest, found) = s.finish::<()>().map_err(|e| format!("{e:?}"))?;
        Ok((field, String::from_utf8(rest).unwrap(), found))
    }

    #[test]
    fn the_field_is_unescaped_in_pieces_and_the_rest_parses() {
        let value = "O\naGk=\n\"q\"\\ \u{e9}\u{1F600}\t/";
        let answer = serde_json::json!({"exitCode": 3, "nested": {"result": "x", "a": [1, "result"]}, "result": value, "after": "s"});
        // serde escapes the control bytes only; a Go encoder may escape more (`\u00e9`, `\/`).
        let go_style = answer
            .to_string()
            .replace('\u{e9}', "\\u00e9")
            .replace('\u{1F600}', "\\ud83d\\ude00");
        for text in [answer.to_string(), go_style] {
            for n in [1, 2, 3, 7, 4096] {
                let (field, rest, found) = scan(&text, n).unwrap();
                assert!(found);
                assert_eq!(String::from_utf8(field).unwrap(), value, "{text} by {n}");
                let rest: serde_json::Value = serde_json::from_str(&rest).unwrap();
                assert_eq!(rest["result"], "");
                assert_eq!(rest["exitCode"], 3);
                assert_eq!(rest["nested"]["result"], "x");
                assert_eq!(rest["after"], "s");
            }
        }
        let (field, _, found) = scan(r#"{"exitCode":1}"#, 3).unwrap();
        assert!(!found && field.is_empty());
    }

    #[test]
    fn several_fields_go_to_the_sink_by_index() {
        let names = ["output", "stdout", "stderr"];
        let answer =
            r#"{"cmdId":"c","output":"o\u0001","stdout":"s","exitCode":0,"x":{"stderr":"no"}}"#;
        for n in [1, 3, 4096] {
            let mut scan = FieldScan::of(&names, 1024);
            let mut got = [Vec::new(), Vec::new(), Vec::new()];
            for piece in answer.as_bytes().chunks(n) {
                scan.feed_fields(piece, &mut |i, b: &[u8]| -> Result<(), ()> {
                    got[i].extend_from_slice(b);
                    Ok(())
                })
                .unwrap();
            }
            assert!(scan.held() <= answer.len());
            let (rest, found) = scan.finish_fields::<()>().unwrap();
            assert_eq!(got, [b"o\x01".to_vec(), b"s".to_vec(), Vec::new()]);
            assert_eq!(found, [true, true, false]);
            let rest: serde_json::Value = serde_json::from_slice(&rest).unwrap();
            assert_eq!(rest["cmdId"], "c");
            assert_eq!(rest["output"], "");
            assert_eq!(rest["x"]["stderr"], "no");
        }
        let twice = r#"{"stdout":"a","stdout":"b"}"#;
        let e = FieldScan::of(&names, 1024)
            .feed_fields(twice.as_bytes(), &mut |_, _| Ok::<(), ()>(()))
            .unwrap_err();
        assert!(format!("{e:?}").contains("`stdout` twice"), "{e:?}");
    }

    #[test]
    fn malformed_answers_and_large_other_fields_are_errors() {
        for bad in [
            "xxxx",
            r#"{"result":"a"#,
            r#"{"result":"a\q"}"#,
            "{\"result\":\"a\nb\"}",
            r#"{"result":"\ud83d"}"#,
            r#"{"result":"a","result":"b"}"#,
            r#"{"result":"a"} x"#,
        ] {
            assert!(scan(bad, 2).is_err(), "{bad}");
        }
        let big = format!(r#"{{"other":"{}","result":""}}"#, "y".repeat(2000));
        let e = scan(&big, 64).unwrap_err();
        assert!(e.contains("exceed 1024 bytes"), "{e}");
    }
}
