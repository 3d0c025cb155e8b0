//! The libfabric transport: one RDM endpoint per rank, tagged messages, one completion queue.
//!
//! - Provider: libfabric's own `FI_PROVIDER` selection when that variable is set (`efa` on
//!   EC2), else `tcp`.
//! - Addressing: every rank's endpoint name (`fi_getname`) is exchanged through the bootstrap
//!   ([`crate::bootstrap::Oob`]) and inserted into a table address vector; the wire tag is the
//!   caller's tag shifted left by 16 bits with the sender's rank in the low 16 bits, so receives
//!   match a given peer without directed receive support.
//! - Registered memory: when the provider asks for `FI_MR_LOCAL` (efa, verbs), pinned regions
//!   ([`Transport::pin`]) are registered with `fi_mr_reg` and their descriptors passed with
//!   every transfer; a buffer nobody pinned is registered for the duration of one exchange.
//! - Progress: the completion queue is polled by the caller (spinning, then yielding, then
//!   short sleeps when nothing completes); an exchange fails when none of its operations
//!   completes for the configured timeout, or on the first error completion. The endpoint is
//!   then closed (so the provider can no longer touch the caller's buffers) and the transport
//!   stays broken.

use std::ffi::{c_void, CStr};
use std::ptr::null_mut;
use std::time::{Duration, Instant};

pub mod dl;
pub mod sys;

use crate::bootstrap::{Oob, RankSpec, Watch};
use crate::coll::{CollConfig, Communicator};
use crate::transport::{RecvOp, SendOp, Transport, MAX_TAG};
use crate::FabricError;

use sys::FI_ADDR_UNSPEC;

fn strerror(code: i64) -> String {
    match dl::api() {
        Ok(api) => api.strerror(code),
        Err(_) => format!("error {code}"),
    }
}

fn check(call: &'static str, rc: i32) -> Result<(), FabricError> {
    if rc == 0 {
        Ok(())
    } else {
        Err(FabricError::Ofi { call, code: rc, msg: strerror(rc.into()) })
    }
}

/// An operation-table entry the provider left empty.
fn missing(call: &'static str) -> FabricError {
    FabricError::Ofi { call, code: -(libc::ENOSYS), msg: "not provided by this libfabric provider".into() }
}

// The static-inline calls of the libfabric headers, through the objects' operation tables
// (`sys`). Each requires a live object of the named kind.

/// `fi_close`.
///
/// # Safety
/// `f` is an open libfabric object, closed once.
unsafe fn fi_close(f: *mut sys::fid) -> i32 {
    // SAFETY: per the contract, `f` and its ops table are live.
    match unsafe { (*(*f).ops).close } {
        // SAFETY: the provider's close of this object.
        Some(close) => unsafe { close(f) },
        None => -(libc::ENOSYS),
    }
}

struct Reg {
    start: usize,
    len: usize,
    mr: *mut sys::fid_mr,
    count: usize,
}

/// A rank's libfabric endpoint, connected to every other rank of the job.
pub struct OfiTransport {
    api: &'static dl::Api,
    rank: usize,
    size: usize,
    info: *mut sys::fi_info,
    fabric: *mut sys::fid_fabric,
    domain: *mut sys::fid_domain,
    cq: *mut sys::fid_cq,
    av: *mut sys::fid_av,
    ep: *mut sys::fid_ep,
    addrs: Vec<u64>,
    mr_local: bool,
    regs: Vec<Reg>,
    next_key: u64,
    max_msg: usize,
    provider: String,
    timeout: Duration,
    broken: Option<String>,
    /// The out-of-band links' liveness (the bootstrap's sockets).
    watch: Option<Watch>,
}

/// How long an exchange may go without progress once an out-of-band link reports its peer
/// gone before it fails: long enough for the last bytes a departing peer sent to be read, and
/// at most the transport timeout.
fn lost_grace(timeout: Duration) -> Duration {
    (timeout / 4).clamp(Duration::from_millis(500), Duration::from_secs(2)).min(timeout)
}

/// Bootstraps at `root` (rank 0 listens there) and returns the communicator over libfabric
/// and the out-of-band channel. `timeout` bounds the rendezvous and every stalled exchange.
pub fn join(
    root: &str,
    spec: RankSpec,
    timeout: Duration,
    cfg: CollConfig,
) -> Result<(Communicator<OfiTransport>, Oob), FabricError> {
    // A missing libfabric fails here, before any rank waits for this one at the rendezvous.
    dl::api()?;
    let mut oob = Oob::connect(root, spec, timeout)?;
    let t = OfiTransport::new(&mut oob, timeout)?;
    Ok((Communicator::new(t, cfg)?, oob))
}

