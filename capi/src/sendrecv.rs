//! `nrt_async_sendrecv.h`: point-to-point tensor send/receive between logical NeuronCores of
//! different processes or hosts, on the same libfabric transport as the global communicators
//! (feature `fabric`; without it every call returns NRT_FAILURE).
//!
//! - `nrt_async_sendrecv_init(lnc)` / `_close(lnc)` bracket the use of an LNC (NRT_FAILURE if
//!   the runtime is not initialised, the LNC is already (not) initialised, or
//!   `NEURON_RT_ASYNC_SENDRECV_BOOTSTRAP_PORT` is not set).
//! - `_accept(peer_ip, peer_lnc, lnc)` / `_connect(peer_ip, peer_lnc, lnc)` create the receive /
//!   send side of one connection. The pair rendezvous over TCP: the receiver listens on
//!   `NEURON_RT_ASYNC_SENDRECV_BOOTSTRAP_PORT + 128 × lnc + peer_lnc` (on every address), the
//!   sender connects to `peer_ip` at the same port; the two then open a two-rank libfabric
//!   endpoint pair (provider from `FI_PROVIDER`). Both calls return at once; the rendezvous runs
//!   in the background and `_test_comm` reports when it is done.
//! - `_send_tensor` / `_recv_tensor` queue a transfer of `length` bytes at `offset` of a tensor
//!   and return a request; transfers of one communicator run in call order on its worker
//!   thread. `_test_request` polls a request (`done`, bytes moved); a transfer that fails
//!   reports the status of the one table (`fabric::FabricError::status`): a dead or silent
//!   peer, a timeout (`NEURON_RT_EXEC_TIMEOUT`) or a broken path is NRT_NETWORK_PROXY_FAILURE
//!   (1206), a local transport failure NRT_EXEC_HW_ERR_COLLECTIVES (1200), a bad argument
//!   NRT_INVALID — as a collective reports them. A completed request's handle is released by the `_test_request`
//!   that reports it done.
//! - Limits (our choice; libnrt does not publish its values): at most
//!   [`MAX_COMMUNICATORS_PER_LNC`] communicators per LNC and [`MAX_PENDING_REQUESTS`] requests
//!   per communicator that `_test_request` has not yet reported done; one more is NRT_RESOURCE.
//!   `_get_max_num_communicators_per_lnc` / `_get_max_num_pending_request` report them.
//! - `_flush(lnc)`: a receive is reported done only after its bytes were written into the
//!   tensor (device memory) by the runtime's synchronous tensor write, so every receive tested
//!   done before the flush has already fully arrived; flush checks the LNC and returns.
//! - `_close(lnc)` with a communicator still connecting or a request still in flight is
//!   NRT_FAILURE (the LNC's communicators are released all the same), and every later `_init`
//!   of that LNC is NRT_FAILURE until `nrt_close` (as nrt_async_sendrecv.h specifies).
//!   `nrt_close` ends every LNC still initialised.

use std::ffi::{c_char, c_int};

use neff::NrtStatus;
#[cfg(feature = "fabric")]
use runtime::RtError;

use crate::base::{entry, err, NRT_STATUS};

/// `nrt_async_sendrecv_comm_t` (opaque).
#[repr(C)]
pub struct nrt_async_sendrecv_comm_t {
    _p: [u8; 0],
}

/// `nrt_async_sendrecv_request_t` (opaque).
#[repr(C)]
pub struct nrt_async_sendrecv_request_t {
    _p: [u8; 0],
}

/// `NEURON_RT_ASYNC_SENDRECV_BOOTSTRAP_PORT`.
pub const BOOTSTRAP_PORT_VAR: &str = "NEURON_RT_ASYNC_SENDRECV_BOOTSTRAP_PORT";
/// Logical NeuronCores per host addressed by the API (`0..128`).
pub const MAX_LNC: c_int = 128;
/// Communicators per LNC (`nrt_async_sendrecv_get_max_num_communicators_per_lnc`).
pub const MAX_COMMUNICATORS_PER_LNC: c_int = 32;
/// Requests per communicator not yet reported done
/// (`nrt_async_sendrecv_get_max_num_pending_request`).
pub const MAX_PENDING_REQUESTS: c_int = 64;

#[cfg(feature = "fabric")]
mod imp {
    use std::collections::HashSet;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::mpsc::{channel, Sender};
    use std::sync::{Arc, Mutex};
    use std::thread::JoinHandle;

