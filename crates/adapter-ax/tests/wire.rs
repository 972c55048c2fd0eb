//! Wire compatibility with upstream: every vector below is written by hand from the published
//! field numbers of `ateenv.v1alpha` at agent-substrate/env 4468a200 (the version google/ax pins),
//! never produced by our own encoder, so a wrong field number, wire type or enum value fails.
//!
//! Protobuf reminder: a key is `(field << 3) | wire_type`; wire type 0 = varint, 2 = length
//! delimited. `0x0a` = field 1 bytes/string, `0x12` = field 2 bytes, `0x18` = field 3 varint, …

use bytes::Bytes;
use execseam_ax_proto::google::protobuf::{Duration, Timestamp};
use execseam_ax_proto::{
    GetProcessRequest, Process, ProcessOutput, ProcessState, ReadFileRequest, ReadFileResponse,
    Signal, SignalProcessRequest, StartProcessRequest, StreamProcessOutputRequest,
    WriteFileRequest, WriteFileResponse, WriteProcessInputRequest, WriteProcessInputResponse,
    process_output::Output,
};
use prost::Message;

fn hex(b: &[u8]) -> String {
    b.iter()
        .map(|x| format!("{x:02x}"))
        .collect::<Vec<_>>()
        .join(" ")
}

fn assert_encodes<M: Message + std::fmt::Debug>(m: &M, want: &[u8]) {
    let got = m.encode_to_vec();
    assert_eq!(hex(&got), hex(want), "encoding of {m:?}");
}

#[test]
fn start_process_request() {
    let m = StartProcessRequest {
        command: vec!["sh".into(), "-c".into(), "exit 7".into()],
        cwd: "/w".into(),
        env: [("A".to_string(), "b".to_string())].into_iter().collect(),
        stdin: true,
        timeout: Some(Duration {
            seconds: 5,
            nanos: 0,
        }),
    };
    let want: &[u8] = &[
        0x0a, 0x02, b's', b'h', // 1: command[0] "sh"
        0x0a, 0x02, b'-', b'c', // 1: command[1] "-c"
        0x0a, 0x06, b'e', b'x', b'i', b't', b' ', b'7', // 1: command[2]
        0x12, 0x02, b'/', b'w', // 2: cwd
        0x1a, 0x06, 0x0a, 0x01, b'A', 0x12, 0x01, b'b', // 3: env entry {1: key, 2: value}
        0x20, 0x01, // 4: stdin = true
        0x2a, 0x02, 0x08, 0x05, // 5: timeout Duration{1: seconds 5}
    ];
    assert_encodes(&m, want);
    assert_eq!(StartProcessRequest::decode(want).unwrap(), m);
}

#[test]
fn process_decodes_every_field() {
    let mut b: Vec<u8> = vec![0x0a, 0x06];
    b.extend_from_slice(b"proc-1"); // 1: process_id
    b.extend_from_slice(&[0x12, 0x02, b's', b'h']); // 2: command[0]
    b.extend_from_slice(&[0x18, 0x92, 0x21]); // 3: pid 4242
    b.extend_from_slice(&[0x20, 0x02]); // 4: state EXITED
    b.extend_from_slice(&[0x28, 0x82, 0x01]); // 5: exit_code 130
    b.extend_from_slice(&[0x32, 0x04, 0x08, 0x01, 0x10, 0x02]); // 6: started_at {1: 1, 2: 2}
    b.extend_from_slice(&[0x3a, 0x02, 0x08, 0x03]); // 7: finished_at {1: 3}
    let p = Process::decode(b.as_slice()).unwrap();
    assert_eq!(
        p,
        Process {
            process_id: "proc-1".into(),
            command: vec!["sh".into()],
            pid: 4242,
            state: ProcessState::Exited as i32,
            exit_code: 130,
            started_at: Some(Timestamp {
                seconds: 1,
                nanos: 2
            }),
            finished_at: Some(Timestamp {
                seconds: 3,
                nanos: 0
            }),
        }
    );
    // A negative int32 is a 10-byte varint.
    let neg = [
        0x28, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
    ];
    assert_eq!(Process::decode(&neg[..]).unwrap().exit_code, -1);
}

#[test]
fn process_state_values() {
    assert_eq!(ProcessState::Unspecified as i32, 0);
    assert_eq!(ProcessState::Running as i32, 1);
    assert_eq!(ProcessState::Exited as i32, 2);
}

