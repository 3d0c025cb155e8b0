//! The exchanges of a group that spans processes: send/receive, permute, all-to-all and
//! all-to-allv move byte ranges between ranks and reduce nothing, so the hub hands the seam,
//! for each local rank, the point-to-point plan of the collective ([`ExchangePart`]: what it
//! sends to which group rank, what it receives from which, its output's length) with its
//! input; the seam moves the bytes between the processes (and between local ranks) and gives
//! back each local rank's output, which the hub delivers as it delivers a local result.
//!
//! The plans are the same placements as the hub's own within one process:
//!
//! - send/receive and permute: the whole input to the instruction's peer (none for
//!   `NO_PEER`); the receiver takes the whole output from the one rank whose peer it is, which
//!   it does not know ([`Receive::FromItsSender`]: the seam learns it from the other
//!   processes' plans), zeros when none;
//! - all-to-all: chunk `d` of the input (`len / n` bytes) to rank `d`, chunk `s` of the output
//!   from rank `s`;
//! - all-to-allv: the metadata's send counts and displacements (elements) to each rank, its
//!   receive counts and displacements from each rank, into an output of the instruction's
//!   length.
//!
//! Every range is checked against its buffer (checked arithmetic); a peer outside the group
//! or a range outside its buffer is a malformed collective ([`CollError::Mismatch`]), as the
//! hub's local path finds it. Zero-length pieces are left out on both sides.

use isa::device_ops::{ctype, NO_PEER};

use super::{CollError, Part};
use crate::interhost::{ExchangePart, Piece, Receive};

/// The plan of local part `p` — group rank `rank` of `n`, elements of `es` bytes, kind `ct` —
/// taking its input.
pub(super) fn part(ct: u8, n: usize, es: usize, rank: usize, p: &mut Part) -> Result<ExchangePart, CollError> {
    let input = std::mem::take(&mut p.data);
    let len = input.len();
    let (sends, recv, out_len) = match ct {
        ctype::SEND_RECV | ctype::PERMUTE => {
            let sends = match p.peer {
                NO_PEER => Vec::new(),
                peer if usize::from(peer) >= n => return Err(CollError::Mismatch),
                _ if len == 0 => Vec::new(),
                peer => vec![Piece { peer: usize::from(peer), at: 0, len }],
            };
            (sends, Receive::FromItsSender, len)
        }
        ctype::ALL_TO_ALL => {
            // Checked at arrival: a whole number of elements, a multiple of `n` of them.
            let chunk = len / n.max(1);
            let pieces = |k: usize| Piece { peer: k, at: k * chunk, len: chunk };
            let all: Vec<Piece> = if chunk == 0 { Vec::new() } else { (0..n).map(pieces).collect() };
            (all.clone(), Receive::From(all), len)
        }
        ctype::ALL_TO_ALLV => {
            let (sends, recvs) = all_to_allv_plan(&p.meta, n, es, len, p.out_len)?;
            (sends, Receive::From(recvs), p.out_len)
        }
        _ => return Err(CollError::BadType),
    };
    Ok(ExchangePart { rank, input, sends, recv, out_len })
}

