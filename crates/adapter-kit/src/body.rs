//! Bounded reads of any HTTP body (`http_body::Body`: hyper's, kube's), for adapters whose
//! client is not reqwest ([`http::read_body`](crate::http) is the reqwest one): at most a limit
//! of bytes, ended by a total deadline (a body that trickles one byte at a time still ends).

use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use execseam_core::Error;
use http_body::Body;
use http_body_util::BodyExt as _;

use crate::retry::{Call, NoAnswer};
use crate::text;

/// Why a body could not be read whole.
#[derive(Debug)]
pub enum BodyError<E> {
    /// It is larger than the limit (what was read is dropped).
    TooLarge {
        /// The limit, in bytes.
        limit: usize,
    },
    /// It did not end within the deadline (a stalled or trickling answer).
    Deadline(Duration),
    /// A read failed (the connection broke).
    Read(E),
}

impl<E: std::error::Error + 'static> BodyError<E> {
    /// The error of `call`, as [`http::BodyError`](crate::http) maps it: a body too large is
    /// [`ErrorKind::OutputLimit`](execseam_core::ErrorKind::OutputLimit) (`Never` before the
    /// submit, `Unsafe` from it on), one past its deadline
    /// [`ErrorKind::Timeout`](execseam_core::ErrorKind::Timeout) of the request, a broken read [`NoAnswer::Cut`].
    pub fn into_error(self, call: Call) -> Error {
        match self {
            BodyError::TooLarge { limit } => call.body_too_large(limit),
            BodyError::Deadline(d) => call.body_too_late(d),
            BodyError::Read(e) => call.no_answer(
                NoAnswer::Cut,
                format!("{}: {}", NoAnswer::Cut.describe(), text::error_chain(&e)),
            ),
        }
    }
}

/// Reads `body` whole: at most `limit` bytes, ended by `within` from now.
pub async fn read<B>(body: B, limit: usize, within: Duration) -> Result<Bytes, BodyError<B::Error>>
where
    B: Body + Unpin,
{
    let mut body = body;
    let read = async {
        let mut buf = BytesMut::new();
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(BodyError::Read)?;
            if let Ok(data) = frame.into_data() {
                if buf.len() + data.remaining() > limit {
                    return Err(BodyError::TooLarge { limit });
                }
                buf.put(data);
            }
        }
        Ok(buf.freeze())
    };
    match tokio::time::timeout(within, read).await {
        Ok(r) => r,
        Err(_) => Err(BodyError::Deadline(within)),
    }
}

/// Reads the start of an error answer to quote it: at most `limit` bytes, within `within`.
/// Never fails: what came before a cut, a stall or the limit is what is quoted (the status
/// already says what went wrong).
pub async fn read_prefix<B>(body: B, limit: usize, within: Duration) -> Bytes
where
    B: Body + Unpin,
{
    let mut body = body;
    let mut buf = BytesMut::new();
    let read = async {
        while let Some(Ok(frame)) = body.frame().await {
            if let Ok(data) = frame.into_data() {
                let room = limit.saturating_sub(buf.len());
                buf.put(data.take(room));
                if buf.len() >= limit {
                    break;
                }
            }
        }
    };
    let _ = tokio::time::timeout(within, read).await;
    buf.freeze()
}

#[cfg(test)]
mod tests {
    use std::pin::Pin;
    use std::task::{Context, Poll};

    use http_body::Frame;
    use http_body_util::Full;

    use execseam_core::{ErrorKind, Retry};

    use super::*;
    use crate::retry::Stage;

    /// A body that never yields a frame.
    struct Stalled;

    impl Body for Stalled {
        type Data = Bytes;
        type Error = std::io::Error;

        fn poll_frame(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
            Poll::Pending
        }
    }

    #[tokio::test]
    async fn bodies_are_bounded_in_size_and_time() {
        let call = Call::new("p", "get", Stage::Before);
        let within = Duration::from_secs(1);
        let whole = read(Full::new(Bytes::from_static(b"hello")), 5, within)
            .await
            .unwrap();
        assert_eq!(&whole[..], b"hello");
        let e = read(Full::new(Bytes::from_static(b"hello!")), 5, within)
            .await
            .unwrap_err()
            .into_error(call);
        assert_eq!(
            (e.kind(), e.retry()),
            (ErrorKind::OutputLimit, Retry::Never)
        );
        let e = read(Stalled, 5, Duration::from_millis(50))
            .await
            .unwrap_err()
            .into_error(call);
        assert_eq!(
            e.kind(),
            ErrorKind::Timeout(execseam_core::Deadline::Request)
        );
        let quoted = read_prefix(Full::new(Bytes::from_static(b"a long error")), 6, within).await;
        assert_eq!(&quoted[..], b"a long");
        assert!(
            read_prefix(Stalled, 6, Duration::from_millis(50))
                .await
                .is_empty()
        );
    }
}
