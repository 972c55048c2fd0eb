//! The Northflank adapter against its emulator: connect-only lifecycle, the team scope, both
//! `exitCode` encodings, stdin, a job's container, the wrapper for workdir and env, and
//! configuration errors before any I/O.

use execseam_core::{Command, ErrorKind, Exec, Exit, ListFilter, Provider, Sandbox, SandboxSpec};
use execseam_emulators::EmulatorOptions;
use execseam_emulators::northflank::{
    ExitCodeJson, JOB_ID, NorthflankEmulator, NorthflankOptions, PROJECT_ID, SERVICE_ID, TEAM_ID,
};
use execseam_northflank::{NorthflankConfig, NorthflankProvider, Target};
use execseam_test_util::exec;
use execseam_test_util::exec::{assert_error, command};

async fn setup() -> (NorthflankEmulator, NorthflankConfig) {
    let options = EmulatorOptions {
        token: Some("nf-test-token".into()),
        ..EmulatorOptions::default()
    };
    let emu = NorthflankEmulator::start_with(options, NorthflankOptions::default())
        .await
        .expect("emulator");
    let config = NorthflankConfig::new(emu.token(), PROJECT_ID).api_url(emu.base_url());
    (emu, config)
}

#[tokio::test(flavor = "multi_thread")]
async fn connect_only_lifecycle() {
    let (emu, config) = setup().await;
    let provider = NorthflankProvider::new(config).unwrap();
    let svc = provider.connect(SERVICE_ID).await.unwrap();
    assert_eq!(svc.id(), SERVICE_ID);
    assert!(!svc.owned());
    svc.set_owned(true);
    assert!(!svc.owned(), "a service is never the adapter's to delete");
    let err = provider.connect("no-such-service").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    let err = provider.connect("builds/x").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidCommand);

    let p: &dyn Provider = &provider;
    let err = p.create(SandboxSpec::new()).await.err().unwrap();
    assert_eq!(err.kind(), ErrorKind::Unsupported);
    let err = p
        .create(SandboxSpec::new().with_label("a", "b"))
        .await
        .err()
        .unwrap();
    assert_eq!(err.kind(), ErrorKind::Unsupported);
    assert_eq!(
        p.destroy(SERVICE_ID).await.unwrap_err().kind(),
        ErrorKind::Unsupported
    );
    assert_eq!(
        Sandbox::destroy(&svc).await.unwrap_err().kind(),
        ErrorKind::Unsupported
    );
    let listed = p.list(&ListFilter::new()).await.unwrap();
    assert_eq!(
        listed.iter().map(|i| i.id.as_str()).collect::<Vec<_>>(),
        [SERVICE_ID]
    );
    let err = p
        .list(&ListFilter::new().with_label("a", "b"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unsupported);
    svc.close().await.unwrap();
    let out = svc.exec(command(["true"])).await.unwrap();
    assert_eq!(
        out.exit,
        Exit::Code(0),
        "closing a connected handle deletes nothing"
    );
    assert!(
        emu.entity(
            PROJECT_ID,
            execseam_emulators::northflank::Kind::Service,
            SERVICE_ID
        )
        .is_some()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn exit_codes_as_numbers_or_strings_stdin_and_a_job() {
    let (emu, config) = setup().await;
    let provider = NorthflankProvider::new(config.clone().team_id(TEAM_ID)).unwrap();
    let svc = provider.connect(SERVICE_ID).await.unwrap();
    for mode in [
        ExitCodeJson::String,
        ExitCodeJson::Number,
        ExitCodeJson::NumberOnSuccess,
    ] {
        emu.set_options(|o| o.exit_code = mode);
        for code in [0, 3, 255] {
            let out = svc
                .exec(command(["sh", "-c", &format!("exit {code}")]))
                .await
                .unwrap();
            assert_eq!(out.exit, Exit::Code(code), "{mode:?}");
        }
    }
    let input: Vec<u8> = (0..300_000u32).map(|i| (i % 256) as u8).collect();
    let out = exec::cat(&svc, &input).await;
    assert_eq!(
        out.stdout.as_ref(),
        &input[..],
        "binary stdin and stdout, byte-exact"
    );
    let out = svc
        .exec(
            Command::builder(["sh", "-c", "pwd; printf %s \"$X-Y\"; printf %s \"$A\" >&2"])
                .workdir("/tmp")
                .env("A", "b c")
                .env("X", "1")
                .build()
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(
        (out.stdout.as_ref(), out.stderr.as_ref()),
        (&b"/tmp\n1-Y"[..], &b"b c"[..])
    );
    let err = svc
        .exec(Command::builder(["true"]).workdir("/nope").build().unwrap())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
    let job = provider.connect(&format!("jobs/{JOB_ID}")).await.unwrap();
    assert_eq!(job.target(), &Target::Job(JOB_ID.into()));
    let out = job.exec(command(["printenv", "HOSTNAME"])).await.unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).starts_with(JOB_ID),
        "{out:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_user_setting_picks_the_images_account() {
    let (_emu, config) = setup().await;
    for user in ["northflank", "1000"] {
        let svc = NorthflankProvider::new(config.clone().user(user))
            .unwrap()
            .attach(SERVICE_ID)
            .expect("a handle");
        let out = svc.exec(command(["id", "-un"])).await.unwrap();
        assert_eq!(out.stdout.as_ref(), b"northflank\n", "{user}");
    }
    let root = NorthflankProvider::new(config)
        .unwrap()
        .attach(SERVICE_ID)
        .expect("a handle");
    let out = root.exec(command(["id", "-u"])).await.unwrap();
    assert_eq!(out.stdout.as_ref(), b"0\n", "the image's default user");
}

#[tokio::test(flavor = "multi_thread")]
async fn refusals_are_typed() {
    let (emu, config) = setup().await;
    let bad = NorthflankProvider::new(config.clone().user("nobody-here")).unwrap();
    let svc = bad.attach(SERVICE_ID).expect("a handle");
    let err = svc.exec(command(["true"])).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidCommand, "{err}");
    let wrong =
        NorthflankProvider::new(NorthflankConfig::new("wrong", PROJECT_ID).api_url(emu.base_url()))
            .unwrap()
            .attach(SERVICE_ID)
            .expect("a handle");
    let err = wrong.exec(command(["true"])).await.unwrap_err();
    assert_error(
        &err,
        ErrorKind::Unauthenticated,
        execseam_core::Retry::Never,
    );
    let err = NorthflankProvider::new(NorthflankConfig::new("", "p")).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidConfig);
}

