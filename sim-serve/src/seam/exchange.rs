//! The exchanges across processes (send/receive, permute, all-to-all, all-to-allv): the hub
//! hands the seam each local group rank's point-to-point plan ([`ExchangePart`]); the group's
//! processes run two rounds of [`Communicator::exchange`] among themselves:
//!
//! 1. **Plan.** Every process sends every other process of the group the plan of each of its
//!    local ranks: for group rank `g`, its receive kind, output length, the bytes it sends to
//!    each group rank and the bytes it expects from each (`(2 + 2n)` little-endian u64s per
//!    local rank, in group-rank order; the receiver knows from the registered span how many
//!    ranks each process hosts, so every plan message has one exact length). With every
//!    process's plan in hand, each process checks the whole table the same way — every
//!    (sender, receiver) pair must agree on its byte count, a send/receive or permute receiver
//!    has at most one sender whose length is its output's — so the processes reach the same
//!    verdict. A process whose plan is malformed or disagrees fails the exchange on every
//!    process that sees it ([`ExchangeError::Plan`], the network-proxy status, as a dead peer).
//! 2. **Data.** Every process sends every other process one message: the bytes of each of its
//!    local senders for each of that process's receivers, packed in (sender, receiver)
//!    group-rank order. Its length follows from the agreed table, which the receiving process
//!    sizes its buffer by, so a byte that does not belong to the plan is a size error of the
//!    transport. Pairs of local ranks are copied in place, never sent.
//!
//! Every size a peer states is checked against what this process expects before anything is
//! allocated from it: a receive's length comes from the local receiver's plan (its ranges were
//! checked against its output) or, for a send/receive or permute receiver, from its output
//! length. A peer that stops answering fails either round within the transport's timeout.

use fabric::{Communicator, FabricError, Transport};
use sim::{ExchangePart, InterHostError, Piece, Receive};

use super::Span;

/// Plan word 0 of a rank: it names its sources ([`Receive::From`]).
const FROM: u64 = 0;
/// Plan word 0 of a rank: it receives from whichever rank sends to it ([`Receive::FromItsSender`]).
const FROM_ITS_SENDER: u64 = 1;

/// Why an exchange across processes failed.
#[derive(Debug, thiserror::Error)]
pub enum ExchangeError {
    /// The local plans do not fit the registered group or their own buffers (a malformed
    /// collective: the collectives status).
    #[error("exchange: {0}")]
    Local(String),
    /// Another process's plan is malformed or disagrees with the others' (the network-proxy
    /// status: the peer is not running the same collective).
    #[error("exchange: the plan of process {proc} of the group: {why}")]
    Plan { proc: usize, why: String },
    /// The transport failed (dead peer, timeout, a message of the wrong length).
    #[error("exchange: {0}")]
    Fabric(#[from] FabricError),
}

impl From<ExchangeError> for InterHostError {
    fn from(e: ExchangeError) -> Self {
        match e {
            ExchangeError::Local(_) => InterHostError::Collective(e.to_string()),
            ExchangeError::Plan { .. } => InterHostError::Network(e.to_string()),
            ExchangeError::Fabric(f) => super::seam_err(f),
        }
    }
}

/// One group rank's plan, as every process sees it after the plan round.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Row {
    kind: u64,
    out_len: usize,
    /// Bytes sent to each group rank.
    sends: Vec<usize>,
    /// Bytes expected from each group rank (all zero for [`FROM_ITS_SENDER`]).
    recvs: Vec<usize>,
}

/// Plan words of one rank in a group of `n`.
fn words(n: usize) -> usize {
    2 + 2 * n
}

/// The plan of local part `x` in a group of `n`, checked against its own buffers.
fn local_row(x: &ExchangePart, n: usize) -> Result<Row, ExchangeError> {
    let bad = |why: String| ExchangeError::Local(format!("group rank {}: {why}", x.rank));
    let fill = |pieces: &[Piece], limit: usize, what: &str| -> Result<Vec<usize>, ExchangeError> {
        let mut row = vec![0usize; n];
        let mut named = vec![false; n];
        for p in pieces {
            if p.peer >= n || std::mem::replace(&mut named[p.peer], true) {
                return Err(bad(format!("{what} group rank {} (twice, or outside {n} ranks)", p.peer)));
            }
            if p.at.checked_add(p.len).is_none_or(|end| end > limit) {
                return Err(bad(format!("{what} {}: {} bytes at {} of {limit}", p.peer, p.len, p.at)));
            }
            row[p.peer] = p.len;
        }
        Ok(row)
    };
    let sends = fill(&x.sends, x.input.len(), "send to")?;
    let (kind, recvs) = match &x.recv {
        Receive::From(pieces) => (FROM, fill(pieces, x.out_len, "receive from")?),
        Receive::FromItsSender => (FROM_ITS_SENDER, vec![0; n]),
    };
    Ok(Row { kind, out_len: x.out_len, sends, recvs })
}