    use fabric::bootstrap::{Oob, RankSpec};
    use fabric::coll::CollConfig;
    use fabric::ofi::OfiTransport;
    use fabric::{Communicator, FabricError};

    use super::*;
    use crate::base::Registry;
    use crate::base::{lock, CTensor};

    pub(super) static LNCS: Mutex<Option<HashSet<c_int>>> = Mutex::new(None);
    /// LNCs whose last `_close` failed: `_init` refuses them until `nrt_close`.
    static FAILED_CLOSE: Mutex<Option<HashSet<c_int>>> = Mutex::new(None);
    pub(super) static COMMS: Registry<Arc<SrComm>> = Registry::new();
    pub(super) static REQS: Registry<Arc<SrReq>> = Registry::new();

    type Joined = Result<(Communicator<OfiTransport>, Oob), FabricError>;

    pub(super) enum Link {
        Connecting(JoinHandle<Joined>),
        Ready(Sender<Job>),
        Failed(String),
        Taken,
    }

    pub(super) struct SrComm {
        pub lnc: c_int,
        /// Peer rank in the two-rank pair (the receiver is rank 0).
        pub peer: usize,
        pub link: Mutex<Link>,
        /// Requests of this communicator not yet reported done by `_test_request`.
        pub pending: AtomicUsize,
    }

    pub(super) struct Job {
        pub send: bool,
        pub tensor: Arc<CTensor>,
        pub offset: u64,
        pub len: usize,
        pub req: Arc<SrReq>,
    }

    pub(super) struct SrReq {
        pub done: Mutex<Option<Result<usize, (NrtStatus, String)>>>,
        pub comm: Arc<SrComm>,
    }

