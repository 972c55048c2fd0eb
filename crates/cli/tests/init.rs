//! Inside every emulator's sandbox, pid 1 is `/sbin/init` (as E2B's, whose init is systemd's
//! `/sbin/init`) and nothing of the emulator's machinery runs: no init script in an argv
//! (`pivot_root`, its state directory), no lifeline reader, no `execseam` process.

use std::process::Command;

use execseam_emulators::kit::sandbox::Isolation;

#[tokio::test(flavor = "multi_thread")]
async fn ps_in_every_emulator_shows_no_execseam_machinery() {
    if Isolation::detect() != Isolation::Namespaces {
        eprintln!(
            "SKIP-REASON: needs root (Isolation::Namespaces); degraded sandboxes are host processes"
        );
        return;
    }
    for provider in execseam_emulators::providers() {
        let emu = execseam_emulators::start(provider, Default::default())
            .await
            .unwrap_or_else(|e| panic!("{provider}: {e}"));
        let env = emu.env.clone();
        let o = tokio::task::spawn_blocking(move || {
            Command::new(env!("CARGO_BIN_EXE_execseam"))
                .args([
                    "run",
                    "--adapter",
                    provider,
                    "--",
                    "ps",
                    "-eo",
                    "pid=,ppid=,args=",
                ])
                .envs(env)
                .output()
                .unwrap()
        })
        .await
        .unwrap();
        let out = String::from_utf8_lossy(&o.stdout);
        assert_eq!(
            o.status.code(),
            Some(0),
            "{provider}: {out} {}",
            String::from_utf8_lossy(&o.stderr)
        );
        // (pid, ppid, args) of every process the sandbox sees.
        let procs: Vec<(u32, u32, String)> = out
            .lines()
            .filter_map(|l| {
                let mut w = l.split_whitespace();
                let pid = w.next()?.parse().ok()?;
                let ppid = w.next()?.parse().ok()?;
                Some((pid, ppid, w.collect::<Vec<_>>().join(" ")))
            })
            .collect();
        let parent = |pid: u32| procs.iter().find(|p| p.0 == pid).map(|p| p.1);
        // The command's own tree: `ps`, the adapter's wrappers around it and their helpers
        // (AX's detach wrapper and its `cat`s): the client's processes, not the emulator's.
        let ps = procs
            .iter()
            .find(|p| p.2.starts_with("ps -eo"))
            .unwrap_or_else(|| panic!("{provider}: no ps in {procs:?}"))
            .0;
        let mut root = ps;
        while let Some(up) = parent(root).filter(|&p| p > 1 && parent(p).is_some()) {
            root = up;
        }
        let in_command = |mut pid: u32| loop {
            if pid == root {
                return true;
            }
            match parent(pid) {
                Some(p) if p > 1 => pid = p,
                _ => return false,
            }
        };
        assert!(
            procs.iter().any(|p| p.0 == 1 && p.2 == "/sbin/init"),
            "{provider}: pid 1 is not /sbin/init: {procs:?}"
        );
        // E2B's sandboxes run envd (e2b-dev/infra `storage.GuestEnvdPath`, `/usr/bin/envd`, a
        // systemd unit): its stand-in, the leader of the group envd's children share, is the
        // provider's, not the emulator's machinery.
        let provider_daemon = |p: &(u32, u32, String)| {
            provider == "e2b"
                && p.2.split_whitespace().next()
                    == Some(execseam_emulators::kit::sandbox::DAEMON_GROUP_LEADER)
        };
        let foreign: Vec<_> = procs
            .iter()
            .filter(|p| p.0 != 1 && !in_command(p.0) && !provider_daemon(p))
            .collect();
        assert!(
            foreign.is_empty(),
            "{provider}: processes of the emulator's show: {foreign:?} in {procs:?}"
        );
        drop(emu);
    }
}