#[test]
fn process_output_oneof() {
    let out = ProcessOutput::decode(&[0x0a, 0x03, b'a', 0x00, 0xff][..]).unwrap();
    assert_eq!(
        out.output,
        Some(Output::Stdout(Bytes::from_static(b"a\0\xff")))
    );
    let err = ProcessOutput::decode(&[0x12, 0x01, b'e'][..]).unwrap();
    assert_eq!(err.output, Some(Output::Stderr(Bytes::from_static(b"e"))));
    // 3: exit Process{4: state EXITED, 5: exit_code 7}
    let exit = ProcessOutput::decode(&[0x1a, 0x04, 0x20, 0x02, 0x28, 0x07][..]).unwrap();
    match exit.output {
        Some(Output::Exit(p)) => {
            assert_eq!((p.state, p.exit_code), (ProcessState::Exited as i32, 7));
        }
        other => panic!("{other:?}"),
    }
    // An empty message (a future output kind we do not know) decodes to no variant.
    assert_eq!(
        ProcessOutput::decode(&[0x22, 0x00][..]).unwrap().output,
        None
    );
    assert_encodes(
        &ProcessOutput {
            output: Some(Output::Stderr(Bytes::from_static(b"e"))),
        },
        &[0x12, 0x01, b'e'],
    );
}

#[test]
fn stream_process_output_request() {
    assert_encodes(
        &StreamProcessOutputRequest {
            process_id: "p".into(),
            stdout_offset: 300,
            stderr_offset: 1,
            follow: true,
        },
        &[0x0a, 0x01, b'p', 0x10, 0xac, 0x02, 0x18, 0x01, 0x20, 0x01],
    );
    // Defaults are omitted (proto3): offsets 0, follow false.
    assert_encodes(
        &StreamProcessOutputRequest {
            process_id: "p".into(),
            ..Default::default()
        },
        &[0x0a, 0x01, b'p'],
    );
}

#[test]
fn write_process_input() {
    assert_encodes(
        &WriteProcessInputRequest {
            process_id: "p".into(),
            data: Bytes::from_static(b"hi"),
            close: true,
        },
        &[0x0a, 0x01, b'p', 0x12, 0x02, b'h', b'i', 0x18, 0x01],
    );
    assert_eq!(
        WriteProcessInputResponse::decode(&[0x08, 0x05][..])
            .unwrap()
            .bytes_written,
        5
    );
}

#[test]
fn signals_use_linux_numbers() {
    assert_encodes(
        &SignalProcessRequest {
            process_id: "p".into(),
            signal: Signal::Int as i32,
        },
        &[0x0a, 0x01, b'p', 0x10, 0x02],
    );
    let table = [
        (Signal::Hup, 1),
        (Signal::Int, 2),
        (Signal::Quit, 3),
        (Signal::Kill, 9),
        (Signal::Term, 15),
        (Signal::Chld, 17),
        (Signal::Cont, 18),
        (Signal::Stop, 19),
        (Signal::Winch, 28),
        (Signal::Io, 29),
        (Signal::Sys, 31),
    ];
    for (s, n) in table {
        assert_eq!(s as i32, n, "{s:?}");
    }
    assert!(Signal::try_from(16).is_err() && Signal::try_from(30).is_err());
}

#[test]
fn get_process_and_files() {
    assert_encodes(
        &GetProcessRequest {
            process_id: "p".into(),
        },
        &[0x0a, 0x01, b'p'],
    );
    assert_encodes(
        &ReadFileRequest {
            path: "/w/f".into(),
            mode: 0o644,
        },
        &[0x0a, 0x04, b'/', b'w', b'/', b'f', 0x10, 0xa4, 0x03],
    );
    assert_eq!(
        ReadFileResponse::decode(&[0x0a, 0x02, b'o', b'k'][..])
            .unwrap()
            .chunk,
        Bytes::from_static(b"ok")
    );
    // WriteFileRequest: 1 path, 2 mode (varint), 3 seek_offset (varint), 4 chunk (bytes).
    assert_encodes(
        &WriteFileRequest {
            path: "f".into(),
            mode: 0o600,
            seek_offset: 10,
            chunk: Bytes::from_static(b"x"),
        },
        &[
            0x0a, 0x01, b'f', 0x10, 0x80, 0x03, 0x18, 0x0a, 0x22, 0x01, b'x',
        ],
    );
    assert_eq!(
        WriteFileResponse::decode(&[0x08, 0x01][..])
            .unwrap()
            .bytes_written,
        1
    );
}

/// Why the older variant cannot be spoken by the same client: its `Process` puts `status` (a
/// varint) at field 2, where this version has `command` (length-delimited), and its exit code at
/// field 3, this version's `pid`.
#[test]
fn a_variant_a_process_does_not_decode_as_this_version() {
    // Variant A: Process{1: "p", 2: status COMPLETED (2), 3: exit_code 7}.
    let variant_a = [0x0a, 0x01, b'p', 0x10, 0x02, 0x18, 0x07];
    assert!(Process::decode(&variant_a[..]).is_err());
    // Variant A's StartProcessResponse{1: process_id} decodes, but without a state: the adapter
    // reports that as an unsupported guest instead of following a process it cannot observe.
    let start = Process::decode(&[0x0a, 0x01, b'p'][..]).unwrap();
    assert_eq!(start.state, ProcessState::Unspecified as i32);
}
