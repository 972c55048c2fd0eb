//! What an image definition means to the processes of a sandbox: its `ENV` and `WORKDIR`.
//!
//! modal 1.6.4 sends an image as Dockerfile lines (`Image.dockerfile_commands`) over named base
//! images (`Image.base_images`): `Image.env({"K": "v"})` is a new image `["FROM base",
//! "ENV K='v'"]` (values through `shlex.quote`) and `Image.workdir(p)` is `["FROM base",
//! "WORKDIR p"]`, each with `base_images=[{docker_tag: "base", image_id: <parent>}]`
//! (`modal/_image.py` `env`, `workdir`). The builder applies them as Docker does; the rules below
//! are the Dockerfile reference's ("Environment replacement", `ENV`, `WORKDIR`) as moby/buildkit's
//! shell lexer implements them (`frontend/dockerfile/shell/lex.go`): single quotes are literal,
//! double quotes and bare words expand `$NAME`/`${NAME}` (and `${NAME:-word}`,
//! `${NAME:+word}`) from the environment as it was *before* the instruction, a backslash escapes
//! the next character; `ENV k=v k2=v2` sets several, the legacy `ENV k v w` sets `k` to `v w`; a
//! relative `WORKDIR` is relative to the previous one. Everything else (`RUN`, `COPY`, …) has no
//! effect here: the emulator's sandboxes are the host's filesystem.

use std::collections::BTreeMap;

use execseam_emulator_kit::util::resolve_path;

/// The environment and working directory an image gives its processes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ImageConfig {
    /// `ENV` variables, applied over the emulator's defaults.
    pub env: BTreeMap<String, String>,
    /// The last `WORKDIR`, absolute.
    pub workdir: Option<String>,
}

/// Why a Dockerfile line could not be applied (the real builder fails the build).
#[derive(Debug, PartialEq, Eq)]
pub struct BuildError(pub String);

impl std::fmt::Display for BuildError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl ImageConfig {
    /// Applies one Dockerfile line. `defaults` is the environment expansion sees beneath the
    /// image's own variables (the base image's `PATH`, …).
    pub fn apply(
        &mut self,
        line: &str,
        defaults: &BTreeMap<String, String>,
    ) -> Result<(), BuildError> {
        let line = line.trim();
        let (word, rest) = line
            .split_once(|c: char| c.is_ascii_whitespace())
            .unwrap_or((line, ""));
        let rest = rest.trim_start();
        let mut seen = defaults.clone();
        seen.extend(self.env.iter().map(|(k, v)| (k.clone(), v.clone())));
        match word.to_ascii_uppercase().as_str() {
            "ENV" => {
                for (k, v) in parse_env(rest, &seen)? {
                    self.env.insert(k, v);
                }
            }
            "WORKDIR" => {
                let words = lex(rest, &seen, false)?;
                let path = words.into_iter().next().unwrap_or_default();
                if path.is_empty() {
                    return Err(BuildError("WORKDIR requires exactly one argument".into()));
                }
                let base = self.workdir.as_deref().unwrap_or("/");
                self.workdir = Some(resolve_path(base, &path));
            }
            _ => {}
        }
        Ok(())
    }
}

/// `ENV` arguments: `k=v …` pairs, or the legacy `k v…`.
fn parse_env(
    rest: &str,
    env: &BTreeMap<String, String>,
) -> Result<Vec<(String, String)>, BuildError> {
    let first_raw = rest.split(|c: char| c.is_ascii_whitespace()).next();
    let legacy = first_raw.is_some_and(|w| !w.is_empty() && !w.contains('='));
    if legacy {
        let (key, value) = rest
            .split_once(|c: char| c.is_ascii_whitespace())
            .ok_or_else(|| BuildError(format!("ENV {rest} must have two arguments")))?;
        let value = lex(value.trim(), env, false)?.concat();
        return Ok(vec![(key.to_owned(), value)]);
    }
    let mut out = Vec::new();
    for word in lex(rest, env, true)? {
        let (k, v) = word
            .split_once('=')
            .ok_or_else(|| BuildError(format!("ENV names a variable without a value: {word}")))?;
        if k.is_empty() {
            return Err(BuildError("ENV names an empty variable".into()));
        }
        out.push((k.to_owned(), v.to_owned()));
    }
    if out.is_empty() {
        return Err(BuildError("ENV requires at least one argument".into()));
    }
    Ok(out)
}

/// Splits `s` into words as the Dockerfile shell lexer does, removing quotes and expanding
/// variables from `env`. With `split` false, unquoted whitespace is kept inside one word.
fn lex(s: &str, env: &BTreeMap<String, String>, split: bool) -> Result<Vec<String>, BuildError> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_ascii_whitespace() && split => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => word.push(c),
                        None => return Err(BuildError(
                            "unexpected end of statement while looking for matching single-quote"
                                .into(),
                        )),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c @ ('"' | '\\' | '$')) => word.push(c),
                            Some(c) => {
                                word.push('\\');
                                word.push(c);
                            }
                            None => word.push('\\'),
                        },
                        Some('$') => word.push_str(&expand(&mut chars, env)?),
                        Some(c) => word.push(c),
                        None => return Err(BuildError(
                            "unexpected end of statement while looking for matching double-quote"
                                .into(),
                        )),
                    }
                }
            }
            '\\' => {
                in_word = true;
                if let Some(c) = chars.next() {
                    word.push(c);
                }
            }
            '$' => {
                in_word = true;
                word.push_str(&expand(&mut chars, env)?);
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    Ok(words)
}

