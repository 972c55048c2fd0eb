//! The calls: the SDK client, configured without `aws-config`, and one helper per operation.
//!
//! Retries: the SDK's standard retry strategy (3 attempts) stays on for the session calls and the
//! tools that cannot start a command (they are idempotent, and StartCodeInterpreterSession carries
//! an idempotency token). For every invocation that submits a command the SDK's retries are
//! switched off: it would re-send `InvokeCodeInterpreter` on an HTTP 500, running the command
//! again.

use execseam_adapter_kit::retry::Call;
use std::sync::Arc;

use aws_sdk_bedrockagentcore as ac;
use aws_sdk_bedrockagentcore::config::http::HttpResponse;
use aws_sdk_bedrockagentcore::config::retry::RetryConfig;
use aws_sdk_bedrockagentcore::config::timeout::TimeoutConfig;
use aws_sdk_bedrockagentcore::config::{BehaviorVersion, Region, StalledStreamProtectionConfig};
use aws_sdk_bedrockagentcore::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_bedrockagentcore::types::{CodeInterpreterStreamOutput, ToolArguments, ToolName};
use aws_smithy_http_client::tls::{self, rustls_provider::CryptoMode};
use execseam_core::Error;
use tracing::instrument::WithSubscriber as _;
use tracing::subscriber::NoSubscriber;

use crate::config::AgentCoreConfig;
use crate::error::{self, GET_SESSION, LIST_SESSIONS, START_SESSION, STOP_SESSION};
use crate::wire::ToolResult;

/// The most text one invocation's result may carry (stdout, stderr and content blocks).
const MAX_RESULT: usize = 64 << 20;

/// One SDK client bound to one code interpreter.
#[derive(Clone, Debug)]
pub(crate) struct Client {
    sdk: ac::Client,
    /// The same client without retries, for the invocations that submit a command (built once:
    /// a per-call `config_override` rebuilds the operation's runtime plugins every call).
    submit: ac::Client,
    identifier: Arc<str>,
    idle: std::time::Duration,
}