    impl SrReq {
        /// A new request counted against `comm`'s pending limit (NRT_RESOURCE beyond it).
        pub(super) fn new(comm: &Arc<SrComm>) -> Result<Arc<Self>, RtError> {
            let max = MAX_PENDING_REQUESTS as usize;
            comm.pending
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < max).then_some(n + 1))
                .map_err(|_| err(NrtStatus::Resource, format!("{max} requests of this communicator are pending")))?;
            Ok(Arc::new(Self { done: Mutex::new(None), comm: comm.clone() }))
        }
    }

    impl Drop for SrReq {
        fn drop(&mut self) {
            self.comm.pending.fetch_sub(1, Ordering::AcqRel);
        }
    }

    fn run(job: &Job, c: &mut Communicator<OfiTransport>, peer: usize) -> Result<usize, (NrtStatus, String)> {
        let mut buf = vec![0u8; job.len];
        if job.send {
            job.tensor.tensor.read(job.offset, &mut buf).map_err(|e| (e.status, e.to_string()))?;
            c.send(peer, &buf).map_err(|e| (e.status(), e.to_string()))?;
        } else {
            c.recv(peer, &mut buf).map_err(|e| (e.status(), e.to_string()))?;
            job.tensor.tensor.write(job.offset, &buf).map_err(|e| (e.status, e.to_string()))?;
        }
        Ok(job.len)
    }

    /// Serialises opening communicators (the per-LNC count and the registration are one step).
    static OPENING: Mutex<()> = Mutex::new(());

    /// Starts the rendezvous of one side of a connection and registers its handle.
    pub(super) fn open(
        peer_ip: &str,
        peer_lnc: c_int,
        lnc: c_int,
        send: bool,
    ) -> Result<*mut nrt_async_sendrecv_comm_t, RtError> {
        let _one = lock(&OPENING);
        let initialised = lock(&LNCS).as_ref().is_some_and(|s| s.contains(&lnc));
        if !initialised {
            return Err(err(NrtStatus::Failure, format!("lnc {lnc}: nrt_async_sendrecv_init was not called")));
        }
        if !(0..MAX_LNC).contains(&peer_lnc) {
            return Err(err(NrtStatus::Failure, format!("bad peer lnc {peer_lnc}")));
        }
        let open = COMMS.entries().iter().filter(|(_, c)| c.lnc == lnc).count();
        if open >= MAX_COMMUNICATORS_PER_LNC as usize {
            return Err(err(
                NrtStatus::Resource,
                format!("lnc {lnc} has {MAX_COMMUNICATORS_PER_LNC} communicators already"),
            ));
        }
        let base = base_port()?;
        let (recv_lnc, send_lnc) = if send { (peer_lnc, lnc) } else { (lnc, peer_lnc) };
        let port = base + 128 * recv_lnc as u32 + send_lnc as u32;
        let port = u16::try_from(port)
            .map_err(|_| err(NrtStatus::Failure, format!("{BOOTSTRAP_PORT_VAR}: port {port} out of range")))?;
        let root = if send { format!("{peer_ip}:{port}") } else { format!("0.0.0.0:{port}") };
        if send {
            fabric::bootstrap::parse_root(&root).map_err(|e| err(NrtStatus::Failure, e.to_string()))?;
        }
        let spec = RankSpec { rank: usize::from(send), size: 2 };
        let timeout = crate::global::timeout()?;
        let h = std::thread::Builder::new()
            .name(format!("nrt-sr-{lnc}-{peer_lnc}"))
            .spawn(move || fabric::ofi::join(&root, spec, timeout, CollConfig::default()))
            .map_err(|e| err(NrtStatus::Failure, format!("cannot start the rendezvous: {e}")))?;
        Ok(COMMS.insert(Arc::new(SrComm {
            lnc,
            peer: usize::from(!send),
            link: Mutex::new(Link::Connecting(h)),
            pending: AtomicUsize::new(0),
        })))
    }

    /// Whether the connection is up (starting its worker when the rendezvous just finished).
    pub(super) fn test(c: &SrComm) -> Result<bool, RtError> {
        let mut l = lock(&c.link);
        match &*l {
            Link::Ready(_) => return Ok(true),
            Link::Failed(m) => return Err(err(NrtStatus::Failure, m.clone())),
            Link::Connecting(h) if !h.is_finished() => return Ok(false),
            _ => {}
        }
        let Link::Connecting(h) = std::mem::replace(&mut *l, Link::Taken) else {
            return Err(err(NrtStatus::Failure, "communicator in an unknown state"));
        };
        let joined = h.join().map_err(|_| FabricError::Bootstrap("rendezvous thread panicked".into()));
        match joined.and_then(|j| j) {
            Ok((mut comm, oob)) => {
                let (tx, rx) = channel::<Job>();
                let peer = c.peer;
                std::thread::Builder::new()
                    .name(format!("nrt-sr-{}", c.lnc))
                    .spawn(move || {
                        let _oob = oob;
                        for job in rx {
                            let r = run(&job, &mut comm, peer);
                            *lock(&job.req.done) = Some(r);
                        }
                    })
                    .map_err(|e| err(NrtStatus::Failure, format!("cannot start the transfer thread: {e}")))?;
                *l = Link::Ready(tx);
                Ok(true)
            }
            Err(e) => {
                *l = Link::Failed(e.to_string());
                Err(err(NrtStatus::Failure, e.to_string()))
            }
        }
    }

    pub(super) fn submit(c: &SrComm, job: Job) -> Result<(), RtError> {
        match &*lock(&c.link) {
            Link::Ready(tx) => {
                tx.send(job).map_err(|_| err(NrtStatus::Failure, "the communicator's transfer thread has stopped"))
            }
            _ => Err(err(NrtStatus::Failure, "the communicator is not connected (nrt_async_sendrecv_test_comm)")),
        }
    }

    fn base_port() -> Result<u32, RtError> {
        let v = std::env::var(BOOTSTRAP_PORT_VAR)
            .map_err(|_| err(NrtStatus::Failure, format!("{BOOTSTRAP_PORT_VAR} is not set")))?;
        v.trim()
            .parse::<u16>()
            .map(u32::from)
            .map_err(|_| err(NrtStatus::Failure, format!("{BOOTSTRAP_PORT_VAR}={v:?} is not a port")))
    }

    pub(super) fn init(lnc: c_int) -> Result<(), RtError> {
        // Communicators and requests live until nrt_close ends them.
        crate::base::shutdown::on_close("nrt_async_sendrecv", close_all);
        base_port()?;
        if lock(&FAILED_CLOSE).as_ref().is_some_and(|s| s.contains(&lnc)) {
            return Err(err(
                NrtStatus::Failure,
                format!("lnc {lnc}: its last nrt_async_sendrecv_close failed (usable again after nrt_close)"),
            ));
        }
        let mut l = lock(&LNCS);
        if !l.get_or_insert_with(HashSet::new).insert(lnc) {
            return Err(err(NrtStatus::Failure, format!("lnc {lnc} is already initialised")));
        }
        Ok(())
    }

    /// Whether `c` is still connecting.
    fn connecting(c: &SrComm) -> bool {
        matches!(&*lock(&c.link), Link::Connecting(_))
    }

    pub(super) fn close(lnc: c_int) -> Result<(), RtError> {
        if !lock(&LNCS).as_mut().is_some_and(|s| s.remove(&lnc)) {
            return Err(err(NrtStatus::Failure, format!("lnc {lnc} is not initialised")));
        }
        let inflight = REQS.entries().iter().filter(|(_, r)| r.comm.lnc == lnc && lock(&r.done).is_none()).count();
        // Every communicator of the LNC: dropping the handle's sender ends its worker once its
        // queued transfers are done.
        let mut unconnected = 0usize;
        for (p, c) in COMMS.entries() {
            if c.lnc == lnc {
                unconnected += usize::from(connecting(&c));
                COMMS.remove(p as *const nrt_async_sendrecv_comm_t);
            }
        }
        if unconnected > 0 || inflight > 0 {
            lock(&FAILED_CLOSE).get_or_insert_with(HashSet::new).insert(lnc);
            return Err(err(
                NrtStatus::Failure,
                format!("lnc {lnc} closed with {unconnected} communicator(s) not connected and {inflight} request(s) in flight"),
            ));
        }
        Ok(())
    }

    pub(super) fn flush(lnc: c_int) -> Result<(), RtError> {
        if !lock(&LNCS).as_ref().is_some_and(|s| s.contains(&lnc)) {
            return Err(err(NrtStatus::Failure, format!("lnc {lnc} is not initialised")));
        }
        Ok(())
    }

    /// `nrt_close`: every LNC ends, its communicators and requests are released, failed
    /// closes are forgotten.
    fn close_all() {
        *lock(&LNCS) = None;
        *lock(&FAILED_CLOSE) = None;
        for (p, _) in COMMS.entries() {
            COMMS.remove(p as *const nrt_async_sendrecv_comm_t);
        }
        for (p, _) in REQS.entries() {
            REQS.remove(p as *const nrt_async_sendrecv_request_t);
        }
    }
}

