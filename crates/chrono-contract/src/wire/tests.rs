//! The wire contract against the fixtures quoted from Aevatar's and Ornn's clients
//! (`research/ax-agentcore-chrono.md` §3; Aevatar `NyxIdCodeExecutionPortTests.cs`@1a4c1e88,
//! `NyxIdDurableCodeExecutionPortTests.cs`@1d8a531c, Ornn `sandboxClient.ts`@116a985e).

use std::time::Duration;

use super::*;
use serde_json::json;

#[test]
fn aevatar_sends_language_script_timeout_in_that_order() {
    // NyxIdCodeExecutionPortTests: the body is exactly {"language","script","timeout_secs"}.
    let r = ExecuteRequest::new(Language::Python, "print(42)", 180);
    assert_eq!(
        String::from_utf8(r.to_json()).unwrap(),
        r#"{"language":"python","script":"print(42)","timeout_secs":180}"#
    );
    assert!(r.validate().is_ok());
    for bad in [0, 601, u32::MAX] {
        assert!(
            ExecuteRequest::new(Language::Bash, "", bad)
                .validate()
                .is_err()
        );
    }
    for ok in [1, 600] {
        assert!(check_timeout(ok).is_ok());
    }
}

#[test]
fn ornn_fields_are_accepted_and_unknown_fields_tolerated() {
    // sandboxClient.ts: the fuller request form.
    let body = json!({
        "script": "print(1)", "language": "python", "output_type": "text",
        "env": {"K": "V"}, "dependencies": ["requests==2.32.0"], "timeout_secs": 60,
        "input_files": [{"path": "data.csv", "content": "YQ=="}], "network_enabled": true
    });
    let r: ExecuteRequest = serde_json::from_value(body).unwrap();
    assert_eq!(r.env["K"], "V");
    assert_eq!(r.input_files[0].path, "data.csv");
    assert_eq!(r.timeout_secs, Some(60));
    // Unknown languages are rejected.
    assert!(
        serde_json::from_value::<ExecuteRequest>(json!({"language": "ruby", "script": ""}))
            .is_err()
    );
    assert_eq!("typescript".parse::<Language>(), Ok(Language::Typescript));
    assert!("ts".parse::<Language>().is_err());
}

#[test]
fn debug_never_shows_the_script_env_values_or_files() {
    let mut r = ExecuteRequest::new(Language::Bash, "echo SECRET-SCRIPT", 5);
    r.env.insert("TOKEN".into(), "SECRET-ENV".into());
    r.input_files.push(InputFile {
        path: "f".into(),
        content: "U0VDUkVU".into(),
    });
    let d = format!("{r:?}");
    assert!(!d.contains("SECRET") && !d.contains("U0VDUkVU"), "{d}");
    assert!(d.contains("TOKEN"), "{d}");
}

#[test]
fn the_payload_hash_ignores_key_order_and_whitespace_only() {
    let a: ExecuteRequest =
        serde_json::from_str(r#"{"language":"python","script":"x","timeout_secs":5}"#).unwrap();
    let b: ExecuteRequest = serde_json::from_str(
        "{ \"timeout_secs\": 5,\n \"script\": \"x\", \"language\": \"python\" }",
    )
    .unwrap();
    assert_eq!(a.payload_hash(), b.payload_hash());
    let c = ExecuteRequest::new(Language::Python, "x", 6);
    assert_ne!(a.payload_hash(), c.payload_hash());
    assert_eq!(a.payload_hash().len(), 64);
}

#[test]
fn completed_answers_follow_aevatars_invariants() {
    // Success fixture (NyxIdCodeExecutionPortTests).
    let ok = br#"{"success": true,
        "output": {"stdout": "42\n", "stderr": "", "exit_code": 0, "execution_time_ms": 17,
                   "display_data": [], "files": []},
        "diagnostic_id": "diag-code-1"}"#;
    let Completion::Ran {
        output,
        error,
        diagnostic_id,
    } = parse_completion(ok).unwrap()
    else {
        panic!()
    };
    assert_eq!(
        (output.stdout.as_str(), output.exit_code, error),
        ("42\n", 0, None)
    );
    assert_eq!(diagnostic_id.as_deref(), Some("diag-code-1"));

    // Completed with failure: HTTP 200, success:false, an output and EXECUTION_FAILED.
    let failed = br#"{"success": false,
        "output": {"stdout": "partial output", "stderr": "traceback", "exit_code": 7, "execution_time_ms": 31},
        "error": {"code": "EXECUTION_FAILED", "message": "boom", "details": {"ename": "E", "evalue": "v", "traceback": []}},
        "diagnostic_id": "diag-code-2"}"#;
    let Completion::Ran { output, error, .. } = parse_completion(failed).unwrap() else {
        panic!()
    };
    assert_eq!(output.exit_code, 7);
    assert_eq!(error.unwrap().code, codes::EXECUTION_FAILED);

    // Terminal result without output (Durable tests): cancelled.
    let cancelled =
        br#"{"success": false, "error": {"code": "EXECUTION_CANCELLED", "phase": "execute"}}"#;
    let Completion::NoOutput { error, .. } = parse_completion(cancelled).unwrap() else {
        panic!()
    };
    assert_eq!(
        (error.code.as_str(), error.phase),
        ("EXECUTION_CANCELLED", Some(Phase::Execute))
    );
}