fn encode(row: &Row, out: &mut Vec<u8>) {
    let all = [row.kind, row.out_len as u64].into_iter().chain(row.sends.iter().chain(&row.recvs).map(|&v| v as u64));
    for w in all {
        out.extend_from_slice(&w.to_le_bytes());
    }
}

/// One rank's row from process `proc`'s plan bytes (exactly [`words`] u64s).
fn decode(b: &[u8], n: usize, proc: usize) -> Result<Row, ExchangeError> {
    let bad = |why: String| ExchangeError::Plan { proc, why };
    let mut w = b.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0xff; 8])));
    let mut next = |what: &str| -> Result<usize, ExchangeError> {
        let v = w.next().ok_or_else(|| bad(format!("{what} missing")))?;
        usize::try_from(v).map_err(|_| bad(format!("{what} {v} is beyond this machine")))
    };
    let kind = next("receive kind")? as u64;
    if kind != FROM && kind != FROM_ITS_SENDER {
        return Err(bad(format!("receive kind {kind}")));
    }
    let out_len = next("output length")?;
    let sends = (0..n).map(|_| next("send length")).collect::<Result<Vec<_>, _>>()?;
    let recvs = (0..n).map(|_| next("receive length")).collect::<Result<Vec<_>, _>>()?;
    if kind == FROM_ITS_SENDER && recvs.iter().any(|&r| r != 0) {
        return Err(bad("a receiver of its sender names sources".into()));
    }
    Ok(Row { kind, out_len, sends, recvs })
}

/// Checks the whole table (the same on every process): every pair agrees, a receiver of its
/// sender has at most one, of its output's length. `at[g]` is group rank `g`'s process; an
/// error names the process of the pair that is not `me` (the one to blame from here).
fn check(rows: &[Row], at: &[usize], me: usize) -> Result<(), ExchangeError> {
    let blame = |s: usize, d: usize| if at[s] != me { at[s] } else { at[d] };
    for (d, rd) in rows.iter().enumerate() {
        let mut sender = None;
        for (s, rs) in rows.iter().enumerate() {
            let sent = rs.sends[d];
            let bad = |why: String| ExchangeError::Plan { proc: blame(s, d), why };
            if rd.kind == FROM {
                if sent != rd.recvs[s] {
                    return Err(bad(format!(
                        "group rank {s} sends {sent} bytes to group rank {d}, which expects {}",
                        rd.recvs[s]
                    )));
                }
            } else if sent != 0 {
                if let Some(first) = sender.replace(s) {
                    return Err(bad(format!("group ranks {first} and {s} both send to group rank {d}")));
                }
                if sent != rd.out_len {
                    return Err(bad(format!(
                        "group rank {s} sends {sent} bytes to group rank {d}, whose output is {}",
                        rd.out_len
                    )));
                }
            }
        }
    }
    Ok(())
}

/// What local part `x` sends to group rank `d`: `None` nothing, `Some(None)` a range outside
/// its input (refused by [`local_row`] before).
fn sent(x: &ExchangePart, d: usize) -> Option<Option<&[u8]>> {
    x.sends.iter().find(|p| p.peer == d).map(|p| p.at.checked_add(p.len).and_then(|end| x.input.get(p.at..end)))
}

