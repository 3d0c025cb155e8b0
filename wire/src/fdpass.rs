//! File descriptors over a unix socket (SCM_RIGHTS): how one process hands another the
//! descriptors it opened — a VFIO container, group or device, an iommufd, one end of a
//! connected socket — so that the receiver uses them as if it had opened them itself (the
//! pattern of DPDK's multi-process mode).
//!
//! Both calls are blocking and carry a payload (a message always moves at least one byte, so
//! the receiver can tell a message carrying only descriptors from end of file). Received
//! descriptors are close-on-exec and owned ([`OwnedFd`]): dropping them closes them.

use std::io::{IoSlice, IoSliceMut};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;

use nix::sys::socket::{recvmsg, sendmsg, ControlMessage, ControlMessageOwned, MsgFlags};

/// Most descriptors one message carries (the kernel's SCM_MAX_FD is 253).
pub const MAX_FDS: usize = 253;

fn invalid(msg: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidInput, msg)
}

/// Send `data` (at least one byte) with `fds` attached. Returns the bytes sent (a short send
/// is possible on a stream socket, as with `write`; the descriptors travel with its first
/// byte).
pub fn send_fds(sock: &UnixStream, data: &[u8], fds: &[BorrowedFd<'_>]) -> std::io::Result<usize> {
    if data.is_empty() {
        return Err(invalid("send_fds: a message needs at least one byte of payload".into()));
    }
    if fds.len() > MAX_FDS {
        return Err(invalid(format!("send_fds: {} descriptors, at most {MAX_FDS} per message", fds.len())));
    }
    let raw: Vec<RawFd> = fds.iter().map(|f| f.as_raw_fd()).collect();
    let iov = [IoSlice::new(data)];
    let cmsg = [ControlMessage::ScmRights(&raw)];
    let cmsgs: &[ControlMessage<'_>] = if raw.is_empty() { &[] } else { &cmsg };
    loop {
        match sendmsg::<()>(sock.as_raw_fd(), &iov, cmsgs, MsgFlags::MSG_NOSIGNAL, None) {
            Err(nix::errno::Errno::EINTR) => continue,
            other => return other.map_err(std::io::Error::from),
        }
    }
}

/// Send all of `data`, the descriptors with the first part.
pub fn send_all_fds(sock: &UnixStream, data: &[u8], fds: &[BorrowedFd<'_>]) -> std::io::Result<()> {
    let mut sent = send_fds(sock, data, fds)?;
    while sent < data.len() {
        let n = send_fds(sock, &data[sent..], &[])?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        sent += n;
    }
    Ok(())
}

/// Receive into `buf` and take the descriptors that came with it (at most `max_fds`; a
/// message carrying more is an error and its descriptors are closed). Returns the bytes read
/// (0: the peer closed the connection) and the descriptors.
pub fn recv_fds(sock: &UnixStream, buf: &mut [u8], max_fds: usize) -> std::io::Result<(usize, Vec<OwnedFd>)> {
    let max_fds = max_fds.min(MAX_FDS);
    // Room for one more than asked, so an excess is seen (and closed) rather than truncated.
    let mut space = nix::cmsg_space!([RawFd; MAX_FDS + 1]);
    let mut iov = [IoSliceMut::new(buf)];
    let msg = loop {
        match recvmsg::<()>(sock.as_raw_fd(), &mut iov, Some(&mut space), MsgFlags::MSG_CMSG_CLOEXEC) {
            Err(nix::errno::Errno::EINTR) => continue,
            other => break other.map_err(std::io::Error::from)?,
        }
    };
    let mut fds = Vec::new();
    for c in msg.cmsgs().map_err(std::io::Error::from)? {
        if let ControlMessageOwned::ScmRights(raw) = c {
            for fd in raw {
                // SAFETY: the kernel installed `fd` in this process for this message
                // (SCM_RIGHTS); nothing else refers to it, so it is ours to own and close.
                fds.push(unsafe { OwnedFd::from_raw_fd(fd) });
            }
        }
    }
    let n = msg.bytes;
    let truncated = msg.flags.contains(MsgFlags::MSG_CTRUNC);
    if truncated || fds.len() > max_fds {
        // `fds` drops here: whatever arrived is closed.
        return Err(invalid(format!(
            "recv_fds: the message carried {}{} descriptors, at most {max_fds} expected",
            fds.len(),
            if truncated { "+" } else { "" }
        )));
    }
    Ok((n, fds))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Seek, SeekFrom, Write};
    use std::os::fd::AsFd;

    #[test]
    fn descriptors_round_trip_and_stay_usable() {
        let (a, b) = UnixStream::pair().unwrap();
        let mut file = tempfile_with(b"shared bytes");
        let (p, q) = UnixStream::pair().unwrap();
        assert_eq!(send_fds(&a, b"hi", &[file.as_fd(), p.as_fd()]).unwrap(), 2);
        let mut buf = [0u8; 8];
        let (n, fds) = recv_fds(&b, &mut buf, 4).unwrap();
        assert_eq!((&buf[..n], fds.len()), (&b"hi"[..], 2));
        // The received file is the same open file description: its offset is shared.
        let mut fds = fds.into_iter();
        let mut got = std::fs::File::from(fds.next().unwrap());
        got.seek(SeekFrom::Start(7)).unwrap();
        let mut s = String::new();
        file.read_to_string(&mut s).unwrap();
        assert_eq!(s, "bytes");
        let flags = nix::fcntl::fcntl(got.as_fd(), nix::fcntl::FcntlArg::F_GETFD).unwrap();
        assert_ne!(flags & libc::FD_CLOEXEC, 0, "received descriptors are close-on-exec");
        // The received socket end talks to `q`, also once the sender closed its copy.
        drop(p);
        let mut sock = UnixStream::from(fds.next().unwrap());
        sock.write_all(b"ping").unwrap();
        let mut four = [0u8; 4];
        let mut q = q;
        q.read_exact(&mut four).unwrap();
        assert_eq!(&four, b"ping");
    }

    #[test]
    fn end_of_file_excess_and_empty_payloads() {
        let (a, b) = UnixStream::pair().unwrap();
        assert!(send_fds(&a, b"", &[]).is_err(), "an empty payload is refused");
        let f = tempfile_with(b"x");
        let many: Vec<_> = (0..3).map(|_| f.as_fd()).collect();
        send_fds(&a, b"m", &many).unwrap();
        let e = recv_fds(&b, &mut [0u8; 4], 2).unwrap_err();
        assert!(e.to_string().contains("at most 2"), "{e}");
        send_all_fds(&a, b"plain", &[]).unwrap();
        let mut buf = [0u8; 16];
        let (n, fds) = recv_fds(&b, &mut buf, 2).unwrap();
        assert_eq!((&buf[..n], fds.len()), (&b"plain"[..], 0));
        drop(a);
        let (n, fds) = recv_fds(&b, &mut buf, 2).unwrap();
        assert_eq!((n, fds.len()), (0, 0), "end of file");
    }

    fn tempfile_with(bytes: &[u8]) -> std::fs::File {
        let fd = nix::sys::memfd::memfd_create(c"fdpass-test", nix::sys::memfd::MFdFlags::MFD_CLOEXEC).unwrap();
        let mut f = std::fs::File::from(fd);
        f.write_all(bytes).unwrap();
        f.seek(SeekFrom::Start(0)).unwrap();
        f
    }
}
