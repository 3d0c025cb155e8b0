//! An in-process [`Transport`]: one thread per rank, messages through channels. The unit
//! tests of the algorithms here and of the layers above (the device host's seam) run on it; it
//! checks what the libfabric transport checks (peers in range, a message exactly the
//! receive's length) and never waits past its timeout.

use std::collections::HashMap;
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use crate::transport::{RecvOp, SendOp, Transport};
use crate::FabricError;

type Message = (usize, u64, Vec<u8>);

/// One rank of a [`group`].
pub struct MemTransport {
    rank: usize,
    size: usize,
    tx: Vec<Sender<Message>>,
    rx: Receiver<Message>,
    stash: HashMap<(usize, u64), Vec<u8>>,
    timeout: Duration,
}

/// `n` connected transports (rank `i` at index `i`); a receive that sees no matching message
/// within `timeout` fails with [`FabricError::Timeout`]. Dropping a rank's transport is its
/// death: its peers' receives from it time out.
pub fn group(n: usize, timeout: Duration) -> Vec<MemTransport> {
    let (txs, rxs): (Vec<_>, Vec<_>) = (0..n).map(|_| channel()).unzip();
    rxs.into_iter()
        .enumerate()
        .map(|(rank, rx)| MemTransport { rank, size: n, tx: txs.clone(), rx, stash: HashMap::new(), timeout })
        .collect()
}

impl MemTransport {
    fn check_peer(&self, peer: usize) -> Result<(), FabricError> {
        if peer >= self.size || peer == self.rank {
            return Err(FabricError::Invalid(format!("peer {peer} of rank {} in {}", self.rank, self.size)));
        }
        Ok(())
    }
}

impl Transport for MemTransport {
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
        for p in sends.iter().map(|s| s.peer).chain(recvs.iter().map(|r| r.peer)) {
            self.check_peer(p)?;
        }
        for s in sends {
            // A peer whose transport is gone drops the message, as a network would; its
            // receives are what fail.
            let _ = self.tx[s.peer].send((self.rank, s.tag, s.buf.to_vec()));
        }
        overlap();
        for r in recvs.iter_mut() {
            let deadline = Instant::now() + self.timeout;
            let msg = loop {
                if let Some(m) = self.stash.remove(&(r.peer, r.tag)) {
                    break m;
                }
                let left = deadline.saturating_duration_since(Instant::now());
                match self.rx.recv_timeout(left) {
                    Ok((p, t, m)) => {
                        self.stash.insert((p, t), m);
                    }
                    Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => {
                        return Err(FabricError::Timeout {
                            rank: self.rank,
                            peers: vec![r.peer],
                            timeout: self.timeout,
                        })
                    }
                }
            };
            if msg.len() != r.buf.len() {
                return Err(FabricError::Size { rank: self.rank, peer: r.peer, expected: r.buf.len(), got: msg.len() });
            }
            r.buf.copy_from_slice(&msg);
        }
        Ok(())
    }

    fn pin(&mut self, _region: &[u8]) -> Result<(), FabricError> {
        Ok(())
    }

    fn unpin(&mut self, _region: &[u8]) {}
}