/// All-to-allv's plan from one rank's metadata (`4·n` entries: send counts, send
/// displacements, receive counts, receive displacements, in elements of `es` bytes) for an
/// input of `in_len` and an output of `out_len` bytes: its sends and its receives, in bytes,
/// zero-length pieces left out; a range outside its buffer is [`CollError::Mismatch`]. The one
/// reading of the metadata, for the hub's local path as for the seam.
pub(super) fn all_to_allv_plan(
    meta: &[u32],
    n: usize,
    es: usize,
    in_len: usize,
    out_len: usize,
) -> Result<(Vec<Piece>, Vec<Piece>), CollError> {
    if meta.len() != 4 * n {
        return Err(CollError::Mismatch);
    }
    // Row `row`, entry `k` of the metadata, in bytes.
    let at = |row: usize, k: usize| (meta[row * n + k] as usize).checked_mul(es).ok_or(CollError::Mismatch);
    let piece = |counts: usize, displs: usize, k: usize, limit: usize| -> Result<Option<Piece>, CollError> {
        let (len, at) = (at(counts, k)?, at(displs, k)?);
        if at.checked_add(len).is_none_or(|end| end > limit) {
            return Err(CollError::Mismatch);
        }
        Ok((len > 0).then_some(Piece { peer: k, at, len }))
    };
    let mut sends = Vec::new();
    let mut recvs = Vec::new();
    for k in 0..n {
        sends.extend(piece(0, 1, k, in_len)?);
        recvs.extend(piece(2, 3, k, out_len)?);
    }
    Ok((sends, recvs))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Weak;

    fn part_of(data: Vec<u8>, peer: u8, meta: Vec<u32>, out_len: usize) -> Part {
        Part { dev: Weak::new(), nc: 0, engine: 0, dst: 0, peer, meta, out_len, data }
    }

    #[test]
    fn send_receive_and_permute_send_the_whole_input_to_the_peer() {
        for ct in [ctype::SEND_RECV, ctype::PERMUTE] {
            let mut p = part_of(vec![1, 2, 3, 4], 2, Vec::new(), 0);
            let x = part(ct, 3, 1, 0, &mut p);
            let want = ExchangePart {
                rank: 0,
                input: vec![1, 2, 3, 4],
                sends: vec![Piece { peer: 2, at: 0, len: 4 }],
                recv: Receive::FromItsSender,
                out_len: 4,
            };
            assert_eq!(x, Ok(want));
            // No peer: nothing sent, still a receiver.
            let x = part(ct, 3, 1, 1, &mut part_of(vec![5, 6], NO_PEER, Vec::new(), 0));
            assert_eq!(x.map(|x| (x.sends, x.recv, x.out_len)), Ok((Vec::new(), Receive::FromItsSender, 2)));
            // A peer outside the group.
            assert_eq!(part(ct, 3, 1, 0, &mut part_of(vec![1], 3, Vec::new(), 0)), Err(CollError::Mismatch));
        }
    }

    #[test]
    fn all_to_all_sends_and_receives_one_chunk_per_rank() {
        let mut p = part_of((0..12).collect(), NO_PEER, Vec::new(), 0);
        let x = part(ctype::ALL_TO_ALL, 3, 2, 1, &mut p);
        let chunks: Vec<Piece> = (0..3).map(|k| Piece { peer: k, at: 4 * k, len: 4 }).collect();
        assert_eq!(x.map(|x| (x.sends, x.recv, x.out_len)), Ok((chunks.clone(), Receive::From(chunks), 12)));
    }

    #[test]
    fn all_to_allv_follows_the_metadata_in_bytes_and_checks_every_range() {
        // Two ranks of 2-byte elements. Rank 0 sends 1 element to itself (from 0) and 3 to
        // rank 1 (from 1); it receives 1 from itself at 3 and 2 from rank 1 at 0.
        let meta = vec![1, 3, 0, 1, 1, 2, 3, 0];
        let x = part(ctype::ALL_TO_ALLV, 2, 2, 0, &mut part_of(vec![0; 8], NO_PEER, meta.clone(), 10));
        let sends = vec![Piece { peer: 0, at: 0, len: 2 }, Piece { peer: 1, at: 2, len: 6 }];
        let recvs = vec![Piece { peer: 0, at: 6, len: 2 }, Piece { peer: 1, at: 0, len: 4 }];
        assert_eq!(x.map(|x| (x.sends, x.recv, x.out_len)), Ok((sends, Receive::From(recvs), 10)));
        // A send past the input, a receive past the output, an output too short for a
        // receive, a count far past the output; a metadata of the wrong length: malformed.
        for (k, v, out_len) in [(1, 4, 10), (7, 4, 10), (0, 1, 7), (5, u32::MAX, 10)] {
            let mut m = meta.clone();
            m[k] = v;
            let x = part(ctype::ALL_TO_ALLV, 2, 2, 0, &mut part_of(vec![0; 8], NO_PEER, m, out_len));
            assert_eq!(x, Err(CollError::Mismatch), "meta[{k}] = {v}, output {out_len}");
        }
        let x = part(ctype::ALL_TO_ALLV, 2, 2, 0, &mut part_of(vec![0; 8], NO_PEER, vec![0; 7], 10));
        assert_eq!(x, Err(CollError::Mismatch));
        // A reducing kind has no exchange plan.
        let x = part(ctype::ALL_REDUCE, 2, 2, 0, &mut part_of(vec![0; 8], NO_PEER, Vec::new(), 0));
        assert_eq!(x, Err(CollError::BadType));
    }
}