#[test]
fn answers_breaking_the_invariants_are_malformed() {
    for body in [
        // success:true with a non-zero exit code
        &br#"{"success":true,"output":{"stdout":"","stderr":"","exit_code":3}}"#[..],
        // success:true with an error
        br#"{"success":true,"output":{"stdout":"","stderr":"","exit_code":0},"error":{"code":"X"}}"#,
        // success:false with exit 0
        br#"{"success":false,"output":{"stdout":"","stderr":"","exit_code":0},"error":{"code":"EXECUTION_FAILED"}}"#,
        // success:false with an output but no error
        br#"{"success":false,"output":{"stdout":"","stderr":"","exit_code":1}}"#,
        // a missing exit code
        br#"{"success":true,"output":{"stdout":"","stderr":""}}"#,
        // a missing stdout
        br#"{"success":true,"output":{"stderr":"","exit_code":0}}"#,
        // exit code out of int32
        br#"{"success":false,"output":{"stdout":"","stderr":"","exit_code":4294967296},"error":{"code":"E"}}"#,
        // success as a string
        br#"{"success":"true","output":{"stdout":"","stderr":"","exit_code":0}}"#,
        br#"{"success":false}"#,
        br#"[]"#,
        br#"{"success":true,"output":{"stdout":"cut"#,
    ] {
        assert!(parse_completion(body).is_err(), "{}", String::from_utf8_lossy(body));
    }
    // An invalid diagnostic id is ignored, not fatal.
    let body = br#"{"success":true,"output":{"stdout":"","stderr":"","exit_code":0},"diagnostic_id":"has space"}"#;
    let Completion::Ran { diagnostic_id, .. } = parse_completion(body).unwrap() else {
        panic!()
    };
    assert_eq!(diagnostic_id, None);
}

fn snapshot_fixture() -> serde_json::Value {
    // NyxIdDurableCodeExecutionPortTests status fixture.
    json!({"operation_id": "op_0123456789abcdefghijklmnopqrstuv", "status": "running",
           "phase": "execute", "cleanup_status": "not_started", "version": 7,
           "cancel_requested": false, "result_available": false,
           "created_at": "2026-08-14T10:00:00Z", "updated_at": "2026-08-14T10:00:05Z",
           "expires_at": "2026-08-15T10:00:00Z", "terminal_at": null,
           "first_event_at": "2026-08-14T10:00:01Z", "last_event_at": "2026-08-14T10:00:04Z",
           "timings": {}})
}

const OP: &str = "op_0123456789abcdefghijklmnopqrstuv";

#[test]
fn snapshots_parse_and_require_every_field() {
    let s = parse_snapshot(snapshot_fixture().to_string().as_bytes(), OP).unwrap();
    assert_eq!(
        (s.status, s.phase, s.version),
        (Status::Running, Phase::Execute, 7)
    );
    assert!(!s.status.is_terminal());
    for field in [
        "operation_id",
        "status",
        "phase",
        "cleanup_status",
        "version",
        "cancel_requested",
        "result_available",
        "created_at",
        "updated_at",
        "expires_at",
    ] {
        let mut v = snapshot_fixture();
        v.as_object_mut().unwrap().remove(field);
        assert!(
            parse_snapshot(v.to_string().as_bytes(), OP).is_err(),
            "{field}"
        );
    }
}