// SAFETY: the libfabric objects behind the raw pointers are owned by this value alone and
// used only through `&mut self` (one thread at a time); libfabric allows a domain's objects to
// be used from any thread as long as the caller serialises access (FI_THREAD_DOMAIN and
// stronger), so moving the value to another thread is sound.
unsafe impl Send for OfiTransport {}

impl OfiTransport {
    /// Opens an endpoint, exchanges endpoint names with every rank through `oob` and inserts
    /// them. `timeout`: how long an exchange may go without any completion.
    pub fn new(oob: &mut Oob, timeout: Duration) -> Result<OfiTransport, FabricError> {
        let spec = oob.spec();
        let api = dl::api()?;
        let mut t = OfiTransport {
            api,
            rank: spec.rank,
            size: spec.size,
            info: null_mut(),
            fabric: null_mut(),
            domain: null_mut(),
            cq: null_mut(),
            av: null_mut(),
            ep: null_mut(),
            addrs: Vec::new(),
            mr_local: false,
            regs: Vec::new(),
            next_key: 1,
            max_msg: usize::MAX,
            provider: String::new(),
            timeout,
            broken: None,
            watch: Some(oob.watch()?),
        };
        let name = t.open()?;
        let names = oob.allgather(&name)?;
        t.insert(&names)?;
        // Nobody sends before every rank has inserted every address.
        oob.barrier()?;
        Ok(t)
    }

    /// The provider in use (`tcp`, `efa`, …).
    pub fn provider(&self) -> &str {
        &self.provider
    }

    /// Whether the provider needs registered local buffers (`FI_MR_LOCAL`).
    pub fn needs_registration(&self) -> bool {
        self.mr_local
    }