/// Runs the exchange of `parts` (the local ranks of `span`, in group-rank order) on `c`, whose
/// ranks are the group's processes (`at[g]`: group rank `g`'s). The outputs in the order of
/// `parts`.
pub(super) fn run<T: Transport>(
    c: &mut Communicator<T>,
    span: &Span,
    at: &[usize],
    parts: Vec<ExchangePart>,
) -> Result<Vec<Vec<u8>>, ExchangeError> {
    let n = span.procs.len();
    let (me, np) = (c.rank(), c.size());
    if at.len() != n || at.iter().any(|&p| p >= np) || span.local.iter().any(|&g| at[g] != me) {
        return Err(ExchangeError::Local(format!("placement {at:?} of {np} processes for span {span:?}")));
    }
    let given: Vec<usize> = parts.iter().map(|x| x.rank).collect();
    if given != span.local {
        return Err(ExchangeError::Local(format!("group ranks {given:?}, registered {:?}", span.local)));
    }
    let mine: Vec<Row> = parts.iter().map(|x| local_row(x, n)).collect::<Result<_, _>>()?;
    // Round 1: the plans.
    let mut plan = Vec::with_capacity(mine.len() * words(n) * 8);
    for r in &mine {
        encode(r, &mut plan);
    }
    let hosted = |q: usize| (0..n).filter(move |&g| at[g] == q);
    let mut theirs: Vec<(usize, Vec<u8>)> =
        (0..np).filter(|&q| q != me).map(|q| (q, vec![0u8; hosted(q).count() * words(n) * 8])).collect();
    {
        let sends: Vec<(usize, &[u8])> = theirs.iter().map(|(q, _)| (*q, &plan[..])).collect();
        let mut recvs: Vec<(usize, &mut [u8])> = theirs.iter_mut().map(|(q, b)| (*q, &mut b[..])).collect();
        c.exchange(&sends, &mut recvs)?;
    }
    let mut rows: Vec<Option<Row>> = vec![None; n];
    for (g, r) in span.local.iter().zip(mine) {
        rows[*g] = Some(r);
    }
    for (q, b) in &theirs {
        for (g, one) in hosted(*q).zip(b.chunks_exact(words(n) * 8)) {
            rows[g] = Some(decode(one, n, *q)?);
        }
    }
    let rows: Vec<Row> = rows
        .into_iter()
        .enumerate()
        .map(|(g, r)| r.ok_or_else(|| ExchangeError::Local(format!("no plan of group rank {g}"))))
        .collect::<Result<_, _>>()?;
    check(&rows, at, me)?;
    // Where sender `s`'s bytes land in local receiver `d`'s output.
    let land = |x: &ExchangePart, s: usize| match &x.recv {
        Receive::From(pieces) => pieces.iter().find(|p| p.peer == s).map_or(0, |p| p.at),
        Receive::FromItsSender => 0,
    };
    let mut outs: Vec<Vec<u8>> = parts.iter().map(|x| vec![0u8; x.out_len]).collect();
    let place = |out: &mut Vec<u8>, at: usize, bytes: &[u8], d: usize| -> Result<(), ExchangeError> {
        let dst = at.checked_add(bytes.len()).and_then(|end| out.get_mut(at..end));
        let dst = dst.ok_or_else(|| ExchangeError::Local(format!("group rank {d}: a receive outside its output")))?;
        dst.copy_from_slice(bytes);
        Ok(())
    };
    // Round 2: the data, one packed message to and from each other process.
    let mut packed: Vec<(usize, Vec<u8>)> = Vec::new();
    for q in (0..np).filter(|&q| q != me) {
        let mut m = Vec::new();
        for x in &parts {
            for d in hosted(q) {
                match sent(x, d) {
                    Some(Some(b)) => m.extend_from_slice(b),
                    Some(None) => {
                        return Err(ExchangeError::Local(format!("group rank {}: a send outside its input", x.rank)))
                    }
                    None => {}
                }
            }
        }
        if !m.is_empty() {
            packed.push((q, m));
        }
    }
    let mut incoming: Vec<(usize, Vec<u8>)> = (0..np)
        .filter(|&q| q != me)
        .map(|q| {
            (q, hosted(q).flat_map(|s| span.local.iter().map(move |&d| (s, d))).map(|(s, d)| rows[s].sends[d]).sum())
        })
        .filter(|(_, len): &(usize, usize)| *len > 0)
        .map(|(q, len)| (q, vec![0u8; len]))
        .collect();
    {
        let sends: Vec<(usize, &[u8])> = packed.iter().map(|(q, b)| (*q, &b[..])).collect();
        let mut recvs: Vec<(usize, &mut [u8])> = incoming.iter_mut().map(|(q, b)| (*q, &mut b[..])).collect();
        c.exchange(&sends, &mut recvs)?;
    }
    for (q, b) in &incoming {
        let mut off = 0;
        for s in hosted(*q) {
            for (i, x) in parts.iter().enumerate() {
                let len = rows[s].sends[x.rank];
                if len == 0 {
                    continue;
                }
                // Sized from the agreed table: the message holds exactly these pieces.
                let bytes = b.get(off..off + len).ok_or_else(|| ExchangeError::Plan {
                    proc: *q,
                    why: "a data message shorter than the plan".into(),
                })?;
                place(&mut outs[i], land(x, s), bytes, x.rank)?;
                off += len;
            }
        }
    }
    // Pairs of local ranks, in place.
    for sx in &parts {
        for (i, x) in parts.iter().enumerate() {
            match sent(sx, x.rank) {
                Some(Some(b)) => place(&mut outs[i], land(x, sx.rank), b, x.rank)?,
                Some(None) => {
                    return Err(ExchangeError::Local(format!("group rank {}: a send outside its input", sx.rank)))
                }
                None => {}
            }
        }
    }
    Ok(outs)
}

#[cfg(test)]
mod tests;