#[test]
fn unknown_enum_values_strings_for_booleans_and_foreign_ids_are_malformed() {
    let cases: Vec<(&str, serde_json::Value)> = vec![
        ("status", json!("paused")),
        ("phase", json!("warming")),
        ("cleanup_status", json!("done")),
        ("cancel_requested", json!("false")),
        ("result_available", json!(0)),
        ("version", json!(-1)),
        ("version", json!("7")),
        ("operation_id", json!("op_ffffffffffffffffffffffffffffffff")),
        ("created_at", json!("yesterday")),
    ];
    for (field, value) in cases {
        let mut v = snapshot_fixture();
        v[field] = value.clone();
        assert!(
            parse_snapshot(v.to_string().as_bytes(), OP).is_err(),
            "{field}={value}"
        );
    }
    // Every status the clients accept, including the ones the brief omitted.
    for s in [
        "queued",
        "provisioning",
        "preparing",
        "running",
        "collecting",
        "succeeded",
        "failed",
        "cancelled",
        "outcome_uncertain",
    ] {
        let mut v = snapshot_fixture();
        v["status"] = json!(s);
        assert_eq!(
            parse_snapshot(v.to_string().as_bytes(), OP)
                .unwrap()
                .status
                .as_str(),
            s
        );
    }
}

#[test]
fn receipts_are_validated() {
    // Durable tests: the 202 receipt.
    let r = json!({"operation_id": OP, "status": "queued",
        "status_url": "https://chrono.internal/executions/op_x", "created_at": "2026-08-14T10:00:00Z",
        "expires_at": "2026-08-15T10:00:00Z"});
    let parsed = parse_receipt(r.to_string().as_bytes()).unwrap();
    assert_eq!(parsed.operation_id, OP);
    for (field, value) in [
        ("operation_id", json!("op_short")),
        ("operation_id", json!("op_0123456789abcdefghijklmnopqrst!v")),
        ("status", json!("accepted")),
        ("expires_at", json!("2026-08-13T10:00:00Z")),
        ("created_at", json!(12)),
    ] {
        let mut v = r.clone();
        v[field] = value.clone();
        assert!(
            parse_receipt(v.to_string().as_bytes()).is_err(),
            "{field}={value}"
        );
    }
}

#[test]
fn the_idempotency_key_rule() {
    // Durable.cs: 1..=128 printable ASCII, no comma.
    assert!(check_idempotency_key("tool:v1:operation:0123abcd").is_ok());
    assert!(check_idempotency_key(&"a".repeat(128)).is_ok());
    assert!(check_idempotency_key("!~").is_ok());
    for bad in ["", "a,b", "has space", "tab\t", "é", "\u{7f}"] {
        assert!(check_idempotency_key(bad).is_err(), "{bad:?}");
    }
    assert!(check_idempotency_key(&"a".repeat(129)).is_err());
    let k = operation_key(&[b"a", b"bc"]);
    assert!(k.starts_with(OPERATION_KEY_PREFIX) && k.len() == OPERATION_KEY_PREFIX.len() + 64);
    assert!(check_idempotency_key(&k).is_ok());
    assert_ne!(k, operation_key(&[b"ab", b"c"]), "length-prefixed parts");
}