fn check_lnc(lnc: c_int) -> Result<(), runtime::RtError> {
    crate::base::guard().map_err(|e| err(NrtStatus::Failure, e.to_string()))?;
    if !(0..MAX_LNC).contains(&lnc) {
        return Err(err(NrtStatus::Failure, format!("bad lnc {lnc}")));
    }
    Ok(())
}

#[cfg(not(feature = "fabric"))]
fn unsupported() -> Result<(), runtime::RtError> {
    Err(err(NrtStatus::Failure, "this libnrt is built without the fabric feature (nrt_async_sendrecv)"))
}

/// `nrt_async_sendrecv_init`.
#[no_mangle]
pub extern "C" fn nrt_async_sendrecv_init(lnc: c_int) -> NRT_STATUS {
    entry("nrt_async_sendrecv_init", || {
        check_lnc(lnc)?;
        #[cfg(feature = "fabric")]
        return imp::init(lnc);
        #[cfg(not(feature = "fabric"))]
        unsupported()
    })
}

/// `nrt_async_sendrecv_close`.
#[no_mangle]
pub extern "C" fn nrt_async_sendrecv_close(lnc: c_int) -> NRT_STATUS {
    entry("nrt_async_sendrecv_close", || {
        check_lnc(lnc)?;
        #[cfg(feature = "fabric")]
        return imp::close(lnc);
        #[cfg(not(feature = "fabric"))]
        unsupported()
    })
}

/// # Safety
/// `num` NULL or writable.
unsafe fn write_limit(func: &str, num: *mut c_int, v: c_int) -> NRT_STATUS {
    entry(func, || {
        if num.is_null() {
            return Err(err(NrtStatus::Failure, "num must not be NULL"));
        }
        // SAFETY: checked non-null; writable per nrt_async_sendrecv.h.
        unsafe { num.write(v) };
        Ok(())
    })
}

/// `nrt_async_sendrecv_get_max_num_communicators_per_lnc`.
///
/// # Safety
/// `num` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn nrt_async_sendrecv_get_max_num_communicators_per_lnc(num: *mut c_int) -> NRT_STATUS {
    // SAFETY: forwarded from this function's contract.
    unsafe { write_limit("nrt_async_sendrecv_get_max_num_communicators_per_lnc", num, MAX_COMMUNICATORS_PER_LNC) }
}