    fn open(&mut self) -> Result<Vec<u8>, FabricError> {
        let api = self.api;
        // SAFETY: the libfabric calls below follow fi_getinfo(3), fi_fabric(3), fi_domain(3),
        // fi_cq(3), fi_av(3), fi_endpoint(3), through the exported calls of `api` and the
        // operation tables of the objects they return (layouts: `sys`): every out-pointer is a
        // field of `self`, closed in Drop in reverse order; `hints` is allocated by
        // fi_dupinfo(NULL) (fi_allocinfo) and freed by fi_freeinfo, which also frees the
        // strdup'ed provider name.
        unsafe {
            let hints = (api.dupinfo)(std::ptr::null());
            if hints.is_null() {
                return Err(FabricError::Ofi { call: "fi_allocinfo", code: -12, msg: "out of memory".into() });
            }
            (*hints).caps = sys::FI_TAGGED;
            (*hints).mode = sys::FI_CONTEXT | sys::FI_CONTEXT2;
            (*(*hints).ep_attr).type_ = sys::FI_EP_RDM;
            (*(*hints).domain_attr).mr_mode =
                sys::FI_MR_LOCAL | sys::FI_MR_VIRT_ADDR | sys::FI_MR_ALLOCATED | sys::FI_MR_PROV_KEY;
            if std::env::var_os("FI_PROVIDER").is_none() {
                (*(*hints).fabric_attr).prov_name = libc::strdup(c"tcp".as_ptr());
            }
            let mut info = null_mut();
            let rc = (api.getinfo)(api.request_version(), std::ptr::null(), std::ptr::null(), 0, hints, &mut info);
            (api.freeinfo)(hints);
            check("fi_getinfo", rc)?;
            if info.is_null() {
                return Err(FabricError::Ofi { call: "fi_getinfo", code: -61, msg: "no provider".into() });
            }
            self.info = info;
            let prov = (*(*info).fabric_attr).prov_name;
            if !prov.is_null() {
                self.provider = CStr::from_ptr(prov).to_string_lossy().into_owned();
            }
            self.mr_local = (*(*info).domain_attr).mr_mode & sys::FI_MR_LOCAL != 0;
            self.max_msg = (*(*info).ep_attr).max_msg_size.max(1);
            check("fi_fabric", (api.fabric)((*info).fabric_attr, &mut self.fabric, null_mut()))?;
            let domain = (*(*self.fabric).ops).domain.ok_or_else(|| missing("fi_domain"))?;
            check("fi_domain", domain(self.fabric, info, &mut self.domain, null_mut()))?;
            let dops = (*self.domain).ops;
            let mut cq_attr: sys::fi_cq_attr = std::mem::zeroed();
            cq_attr.format = sys::FI_CQ_FORMAT_MSG;
            cq_attr.wait_obj = sys::FI_WAIT_NONE;
            cq_attr.size = 0;
            let cq_open = (*dops).cq_open.ok_or_else(|| missing("fi_cq_open"))?;
            check("fi_cq_open", cq_open(self.domain, &mut cq_attr, &mut self.cq, null_mut()))?;
            let mut av_attr: sys::fi_av_attr = std::mem::zeroed();
            av_attr.type_ = sys::FI_AV_TABLE;
            av_attr.count = self.size;
            let av_open = (*dops).av_open.ok_or_else(|| missing("fi_av_open"))?;
            check("fi_av_open", av_open(self.domain, &mut av_attr, &mut self.av, null_mut()))?;
            let endpoint = (*dops).endpoint.ok_or_else(|| missing("fi_endpoint"))?;
            check("fi_endpoint", endpoint(self.domain, info, &mut self.ep, null_mut()))?;
            let ep_fid: *mut sys::fid = &mut (*self.ep).fid;
            let bind = (*(*ep_fid).ops).bind.ok_or_else(|| missing("fi_ep_bind"))?;
            check("fi_ep_bind(av)", bind(ep_fid, &mut (*self.av).fid, 0))?;
            check("fi_ep_bind(cq)", bind(ep_fid, &mut (*self.cq).fid, sys::FI_TRANSMIT | sys::FI_RECV))?;
            let control = (*(*ep_fid).ops).control.ok_or_else(|| missing("fi_enable"))?;
            check("fi_enable", control(ep_fid, sys::FI_ENABLE, null_mut()))?;
            let getname = (*(*self.ep).cm).getname.ok_or_else(|| missing("fi_getname"))?;
            let mut name = vec![0u8; 256];
            let mut len = name.len();
            let mut rc = getname(ep_fid, name.as_mut_ptr().cast(), &mut len);
            if i64::from(rc) == -sys::FI_ETOOSMALL {
                name.resize(len, 0);
                rc = getname(ep_fid, name.as_mut_ptr().cast(), &mut len);
            }
            check("fi_getname", rc)?;
            name.truncate(len);
            tracing::debug!(
                "fabric: rank {} on provider {} (mr_local {}, libfabric {} from {})",
                self.rank,
                self.provider,
                self.mr_local,
                api.version_string(),
                api.path
            );
            Ok(name)
        }
    }

    fn insert(&mut self, names: &[Vec<u8>]) -> Result<(), FabricError> {
        let len = names.first().map_or(0, |n| n.len());
        if names.len() != self.size || names.iter().any(|n| n.len() != len || n.is_empty()) {
            return Err(FabricError::Bootstrap("endpoint names of different lengths (mixed providers?)".into()));
        }
        let flat = names.concat();
        self.addrs = vec![FI_ADDR_UNSPEC; self.size];
        // SAFETY: an open AV (its ops table is live).
        let insert = unsafe { (*(*self.av).ops).insert }.ok_or_else(|| missing("fi_av_insert"))?;
        // SAFETY: `flat` holds `size` names of `len` bytes; `addrs` has room for `size` entries;
        // the AV is open.
        let rc = unsafe { insert(self.av, flat.as_ptr().cast(), self.size, self.addrs.as_mut_ptr(), 0, null_mut()) };
        if rc < 0 || rc as usize != self.size {
            return Err(FabricError::Ofi {
                call: "fi_av_insert",
                code: rc.min(-1),
                msg: format!("inserted {rc} of {}", self.size),
            });
        }
        Ok(())
    }

    fn find_reg(&self, start: usize, len: usize) -> Option<usize> {
        self.regs.iter().position(|r| r.start <= start && start + len <= r.start + r.len)
    }

    fn register(&mut self, start: usize, len: usize) -> Result<(), FabricError> {
        let mut mr = null_mut();
        let key = self.next_key;
        self.next_key += 1;
        // SAFETY: registers [start, start+len), a live region of the caller (see Transport::pin);
        // the MR is closed by unpin or Drop.
        let rc = unsafe {
            match (*(*self.domain).mr).reg {
                None => -(libc::ENOSYS),
                Some(reg) => reg(
                    &mut (*self.domain).fid,
                    start as *const c_void,
                    len,
                    sys::FI_SEND | sys::FI_RECV,
                    0,
                    key,
                    0,
                    &mut mr,
                    null_mut(),
                ),
            }
        };
        check("fi_mr_reg", rc)?;
        self.regs.push(Reg { start, len, mr, count: 1 });
        Ok(())
    }

