//! Behaviour of the Sprites adapter against the emulator beyond the conformance suite: kill on
//! drop through the session kill route, the HTTP POST transport, the environment semantics, the
//! error mapping of the observed answers, and closing the socket first.

use std::sync::Arc;
use std::time::{Duration, Instant};

use execseam_core::{Command, ErrorKind, Event, Exec, Exit, Output, Retry};
use execseam_emulators::sprites::{
    DEFAULT_SPRITE, EnvMode, SignalExit, SpritesEmulator, SpritesOptions, UnknownSprite,
};
use execseam_emulators::{EmulatorOptions, Fault};
use execseam_sprites::{BaseEnv, SpritesConfig, SpritesExec, SpritesProvider, Transport};
use execseam_test_util::exec::{alive_or_gone, assert_error, command, sh, stream_of};

async fn emulator(opts: SpritesOptions) -> SpritesEmulator {
    SpritesEmulator::start_with(
        EmulatorOptions {
            token: Some("spr_test".into()),
            ..EmulatorOptions::default()
        },
        opts,
    )
    .await
    .expect("the emulator starts")
}

fn adapter(emu: &SpritesEmulator, f: impl FnOnce(SpritesConfig) -> SpritesConfig) -> SpritesExec {
    on(
        f(SpritesConfig::new("spr_test").base_url(emu.base_url())),
        DEFAULT_SPRITE,
    )
}

/// A handle on sprite `name` (no request).
fn on(config: SpritesConfig, name: &str) -> SpritesExec {
    SpritesProvider::new(config)
        .expect("a provider")
        .attach(name)
        .expect("a handle")
}

async fn pid_alive(sprite: &SpritesExec, pidfile: &str) -> bool {
    let o = sprite.exec(sh(&alive_or_gone(pidfile))).await.unwrap();
    o.stdout.as_ref() == b"alive\n"
}