#[test]
fn error_codes_are_found_directly_at_top_level_and_inside_nyxid_envelopes() {
    // ChronoProxyFailureInspector tests: error.code first, then top-level code, then one level
    // into the NyxID envelope's body (a JSON string or an object).
    assert_eq!(
        error_code(br#"{"success":false,"error":{"code":"SANDBOX_TIMEOUT"}}"#).as_deref(),
        Some("SANDBOX_TIMEOUT")
    );
    assert_eq!(
        error_code(br#"{"code":"FORBIDDEN"}"#).as_deref(),
        Some("FORBIDDEN")
    );
    let env = json!({"error": true, "status": 504,
        "body": "{\"success\":false,\"error\":{\"code\":\"SANDBOX_TIMEOUT\",\"message\":\"t\"}}"});
    assert_eq!(
        error_code(env.to_string().as_bytes()).as_deref(),
        Some("SANDBOX_TIMEOUT")
    );
    assert_eq!(envelope_status(env.to_string().as_bytes()), Some(504));
    let env =
        json!({"error": true, "status": 409, "body": {"error": {"code": "IDEMPOTENCY_KEY_REUSE"}}});
    assert_eq!(
        error_code(env.to_string().as_bytes()).as_deref(),
        Some("IDEMPOTENCY_KEY_REUSE")
    );
    assert_eq!(error_code(b"<html>bad gateway</html>"), None);
    assert_eq!(error_code(br#"{"error":{"code":"has space"}}"#), None);
}

#[test]
fn the_code_table_has_one_row_per_code_with_the_notes_status() {
    assert_eq!(
        code_spec(codes::IDEMPOTENCY_KEY_MISSING).unwrap().status,
        400
    );
    assert_eq!(code_spec(codes::IDEMPOTENCY_KEY_REUSE).unwrap().status, 409);
    assert_eq!(
        code_spec(codes::OPERATION_NOT_TERMINAL).unwrap().status,
        409
    );
    assert_eq!(
        code_spec(codes::ASYNC_EXECUTION_UNAVAILABLE)
            .unwrap()
            .status,
        503
    );
    assert_eq!(
        code_spec(codes::EXECUTION_CAPACITY_EXCEEDED)
            .unwrap()
            .status,
        429
    );
    assert_eq!(code_spec(codes::OPERATION_EXPIRED).unwrap().status, 410);
    assert_eq!(code_spec(codes::SANDBOX_TIMEOUT).unwrap().status, 504);
    let mut seen = std::collections::HashSet::new();
    for c in ERROR_CODES {
        assert!(valid_code(c.code) && seen.insert(c.code), "{}", c.code);
    }
}

#[test]
fn etags_and_conditional_requests() {
    assert_eq!(etag_for_version(7), "\"v7\"");
    assert!(valid_etag("\"v7\""));
    assert!(!valid_etag(" \"v7\"") && !valid_etag("") && !valid_etag("a\nb"));
    assert!(!valid_etag(&"x".repeat(513)));
    assert!(if_none_match_matches("\"v7\"", "\"v7\""));
    assert!(if_none_match_matches("W/\"v7\", \"v8\"", "\"v7\""));
    assert!(if_none_match_matches("*", "\"v1\""));
    assert!(!if_none_match_matches("\"v6\"", "\"v7\""));
}

#[test]
fn rfc3339_round_trips_and_rejects_garbage() {
    let t = UNIX_EPOCH + Duration::from_secs(1_786_701_600); // 2026-08-14T10:00:00Z
    assert_eq!(format_rfc3339(t), "2026-08-14T10:00:00Z");
    assert_eq!(
        parse_rfc3339("2026-08-14T10:00:00Z"),
        Some(1_786_701_600_000)
    );
    assert_eq!(
        parse_rfc3339("2026-08-14T12:00:00.250+02:00"),
        Some(1_786_701_600_250)
    );
    assert_eq!(parse_rfc3339("2000-02-29T00:00:00Z"), Some(951_782_400_000));
    for bad in [
        "2026-02-30T00:00:00Z",
        "2026-08-14 10:00",
        "2026-08-14T10:00:00",
        "x",
        "2026-08-14T10:00:00.Z",
    ] {
        assert_eq!(parse_rfc3339(bad), None, "{bad}");
    }
}

#[test]
fn completed_constructor_keeps_the_invariants() {
    let out = |code| ExecOutput {
        stdout: "o".into(),
        stderr: "e".into(),
        exit_code: code,
        execution_time_ms: Some(1),
        display_data: None,
        files: None,
    };
    for code in [0, 1, 127, -1] {
        let r = ExecuteResponse::completed(out(code), None);
        let body = serde_json::to_vec(&r).unwrap();
        assert!(parse_completion(&body).is_ok(), "{code}");
    }
}
