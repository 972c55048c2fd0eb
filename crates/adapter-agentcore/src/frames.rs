//! A check on the event-stream framing before the SDK decodes it.
//!
//! The SDK's `MessageFrameDecoder` (aws-smithy-eventstream 0.61) reads a message's 12-byte
//! prelude and then buffers `total_length` bytes before it checks the prelude's CRC: a broken
//! or hostile answer whose first four bytes say 2 GiB makes it hold 2 GiB. This body wrapper
//! walks the same frames as they stream by, checks each prelude's CRC and bounds its length
//! first, and fails the body (a transport error to the SDK) the moment one is wrong. Bytes
//! pass through unchanged.

use std::pin::Pin;
use std::task::{Context, Poll};

use aws_sdk_bedrockagentcore::config::interceptors::BeforeDeserializationInterceptorContextMut;
use aws_sdk_bedrockagentcore::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_smithy_types::body::SdkBody;
use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

/// The largest event-stream message accepted. One result event carries a whole command's
/// output JSON-escaped (up to six bytes per byte, both streams), so the bound is generous; what
/// matters is that it is checked, with the prelude's CRC, before anything is buffered.
pub(crate) const MAX_MESSAGE: u32 = 256 << 20;

const PRELUDE: usize = 12;
/// Prelude, no headers, message CRC.
const MIN_MESSAGE: u32 = 16;

/// Where the walk is.
#[derive(Debug)]
struct Walk {
    prelude: [u8; PRELUDE],
    have: usize,
    /// Bytes of the current message still to pass after its prelude.
    skip: u64,
}

impl Walk {
    fn new() -> Walk {
        Walk {
            prelude: [0; PRELUDE],
            have: 0,
            skip: 0,
        }
    }

    /// Walks `data`; `Err` names the first broken frame.
    fn feed(&mut self, mut data: &[u8]) -> Result<(), String> {
        while !data.is_empty() {
            if self.skip > 0 {
                let n = (self.skip as usize).min(data.len());
                self.skip -= n as u64;
                data = &data[n..];
                continue;
            }
            let n = (PRELUDE - self.have).min(data.len());
            self.prelude[self.have..self.have + n].copy_from_slice(&data[..n]);
            self.have += n;
            data = &data[n..];
            if self.have < PRELUDE {
                return Ok(());
            }
            self.have = 0;
            let total = u32::from_be_bytes(self.prelude[0..4].try_into().expect("4 bytes"));
            let crc = u32::from_be_bytes(self.prelude[8..12].try_into().expect("4 bytes"));
            if crc32fast::hash(&self.prelude[..8]) != crc {
                return Err("an event-stream message whose prelude checksum is wrong".into());
            }
            if !(MIN_MESSAGE..=MAX_MESSAGE).contains(&total) {
                return Err(format!(
                    "an event-stream message of {total} bytes (at most {MAX_MESSAGE} accepted)"
                ));
            }
            self.skip = u64::from(total) - PRELUDE as u64;
        }
        Ok(())
    }

    /// True between messages.
    fn at_boundary(&self) -> bool {
        self.have == 0 && self.skip == 0
    }
}

/// Why the check failed a body (found again in the SDK's error chain).
#[derive(Debug)]
pub(crate) struct FrameError(String);

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for FrameError {}

/// True if `err`'s chain holds a [`FrameError`].
pub(crate) fn is_frame_error(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = cur {
        if e.is::<FrameError>() || e.to_string().contains(FRAME_ERROR_TAG) {
            return true;
        }
        cur = e.source();
    }
    false
}

/// In every [`FrameError`]'s text, for chains that keep only the text (io errors).
const FRAME_ERROR_TAG: &str = "event-stream message";

/// The most an answer that is not an event stream may carry: the session calls' JSON
/// (`StartCodeInterpreterSession`, `Get…`, `Stop…`) and every error body are a few hundred
/// bytes. Without it the SDK reads such an answer whole (issue 38: 3.3–3.6 GiB for an endless
/// session answer, 1.1 GiB for an `InvokeCodeInterpreter` 200 with a JSON content type).
pub(crate) const MAX_PLAIN_ANSWER: usize = 1 << 20;

/// The checked body: an event stream walked frame by frame, anything else only counted.
struct Checked {
    inner: SdkBody,
    /// `None`: not an event stream, capped at [`MAX_PLAIN_ANSWER`].
    walk: Option<Walk>,
    seen: usize,
    failed: bool,
}