/// `nrt_async_sendrecv_get_max_num_pending_request`.
///
/// # Safety
/// `num` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn nrt_async_sendrecv_get_max_num_pending_request(num: *mut c_int) -> NRT_STATUS {
    // SAFETY: forwarded from this function's contract.
    unsafe { write_limit("nrt_async_sendrecv_get_max_num_pending_request", num, MAX_PENDING_REQUESTS) }
}

/// `nrt_async_sendrecv_flush`: every receive of `lnc` tested done has fully arrived in memory.
#[no_mangle]
pub extern "C" fn nrt_async_sendrecv_flush(lnc: c_int) -> NRT_STATUS {
    entry("nrt_async_sendrecv_flush", || {
        check_lnc(lnc)?;
        #[cfg(feature = "fabric")]
        return imp::flush(lnc);
        #[cfg(not(feature = "fabric"))]
        unsupported()
    })
}

/// # Safety
/// `peer_ip` NULL or NUL-terminated; `out` NULL or writable.
unsafe fn open_entry(
    func: &str,
    peer_ip: *const c_char,
    peer_lnc: c_int,
    lnc: c_int,
    out: *mut *mut nrt_async_sendrecv_comm_t,
    send: bool,
) -> NRT_STATUS {
    entry(func, || {
        check_lnc(lnc)?;
        if peer_ip.is_null() || out.is_null() {
            return Err(err(NrtStatus::Failure, "peer_ip and the communicator pointer must not be NULL"));
        }
        // SAFETY: non-null and NUL-terminated per nrt_async_sendrecv.h.
        let ip = unsafe { std::ffi::CStr::from_ptr(peer_ip) }.to_string_lossy().into_owned();
        #[cfg(feature = "fabric")]
        {
            let h = imp::open(&ip, peer_lnc, lnc, send)?;
            // SAFETY: checked non-null; writable per nrt_async_sendrecv.h.
            unsafe { out.write(h) };
            Ok(())
        }
        #[cfg(not(feature = "fabric"))]
        {
            let _ = (ip, peer_lnc, send);
            unsupported()
        }
    })
}

/// `nrt_async_sendrecv_connect`: the send side of a connection to `peer_ip`'s `peer_lnc`.
///
/// # Safety
/// `peer_ip` NULL or NUL-terminated; `send_comm` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn nrt_async_sendrecv_connect(
    peer_ip: *const c_char,
    peer_lnc: c_int,
    lnc: c_int,
    send_comm: *mut *mut nrt_async_sendrecv_comm_t,
) -> NRT_STATUS {
    // SAFETY: forwarded from this function's contract.
    unsafe { open_entry("nrt_async_sendrecv_connect", peer_ip, peer_lnc, lnc, send_comm, true) }
}

/// `nrt_async_sendrecv_accept`: the receive side of a connection from `peer_ip`'s `peer_lnc`.
///
/// # Safety
/// `peer_ip` NULL or NUL-terminated; `recv_comm` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn nrt_async_sendrecv_accept(
    peer_ip: *const c_char,
    peer_lnc: c_int,
    lnc: c_int,
    recv_comm: *mut *mut nrt_async_sendrecv_comm_t,
) -> NRT_STATUS {
    // SAFETY: forwarded from this function's contract.
    unsafe { open_entry("nrt_async_sendrecv_accept", peer_ip, peer_lnc, lnc, recv_comm, false) }
}

/// `nrt_async_sendrecv_test_comm`: `*done` = whether the connection is established.
///
/// # Safety
/// `done` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn nrt_async_sendrecv_test_comm(
    comm: *mut nrt_async_sendrecv_comm_t,
    done: *mut bool,
) -> NRT_STATUS {
    entry("nrt_async_sendrecv_test_comm", || {
        if done.is_null() {
            return Err(err(NrtStatus::Failure, "done must not be NULL"));
        }
        #[cfg(feature = "fabric")]
        {
            let c = imp::COMMS
                .get(comm)
                .ok_or_else(|| err(NrtStatus::InvalidHandle, format!("{comm:p} is not a sendrecv communicator")))?;
            let up = imp::test(&c)?;
            // SAFETY: checked non-null; writable per nrt_async_sendrecv.h.
            unsafe { done.write(up) };
            Ok(())
        }
        #[cfg(not(feature = "fabric"))]
        {
            let _ = comm;
            unsupported()
        }
    })
}