#[tokio::test(flavor = "multi_thread")]
async fn each_service_is_its_own_container() {
    let (emu, config) = setup().await;
    let provider = NorthflankProvider::new(config).unwrap();
    let svc = provider.connect(SERVICE_ID).await.unwrap();
    let job = provider.connect(&format!("jobs/{JOB_ID}")).await.unwrap();
    let instance = emu
        .entity(
            PROJECT_ID,
            execseam_emulators::northflank::Kind::Service,
            SERVICE_ID,
        )
        .unwrap()
        .instance()
        .to_owned();
    let out = svc.exec(command(["hostname"])).await.unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        instance,
        "the pod's hostname"
    );
    let out = svc
        .exec(command(["sh", "-c", "ps -e -o pid= | wc -l"]))
        .await
        .unwrap();
    let n: usize = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    assert!(n < 10, "ps lists only the container's processes: {n}");
    let marker = format!("/var/tmp/execseam-nf-{}", std::process::id());
    svc.exec(command(["sh", "-c", &format!("echo x > {marker}")]))
        .await
        .unwrap();
    assert!(!std::path::Path::new(&marker).exists(), "not on the host");
    let out = job.exec(command(["cat", &marker])).await.unwrap();
    assert_ne!(out.exit, Exit::Code(0), "not in the job's container");
}

/// The container's `execve` limit is its own (issue 38, D32): the first command over 64 KiB
/// asks it once (one probe exec), so Inspect's 16 x 64 KiB arguments run at the default stack,
/// and a handle on a container whose processes have a 1 MiB stack refuses them before their
/// exec request (the code before assumed 8 MiB and sent them).
#[tokio::test(flavor = "multi_thread")]
async fn a_command_is_checked_against_the_containers_probed_arg_max() {
    let (emu, config) = setup().await;
    let provider = NorthflankProvider::new(config).unwrap();
    let svc = provider.connect(SERVICE_ID).await.unwrap();
    let fresh = || async { provider.connect(SERVICE_ID).await.unwrap() };
    execseam_test_util::probe::arg_max_is_probed(&svc, fresh, || emu.exec_requests()).await;
}