    fn desc(&self, start: usize, len: usize) -> *mut c_void {
        match self.find_reg(start, len) {
            // SAFETY: `mr` is an open memory region of this domain.
            Some(i) => unsafe { (*self.regs[i].mr).mem_desc },
            None => null_mut(),
        }
    }

    fn close_reg(&mut self, i: usize) {
        let r = self.regs.swap_remove(i);
        // SAFETY: an open MR of this domain, closed once (removed from `regs`).
        unsafe { fi_close(&mut (*r.mr).fid) };
    }

    /// Closes the endpoint (cancelling whatever is posted) and marks the transport broken.
    fn fail(&mut self, e: FabricError) -> FabricError {
        if !self.ep.is_null() {
            // SAFETY: the open endpoint, closed once (set to null).
            unsafe { fi_close(&mut (*self.ep).fid) };
            self.ep = null_mut();
        }
        // Every rank linked to this one learns of the failure now rather than at its timeout.
        if let Some(w) = &self.watch {
            w.sever();
        }
        self.broken = Some(e.to_string());
        e
    }

    /// Reads completions; marks done ops; returns whether any completed. Op `i` below
    /// `want.len()` is a receive of `want[i]` bytes: a message of another length is a
    /// [`FabricError::Size`] (a longer one is the provider's truncation error).
    fn poll(
        &mut self,
        base: *const sys::fi_context2,
        peers: &[usize],
        want: &[usize],
        done: &mut [bool],
        left: &mut usize,
    ) -> Result<bool, FabricError> {
        // SAFETY: zeroed fi_cq_msg_entry is plain data.
        let mut ents: [sys::fi_cq_msg_entry; 16] = unsafe { std::mem::zeroed() };
        // SAFETY: `ents` has room for 16 entries of the CQ's format (FI_CQ_FORMAT_MSG).
        let rc = unsafe {
            match (*(*self.cq).ops).read {
                Some(read) => read(self.cq, ents.as_mut_ptr().cast(), ents.len()),
                None => -(libc::ENOSYS as isize),
            }
        };
        let idx = |ctx: *mut c_void| -> Option<usize> {
            let off = (ctx as usize).checked_sub(base as usize)?;
            let i = off / std::mem::size_of::<sys::fi_context2>();
            (i < peers.len()).then_some(i)
        };
        if rc > 0 {
            for e in &ents[..rc as usize] {
                if let Some(i) = idx(e.op_context) {
                    if let Some(&expected) = want.get(i).filter(|&&w| w != e.len) {
                        return Err(FabricError::Size { rank: self.rank, peer: peers[i], expected, got: e.len });
                    }
                    if !done[i] {
                        done[i] = true;
                        *left -= 1;
                    }
                }
            }
            return Ok(true);
        }
        if rc as i64 == -sys::FI_EAGAIN {
            return Ok(false);
        }
        if rc as i64 == -sys::FI_EAVAIL {
            // SAFETY: zeroed fi_cq_err_entry is plain data; fi_cq_readerr fills it.
            let mut err: sys::fi_cq_err_entry = unsafe { std::mem::zeroed() };
            // SAFETY: `err` is a valid out-parameter.
            let rc = unsafe {
                match (*(*self.cq).ops).readerr {
                    Some(readerr) => readerr(self.cq, &mut err, 0),
                    None => -(libc::ENOSYS as isize),
                }
            };
            if rc < 0 {
                return Err(FabricError::Ofi { call: "fi_cq_readerr", code: rc as i32, msg: strerror(rc as i64) });
            }
            let mut buf = [0 as std::ffi::c_char; 256];
            // SAFETY: `buf` is writable for its length; the call returns a NUL-terminated string.
            let p = unsafe {
                match (*(*self.cq).ops).strerror {
                    Some(f) => f(self.cq, err.prov_errno, err.err_data, buf.as_mut_ptr(), buf.len()),
                    None => std::ptr::null(),
                }
            };
            let prov = if p.is_null() {
                String::new()
            } else {
                // SAFETY: non-null NUL-terminated string (above).
                unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
            };
            let peer = idx(err.op_context).map_or(usize::MAX, |i| peers[i]);
            return Err(FabricError::Peer {
                rank: self.rank,
                peer,
                msg: format!("{} ({prov})", strerror(err.err.into())),
            });
        }
        Err(FabricError::Ofi { call: "fi_cq_read", code: rc as i32, msg: strerror(rc as i64) })
    }

