//! One round of point-to-point messages among a communicator's ranks: each rank names what
//! it sends to which rank and what it receives from which (at most one message each way per
//! pair), and every message is in flight at once. The device host's seam carries send/receive,
//! permute, all-to-all and all-to-allv across hosts with two such rounds (the plan, then the
//! data: `sim-serve/src/seam/exchange.rs`).
//!
//! Tags: the exchange takes one sequence number like a collective and its own phase
//! ([`PHASE_EXCHANGE`]); a message is cut into pieces of at most the chunk size, piece `j`
//! tagged with `j` (its low 16 bits as the chunk, the next 12 as the step), so a message of
//! any length up to [`MAX_PIECES`] pieces keeps its tags apart from every other message of the
//! round and of every other collective.
//!
//! Sizes: a piece that arrives shorter or longer than the receive expects fails the exchange
//! with [`FabricError::Size`] (the libfabric transport checks every receive's completion
//! length). Both ends cut a message at the same chunk size, so peers that disagree on a
//! message's length fail on its first differing piece; a receive expecting more pieces than
//! the sender sent fails when the transport's timeout expires ([`FabricError::Timeout`]), as
//! does a receive from a dead peer. Nothing waits longer than the transport's timeout without
//! progress.

use super::{tag, Communicator};
use crate::transport::{RecvOp, SendOp, Transport};
use crate::FabricError;

/// The tag phase of [`Communicator::exchange`] (0–6 are the ring, direct, point-to-point,
/// log-round and hierarchical phases).
pub(super) const PHASE_EXCHANGE: u64 = 7;

/// Most pieces one message of an exchange is cut into (the tag's 16 chunk and 12 step bits).
pub const MAX_PIECES: usize = 1 << 28;

