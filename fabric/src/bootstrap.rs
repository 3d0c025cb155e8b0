//! Bootstrap in the manner of libnrt: the root address comes from `NEURON_RT_ROOT_COMM_ID`
//! (`host:port`), rank and size from the caller or the launcher's environment, and rank 0
//! runs a TCP rendezvous at that address through which every rank learns every other rank's
//! transport address (its libfabric endpoint name). The rendezvous connections stay open as an
//! out-of-band channel ([`Oob::allgather`], [`Oob::barrier`]).

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use crate::FabricError;

/// The environment variable holding the root's `host:port` (as libnrt reads it).
pub const ROOT_ENV: &str = "NEURON_RT_ROOT_COMM_ID";

/// Launcher variables (rank, size), in the order they are tried: Open MPI, PMI (MPICH, Intel
/// MPI, Slurm's PMI), Slurm, torchrun.
pub const LAUNCHER_ENV: [(&str, &str); 4] = [
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
    ("PMI_RANK", "PMI_SIZE"),
    ("SLURM_PROCID", "SLURM_NTASKS"),
    ("RANK", "WORLD_SIZE"),
];

const MAGIC: &[u8; 4] = b"NVFB";
const VERSION: u32 = 1;
const MAX_FRAME: usize = 64 << 20;

/// A rank's place in the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RankSpec {
    pub rank: usize,
    pub size: usize,
}

fn parse_num(var: &str, v: &str) -> Result<usize, FabricError> {
    v.trim().parse().map_err(|_| FabricError::Invalid(format!("{var}={v:?} is not a number")))
}