/// The value of the variable reference after a `$` (`NAME` or `{NAME[:-word|:+word]}`); a `$`
/// followed by anything else is literal.
fn expand(
    chars: &mut std::iter::Peekable<std::str::Chars<'_>>,
    env: &BTreeMap<String, String>,
) -> Result<String, BuildError> {
    let is_name = |c: char| c.is_ascii_alphanumeric() || c == '_';
    if chars.peek() == Some(&'{') {
        chars.next();
        let mut name = String::new();
        while let Some(&c) = chars.peek() {
            if !is_name(c) {
                break;
            }
            name.push(c);
            chars.next();
        }
        let value = env.get(&name).cloned().unwrap_or_default();
        match chars.next() {
            Some('}') => Ok(value),
            Some(':') => {
                let op = chars.next();
                let mut word = String::new();
                loop {
                    match chars.next() {
                        Some('}') => break,
                        Some(c) => word.push(c),
                        None => return Err(BuildError(format!("missing '}}' in ${{{name}"))),
                    }
                }
                match op {
                    Some('-') => Ok(if value.is_empty() { word } else { value }),
                    Some('+') => Ok(if value.is_empty() { value } else { word }),
                    _ => Err(BuildError(format!("unsupported modifier in ${{{name}:…}}"))),
                }
            }
            _ => Err(BuildError(format!("missing '}}' in ${{{name}"))),
        }
    } else {
        let mut name = String::new();
        while let Some(&c) = chars.peek() {
            if !is_name(c) {
                break;
            }
            name.push(c);
            chars.next();
        }
        if name.is_empty() {
            return Ok("$".to_owned());
        }
        Ok(env.get(&name).cloned().unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn build(lines: &[&str]) -> ImageConfig {
        let defaults = BTreeMap::from([("PATH".to_owned(), "/usr/bin:/bin".to_owned())]);
        let mut c = ImageConfig::default();
        for l in lines {
            c.apply(l, &defaults).expect(l);
        }
        c
    }

    #[test]
    fn env_lines_as_modal_sends_them_are_unquoted() {
        // What `Image.env` sends: `ENV {key}={shlex.quote(val)}`.
        let c = build(&[
            "FROM base",
            "ENV GREETING='hello world'",
            r#"ENV QUOTE='it'"'"'s'"#,
            "ENV PLAIN=x",
            "ENV LITERAL='$HOME'",
            "ENV EMPTY=''",
        ]);
        assert_eq!(c.env["GREETING"], "hello world");
        assert_eq!(c.env["QUOTE"], "it's");
        assert_eq!(c.env["PLAIN"], "x");
        assert_eq!(c.env["LITERAL"], "$HOME", "single quotes are literal");
        assert_eq!(c.env["EMPTY"], "");
    }

    #[test]
    fn env_expands_from_the_environment_before_the_instruction() {
        // The Dockerfile reference's example: `ENV abc=bye def=$abc` gives def=hello.
        let c = build(&[
            "ENV abc=hello",
            "ENV abc=bye def=$abc",
            "ENV ghi=$abc",
            "ENV P=/opt/bin:${PATH} Q=\"a $abc\" R=${NOPE:-dflt} S=${abc:+set} T=\\$abc",
            "ENV legacy value with  spaces",
        ]);
        assert_eq!(c.env["def"], "hello");
        assert_eq!(c.env["ghi"], "bye");
        assert_eq!(c.env["P"], "/opt/bin:/usr/bin:/bin");
        assert_eq!(c.env["Q"], "a bye");
        assert_eq!(c.env["R"], "dflt");
        assert_eq!(c.env["S"], "set");
        assert_eq!(c.env["T"], "$abc");
        assert_eq!(c.env["legacy"], "value with  spaces");
    }

    #[test]
    fn workdir_is_absolute_and_relative_to_the_previous_one() {
        let c = build(&[
            "WORKDIR /srv",
            "WORKDIR app",
            "ENV D=data",
            "WORKDIR $D/../x",
        ]);
        assert_eq!(c.workdir.as_deref(), Some("/srv/app/x"));
        let c = build(&["WORKDIR '/my dir'"]);
        assert_eq!(c.workdir.as_deref(), Some("/my dir"));
    }

    #[test]
    fn malformed_lines_fail_the_build() {
        let mut c = ImageConfig::default();
        let d = BTreeMap::new();
        assert!(c.apply("ENV A='open", &d).is_err());
        assert!(c.apply("ENV A=1 B", &d).is_err());
        assert!(c.apply("ENV", &d).is_err());
        assert!(c.apply("WORKDIR", &d).is_err());
        assert!(c.apply("RUN anything at all", &d).is_ok());
    }
}
