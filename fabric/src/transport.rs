//! The transport seam: tagged point-to-point messages between the ranks of one communicator.

use crate::FabricError;

/// A send of `buf` to `peer`, matched at the peer by (this rank, `tag`).
pub struct SendOp<'a> {
    pub peer: usize,
    pub tag: u64,
    pub buf: &'a [u8],
}

/// A receive into `buf` of the message `peer` sent with `tag`; the message must be exactly
/// `buf.len()` bytes.
pub struct RecvOp<'a> {
    pub peer: usize,
    pub tag: u64,
    pub buf: &'a mut [u8],
}

/// Largest tag a caller may use (the libfabric transport puts the source rank in the low 16
/// bits of the wire tag).
pub const MAX_TAG: u64 = (1 << 48) - 1;

/// Tagged messaging between ranks. Messages between one pair of ranks with the same tag must
/// not be outstanding twice at once.
pub trait Transport {
    /// This rank.
    fn rank(&self) -> usize;
    /// Number of ranks.
    fn size(&self) -> usize;
    /// Posts every receive and send, runs `overlap` while they are in flight (the pipelined
    /// algorithms reduce the previous chunk there), then waits for all of them. A peer that
    /// makes no progress within the transport's timeout fails the call; after any failure the
    /// transport is broken and every later call fails.
    fn exchange(
        &mut self,
        sends: &[SendOp<'_>],
        recvs: &mut [RecvOp<'_>],
        overlap: &mut dyn FnMut(),
    ) -> Result<(), FabricError>;
    /// Makes `region` usable by the NIC for the following exchanges (fi_mr_reg where the
    /// provider requires registered local buffers); a no-op otherwise. Balanced by `unpin`.
    fn pin(&mut self, region: &[u8]) -> Result<(), FabricError>;
    /// Ends a `pin` of the same region.
    fn unpin(&mut self, region: &[u8]);
    /// Largest message the transport carries in one piece.
    fn max_message(&self) -> usize {
        usize::MAX
    }
}

/// The ranks `ranks` of a transport as a transport of their own: rank `i` of the subgroup is
/// rank `ranks[i]` of `inner` (a replica group spanning some of the job's processes, in group
/// order). Tags are passed through unchanged: collectives of different subgroups that may be in
/// flight together must use different tag sequences ([`crate::Communicator::set_seq`]).
pub struct Subgroup<'a, T: Transport> {
    inner: &'a mut T,
    ranks: Vec<usize>,
    me: usize,
}

impl<'a, T: Transport> Subgroup<'a, T> {
    /// The subgroup `ranks` (distinct ranks of `inner`, which must include `inner`'s own).
    pub fn new(inner: &'a mut T, ranks: Vec<usize>) -> Result<Self, FabricError> {
        let n = inner.size();
        let mut seen = vec![false; n];
        for &r in &ranks {
            if r >= n || std::mem::replace(&mut seen[r], true) {
                return Err(FabricError::Invalid(format!("subgroup {ranks:?} of {n} ranks")));
            }
        }
        let me = ranks
            .iter()
            .position(|&r| r == inner.rank())
            .ok_or_else(|| FabricError::Invalid(format!("rank {} is not in subgroup {ranks:?}", inner.rank())))?;
        Ok(Self { inner, ranks, me })
    }

    fn map(&self, peer: usize) -> Result<usize, FabricError> {
        self.ranks
            .get(peer)
            .copied()
            .ok_or_else(|| FabricError::Invalid(format!("peer {peer} of a subgroup of {}", self.ranks.len())))
    }
}

impl<T: Transport> Transport for Subgroup<'_, T> {
    fn rank(&self) -> usize {
        self.me
    }

    fn size(&self) -> usize {
        self.ranks.len()
    }

    fn exchange(
        &mut self,
        sends: &[SendOp<'_>],
        recvs: &mut [RecvOp<'_>],
        overlap: &mut dyn FnMut(),
    ) -> Result<(), FabricError> {
        let mut s = Vec::with_capacity(sends.len());
        for x in sends {
            s.push(SendOp { peer: self.map(x.peer)?, tag: x.tag, buf: x.buf });
        }
        let mut peers = Vec::with_capacity(recvs.len());
        for x in recvs.iter() {
            peers.push(self.map(x.peer)?);
        }
        let mut r: Vec<RecvOp<'_>> =
            recvs.iter_mut().zip(peers).map(|(x, peer)| RecvOp { peer, tag: x.tag, buf: &mut *x.buf }).collect();
        self.inner.exchange(&s, &mut r, overlap)
    }

    fn pin(&mut self, region: &[u8]) -> Result<(), FabricError> {
        self.inner.pin(region)
    }

    fn unpin(&mut self, region: &[u8]) {
        self.inner.unpin(region)
    }

    fn max_message(&self) -> usize {
        self.inner.max_message()
    }
}