/// # Safety
/// `request` NULL or writable.
unsafe fn transfer(
    func: &str,
    tensor: *mut crate::base::nrt_tensor_t,
    offset: usize,
    length: usize,
    comm: *mut nrt_async_sendrecv_comm_t,
    request: *mut *mut nrt_async_sendrecv_request_t,
    send: bool,
) -> NRT_STATUS {
    entry(func, || {
        crate::base::guard().map_err(|e| err(NrtStatus::Failure, e.to_string()))?;
        if request.is_null() {
            return Err(err(NrtStatus::Failure, "request must not be NULL"));
        }
        #[cfg(feature = "fabric")]
        {
            let t = crate::base::tensor_of(tensor)?;
            let c = imp::COMMS
                .get(comm)
                .ok_or_else(|| err(NrtStatus::InvalidHandle, format!("{comm:p} is not a sendrecv communicator")))?;
            let end = offset.checked_add(length).filter(|&e| e as u64 <= t.tensor.size);
            if end.is_none() {
                return Err(err(NrtStatus::Failure, format!("{length} bytes at {offset} exceed the tensor")));
            }
            let req = imp::SrReq::new(&c)?;
            imp::submit(&c, imp::Job { send, tensor: t, offset: offset as u64, len: length, req: req.clone() })?;
            let h = imp::REQS.insert(req);
            // SAFETY: checked non-null; writable per nrt_async_sendrecv.h.
            unsafe { request.write(h) };
            Ok(())
        }
        #[cfg(not(feature = "fabric"))]
        {
            let _ = (tensor, offset, length, comm, send);
            unsupported()
        }
    })
}

/// `nrt_async_sendrecv_send_tensor`: queue sending `length` bytes at `offset` of `tensor`.
///
/// # Safety
/// `request` NULL or writable; handles are validated, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn nrt_async_sendrecv_send_tensor(
    tensor: *mut crate::base::nrt_tensor_t,
    offset: usize,
    length: usize,
    send_comm: *mut nrt_async_sendrecv_comm_t,
    request: *mut *mut nrt_async_sendrecv_request_t,
) -> NRT_STATUS {
    // SAFETY: forwarded from this function's contract.
    unsafe { transfer("nrt_async_sendrecv_send_tensor", tensor, offset, length, send_comm, request, true) }
}

/// `nrt_async_sendrecv_recv_tensor`: queue receiving `length` bytes into `tensor` at `offset`.
///
/// # Safety
/// `request` NULL or writable; handles are validated, never dereferenced.
#[no_mangle]
pub unsafe extern "C" fn nrt_async_sendrecv_recv_tensor(
    tensor: *mut crate::base::nrt_tensor_t,
    offset: usize,
    length: usize,
    recv_comm: *mut nrt_async_sendrecv_comm_t,
    request: *mut *mut nrt_async_sendrecv_request_t,
) -> NRT_STATUS {
    // SAFETY: forwarded from this function's contract.
    unsafe { transfer("nrt_async_sendrecv_recv_tensor", tensor, offset, length, recv_comm, request, false) }
}

/// `nrt_async_sendrecv_test_request`: `*done` and `*size` (bytes moved) of a request; a
/// request reported done is released.
///
/// # Safety
/// `done` and `size` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn nrt_async_sendrecv_test_request(
    request: *mut nrt_async_sendrecv_request_t,
    done: *mut bool,
    size: *mut usize,
) -> NRT_STATUS {
    entry("nrt_async_sendrecv_test_request", || {
        if done.is_null() {
            return Err(err(NrtStatus::Failure, "done must not be NULL"));
        }
        #[cfg(feature = "fabric")]
        {
            let r = imp::REQS
                .get(request)
                .ok_or_else(|| err(NrtStatus::InvalidHandle, format!("{request:p} is not a sendrecv request")))?;
            let state = crate::base::lock(&r.done).clone();
            let Some(res) = state else {
                // SAFETY: checked non-null; writable per nrt_async_sendrecv.h.
                unsafe { done.write(false) };
                return Ok(());
            };
            imp::REQS.remove(request);
            // SAFETY: checked non-null; writable per nrt_async_sendrecv.h.
            unsafe { done.write(true) };
            match res {
                Ok(n) => {
                    if !size.is_null() {
                        // SAFETY: non-null; writable per nrt_async_sendrecv.h.
                        unsafe { size.write(n) };
                    }
                    Ok(())
                }
                Err((s, m)) => Err(err(s, m)),
            }
        }
        #[cfg(not(feature = "fabric"))]
        {
            let _ = (request, size);
            unsupported()
        }
    })
}