/// Rank and size: explicit values win, missing ones come from the first launcher whose
/// variables are set (`lookup` reads the environment).
pub fn resolve_rank(
    rank: Option<usize>,
    size: Option<usize>,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<RankSpec, FabricError> {
    let mut from_env = None;
    for (rv, sv) in LAUNCHER_ENV {
        if let (Some(r), Some(s)) = (lookup(rv), lookup(sv)) {
            from_env = Some((parse_num(rv, &r)?, parse_num(sv, &s)?, rv));
            break;
        }
    }
    let rank = rank.or(from_env.map(|e| e.0));
    let size = size.or(from_env.map(|e| e.1));
    match (rank, size) {
        (Some(rank), Some(size)) if size > 0 && rank < size => Ok(RankSpec { rank, size }),
        (Some(rank), Some(size)) => Err(FabricError::Invalid(format!("rank {rank} is not in 0..{size}"))),
        _ => Err(FabricError::Invalid(format!(
            "rank and size are neither given nor set by a launcher ({})",
            LAUNCHER_ENV.iter().map(|(r, s)| format!("{r}/{s}")).collect::<Vec<_>>().join(", ")
        ))),
    }
}

/// Rank and size from the arguments or the process environment.
pub fn rank_from_env(rank: Option<usize>, size: Option<usize>) -> Result<RankSpec, FabricError> {
    resolve_rank(rank, size, |k| std::env::var(k).ok())
}

/// `host:port` or `[v6]:port` → (host, port).
pub fn parse_root(s: &str) -> Result<(String, u16), FabricError> {
    let bad = || FabricError::Invalid(format!("root address {s:?} is not host:port"));
    let (host, port) = if let Some(rest) = s.strip_prefix('[') {
        let (h, p) = rest.split_once("]:").ok_or_else(bad)?;
        (h, p)
    } else {
        s.rsplit_once(':').ok_or_else(bad)?
    };
    let port: u16 = port.parse().map_err(|_| bad())?;
    if host.is_empty() || port == 0 {
        return Err(bad());
    }
    Ok((host.to_string(), port))
}

/// The root address from the process environment ([`resolve_root`]).
pub fn root_from_env() -> Result<String, FabricError> {
    resolve_root(|k| std::env::var(k).ok())
}

/// The root address: `NEURON_RT_ROOT_COMM_ID`; when unset under torchrun (`MASTER_ADDR` /
/// `MASTER_PORT` set), `MASTER_ADDR:MASTER_PORT+1`.
///
/// The Neuron PyTorch plugin sets `NEURON_RT_ROOT_COMM_ID` itself when it is unset: the host
/// is `MASTER_ADDR` and the port one that rank 0 finds free and publishes through torch's
/// store (which torchrun serves at `MASTER_ADDR:MASTER_PORT`). A libnrt program without torch
/// cannot read that store, so it takes the port after the store's; with the plugin in the
/// process the variable is already set and wins.
pub fn resolve_root(lookup: impl Fn(&str) -> Option<String>) -> Result<String, FabricError> {
    if let Some(r) = lookup(ROOT_ENV).filter(|r| !r.is_empty()) {
        return Ok(r);
    }
    if let (Some(addr), Some(port)) = (lookup("MASTER_ADDR"), lookup("MASTER_PORT")) {
        let p: u16 = port
            .trim()
            .parse()
            .ok()
            .filter(|p| *p > 0 && *p < u16::MAX)
            .ok_or_else(|| FabricError::Invalid(format!("MASTER_PORT={port:?} is not a port below 65535")))?;
        let host = if addr.contains(':') && !addr.starts_with('[') { format!("[{addr}]") } else { addr };
        return Ok(format!("{host}:{}", p + 1));
    }
    Err(FabricError::Invalid(format!(
        "{ROOT_ENV} is not set (host:port of rank 0; under torchrun MASTER_ADDR/MASTER_PORT stand in)"
    )))
}

fn write_frame(s: &mut TcpStream, b: &[u8]) -> std::io::Result<()> {
    let len = u32::try_from(b.len()).map_err(|_| std::io::Error::other("frame too large"))?;
    s.write_all(&len.to_le_bytes())?;
    s.write_all(b)
}

/// The length word a rank sends on each out-of-band link when it leaves the job in order (its
/// [`Oob`] dropped): the peer's [`Watch`] finds bytes pending, not a bare end of stream, so an
/// orderly exit is never taken for a failure; reading it is an error (the rank is gone).
const BYE: u32 = u32::MAX;

fn read_frame(s: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    let mut l = [0u8; 4];
    s.read_exact(&mut l)?;
    if u32::from_le_bytes(l) == BYE {
        return Err(std::io::Error::new(std::io::ErrorKind::ConnectionAborted, "the rank left the job"));
    }
    let len = u32::from_le_bytes(l) as usize;
    if len > MAX_FRAME {
        return Err(std::io::Error::other(format!("frame of {len} bytes")));
    }
    let mut b = vec![0u8; len];
    s.read_exact(&mut b)?;
    Ok(b)
}

fn hello(spec: RankSpec) -> Vec<u8> {
    let mut h = MAGIC.to_vec();
    for v in [VERSION, spec.rank as u32, spec.size as u32] {
        h.extend_from_slice(&v.to_le_bytes());
    }
    h
}

fn parse_hello(b: &[u8]) -> Option<(u32, usize, usize)> {
    if b.len() != 16 || &b[..4] != MAGIC {
        return None;
    }
    let w = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    Some((w(4), w(8) as usize, w(12) as usize))
}

/// The out-of-band channel: rank 0 holds a connection to every rank, the others one to rank 0.
pub struct Oob {
    spec: RankSpec,
    links: Vec<Option<TcpStream>>,
    local_ip: IpAddr,
    timeout: Duration,
}

impl Oob {
    /// Joins the rendezvous at `root` (`host:port`); rank 0 listens there. Fails with
    /// [`FabricError::Bootstrap`] when not every rank arrived within `timeout`.
    pub fn connect(root: &str, spec: RankSpec, timeout: Duration) -> Result<Oob, FabricError> {
        if spec.size == 0 || spec.rank >= spec.size {
            return Err(FabricError::Invalid(format!("rank {} of {}", spec.rank, spec.size)));
        }
        let (host, port) = parse_root(root)?;
        let addrs: Vec<SocketAddr> = (host.as_str(), port)
            .to_socket_addrs()
            .map_err(|e| FabricError::Bootstrap(format!("cannot resolve {root}: {e}")))?
            .collect();
        let Some(first) = addrs.first().copied() else {
            return Err(FabricError::Bootstrap(format!("{root} resolves to no address")));
        };
        let deadline = Instant::now() + timeout;
        let mut links: Vec<Option<TcpStream>> = (0..spec.size).map(|_| None).collect();
        let local_ip;
        if spec.rank == 0 {
            // Listen on the root address when it is local to this host, else on every address.
            let bind = TcpListener::bind(first).or_else(|_| {
                let any =
                    if first.is_ipv4() { IpAddr::V4(Ipv4Addr::UNSPECIFIED) } else { IpAddr::V6(Ipv6Addr::UNSPECIFIED) };
                TcpListener::bind((any, port))
            });
            let listener = bind.map_err(|e| FabricError::Bootstrap(format!("rank 0 cannot listen on {root}: {e}")))?;
            listener.set_nonblocking(true).map_err(|e| FabricError::io("listener", e))?;
            local_ip = first.ip();
            let mut missing = spec.size - 1;
            while missing > 0 {
                match listener.accept() {
                    Ok((mut s, from)) => {
                        s.set_nonblocking(false).map_err(|e| FabricError::io("accept", e))?;
                        s.set_nodelay(true).map_err(|e| FabricError::io("accept", e))?;
                        s.set_read_timeout(Some(timeout)).map_err(|e| FabricError::io("accept", e))?;
                        let h = read_frame(&mut s).ok().and_then(|b| parse_hello(&b));
                        match h {
                            Some((VERSION, r, n)) if n == spec.size && r > 0 && r < n && links[r].is_none() => {
                                links[r] = Some(s);
                                missing -= 1;
                            }
                            other => {
                                tracing::warn!("bootstrap: rejected {from}: hello {other:?} for {} ranks", spec.size);
                            }
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        if Instant::now() >= deadline {
                            let absent: Vec<usize> = (1..spec.size).filter(|&r| links[r].is_none()).collect();
                            return Err(FabricError::Bootstrap(format!(
                                "ranks {absent:?} did not join {root} within {timeout:?}"
                            )));
                        }
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    Err(e) => return Err(FabricError::io("accept", e)),
                }
            }
        } else {
            let mut stream = None;
            let mut last = String::new();
            while stream.is_none() {
                for a in &addrs {
                    match TcpStream::connect_timeout(a, Duration::from_millis(500)) {
                        Ok(s) => {
                            stream = Some(s);
                            break;
                        }
                        Err(e) => last = e.to_string(),
                    }
                }
                if stream.is_none() {
                    if Instant::now() >= deadline {
                        return Err(FabricError::Bootstrap(format!(
                            "root {root} unreachable within {timeout:?}: {last}"
                        )));
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
            let Some(mut s) = stream else {
                return Err(FabricError::Bootstrap(format!("root {root} unreachable")));
            };
            s.set_nodelay(true).map_err(|e| FabricError::io("connect", e))?;
            s.set_read_timeout(Some(timeout)).map_err(|e| FabricError::io("connect", e))?;
            local_ip = s.local_addr().map_err(|e| FabricError::io("connect", e))?.ip();
            write_frame(&mut s, &hello(spec)).map_err(|e| FabricError::io("bootstrap hello", e))?;
            links[0] = Some(s);
        }
        Ok(Oob { spec, links, local_ip, timeout })
    }

    /// This rank and the size.
    pub fn spec(&self) -> RankSpec {
        self.spec
    }

    /// The local address this rank uses toward the root (rank 0: the root address).
    pub fn local_ip(&self) -> IpAddr {
        self.local_ip
    }

    /// Every rank's `mine`, indexed by rank. A failure (a rank gone, a read timeout) shuts
    /// every link of this rank down, so the ranks waiting on it fail at once too.
    pub fn allgather(&mut self, mine: &[u8]) -> Result<Vec<Vec<u8>>, FabricError> {
        let res = self.allgather_inner(mine);
        if res.is_err() {
            for s in self.links.iter().flatten() {
                let _ = s.shutdown(std::net::Shutdown::Both);
            }
        }
        res
    }

    fn allgather_inner(&mut self, mine: &[u8]) -> Result<Vec<Vec<u8>>, FabricError> {
        let n = self.spec.size;
        let lost = |r: usize, e: std::io::Error| FabricError::Bootstrap(format!("out-of-band link to rank {r}: {e}"));
        if self.spec.rank == 0 {
            let mut all = vec![mine.to_vec()];
            for r in 1..n {
                let s = self.links[r].as_mut().ok_or_else(|| FabricError::Bootstrap(format!("no link to rank {r}")))?;
                all.push(read_frame(s).map_err(|e| lost(r, e))?);
            }
            for r in 1..n {
                let s = self.links[r].as_mut().ok_or_else(|| FabricError::Bootstrap(format!("no link to rank {r}")))?;
                for b in &all {
                    write_frame(s, b).map_err(|e| lost(r, e))?;
                }
            }
            Ok(all)
        } else {
            let s = self.links[0].as_mut().ok_or_else(|| FabricError::Bootstrap("no link to rank 0".into()))?;
            write_frame(s, mine).map_err(|e| lost(0, e))?;
            let mut all = Vec::with_capacity(n);
            for _ in 0..n {
                all.push(read_frame(s).map_err(|e| lost(0, e))?);
            }
            if all.get(self.spec.rank).map(|b| b.as_slice()) != Some(mine) {
                return Err(FabricError::Bootstrap("out-of-band allgather returned a different own entry".into()));
            }
            Ok(all)
        }
    }

    /// Returns once every rank has called it.
    pub fn barrier(&mut self) -> Result<(), FabricError> {
        self.allgather(&[]).map(|_| ())
    }

    /// The timeout of the out-of-band reads.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// A watch on this rank's out-of-band links (the same sockets): the transport polls it
    /// while an exchange makes no progress, so a peer process that is gone (its socket closed
    /// or reset: exit, SIGKILL, the root severing after a failure) is noticed in about a second
    /// instead of after the whole timeout, on every rank (see [`Watch`]).
    pub fn watch(&self) -> Result<Watch, FabricError> {
        let mut links = Vec::new();
        for (r, l) in self.links.iter().enumerate() {
            if let Some(s) = l {
                links.push((r, s.try_clone().map_err(|e| FabricError::io("out-of-band watch", e))?));
            }
        }
        Ok(Watch { links })
    }
}

impl Drop for Oob {
    /// Leaves in order: a goodbye word on every link (best effort, never blocking; a link shut
    /// down by a failure takes nothing, so its peers see the failure).
    fn drop(&mut self) {
        for s in self.links.iter_mut().flatten() {
            if s.set_nonblocking(true).is_ok() {
                let _ = s.write_all(&BYE.to_le_bytes());
            }
        }
    }
}

/// Liveness of the out-of-band links, without reading from them.
///
/// - [`Watch::lost`] peeks at every link without blocking: end of stream or a reset means the
///   process at the other end is gone (pending bytes — data, or the goodbye of a rank that
///   left in order — or nothing to read mean it is not a failure).
/// - [`Watch::sever`] shuts the links down, so every rank linked to this one sees its end of
///   stream. A transport that fails severs: rank 0 links every rank, so the failure of any rank
///   reaches every other one through it within a poll.
pub struct Watch {
    links: Vec<(usize, TcpStream)>,
}

impl Watch {
    /// The first linked rank whose process is gone.
    pub fn lost(&self) -> Option<usize> {
        use std::os::fd::AsRawFd;
        for (r, s) in &self.links {
            let mut b = 0u8;
            // SAFETY: a one-byte peek into `b` on an open socket this value owns a handle of;
            // MSG_DONTWAIT leaves the socket's own blocking mode untouched.
            let n = unsafe {
                libc::recv(s.as_raw_fd(), (&mut b as *mut u8).cast(), 1, libc::MSG_PEEK | libc::MSG_DONTWAIT)
            };
            if n == 0 {
                return Some(*r);
            }
            if n < 0 {
                let e = std::io::Error::last_os_error();
                if !matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted) {
                    return Some(*r);
                }
            }
        }
        None
    }

    /// Shuts every link down (both directions).
    pub fn sever(&self) {
        for (_, s) in &self.links {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn rank_from_launchers_and_arguments() {
        let r = resolve_rank(None, None, env(&[("OMPI_COMM_WORLD_RANK", "3"), ("OMPI_COMM_WORLD_SIZE", "4")]));
        assert_eq!(r.ok(), Some(RankSpec { rank: 3, size: 4 }));
        let r = resolve_rank(
            None,
            None,
            env(&[("SLURM_PROCID", "1"), ("SLURM_NTASKS", "2"), ("RANK", "0"), ("WORLD_SIZE", "9")]),
        );
        assert_eq!(r.ok(), Some(RankSpec { rank: 1, size: 2 }));
        let r = resolve_rank(None, None, env(&[("RANK", "5"), ("WORLD_SIZE", "8")]));
        assert_eq!(r.ok(), Some(RankSpec { rank: 5, size: 8 }));
        let r = resolve_rank(Some(0), None, env(&[("PMI_RANK", "1"), ("PMI_SIZE", "2")]));
        assert_eq!(r.ok(), Some(RankSpec { rank: 0, size: 2 }));
        assert!(resolve_rank(None, None, env(&[])).is_err());
        assert!(resolve_rank(Some(2), Some(2), env(&[])).is_err());
        assert!(resolve_rank(None, None, env(&[("RANK", "x"), ("WORLD_SIZE", "2")])).is_err());
    }

    #[test]
    fn root_from_neuron_rt_root_comm_id_else_torchruns_master_port_plus_one() {
        let r = resolve_root(env(&[(ROOT_ENV, "10.0.0.1:44444"), ("MASTER_ADDR", "h"), ("MASTER_PORT", "29500")]));
        assert_eq!(r.ok().as_deref(), Some("10.0.0.1:44444"));
        let r = resolve_root(env(&[("MASTER_ADDR", "node-0"), ("MASTER_PORT", "29500")]));
        assert_eq!(r.ok().as_deref(), Some("node-0:29501"));
        let r = resolve_root(env(&[("MASTER_ADDR", "fd00::1"), ("MASTER_PORT", "29500")]));
        assert_eq!(r.ok().as_deref(), Some("[fd00::1]:29501"));
        assert!(matches!(
            resolve_root(env(&[("MASTER_ADDR", "h"), ("MASTER_PORT", "65535")])),
            Err(FabricError::Invalid(_))
        ));
        match resolve_root(env(&[])) {
            Err(FabricError::Invalid(m)) => assert!(m.contains(ROOT_ENV), "{m}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn root_addresses() {
        assert_eq!(parse_root("10.0.0.1:4000").ok(), Some(("10.0.0.1".into(), 4000)));
        assert_eq!(parse_root("[::1]:62182").ok(), Some(("::1".into(), 62182)));
        assert_eq!(parse_root("host-a:1").ok(), Some(("host-a".into(), 1)));
        assert!(parse_root("nohost").is_err());
        assert!(parse_root(":80").is_err());
        assert!(parse_root("h:0").is_err());
    }

    #[test]
    fn rendezvous_and_allgather_over_loopback() {
        let port = TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).unwrap_or(0);
        assert_ne!(port, 0);
        let root = format!("127.0.0.1:{port}");
        let handles: Vec<_> = (0..3)
            .map(|r| {
                let root = root.clone();
                std::thread::spawn(move || -> Result<Vec<Vec<u8>>, FabricError> {
                    let mut o = Oob::connect(&root, RankSpec { rank: r, size: 3 }, Duration::from_secs(10))?;
                    let all = o.allgather(&[r as u8; 3])?;
                    o.barrier()?;
                    Ok(all)
                })
            })
            .collect();
        for h in handles {
            let all = h.join().map_err(|_| "panic").and_then(|r| r.map_err(|_| "err"));
            assert_eq!(all, Ok(vec![vec![0u8; 3], vec![1; 3], vec![2; 3]]));
        }
    }

    /// Three ranks: rank 1 leaves in order (its Oob dropped: goodbye), rank 2's links are
    /// severed as after a failure. Rank 0's watch reports rank 2 only; the peers of a severed
    /// rank see it gone, and reading a goodbye is an error.
    #[test]
    fn the_watch_tells_a_failure_from_an_orderly_exit() {
        let port = TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).unwrap_or(0);
        let root = format!("127.0.0.1:{port}");
        let t = Duration::from_secs(10);
        let others: Vec<_> = (1..3)
            .map(|r| {
                let root = root.clone();
                std::thread::spawn(move || Oob::connect(&root, RankSpec { rank: r, size: 3 }, t))
            })
            .collect();
        let mut o0 = Oob::connect(&root, RankSpec { rank: 0, size: 3 }, t).expect("rank 0");
        let mut rest: Vec<Oob> = others.into_iter().map(|h| h.join().expect("thread").expect("rank joins")).collect();
        let w0 = o0.watch().expect("watch");
        assert_eq!(w0.lost(), None);
        let o2 = rest.pop().expect("rank 2");
        let o1 = rest.pop().expect("rank 1");
        let w2 = o2.watch().expect("watch");
        // Rank 1's goodbye and end of stream go out before rank 2's links are cut; the watch
        // checks rank 1's link first, so the first rank it reports must be 2.
        drop(o1);
        w2.sever();
        let until = Instant::now() + t;
        while w0.lost().is_none() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(w0.lost(), Some(2), "an orderly exit is not a failure; a severed link is");
        drop(o2);
        // Reading rank 1's goodbye fails the out-of-band allgather.
        assert!(o0.allgather(b"x").is_err());
    }

    #[test]
    fn missing_rank_fails_within_the_timeout() {
        let port = TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).unwrap_or(0);
        let t0 = Instant::now();
        let r = Oob::connect(&format!("127.0.0.1:{port}"), RankSpec { rank: 0, size: 2 }, Duration::from_millis(300));
        assert!(matches!(r, Err(FabricError::Bootstrap(_))));
        assert!(t0.elapsed() < Duration::from_secs(3));
        if let Err(e) = r {
            assert_eq!(e.status_code(), crate::NRT_NETWORK_PROXY_FAILURE);
        }
    }
}
