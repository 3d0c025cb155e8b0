//! One client's connection: its credentials checked, its requests read and applied, its
//! process watched (socket and pidfd), and everything it held released when it goes.

use std::os::fd::{AsFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::Instant;

use broker_client::protocol::ProtoError;
use broker_client::protocol::{self as wire, ErrorCode, Reply, Request, WireError};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::socket::{getsockopt, sockopt};
use platform::sync::lock;

use super::adopt::{rejoin, Held};
use super::attach::{attach, query};
use super::cleanup::{cleanup, detach, release};
use super::lease::{alloc_hbm, lease, mailbox_user};
use super::reply::{error, not_attached};
use super::state::{attached, Client, Shared};

/// `pidfd_open(pid)`: a descriptor readable once `pid` has exited.
pub(super) fn pidfd_open(pid: u32) -> Option<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1; no memory
    // is passed.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if fd < 0 {
        return None;
    }
    // SAFETY: the syscall returned a fresh descriptor that nothing else owns.
    Some(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// The last reply to a frame that is not a request (the connection is closed after it).
fn refuse(sock: &UnixStream, e: &ProtoError) {
    let code = if matches!(e, ProtoError::Version { .. }) { ErrorCode::Version } else { ErrorCode::BadMessage };
    let _ = wire::send(sock, &error(code, 0, e.to_string()).encode(), &[]);
}

pub(super) fn serve_client(shared: Arc<Shared>, sock: UnixStream) {
    let cred = match getsockopt(&sock, sockopt::PeerCredentials) {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(%e, "SO_PEERCRED failed: connection refused");
            return;
        }
    };
    let (pid, uid) = (cred.pid() as u32, cred.uid());
    if uid != shared.uid && uid != 0 {
        let r = error(ErrorCode::Sequence, 0, format!("uid {uid} may not use the broker of uid {}", shared.uid));
        let _ = wire::send(&sock, &r.encode(), &[]);
        tracing::warn!(pid, uid, "refused a client of another user");
        return;
    }
    let _ = sock.set_read_timeout(Some(shared.cfg.frame_timeout));
    let pidfd = pidfd_open(pid);
    let mut id: Option<u64> = None;
    loop {
        let mut fds = vec![PollFd::new(sock.as_fd(), PollFlags::POLLIN)];
        if let Some(p) = &pidfd {
            fds.push(PollFd::new(p.as_fd(), PollFlags::POLLIN));
        }
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) => {}
            Err(nix::Error::EINTR) => continue,
            Err(_) => break,
        }
        let dead = fds.get(1).and_then(|f| f.revents()).is_some_and(|r| !r.is_empty());
        let readable = fds[0].revents().is_some_and(|r| !r.is_empty());
        if dead {
            tracing::info!(pid, "client process exited");
            break;
        }
        if !readable {
            continue;
        }
        let (frame, fds) = match wire::recv(&sock) {
            Ok(m) => m,
            Err(WireError::Closed | WireError::Short { .. }) => break,
            Err(WireError::Decode(e)) => {
                refuse(&sock, &e);
                break;
            }
            Err(WireError::Io(e)) => {
                tracing::info!(pid, %e, "client connection failed");
                break;
            }
        };
        let req = match Request::decode(&frame) {
            Ok(r) => r,
            Err(e) => {
                refuse(&sock, &e);
                break;
            }
        };
        let (reply, fds) = handle(&shared, &mut id, pid, &sock, req, fds);
        let borrowed: Vec<_> = fds.iter().map(|f| f.as_fd()).collect();
        if wire::send(&sock, &reply.encode(), &borrowed).is_err() {
            break;
        }
    }
    if let Some(id) = id {
        let t0 = Instant::now();
        cleanup(&shared, id);
        tracing::info!(pid, us = t0.elapsed().as_micros() as u64, "client cleaned up");
    }
}

/// Apply one request of client `id` (None before Hello).
pub(super) fn handle(
    shared: &Arc<Shared>,
    id: &mut Option<u64>,
    pid: u32,
    sock: &UnixStream,
    req: Request,
    fds: Vec<OwnedFd>,
) -> (Reply, Vec<OwnedFd>) {
    let mut st = lock(&shared.st);
    st.last_activity = Some(Instant::now());
    let Some(me) = *id else {
        return match req {
            Request::Hello { role, command, runtime_version } => {
                st.next_client += 1;
                let c = st.next_client;
                let sock = sock.try_clone().ok();
                st.clients.insert(c, Client { pid, role, command, runtime_version, attached: Vec::new(), sock });
                *id = Some(c);
                (Reply::Hello { broker_pid: std::process::id() }, Vec::new())
            }
            _ => (error(ErrorCode::Sequence, 0, "the first request must be Hello"), Vec::new()),
        };
    };
    match req {
        Request::Hello { .. } => (error(ErrorCode::Sequence, 0, "Hello was already sent"), Vec::new()),
        Request::Query => (Reply::Query(query(&st)), Vec::new()),
        Request::Attach { spec } => (attach(shared, &mut st, me, spec), Vec::new()),
        Request::Lease { device, want, lnc } => lease(&mut st, me, device, want, lnc),
        Request::Rejoin { spec, iova_start, first, count, path, grants, handoff } => {
            let held = Held { iova_start, first, count, path, grants };
            (rejoin(shared, &mut st, me, spec, held, handoff, fds), Vec::new())
        }
        Request::Release { device } => {
            let Some(d) = attached(&st, me, device) else { return (not_attached(device), Vec::new()) };
            if st.devices[d].client_ncs(me).is_none() {
                return (error(ErrorCode::Invalid, 0, format!("no lease on device {device}")), Vec::new());
            }
            drop(st);
            release(shared, me, d);
            (Reply::Ok, Vec::new())
        }
        Request::AllocHbm { device, chan, len } => (alloc_hbm(&mut st, me, device, chan, len), Vec::new()),
        Request::FreeHbm { device, handle } => {
            let Some(d) = attached(&st, me, device) else { return (not_attached(device), Vec::new()) };
            match st.devices[d].hbm.get(&handle) {
                Some((owner, _)) if *owner == me => {
                    st.devices[d].hbm.remove(&handle);
                    (Reply::Ok, Vec::new())
                }
                _ => (error(ErrorCode::NoSuchHandle, 0, format!("no device memory {handle} of yours")), Vec::new()),
            }
        }
        Request::Detach { device } => {
            let Some(d) = attached(&st, me, device) else { return (not_attached(device), Vec::new()) };
            drop(st);
            detach(shared, me, d);
            (Reply::Ok, Vec::new())
        }
        Request::ResetNcs { device, mask } => {
            let ops = match mailbox_user(&st, me, device, Some(mask)) {
                Ok(h) => h,
                Err(r) => return (r, Vec::new()),
            };
            drop(st);
            (ops.reset_ncs(mask), Vec::new())
        }
        Request::Fwio { device, cmd, payload } => {
            let ops = match mailbox_user(&st, me, device, None) {
                Ok(h) => h,
                Err(r) => return (r, Vec::new()),
            };
            drop(st);
            (ops.fwio(cmd, &payload), Vec::new())
        }
    }
}
