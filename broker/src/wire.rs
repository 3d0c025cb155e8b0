//! Frames on a unix stream socket, with file descriptors beside them (SCM_RIGHTS).
//!
//! A frame is sent by one `sendmsg` carrying its descriptors; the receiver reads with
//! `recvmsg` until the whole frame is in, collecting every descriptor that arrived with it.

use std::io::{IoSlice, IoSliceMut};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;

use nix::sys::socket::{recvmsg, sendmsg, ControlMessage, ControlMessageOwned, MsgFlags};

use crate::protocol::{frame_len, ProtoError};

/// Most descriptors one frame carries.
pub const MAX_FDS: usize = 4;

/// Why a frame could not be sent or received.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    #[error("connection closed")]
    Closed,
    #[error("socket: {0}")]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Proto(#[from] ProtoError),
}

fn io(e: nix::Error) -> WireError {
    WireError::Io(std::io::Error::from(e))
}

/// Send one encoded frame with `fds`.
pub fn send(sock: &UnixStream, frame: &[u8], fds: &[BorrowedFd<'_>]) -> Result<(), WireError> {
    let raw: Vec<RawFd> = fds.iter().map(|f| f.as_raw_fd()).collect();
    let mut off = 0;
    while off < frame.len() {
        let iov = [IoSlice::new(&frame[off..])];
        // Descriptors go with the first bytes only.
        let cmsg = [ControlMessage::ScmRights(&raw)];
        let cm: &[ControlMessage<'_>] = if off == 0 && !raw.is_empty() { &cmsg } else { &[] };
        match sendmsg::<()>(sock.as_raw_fd(), &iov, cm, MsgFlags::MSG_NOSIGNAL, None) {
            Ok(0) => return Err(WireError::Closed),
            Ok(n) => off += n,
            Err(nix::Error::EINTR) => {}
            Err(nix::Error::EPIPE) | Err(nix::Error::ECONNRESET) => return Err(WireError::Closed),
            Err(e) => return Err(io(e)),
        }
    }
    Ok(())
}

/// Read exactly `buf.len()` bytes, collecting descriptors into `fds` (at most [`MAX_FDS`]; any
/// beyond are closed).
fn fill(sock: &UnixStream, buf: &mut [u8], fds: &mut Vec<OwnedFd>) -> Result<(), WireError> {
    let mut off = 0;
    while off < buf.len() {
        let mut space = nix::cmsg_space!([RawFd; MAX_FDS]);
        let mut iov = [IoSliceMut::new(&mut buf[off..])];
        let msg = match recvmsg::<()>(sock.as_raw_fd(), &mut iov, Some(&mut space), MsgFlags::MSG_CMSG_CLOEXEC) {
            Ok(m) => m,
            Err(nix::Error::EINTR) => continue,
            Err(nix::Error::ECONNRESET) => return Err(WireError::Closed),
            Err(e @ (nix::Error::EAGAIN | nix::Error::ETIMEDOUT)) => return Err(io(e)),
            Err(e) => return Err(io(e)),
        };
        let n = msg.bytes;
        if let Ok(cmsgs) = msg.cmsgs() {
            for c in cmsgs {
                if let ControlMessageOwned::ScmRights(rs) = c {
                    for r in rs {
                        // SAFETY: the kernel installed `r` in this process for this message
                        // (SCM_RIGHTS); nothing else owns it, so it is owned here exactly once.
                        let fd = unsafe { OwnedFd::from_raw_fd(r) };
                        if fds.len() < MAX_FDS {
                            fds.push(fd);
                        }
                    }
                }
            }
        }
        if n == 0 {
            return Err(WireError::Closed);
        }
        off += n;
    }
    Ok(())
}

/// Receive one frame: its body (after the length prefix) and the descriptors sent with it.
pub fn recv(sock: &UnixStream) -> Result<(Vec<u8>, Vec<OwnedFd>), WireError> {
    let mut fds = Vec::new();
    let mut prefix = [0u8; 4];
    fill(sock, &mut prefix, &mut fds)?;
    let n = frame_len(prefix)?;
    let mut body = vec![0u8; n];
    fill(sock, &mut body, &mut fds)?;
    Ok((body, fds))
}

/// A descriptor borrowed for sending.
pub fn borrow(f: &impl AsFd) -> BorrowedFd<'_> {
    f.as_fd()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::Request;
    use std::io::{Read, Write};

    #[test]
    fn frames_carry_descriptors() {
        let (a, b) = UnixStream::pair().unwrap();
        let (mut x, y) = UnixStream::pair().unwrap();
        let f = Request::Query.encode();
        send(&a, &f, &[y.as_fd()]).unwrap();
        drop(y);
        let (body, fds) = recv(&b).unwrap();
        assert_eq!(Request::decode(&body).unwrap(), Request::Query);
        assert_eq!(fds.len(), 1);
        // The received descriptor is the other end of x.
        let mut got = UnixStream::from(fds.into_iter().next().unwrap());
        x.write_all(b"hi").unwrap();
        let mut buf = [0u8; 2];
        got.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"hi");
    }

    #[test]
    fn short_and_oversized_frames_are_errors() {
        let (mut a, b) = UnixStream::pair().unwrap();
        a.write_all(&[3, 0]).unwrap();
        drop(a);
        assert!(matches!(recv(&b), Err(WireError::Closed)));
        let (mut a, b) = UnixStream::pair().unwrap();
        a.write_all(&u32::MAX.to_le_bytes()).unwrap();
        assert!(matches!(recv(&b), Err(WireError::Proto(ProtoError::FrameTooLong(_)))));
    }
}