    /// One idle round of an exchange that made no progress (`idle` rounds in a row, the last
    /// progress at `last`): spin, then yield, then sleep 20 µs; fails with `stalled()` after
    /// the timeout, or after `grace` when an out-of-band link reports its process gone
    /// (checked about once a millisecond).
    fn idle_wait(
        &self,
        idle: u32,
        last: Instant,
        grace: Duration,
        stalled: impl FnOnce() -> FabricError,
    ) -> Result<(), FabricError> {
        if idle < 64 {
            std::hint::spin_loop();
            return Ok(());
        }
        if idle < 1024 {
            std::thread::yield_now();
            return Ok(());
        }
        let stall = last.elapsed();
        if stall > self.timeout {
            return Err(stalled());
        }
        if idle.is_multiple_of(50) && stall > grace {
            if let Some(peer) = self.watch.as_ref().and_then(Watch::lost) {
                let why = if peer == 0 && self.rank != 0 {
                    "rank 0 closed the out-of-band links (it failed, or saw a rank fail or go away)"
                } else {
                    "its out-of-band link closed (the process is gone or failed)"
                };
                return Err(FabricError::Peer {
                    rank: self.rank,
                    peer,
                    msg: format!("{why}, and nothing completed for {stall:?}"),
                });
            }
        }
        std::thread::sleep(Duration::from_micros(20));
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn exchange_inner(
        &mut self,
        sends: &[SendOp<'_>],
        recvs: &mut [RecvOp<'_>],
        overlap: &mut dyn FnMut(),
        temp: &mut Vec<usize>,
    ) -> Result<(), FabricError> {
        let n = recvs.len() + sends.len();
        // SAFETY: an all-zero fi_context2 (pointers) is its initial state.
        let ctxs: Vec<sys::fi_context2> = (0..n).map(|_| unsafe { std::mem::zeroed() }).collect();
        let base = ctxs.as_ptr();
        let mut peers = Vec::with_capacity(n);
        for r in recvs.iter() {
            peers.push(r.peer);
        }
        for s in sends {
            peers.push(s.peer);
        }
        for (i, &p) in peers.iter().enumerate() {
            if p >= self.size || p == self.rank {
                return Err(FabricError::Invalid(format!("op {i}: peer {p} of rank {} in {}", self.rank, self.size)));
            }
        }
        let lens: Vec<(usize, usize)> = recvs
            .iter()
            .map(|r| (r.buf.as_ptr() as usize, r.buf.len()))
            .chain(sends.iter().map(|s| (s.buf.as_ptr() as usize, s.buf.len())))
            .collect();
        for (i, &(start, len)) in lens.iter().enumerate() {
            if len > self.max_msg {
                return Err(FabricError::Invalid(format!("op {i}: {len} bytes > provider max {}", self.max_msg)));
            }
            if self.mr_local && len > 0 && self.find_reg(start, len).is_none() {
                self.register(start, len)?;
                temp.push(start);
            }
        }
        let want: Vec<usize> = lens[..recvs.len()].iter().map(|l| l.1).collect();
        let mut done = vec![false; n];
        let mut left = n;
        let mut last = Instant::now();
        let timeout = self.timeout;
        let grace = lost_grace(timeout);
        let mut idle = 0u32;
        let stalled = |peers: &[usize], done: &[bool], rank| FabricError::Timeout {
            rank,
            peers: {
                let mut p: Vec<usize> = peers.iter().zip(done).filter(|(_, d)| !**d).map(|(p, _)| *p).collect();
                p.sort_unstable();
                p.dedup();
                p
            },
            timeout,
        };
        for i in 0..n {
            let (start, len) = lens[i];
            let desc = if self.mr_local { self.desc(start, len) } else { null_mut() };
            let ctx = base.wrapping_add(i) as *mut c_void;
            loop {
                let rc = if i < recvs.len() {
                    let r = &recvs[i];
                    let tag = (r.tag << 16) | r.peer as u64;
                    // SAFETY: the receive buffer is exclusively borrowed for this call, which
                    // does not return before the operation completed or the endpoint was
                    // closed (fail); `ctx` lives in `ctxs` until then.
                    unsafe {
                        match (*(*self.ep).tagged).recv {
                            Some(recv) => recv(self.ep, start as *mut c_void, len, desc, FI_ADDR_UNSPEC, tag, 0, ctx),
                            None => -(libc::ENOSYS as isize),
                        }
                    }
                } else {
                    let s = &sends[i - recvs.len()];
                    let tag = (s.tag << 16) | self.rank as u64;
                    // SAFETY: as above, for the borrowed send buffer.
                    unsafe {
                        match (*(*self.ep).tagged).send {
                            Some(send) => {
                                send(self.ep, start as *const c_void, len, desc, self.addrs[s.peer], tag, ctx)
                            }
                            None => -(libc::ENOSYS as isize),
                        }
                    }
                };
                if rc == 0 {
                    break;
                }
                if rc as i64 != -sys::FI_EAGAIN {
                    return Err(FabricError::Ofi {
                        call: if i < recvs.len() { "fi_trecv" } else { "fi_tsend" },
                        code: rc as i32,
                        msg: strerror(rc as i64),
                    });
                }
                if self.poll(base, &peers, &want, &mut done, &mut left)? {
                    idle = 0;
                    last = Instant::now();
                } else {
                    idle += 1;
                    self.idle_wait(idle, last, grace, || stalled(&peers, &done, self.rank))?;
                }
            }
        }
        overlap();
        idle = 0;
        while left > 0 {
            if self.poll(base, &peers, &want, &mut done, &mut left)? {
                idle = 0;
                last = Instant::now();
                continue;
            }
            idle += 1;
            self.idle_wait(idle, last, grace, || stalled(&peers, &done, self.rank))?;
        }
        drop(ctxs);
        Ok(())
    }
}

impl Transport for OfiTransport {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn exchange(
        &mut self,
        sends: &[SendOp<'_>],
        recvs: &mut [RecvOp<'_>],
        overlap: &mut dyn FnMut(),
    ) -> Result<(), FabricError> {
        if let Some(b) = &self.broken {
            return Err(FabricError::Broken(b.clone()));
        }
        if sends.iter().map(|s| s.tag).chain(recvs.iter().map(|r| r.tag)).any(|t| t > MAX_TAG) {
            return Err(FabricError::Invalid("tag above 48 bits".into()));
        }
        let mut temp = Vec::new();
        let res = self.exchange_inner(sends, recvs, overlap, &mut temp);
        let res = match res {
            Err(e @ FabricError::Invalid(_)) => Err(e),
            Err(e) => Err(self.fail(e)),
            Ok(()) => Ok(()),
        };
        for start in temp {
            if let Some(i) = self.regs.iter().position(|r| r.start == start && r.count == 1) {
                self.close_reg(i);
            }
        }
        res
    }

    fn pin(&mut self, region: &[u8]) -> Result<(), FabricError> {
        if !self.mr_local || region.is_empty() {
            return Ok(());
        }
        let (start, len) = (region.as_ptr() as usize, region.len());
        if let Some(r) = self.regs.iter_mut().find(|r| r.start == start && r.len == len) {
            r.count += 1;
            return Ok(());
        }
        self.register(start, len)
    }

    fn unpin(&mut self, region: &[u8]) {
        if !self.mr_local || region.is_empty() {
            return;
        }
        let (start, len) = (region.as_ptr() as usize, region.len());
        if let Some(i) = self.regs.iter().position(|r| r.start == start && r.len == len) {
            self.regs[i].count -= 1;
            if self.regs[i].count == 0 {
                self.close_reg(i);
            }
        }
    }

    fn max_message(&self) -> usize {
        self.max_msg
    }
}

impl Drop for OfiTransport {
    fn drop(&mut self) {
        // SAFETY: every non-null handle is open and closed exactly once, children before
        // parents (endpoint, memory regions, address vector, completion queue, domain, fabric).
        unsafe {
            if !self.ep.is_null() {
                fi_close(&mut (*self.ep).fid);
            }
            for r in self.regs.drain(..) {
                fi_close(&mut (*r.mr).fid);
            }
            if !self.av.is_null() {
                fi_close(&mut (*self.av).fid);
            }
            if !self.cq.is_null() {
                fi_close(&mut (*self.cq).fid);
            }
            if !self.domain.is_null() {
                fi_close(&mut (*self.domain).fid);
            }
            if !self.fabric.is_null() {
                fi_close(&mut (*self.fabric).fid);
            }
            if !self.info.is_null() {
                (self.api.freeinfo)(self.info);
            }
        }
    }
}
