//! The bytes of an upgraded connection (a WebSocket): the client's pass through untouched, the
//! server's through the rule's action.

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::{Action, ENDLESS_PIECE, MERGE_WAIT, Noise};

/// Copies both ways until either side ends.
pub(crate) async fn pump<C, U>(client: C, upstream: U, action: Option<Action>)
where
    C: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    U: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut client_r, mut client_w) = tokio::io::split(client);
    let (mut up_r, mut up_w) = tokio::io::split(upstream);
    let to_upstream = async {
        let _ = tokio::io::copy(&mut client_r, &mut up_w).await;
        let _ = up_w.shutdown().await;
    };
    let to_client = async {
        let _ = server_to_client(&mut up_r, &mut client_w, action).await;
        let _ = client_w.shutdown().await;
    };
    // The server's direction decides: once it is over (or cut) the connection goes.
    tokio::select! {
        () = to_client => {}
        () = async { to_upstream.await; std::future::pending::<()>().await } => {}
    }
}

async fn server_to_client<R, W>(
    up: &mut R,
    client: &mut W,
    action: Option<Action>,
) -> std::io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; 64 << 10];
    match action {
        None | Some(Action::Delay(_)) => {
            tokio::io::copy(up, client).await?;
        }
        Some(Action::Stall) => std::future::pending::<()>().await,
        Some(Action::Trickle { every, bytes }) => loop {
            let n = up.read(&mut buf).await?;
            if n == 0 {
                return Ok(());
            }
            for piece in buf[..n].chunks(bytes) {
                tokio::time::sleep(every).await;
                client.write_all(piece).await?;
                client.flush().await?;
            }
        },
        Some(Action::Endless) => {
            // A binary frame announcing 2^40 bytes, then endless 'x'.
            let mut head = vec![0x82, 127];
            head.extend_from_slice(&(1u64 << 40).to_be_bytes());
            client.write_all(&head).await?;
            let piece = vec![b'x'; ENDLESS_PIECE];
            loop {
                client.write_all(&piece).await?;
            }
        }
        Some(Action::Truncate(limit)) => {
            let mut left = limit;
            while left > 0 {
                let n = up.read(&mut buf).await?;
                if n == 0 {
                    return Ok(());
                }
                let k = (n as u64).min(left) as usize;
                client.write_all(&buf[..k]).await?;
                left -= k as u64;
            }
            client.flush().await?;
        }
        Some(Action::Rechunk(size)) => {
            let mut pending = BytesMut::new();
            loop {
                let read = if pending.is_empty() {
                    Ok(up.read(&mut buf).await)
                } else {
                    tokio::time::timeout(MERGE_WAIT, up.read(&mut buf)).await
                };
                let n = match read {
                    Ok(n) => n?,
                    Err(_) => {
                        client.write_all(&pending.split()).await?;
                        client.flush().await?;
                        continue;
                    }
                };
                if n == 0 {
                    client.write_all(&pending).await?;
                    return client.flush().await;
                }
                pending.extend_from_slice(&buf[..n]);
                while pending.len() >= size {
                    client.write_all(&pending.split_to(size)).await?;
                    client.flush().await?;
                }
            }
        }
        Some(Action::DropLast) => {
            let mut pending = BytesMut::new();
            let mut held: Option<BytesMut> = None;
            loop {
                while let Some(len) = frame_len(&pending) {
                    let frame = pending.split_to(len);
                    let opcode = frame[0] & 0x0f;
                    match opcode {
                        // Close: the data frame before it is the final one. Dropped.
                        0x8 => {
                            held = None;
                            client.write_all(&frame).await?;
                        }
                        // Ping and pong pass.
                        0x9 | 0xa => client.write_all(&frame).await?,
                        _ => {
                            if let Some(prev) = held.replace(frame) {
                                client.write_all(&prev).await?;
                            }
                        }
                    }
                    client.flush().await?;
                }
                let n = up.read(&mut buf).await?;
                if n == 0 {
                    return Ok(());
                }
                pending.extend_from_slice(&buf[..n]);
            }
        }
        Some(Action::Garbage(n)) => {
            client.write_all(&Noise::new().fill(n)).await?;
            client.flush().await?;
        }
        Some(Action::Body(text)) => {
            client.write_all(text.as_bytes()).await?;
            client.flush().await?;
        }
        Some(
            Action::Status { .. }
            | Action::StatusAfter { .. }
            | Action::Head { .. }
            | Action::Hold(_)
            | Action::Then { .. }
            | Action::Reset
            | Action::ResetAfter
            | Action::Hang,
        ) => {}
    }
    Ok(())
}

/// The length of the complete frame at the start of `b`, if it is all there.
fn frame_len(b: &[u8]) -> Option<usize> {
    if b.len() < 2 {
        return None;
    }
    let masked = b[1] & 0x80 != 0;
    let (len, mut at) = match b[1] & 0x7f {
        126 => {
            if b.len() < 4 {
                return None;
            }
            ((&b[2..4]).get_u16() as u64, 4)
        }
        127 => {
            if b.len() < 10 {
                return None;
            }
            ((&b[2..10]).get_u64(), 10)
        }
        n => (n as u64, 2),
    };
    if masked {
        at += 4;
    }
    let total = at as u64 + len;
    (b.len() as u64 >= total).then_some(total as usize)
}

#[cfg(test)]
mod tests {
    use super::frame_len;

    #[test]
    fn frames_are_measured() {
        assert_eq!(frame_len(&[0x82]), None);
        assert_eq!(frame_len(&[0x82, 2, 1]), None);
        assert_eq!(frame_len(&[0x82, 2, 1, 2, 9]), Some(4));
        let mut long = vec![0x82, 126, 0, 200];
        long.extend(vec![0; 200]);
        assert_eq!(frame_len(&long), Some(204));
        assert_eq!(frame_len(&[0x81, 0x81, 1, 2, 3, 4, b'a']), Some(7));
    }
}