impl Client {
    pub(crate) fn new(config: &AgentCoreConfig) -> Client {
        // rustls with ring (no aws-lc); the connector also speaks plain http:// (the emulator).
        let http = aws_smithy_http_client::Builder::new()
            .tls_provider(tls::Provider::Rustls(CryptoMode::Ring))
            .build_https();
        let mut b = ac::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new(config.region.clone()))
            .credentials_provider(config.credentials.provider())
            .http_client(http)
            .retry_config(RetryConfig::standard().with_max_attempts(3))
            // A command may be silent for minutes: a quiet event stream is not a stalled one.
            .stalled_stream_protection(StalledStreamProtectionConfig::disabled())
            // The SDK buffers a message's claimed length before checking its prelude.
            .interceptor(crate::frames::CheckFrames)
            .timeout_config(
                TimeoutConfig::builder()
                    .connect_timeout(config.connect_timeout)
                    .build(),
            );
        if let Some(url) = &config.endpoint_url {
            b = b.endpoint_url(url.trim_end_matches('/'));
        }
        let conf = b.build();
        let submit = conf
            .to_builder()
            .retry_config(RetryConfig::disabled())
            .build();
        Client {
            sdk: ac::Client::from_conf(conf),
            submit: ac::Client::from_conf(submit),
            identifier: Arc::from(config.identifier.as_str()),
            idle: config.idle_timeout,
        }
    }

    /// The code interpreter identifier.
    pub(crate) fn identifier(&self) -> &str {
        &self.identifier
    }

    /// `call`'s answer within the idle timeout, its failure classified as `op`'s.
    async fn within_idle<T, E>(
        &self,
        op: Call,
        call: impl Future<Output = Result<T, SdkError<E, HttpResponse>>>,
    ) -> Result<T, Error>
    where
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    {
        tokio::time::timeout(self.idle, call)
            .await
            .map_err(|_| error::idle(op, self.idle))?
            .map_err(|e| error::from_operation(op, e))
    }

    /// StartCodeInterpreterSession: the new session's id.
    pub(crate) async fn start_session(
        &self,
        name: &str,
        timeout_secs: i32,
    ) -> Result<String, Error> {
        let out = self
            .sdk
            .start_code_interpreter_session()
            .code_interpreter_identifier(self.identifier())
            .name(name)
            .session_timeout_seconds(timeout_secs)
            .send();
        let out = self.within_idle(START_SESSION, out).await?;
        let sid = out.session_id();
        if sid.is_empty() {
            return Err(error::protocol(
                START_SESSION,
                "StartCodeInterpreterSession returned an empty sessionId",
            ));
        }
        Ok(sid.to_owned())
    }

    /// StopCodeInterpreterSession.
    pub(crate) async fn stop_session(&self, session_id: &str) -> Result<(), Error> {
        let out = self
            .sdk
            .stop_code_interpreter_session()
            .code_interpreter_identifier(self.identifier())
            .session_id(session_id)
            .send();
        self.within_idle(STOP_SESSION, out).await?;
        Ok(())
    }

    /// GetCodeInterpreterSession: the session's status (`READY`, `TERMINATED`).
    pub(crate) async fn session_status(&self, session_id: &str) -> Result<String, Error> {
        let out = self
            .sdk
            .get_code_interpreter_session()
            .code_interpreter_identifier(self.identifier())
            .session_id(session_id)
            .send();
        let out = self.within_idle(GET_SESSION, out).await?;
        Ok(out
            .status()
            .map(|s| s.as_str().to_owned())
            .unwrap_or_default())
    }

    /// ListCodeInterpreterSessions with status `READY`, every page: `(id, name)`.
    pub(crate) async fn list_sessions(&self) -> Result<Vec<(String, String)>, Error> {
        let mut out = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let page = self
                .sdk
                .list_code_interpreter_sessions()
                .code_interpreter_identifier(self.identifier())
                .status(aws_sdk_bedrockagentcore::types::CodeInterpreterSessionStatus::Ready)
                .set_next_token(token.take())
                .send();
            let page = self.within_idle(LIST_SESSIONS, page).await?;
            out.extend(page.items().iter().map(|s| {
                (
                    s.session_id().to_owned(),
                    s.name().unwrap_or_default().to_owned(),
                )
            }));
            match page.next_token() {
                Some(t) if !t.is_empty() => token = Some(t.to_owned()),
                _ => return Ok(out),
            }
        }
    }

    /// InvokeCodeInterpreter: sends one tool call and reads its event stream to the end.
    ///
    /// `op` decides the retry policy: [`Op::submits`] calls go out exactly once.
    pub(crate) async fn invoke(
        &self,
        op: Call,
        session_id: &str,
        tool: ToolName,
        arguments: ToolArguments,
    ) -> Result<ToolResult, Error> {
        let sdk = if op.stage == execseam_adapter_kit::retry::Stage::Submit {
            &self.submit
        } else {
            &self.sdk
        };
        let call = sdk
            .invoke_code_interpreter()
            .code_interpreter_identifier(self.identifier())
            .session_id(session_id)
            .name(tool)
            .arguments(arguments);
        let idle = self.idle;
        // The SDK's own tracing stays out of the host's subscriber during the call: at TRACE
        // aws-smithy logs the request (the command, with its env values and stdin) and every
        // event-stream message whole (the command's output, file contents: caught by
        // `crates/emulated/tests/secrets/mod.rs`). Our spans and events are outside these
        // futures and unaffected.
        let mut out =
            tokio::time::timeout(idle, call.send().with_subscriber(NoSubscriber::default()))
                .await
                .map_err(|_| error::idle(op, idle))?
                .map_err(|e| error::from_operation(op, e))?;
        let mut result = ToolResult::default();
        loop {
            // Each event must come within the idle timeout: a stalled or trickling stream ends.
            let next = tokio::time::timeout(
                idle,
                out.stream.recv().with_subscriber(NoSubscriber::default()),
            )
            .await
            .map_err(|_| error::idle(op, idle))?;
            if result.size() > MAX_RESULT {
                return Err(error::output_limit(op, MAX_RESULT));
            }
            match next {
                Ok(Some(CodeInterpreterStreamOutput::Result(r))) => result.push(r),
                // An event type this SDK does not know: not ours to interpret, and not an error.
                Ok(Some(_)) => {
                    tracing::debug!("agentcore: ignoring an unknown event in the stream");
                }
                Ok(None) => break,
                Err(e) => return Err(error::from_stream(op, e)),
            }
        }
        if result.events == 0 {
            return Err(error::protocol(
                op,
                "the event stream ended without a result event",
            ));
        }
        Ok(result)
    }
}
