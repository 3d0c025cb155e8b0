//! Whole frames on a stream: read from any reader, or received from a unix socket with the
//! descriptors that came beside them ([`crate::fdpass`]); sent with descriptors.

use std::io::Read;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;

use crate::codec::{DecodeError, Format};
use crate::fdpass;

/// Why a frame could not be sent or received.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The peer closed the connection before the frame's first byte (or while it was sent).
    #[error("the peer closed the connection")]
    Closed,
    #[error("the stream ended inside a frame ({got} of {want} bytes)")]
    Short { got: usize, want: usize },
    #[error("socket: {0}")]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Decode(#[from] DecodeError),
}

/// Whether an I/O error means the peer went.
fn gone(e: &std::io::Error) -> bool {
    matches!(e.kind(), std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset)
}

/// Fill `buf` from `pull` (0: the end) until full or the end: the bytes read.
fn fill(pull: &mut impl FnMut(&mut [u8]) -> std::io::Result<usize>, buf: &mut [u8]) -> Result<usize, FrameError> {
    let mut n = 0;
    while n < buf.len() {
        match pull(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if gone(&e) => break,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(n)
}

impl Format {
    /// One whole frame (header and body) from `pull`, its length checked before the rest is
    /// read: [`FrameError::Closed`] when the stream ends before the first byte.
    fn pull(&self, mut pull: impl FnMut(&mut [u8]) -> std::io::Result<usize>) -> Result<Vec<u8>, FrameError> {
        let p = self.prefix_len();
        let mut frame = vec![0u8; p];
        match fill(&mut pull, &mut frame)? {
            0 => return Err(FrameError::Closed),
            got if got < p => return Err(FrameError::Short { got, want: p }),
            _ => {}
        }
        let want = self.frame_len(&frame)?;
        frame.resize(want, 0);
        let got = p + fill(&mut pull, &mut frame[p..])?;
        if got < want {
            return Err(FrameError::Short { got, want });
        }
        Ok(frame)
    }

    /// Read one whole frame from `r`.
    pub fn read_frame(&self, r: &mut impl Read) -> Result<Vec<u8>, FrameError> {
        self.pull(|b| r.read(b))
    }

    /// Receive one whole frame from `sock` with the descriptors sent beside it (at most
    /// `max_fds`: a frame carrying more is an error, its descriptors closed).
    pub fn recv_frame(&self, sock: &UnixStream, max_fds: usize) -> Result<(Vec<u8>, Vec<OwnedFd>), FrameError> {
        let mut fds = Vec::new();
        let frame = self.pull(|b| {
            let (n, got) = fdpass::recv_fds(sock, b, max_fds - fds.len())?;
            fds.extend(got);
            Ok(n)
        })?;
        Ok((frame, fds))
    }
}

/// Send a whole frame with `fds` (they travel with its first bytes).
pub fn send_frame(sock: &UnixStream, frame: &[u8], fds: &[BorrowedFd<'_>]) -> Result<(), FrameError> {
    match fdpass::send_all_fds(sock, frame, fds) {
        Err(e) if gone(&e) => Err(FrameError::Closed),
        r => Ok(r?),
    }
}
