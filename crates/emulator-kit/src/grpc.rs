//! What the gRPC emulators (ax, modal) share: faults that a tonic handler cannot express by
//! itself (a body that is not valid protobuf, an HTTP/2 stream that ends without trailers),
//! applied by a router layer after the handler answered.

use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::Body;
use bytes::Bytes;

/// A change to the HTTP body made after the handler answered (for faults that a gRPC handler
/// cannot express).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyFault {
    /// Replace the body with a frame that is not valid protobuf (then OK trailers).
    Malformed,
    /// Drop the trailers: the HTTP/2 stream ends without a gRPC status.
    StripTrailers,
}

/// Applies [`BodyFault`]s to the responses that carry one.
pub async fn body_faults(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let response = next.run(request).await;
    match response.extensions().get::<BodyFault>().copied() {
        None => response,
        Some(BodyFault::StripTrailers) => response.map(|b| Body::new(NoTrailers(b))),
        Some(BodyFault::Malformed) => response.map(|_| Body::new(Malformed(0))),
    }
}

/// A body with its trailers dropped.
struct NoTrailers(Body);

impl http_body::Body for NoTrailers {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        match Pin::new(&mut self.0).poll_frame(cx) {
            Poll::Ready(Some(Ok(f))) if f.is_trailers() => Poll::Ready(None),
            other => other,
        }
    }
}

/// One gRPC message that is not valid protobuf (field 1, length 5, one byte), then OK trailers.
struct Malformed(u8);

impl http_body::Body for Malformed {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        self.0 += 1;
        Poll::Ready(match self.0 {
            1 => Some(Ok(http_body::Frame::data(Bytes::from_static(&[
                0, 0, 0, 0, 3, 0x0a, 0x05, b'x',
            ])))),
            2 => {
                let mut trailers = http::HeaderMap::new();
                trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
                Some(Ok(http_body::Frame::trailers(trailers)))
            }
            _ => None,
        })
    }
}