#[tokio::test(flavor = "multi_thread")]
async fn dropping_the_stream_kills_the_command_through_the_kill_route() {
    // The server would keep an orphan running for a minute: only the kill route can end it fast.
    let emu = emulator(SpritesOptions {
        max_run_after_disconnect: Duration::from_secs(60),
        ..SpritesOptions::default()
    })
    .await;
    let sprite = adapter(&emu, |c| c);
    let stream = sprite.streaming().expect("streaming over WebSockets");
    let mut events = stream
        .exec_stream(sh(
            "echo $$ > /home/sprite/pid; echo started; exec sleep 60",
        ))
        .await
        .unwrap();
    assert_eq!(
        events.next().await.unwrap().unwrap(),
        Event::Stdout("started\n".into())
    );
    assert!(pid_alive(&sprite, "/home/sprite/pid").await);
    let sessions = emu.sprite(DEFAULT_SPRITE).unwrap();
    assert_eq!(sessions.sessions().len(), 1);
    drop(events);
    let t = Instant::now();
    while !sessions.sessions().is_empty() || pid_alive(&sprite, "/home/sprite/pid").await {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "the command outlived its stream"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        emu.faults().count("kill"),
        1,
        "POST /exec/{{id}}/kill was called once"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn dropping_the_exec_future_kills_too() {
    let emu = emulator(SpritesOptions {
        max_run_after_disconnect: Duration::from_secs(60),
        ..SpritesOptions::default()
    })
    .await;
    let sprite = Arc::new(adapter(&emu, |c| c));
    let running = {
        let s = sprite.clone();
        tokio::spawn(async move {
            s.exec(sh("echo $$ > /home/sprite/pid2; exec sleep 60"))
                .await
        })
    };
    let t = Instant::now();
    while !pid_alive(&sprite, "/home/sprite/pid2").await {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "the command never started"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    running.abort(); // drops the exec future
    let t = Instant::now();
    while pid_alive(&sprite, "/home/sprite/pid2").await {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "the command outlived its exec"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(emu.faults().count("kill"), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_adapter_closes_first_so_the_servers_linger_costs_nothing() {
    let emu = emulator(SpritesOptions::default()).await; // 5 s linger, as production
    let sprite = adapter(&emu, |c| c);
    let t = Instant::now();
    for _ in 0..3 {
        assert!(sprite.exec(command(["true"])).await.unwrap().exit.success());
    }
    assert!(
        t.elapsed() < Duration::from_secs(3),
        "{:?} for 3 execs",
        t.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_http_post_transport() {
    let emu = emulator(SpritesOptions::default()).await;
    let sprite = adapter(&emu, |c| c.transport(Transport::Http));
    assert!(sprite.streaming().is_none());
    assert!(!sprite.capabilities().streaming && !sprite.capabilities().remote_kill);

    let o = sprite
        .exec(sh("printf out; printf err >&2; exit 3"))
        .await
        .unwrap();
    assert_eq!(o, Output::new("out", "err", Exit::Code(3)));
    let c = Command::builder(["cat"])
        .stdin("through the body")
        .build()
        .unwrap();
    assert_eq!(
        sprite.exec(c).await.unwrap().stdout.as_ref(),
        b"through the body"
    );
    assert_eq!(
        sprite.exec(command(["cat"])).await.unwrap().stdout.as_ref(),
        b""
    );
    let c = Command::builder(["pwd"])
        .workdir("/tmp")
        .env("A", "1")
        .build()
        .unwrap();
    assert_eq!(sprite.exec(c).await.unwrap().stdout.as_ref(), b"/tmp\n");

    // A missing workdir: the server answers 500 "failed to start process"; the files API says why.
    let c = Command::builder(["true"])
        .workdir("/home/sprite/nope")
        .build()
        .unwrap();
    let e = sprite.exec(c).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");

    // Faults in this transport's own format.
    for (fault, kinds, retry) in [
        (
            Fault::CutBeforeExit,
            &[ErrorKind::Unavailable, ErrorKind::Protocol][..],
            Retry::Unsafe,
        ),
        (
            Fault::MalformedBody,
            &[ErrorKind::Protocol][..],
            Retry::Unsafe,
        ),
        (
            Fault::ServerError,
            &[ErrorKind::Internal][..],
            Retry::Unsafe,
        ),
        (
            Fault::AuthFailure,
            &[ErrorKind::Unauthenticated][..],
            Retry::Never,
        ),
    ] {
        emu.faults().arm("exec", fault);
        let before = emu.exec_requests();
        let e = sprite
            .exec(sh("printf before; sleep 0.2; printf after"))
            .await
            .unwrap_err();
        assert!(kinds.contains(&e.kind()), "{fault:?}: {e}");
        assert_eq!(e.retry(), retry, "{fault:?}: {e}");
        assert_eq!(emu.exec_requests(), before + 1, "{fault:?}: never re-sent");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn env_is_added_to_the_base_environment_under_either_server_semantics() {
    for mode in [EnvMode::Replace, EnvMode::Merge] {
        let emu = emulator(SpritesOptions {
            env_mode: mode,
            ..SpritesOptions::default()
        })
        .await;
        let sprite = adapter(&emu, |c| c); // BaseEnv::Discover
        let c = Command::builder(["sh", "-c", "printf '%s|%s|%s' \"$A\" \"$HOME\" \"$USER\""])
            .env("A", "x y")
            .build()
            .unwrap();
        let before = emu.exec_requests();
        assert_eq!(
            sprite.exec(c.clone()).await.unwrap().stdout.as_ref(),
            b"x y|/home/sprite|sprite",
            "{mode:?}"
        );
        assert_eq!(
            emu.exec_requests(),
            before + 2,
            "discovery, then the command"
        );
        sprite.exec(c).await.unwrap();
        assert_eq!(
            emu.exec_requests(),
            before + 3,
            "the environment is read once"
        );

        // Trusting the server: right only where it merges.
        let trusting = adapter(&emu, |c| c.base_env(BaseEnv::Server));
        let c = Command::builder(["sh", "-c", "printf '%s' \"${HOME-unset}\""])
            .env("A", "1")
            .build()
            .unwrap();
        let home = trusting.exec(c).await.unwrap().stdout;
        let want: &[u8] = match mode {
            EnvMode::Replace => b"unset",
            EnvMode::Merge => b"/home/sprite",
        };
        assert_eq!(home.as_ref(), want, "{mode:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn observed_errors_map_to_typed_errors() {
    let emu = emulator(SpritesOptions::default()).await;
    let true_ = || command(["true"]);

    // The observed 500 {"error":"failed to retrieve sprite"} and the 404 are both NotFound.
    let gone = on(
        SpritesConfig::new("spr_test").base_url(emu.base_url()),
        "ghost",
    );
    let e = gone.exec(true_()).await.unwrap_err();
    assert_error(&e, ErrorKind::NotFound, Retry::Never);
    emu.set_options(|o| o.unknown_sprite = UnknownSprite::NotFound);
    let e = gone.exec(true_()).await.unwrap_err();
    assert_error(&e, ErrorKind::NotFound, Retry::Never);

    // 401 {"error":"authentication failed"}.
    let bad = on(
        SpritesConfig::new("wrong").base_url(emu.base_url()),
        DEFAULT_SPRITE,
    );
    let e = bad.exec(true_()).await.unwrap_err();
    assert_error(&e, ErrorKind::Unauthenticated, Retry::Never);
    assert!(
        !format!("{e:?}{e}").contains("wrong"),
        "the token never appears in errors"
    );

    // A 255 from the 2025 server's signal handling is reported as it came, never reinterpreted.
    emu.set_options(|o| o.signal_exit = SignalExit::Raw255);
    let sprite = adapter(&emu, |c| c);
    assert_eq!(
        sprite.exec(sh("kill -9 $$")).await.unwrap().exit,
        Exit::Code(255)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_sprite_vanishing_mid_command_is_an_error_and_stays_one() {
    let emu = emulator(SpritesOptions::default()).await;
    let sprite = Arc::new(adapter(&emu, |c| c));
    let running = {
        let s = sprite.clone();
        tokio::spawn(async move { s.exec(sh("printf start; sleep 30")).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(emu.destroy_sprite(DEFAULT_SPRITE));
    let e = running.await.unwrap().unwrap_err();
    assert!(
        matches!(e.kind(), ErrorKind::Unavailable | ErrorKind::Protocol),
        "{e}"
    );
    assert_eq!(e.retry(), Retry::Unsafe);
    assert_eq!(e.partial().map(|p| p.stdout.as_ref()), Some(&b"start"[..]));
    let e = sprite.exec(command(["true"])).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
}

#[tokio::test(flavor = "multi_thread")]
async fn env_values_and_argv_never_reach_error_messages() {
    // Sprites carries argv and env in the URL query; transport errors must not repeat the URL.
    let emu = emulator(SpritesOptions::default()).await;
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_url = format!("http://{}", l.local_addr().unwrap());
    drop(l);
    let secret = || {
        Command::builder(["printf", "argv-secret-1"])
            .env("TOKEN", "env-secret-2")
            .build()
            .unwrap()
    };
    for (sprite, fault) in [
        (
            on(
                SpritesConfig::new("spr_test")
                    .base_url(dead_url)
                    .base_env(BaseEnv::Server),
                DEFAULT_SPRITE,
            ),
            None,
        ),
        (
            adapter(&emu, |c| c.base_env(BaseEnv::Server)),
            Some(Fault::ResetBeforeResponse),
        ),
        (
            adapter(&emu, |c| {
                c.base_env(BaseEnv::Server).transport(Transport::Http)
            }),
            Some(Fault::ResetBeforeResponse),
        ),
    ] {
        if let Some(f) = fault {
            emu.faults().arm("exec", f);
        }
        let e = sprite.exec(secret()).await.unwrap_err();
        let shown = format!("{e} {e:?}");
        assert!(
            !shown.contains("secret-1") && !shown.contains("secret-2"),
            "{shown}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn pings_keep_a_silent_command_alive() {
    let emu = emulator(SpritesOptions::default()).await;
    let sprite = adapter(&emu, |c| {
        c.keepalive(Duration::from_millis(100), Duration::from_millis(600))
    });
    // Silent for 2 s: longer than the 600 ms without frames, but the server answers the pings.
    let o = sprite.exec(sh("sleep 2; printf done")).await.unwrap();
    assert_eq!(o.stdout.as_ref(), b"done");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_slow_consumer_is_not_a_silent_socket() {
    let emu = emulator(SpritesOptions::default()).await;
    let sprite = adapter(&emu, |c| {
        c.keepalive(Duration::from_millis(50), Duration::from_millis(200))
    });
    let script = "i=0; while [ $i -lt 200 ]; do echo $i; i=$((i+1)); sleep 0.001; done";
    let events = stream_of(&sprite, sh(script)).await;
    // The driver's queue fills up while nobody reads, for far longer than the pong timeout.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let o = events.collect().await.unwrap();
    let want: String = (0..200).map(|i| format!("{i}\n")).collect();
    assert_eq!(o.stdout.as_ref(), want.as_bytes());
}

/// argv and env travel in the exec URL's query: one that would not fit is refused before any
/// request (`InvalidCommand`, `Retry::Never`), not reported as an unavailable service.
#[tokio::test(flavor = "multi_thread")]
async fn a_command_too_large_for_the_exec_url_is_refused_before_any_request() {
    let emu = emulator(SpritesOptions::default()).await;
    for transport in [Transport::WebSocket, Transport::Http] {
        let sprite = adapter(&emu, |c| c.transport(transport));
        let before = emu.faults().count("exec");
        let long = "a".repeat(70 << 10);
        for cmd in [
            command(["echo", long.as_str()]),
            Command::builder(["true"])
                .env("BIG", long.as_str())
                .build()
                .unwrap(),
        ] {
            let e = sprite.exec(cmd).await.unwrap_err();
            assert_error(&e, ErrorKind::InvalidCommand, Retry::Never);
            assert!(e.message().contains("exec URL"), "{e}");
            assert!(!e.message().contains("aaaa"), "{e}");
        }
        assert_eq!(emu.faults().count("exec"), before, "nothing was sent");
    }
}

/// The HTTP body's exit is a chunk of its own; an exit merged into the last data chunk (an
/// intermediary merged chunks) is never guessed from the output's last two bytes, and two output
/// frames merged into one chunk (`out` + `err` read as stdout `out\x02err`, seen once in the
/// reliability suite's `rechunk:65536` case) or split (`\x01ou` + `t`) are refused, never `Ok`.
#[tokio::test]
async fn an_exit_merged_into_output_is_never_guessed() {
    use bytes::Bytes;
    let body = |chunks: Vec<&'static [u8]>| {
        futures_util::stream::iter(
            chunks
                .into_iter()
                .map(|c| Ok::<_, reqwest::Error>(Bytes::from_static(c))),
        )
    };
    let ok = execseam_sprites::parse_http_body(body(vec![b"\x01out", b"\x02err", b"\x03\x07"]))
        .await
        .unwrap();
    assert_eq!(ok, Output::new("out", "err", Exit::Code(7)));
    for merged in [
        vec![&b"\x01out\x03\x07"[..]],
        vec![&b"\x01out"[..], b"\x02err\x03\x00"],
        vec![&b"\x01out\x02err"[..], b"\x03\x07"],
        vec![&b"\x02err\x01out"[..], b"\x03\x07"],
        vec![&b"\x01ou"[..], b"t", b"\x03\x07"],
    ] {
        let e = execseam_sprites::parse_http_body(body(merged))
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Protocol, "{e}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_checkpoint_restores_in_place_and_stops_the_running_processes() {
    // docs.sprites.dev/concepts/checkpoints: the checkpoint holds the writable filesystem, not
    // memory; "Restore rewinds the filesystem. Running processes stop."
    let emu = emulator(SpritesOptions::default()).await;
    let config = SpritesConfig::new("spr_test").base_url(emu.base_url());
    let p = SpritesProvider::new(config.clone()).unwrap();
    let sprite = on(config, DEFAULT_SPRITE);
    let f = "/home/sprite/execseam-state";
    sprite
        .exec(sh(&format!(
            "printf before > {f}; sleep 300 >/dev/null 2>&1 </dev/null & echo $! > {f}.pid"
        )))
        .await
        .unwrap();
    let taken = p
        .snapshot(DEFAULT_SPRITE, execseam_core::SnapshotRequest::new())
        .await
        .unwrap();
    assert_eq!(taken.source_state, execseam_core::SandboxState::Running);
    let listed = p.list_snapshots(Some(DEFAULT_SPRITE)).await.unwrap();
    assert!(
        listed.iter().any(|s| s.id == taken.snapshot.id),
        "{listed:?}"
    );
    assert!(
        pid_alive(&sprite, &format!("{f}.pid")).await,
        "a checkpoint stops nothing"
    );
    sprite
        .exec(sh(&format!("printf after > {f}")))
        .await
        .unwrap();
    p.restore(DEFAULT_SPRITE, &taken.snapshot.id).await.unwrap();
    let o = sprite.exec(sh(&format!("cat {f}"))).await.unwrap();
    assert_eq!(o.stdout.as_ref(), b"before");
    assert!(
        !pid_alive(&sprite, &format!("{f}.pid")).await,
        "a restore stops processes"
    );
    let e = p.restore(DEFAULT_SPRITE, "v999").await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
}

/// Sends one HTTP/1.1 request to the emulator (`Connection: close`) and reads the whole answer.
async fn http(emu: &SpritesEmulator, method: &str, path: &str, body: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = emu.base_url().trim_start_matches("http://").to_owned();
    let mut s = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer spr_test\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn expose_is_a_conflict_while_a_running_service_routes_the_url_to_another_port() {
    // The sprite URL routes to a running service's `http_port` (the Services API: "HTTP port
    // for proxy routing"), so while one names 3000 the URL does not reach 8080.
    let emu = emulator(SpritesOptions::default()).await;
    let provider = SpritesProvider::new(SpritesConfig::new("spr_test").base_url(emu.base_url()))
        .expect("a provider");
    let url = provider.expose(DEFAULT_SPRITE, 8080).await.unwrap();
    assert!(url.url.contains(".sprites.localhost:"), "{}", url.url);
    let path = format!("/v1/sprites/{DEFAULT_SPRITE}/services/site?duration=0s");
    let started = http(
        &emu,
        "PUT",
        &path,
        r#"{"cmd":"sleep","args":["300"],"http_port":3000}"#,
    )
    .await;
    assert!(started.starts_with("HTTP/1.1 200"), "{started}");
    let e = provider.expose(DEFAULT_SPRITE, 8080).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Conflict, "{e}");
    assert!(e.to_string().contains("3000"), "{e}");
    let path = format!("/v1/sprites/{DEFAULT_SPRITE}/services/site");
    let deleted = http(&emu, "DELETE", &path, "").await;
    assert!(deleted.starts_with("HTTP/1.1 204"), "{deleted}");
    assert!(provider.expose(DEFAULT_SPRITE, 8080).await.is_ok());
}