impl<T: Transport> Communicator<T> {
    /// One round of point-to-point messages (module docs): `sends` are `(rank, bytes)` to send,
    /// `recvs` `(rank, buffer)` to fill with exactly what that rank sends this round. At most
    /// one send and one receive per peer, never this rank itself; an empty buffer is a message
    /// of no bytes (leave the pair out to send nothing). Every rank of the communicator calls
    /// it in the same order with its other collectives, also a rank with nothing to move.
    pub fn exchange(&mut self, sends: &[(usize, &[u8])], recvs: &mut [(usize, &mut [u8])]) -> Result<(), FabricError> {
        let n = self.size();
        let me = self.rank();
        // `seen[p]`: bit 0 a send to `p`, bit 1 a receive from it.
        let mut seen = vec![0u8; n];
        let peers = sends.iter().map(|s| (s.0, 1u8)).chain(recvs.iter().map(|r| (r.0, 2u8)));
        for (p, bit) in peers {
            if p >= n || p == me {
                return Err(FabricError::Invalid(format!("exchange with rank {p} from rank {me} of {n}")));
            }
            let was = seen[p];
            seen[p] |= bit;
            if was & bit != 0 {
                return Err(FabricError::Invalid(format!("two messages each way between ranks {me} and {p}")));
            }
        }
        let chunk = self.chunk();
        let pieces = |len: usize| len.div_ceil(chunk).max(1);
        if let Some(len) =
            sends.iter().map(|s| s.1.len()).chain(recvs.iter().map(|r| r.1.len())).find(|&l| pieces(l) > MAX_PIECES)
        {
            return Err(FabricError::Invalid(format!("a message of {len} bytes is over {MAX_PIECES} pieces")));
        }
        let seq = self.next_seq();
        let t = |j: usize| tag(seq, PHASE_EXCHANGE, j >> 16, j & 0xffff);
        let mut regions: Vec<(*const u8, usize)> = sends.iter().map(|s| (s.1.as_ptr(), s.1.len())).collect();
        regions.extend(recvs.iter().map(|r| (r.1.as_ptr(), r.1.len())));
        let mut ops = Vec::with_capacity(sends.len());
        for &(peer, buf) in sends {
            if buf.is_empty() {
                ops.push(SendOp { peer, tag: t(0), buf });
            }
            ops.extend(buf.chunks(chunk).enumerate().map(|(j, piece)| SendOp { peer, tag: t(j), buf: piece }));
        }
        let mut ins = Vec::with_capacity(recvs.len());
        for (peer, buf) in recvs.iter_mut() {
            let peer = *peer;
            if buf.is_empty() {
                ins.push(RecvOp { peer, tag: t(0), buf: &mut [] });
            }
            ins.extend(buf.chunks_mut(chunk).enumerate().map(|(j, piece)| RecvOp { peer, tag: t(j), buf: piece }));
        }
        self.pinned(&regions, |c| c.t.exchange(&ops, &mut ins, &mut || {}))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coll::CollConfig;
    use crate::mem;
    use std::time::{Duration, Instant};

    /// Rank `s` sends rank `d` `len(s, d)` bytes (none where 0), each byte `s·16 + d + i`.
    fn payload(s: usize, d: usize, len: usize) -> Vec<u8> {
        (0..len).map(|i| (s * 16 + d + i) as u8).collect()
    }

    /// Runs one exchange on `n` ranks of the in-process transport, rank `s` sending
    /// `sends(s, d)` bytes to `d` and receiving `recvs(d, s)` from `s` (`None`: no message);
    /// each rank's received buffers by source, or its error.
    #[allow(clippy::type_complexity)]
    fn run(
        n: usize,
        cfg: CollConfig,
        timeout: Duration,
        sends: fn(usize, usize) -> Option<usize>,
        recvs: fn(usize, usize) -> Option<usize>,
    ) -> Vec<Result<Vec<(usize, Vec<u8>)>, FabricError>> {
        let hs: Vec<_> = mem::group(n, timeout)
            .into_iter()
            .map(|t| {
                std::thread::spawn(move || -> Result<Vec<(usize, Vec<u8>)>, FabricError> {
                    let mut c = Communicator::new(t, cfg)?;
                    let me = c.rank();
                    let out: Vec<(usize, Vec<u8>)> = (0..n)
                        .filter(|&d| d != me)
                        .filter_map(|d| sends(me, d).map(|l| (d, payload(me, d, l))))
                        .collect();
                    let mut got: Vec<(usize, Vec<u8>)> =
                        (0..n).filter(|&s| s != me).filter_map(|s| recvs(me, s).map(|l| (s, vec![0u8; l]))).collect();
                    let o: Vec<(usize, &[u8])> = out.iter().map(|(d, b)| (*d, &b[..])).collect();
                    let mut g: Vec<(usize, &mut [u8])> = got.iter_mut().map(|(s, b)| (*s, &mut b[..])).collect();
                    c.exchange(&o, &mut g)?;
                    Ok(got)
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap_or_else(|_| Err(FabricError::Invalid("panic".into())))).collect()
    }

    #[test]
    fn every_pair_gets_its_bytes_in_pieces_and_whole() {
        // Ranks send each other different lengths (some none, some empty, some many pieces).
        fn len(s: usize, d: usize) -> Option<usize> {
            match (s + 2 * d) % 4 {
                0 => None,
                1 => Some(0),
                k => Some(k * 37 + s),
            }
        }
        for cfg in [CollConfig { chunk_bytes: 8, ..CollConfig::default() }, CollConfig::default()] {
            for n in [2usize, 3, 5] {
                let got = run(n, cfg, Duration::from_secs(10), len, |d, s| len(s, d));
                for (d, r) in got.into_iter().enumerate() {
                    let want: Vec<(usize, Vec<u8>)> =
                        (0..n).filter(|&s| s != d).filter_map(|s| len(s, d).map(|l| (s, payload(s, d, l)))).collect();
                    assert_eq!(r.map_err(|e| e.to_string()), Ok(want), "n={n} rank {d}");
                }
            }
        }
    }

    #[test]
    fn a_length_the_peers_disagree_on_is_a_size_error() {
        // Rank 0 sends 10 bytes to rank 1, which expects 12 (one piece each).
        let got = run(
            2,
            CollConfig::default(),
            Duration::from_secs(5),
            |s, _| (s == 0).then_some(10),
            |d, _| (d == 1).then_some(12),
        );
        assert!(matches!(&got[1], Err(FabricError::Size { rank: 1, peer: 0, expected: 12, got: 10 })), "{:?}", got[1]);
        assert_eq!(got[1].as_ref().err().map(|e| e.status_code()), Some(crate::NRT_NETWORK_PROXY_FAILURE));
        // In pieces of 4: the third piece differs (2 bytes for 4).
        let cfg = CollConfig { chunk_bytes: 4, ..CollConfig::default() };
        let got = run(2, cfg, Duration::from_secs(5), |s, _| (s == 0).then_some(10), |d, _| (d == 1).then_some(12));
        assert!(matches!(&got[1], Err(FabricError::Size { expected: 4, got: 2, .. })), "{:?}", got[1]);
    }

    #[test]
    fn a_dead_peer_fails_within_the_timeout() {
        let mut ts = mem::group(3, Duration::from_millis(300)).into_iter();
        let (Some(a), Some(b), Some(dead)) = (ts.next(), ts.next(), ts.next()) else { panic!("group of 3") };
        drop(dead);
        let h = std::thread::spawn(move || -> Result<Vec<u8>, FabricError> {
            let mut c = Communicator::new(b, CollConfig::default())?;
            let mut buf = vec![0u8; 3];
            c.exchange(&[(0, &[9, 9])], &mut [(0, &mut buf[..])])?;
            Ok(buf)
        });
        let Ok(mut c) = Communicator::new(a, CollConfig::default()) else { panic!("communicator") };
        let t0 = Instant::now();
        let (mut from1, mut from2) = ([0u8; 2], [0u8; 4]);
        let e = c.exchange(&[(1, &[1, 2, 3]), (2, &[4])], &mut [(1, &mut from1[..]), (2, &mut from2[..])]).err();
        assert!(matches!(e, Some(FabricError::Timeout { rank: 0, ref peers, .. }) if peers == &[2]), "{e:?}");
        assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
        // The live peer's message arrived before the dead one was given up on.
        assert_eq!(from1, [9, 9]);
        assert_eq!(h.join().map_err(|_| ()).and_then(|r| r.map_err(|_| ())), Ok(vec![1, 2, 3]));
    }

    #[test]
    fn bad_arguments_are_refused_before_anything_moves() {
        let mut ts = mem::group(2, Duration::from_millis(100)).into_iter();
        let Some(t) = ts.next() else { panic!("group of 2") };
        let Ok(mut c) = Communicator::new(t, CollConfig::default()) else { panic!("communicator") };
        let mut b = [0u8; 2];
        for (sends, recv_peer) in [
            (vec![(0usize, &[1u8][..])], None),       // to itself
            (vec![(2, &[1u8][..])], None),            // no rank 2
            (vec![(1, &[1u8][..]), (1, &[2])], None), // two sends to one peer
            (vec![], Some(5)),                        // a receive from no rank
        ] {
            let mut r: Vec<(usize, &mut [u8])> = recv_peer.map(|p| (p, &mut b[..])).into_iter().collect();
            let e = c.exchange(&sends, &mut r).err();
            assert!(matches!(e, Some(FabricError::Invalid(_))), "{sends:?}: {e:?}");
        }
    }
}
