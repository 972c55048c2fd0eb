//! Set-up the CLI's tests share: the E2B emulator (its control plane lists running sandboxes)
//! and plain HTTP to that control plane.
// Each test binary uses a part of this module.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};

/// The MCP interop scripts' folder (`interop/mcp`).
pub fn mcp_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("interop/mcp")
}

/// The Python of the official MCP SDK's venv (`mcp`, pinned in `interop/mcp/requirements.txt`,
/// installed from PyPI when missing).
pub fn mcp_python() -> PathBuf {
    execseam_test_util::interop::python_env("mcp", &mcp_dir().join("requirements.txt"))
        .expect("the official mcp SDK installs from PyPI")
}

/// A running E2B emulator, with the variables that point the CLI at it.
pub struct Emu {
    /// The emulator (it stops when dropped).
    pub emu: execseam_emulators::AnyEmulator,
    /// The CLI's environment for it.
    pub env: Vec<(String, String)>,
    /// The control plane's base URL.
    pub base: String,
    /// Its API key.
    pub key: String,
}

/// Starts the E2B emulator.
pub async fn e2b() -> Emu {
    let emu = execseam_emulators::start("e2b", Default::default())
        .await
        .unwrap();
    let key = emu
        .env
        .iter()
        .find(|(k, _)| k == "E2B_API_KEY")
        .unwrap()
        .1
        .clone();
    Emu {
        env: emu.env.clone(),
        base: emu.base_url.clone(),
        key,
        emu,
    }
}

/// One plain HTTP/1.1 request without a body to the emulator's control plane; asserts a 2xx
/// answer and returns its body.
pub fn http(base: &str, key: &str, method: &str, path: &str) -> String {
    request(base, key, method, path, "")
}

/// One plain HTTP/1.1 request with a JSON `body` to the emulator's control plane; asserts a
/// 2xx answer and returns its body.
pub fn request(base: &str, key: &str, method: &str, path: &str, body: &str) -> String {
    let addr = base.trim_start_matches("http://");
    let mut s = TcpStream::connect(addr).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nX-API-KEY: {key}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    assert!(resp.starts_with("HTTP/1.1 2"), "{resp}");
    resp.split("\r\n\r\n")
        .nth(1)
        .unwrap_or_default()
        .trim()
        .to_owned()
}

/// `run --adapter <adapter> -- sh -c <script>`: the CLI's arguments.
pub fn run_sh<'a>(adapter: &'a str, script: &'a str) -> [&'a str; 7] {
    ["run", "--adapter", adapter, "--", "sh", "-c", script]
}