impl Body for Checked {
    type Data = Bytes;
    type Error = aws_smithy_types::body::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if self.failed {
            return Poll::Ready(None);
        }
        match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    let this = &mut *self;
                    this.seen = this.seen.saturating_add(data.len());
                    let checked = match &mut this.walk {
                        Some(walk) => walk.feed(data),
                        None if this.seen > MAX_PLAIN_ANSWER => Err(format!(
                            "an answer that is not an event-stream message exceeds {MAX_PLAIN_ANSWER} bytes"
                        )),
                        None => Ok(()),
                    };
                    if let Err(why) = checked {
                        this.failed = true;
                        return Poll::Ready(Some(Err(Box::new(FrameError(why)))));
                    }
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(None) if self.walk.as_ref().is_some_and(|w| !w.at_boundary()) => {
                self.failed = true;
                Poll::Ready(Some(Err(Box::new(FrameError(
                    "the event stream ended inside an event-stream message".into(),
                )))))
            }
            other => other,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.failed || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Wraps every answer's body in the check: an `application/vnd.amazon.eventstream` body is
/// walked frame by frame, any other is capped at [`MAX_PLAIN_ANSWER`].
#[derive(Debug)]
pub(crate) struct CheckFrames;

impl Intercept for CheckFrames {
    fn name(&self) -> &'static str {
        "execseam-check-event-stream-frames"
    }

    fn modify_before_deserialization(
        &self,
        context: &mut BeforeDeserializationInterceptorContextMut<'_>,
        _: &RuntimeComponents,
        _: &mut ConfigBag,
    ) -> Result<(), aws_sdk_bedrockagentcore::error::BoxError> {
        let response = context.response_mut();
        let event_stream = response
            .headers()
            .get("content-type")
            .is_some_and(|v| v.starts_with("application/vnd.amazon.eventstream"));
        let body = response.take_body();
        *response.body_mut() = SdkBody::from_body_1_x(Checked {
            inner: body,
            walk: event_stream.then(Walk::new),
            seen: 0,
            failed: false,
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prelude(total: u32, headers: u32) -> Vec<u8> {
        let mut p = Vec::new();
        p.extend_from_slice(&total.to_be_bytes());
        p.extend_from_slice(&headers.to_be_bytes());
        let crc = crc32fast::hash(&p);
        p.extend_from_slice(&crc.to_be_bytes());
        p
    }

    fn plain(body: SdkBody) -> Checked {
        Checked {
            inner: body,
            walk: None,
            seen: 0,
            failed: false,
        }
    }

    async fn next(
        body: &mut Checked,
    ) -> Option<Result<Frame<Bytes>, aws_smithy_types::body::Error>> {
        std::future::poll_fn(|cx| Pin::new(&mut *body).poll_frame(cx)).await
    }

    // Issue 38 (D1, D2): an answer that is not an event stream was read whole.
    #[tokio::test]
    async fn an_answer_that_is_not_an_event_stream_is_capped() {
        let mut big = plain(SdkBody::from(vec![b'x'; MAX_PLAIN_ANSWER + 1]));
        let e = next(&mut big).await.unwrap().unwrap_err();
        assert!(is_frame_error(e.as_ref()), "{e}");
        assert!(next(&mut big).await.is_none());
        let mut small = plain(SdkBody::from(r#"{"sessionId":"s"}"#));
        assert!(next(&mut small).await.unwrap().is_ok());
    }

    #[test]
    fn frames_are_walked_across_chunks_and_bad_preludes_fail_first() {
        let mut msg = prelude(20, 0);
        msg.extend_from_slice(&[0xAA; 8]);
        let mut w = Walk::new();
        for b in msg.iter().chain(msg.iter()) {
            w.feed(&[*b]).unwrap();
        }
        assert!(w.at_boundary());
        // Endless 'x': the length says 2 GiB, the checksum is wrong; refused at byte 12.
        assert!(
            Walk::new()
                .feed(&[b'x'; 12])
                .unwrap_err()
                .contains("checksum")
        );
        // A right checksum on a length beyond the cap.
        let e = Walk::new().feed(&prelude(u32::MAX, 0)).unwrap_err();
        assert!(e.contains("at most"), "{e}");
        let mut w = Walk::new();
        w.feed(&msg[..15]).unwrap();
        assert!(!w.at_boundary());
    }
}
