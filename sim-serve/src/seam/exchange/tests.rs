//! The exchange across processes on the in-process transport (`fabric::mem`): one thread per
//! process, every kind's placements checked against what the collective means, and the
//! failures — a peer whose plan disagrees, a hostile plan, a dead peer.

use std::time::{Duration, Instant};

use fabric::coll::CollConfig;
use fabric::mem::{self, MemTransport};
use fabric::{Communicator, DType, ReduceOp};
use sim::{CollKind, ExchangePart, InterHostError, InterHostRequest, Piece, Receive};

use super::super::{collective, tag_seq, Span};

const COMM: u32 = 0x4500;
const SEQ: u32 = 3;

fn request(size: usize, exchange: Vec<ExchangePart>) -> InterHostRequest {
    InterHostRequest {
        comm: COMM,
        seq: SEQ,
        size,
        kind: CollKind::Exchange,
        elem: DType::U8,
        op: ReduceOp::Add,
        parts: Vec::new(),
        exchange,
    }
}

/// Input of group rank `g`: `len` bytes, distinct per rank.
fn input(g: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| (g * 41 + i * 7 + 1) as u8).collect()
}

/// Runs every process of placement `procs` (group rank `g` on process `procs[g]`) in a thread
/// with the parts `plan(g)` of its ranks; each process's outputs (group-rank order) or error.
fn run(
    procs: &[usize],
    timeout: Duration,
    plan: &(dyn Fn(usize) -> ExchangePart + Sync),
) -> Vec<Result<Vec<Vec<u8>>, InterHostError>> {
    let np = procs.iter().max().map_or(0, |m| m + 1);
    std::thread::scope(|sc| {
        let hs: Vec<_> = mem::group(np, timeout)
            .into_iter()
            .enumerate()
            .map(|(me, mut t)| {
                sc.spawn(move || {
                    let span = Span::new(procs.to_vec(), me);
                    let parts = span.local.iter().map(|&g| plan(g)).collect();
                    collective(&mut t, &span, request(procs.len(), parts))
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap_or_else(|_| Err(InterHostError::Collective("panic".into())))).collect()
    })
}

/// The outputs of every group rank from a run, by group rank.
fn by_rank(procs: &[usize], got: Vec<Result<Vec<Vec<u8>>, InterHostError>>) -> Vec<Vec<u8>> {
    let mut outs = vec![Vec::new(); procs.len()];
    for (me, r) in got.into_iter().enumerate() {
        let r = r.unwrap_or_else(|e| panic!("process {me}: {e}"));
        let span = Span::new(procs.to_vec(), me);
        for (g, o) in span.local.iter().zip(r) {
            outs[*g] = o;
        }
    }
    outs
}

const PLACEMENTS: [&[usize]; 4] = [&[0, 1], &[0, 0, 1, 1], &[1, 0, 1, 0, 0], &[0, 1, 2, 1]];

#[test]
fn permute_and_send_receive_deliver_each_input_to_its_peer() {
    for procs in PLACEMENTS {
        let n = procs.len();
        // Rank g sends to g+1 (a ring), except the last rank, which sends nowhere: rank 0
        // receives zeros.
        let peer = |g: usize| (g + 1 < n).then_some(g + 1);
        let plan = |g: usize| ExchangePart {
            rank: g,
            input: input(g, 24),
            sends: peer(g).map(|p| Piece { peer: p, at: 0, len: 24 }).into_iter().collect(),
            recv: Receive::FromItsSender,
            out_len: 24,
        };
        let outs = by_rank(procs, run(procs, Duration::from_secs(10), &plan));
        for (d, o) in outs.iter().enumerate() {
            let want = if d == 0 { vec![0u8; 24] } else { input(d - 1, 24) };
            assert_eq!(o, &want, "{procs:?}: group rank {d}");
        }
    }
}

#[test]
fn all_to_all_transposes_the_chunks_across_processes() {
    for procs in PLACEMENTS {
        let n = procs.len();
        let chunk = 5;
        let pieces: Vec<Piece> = (0..n).map(|k| Piece { peer: k, at: k * chunk, len: chunk }).collect();
        let plan = |g: usize| ExchangePart {
            rank: g,
            input: input(g, n * chunk),
            sends: pieces.clone(),
            recv: Receive::From(pieces.clone()),
            out_len: n * chunk,
        };
        let outs = by_rank(procs, run(procs, Duration::from_secs(10), &plan));
        for (d, o) in outs.iter().enumerate() {
            let want: Vec<u8> = (0..n).flat_map(|s| input(s, n * chunk)[d * chunk..(d + 1) * chunk].to_vec()).collect();
            assert_eq!(o, &want, "{procs:?}: group rank {d}");
        }
    }
}

/// All-to-allv's pieces in a group of `n`: rank `s` sends rank `r` `1 + (s + r) mod n`
/// bytes, displacements in rank order; each output has 3 spare bytes at its end.
fn v_count(s: usize, r: usize, n: usize) -> usize {
    1 + (s + r) % n
}

fn v_plan(g: usize, n: usize) -> ExchangePart {
    let mut sends = Vec::new();
    let mut recvs = Vec::new();
    let (mut si, mut ri) = (0, 0);
    for k in 0..n {
        let (sl, rl) = (v_count(g, k, n), v_count(k, g, n));
        sends.push(Piece { peer: k, at: si, len: sl });
        recvs.push(Piece { peer: k, at: ri, len: rl });
        si += sl;
        ri += rl;
    }
    ExchangePart { rank: g, input: input(g, si), sends, recv: Receive::From(recvs), out_len: ri + 3 }
}

#[test]
fn all_to_allv_places_every_pairs_count() {
    for procs in PLACEMENTS {
        let n = procs.len();
        let outs = by_rank(procs, run(procs, Duration::from_secs(10), &|g| v_plan(g, n)));
        for (d, o) in outs.iter().enumerate() {
            let mut want = Vec::new();
            for s in 0..n {
                let from: usize = (0..d).map(|k| v_count(s, k, n)).sum();
                want.extend_from_slice(&input(s, n * (n + 1))[from..from + v_count(s, d, n)]);
            }
            want.extend([0, 0, 0]);
            assert_eq!(o, &want, "{procs:?}: group rank {d}");
        }
    }
}

fn is_network(r: &Result<Vec<Vec<u8>>, InterHostError>, what: &str) -> bool {
    matches!(r, Err(InterHostError::Network(m)) if m.contains(what))
}

#[test]
fn plans_that_disagree_fail_every_process_with_the_network_status() {
    let procs: &[usize] = &[0, 0, 1, 1];
    // Group rank 3 (process 1) sends rank 1 one byte more than rank 1 expects.
    let plan = |g: usize| {
        let mut x = v_plan(g, 4);
        if g == 3 {
            x.sends[1].len += 1;
        }
        x
    };
    let got = run(procs, Duration::from_secs(10), &plan);
    for (me, r) in got.iter().enumerate() {
        assert!(is_network(r, "group rank 3 sends 2 bytes to group rank 1, which expects 1"), "process {me}: {r:?}");
    }
    // Two senders for one permute receiver.
    let plan = |g: usize| ExchangePart {
        rank: g,
        input: input(g, 4),
        sends: (g != 0).then_some(Piece { peer: 0, at: 0, len: 4 }).into_iter().collect(),
        recv: Receive::FromItsSender,
        out_len: 4,
    };
    for (me, r) in run(procs, Duration::from_secs(10), &plan).iter().enumerate() {
        assert!(is_network(r, "both send to group rank 0"), "process {me}: {r:?}");
    }
    // A sender longer than its permute receiver's output.
    let plan = |g: usize| ExchangePart {
        rank: g,
        input: input(g, 4 + g),
        sends: vec![Piece { peer: (g + 1) % 4, at: 0, len: 4 + g }],
        recv: Receive::FromItsSender,
        out_len: 4 + g,
    };
    for (me, r) in run(procs, Duration::from_secs(10), &plan).iter().enumerate() {
        assert!(is_network(r, "whose output is"), "process {me}: {r:?}");
    }
}

/// Process 1 of a two-process group (group ranks 0 on process 0, 1 on process 1) that sends
/// `plan` as its plan round, then nothing.
fn hostile(t: MemTransport, plan: Vec<u8>) -> Result<(), fabric::FabricError> {
    let mut c = Communicator::new(t, CollConfig::default())?;
    c.set_seq(tag_seq(COMM, SEQ));
    c.exchange(&[(0, &plan)], &mut [(0, &mut vec![0u8; 6 * 8][..])])
}

/// Plan words of a rank in a group of 2.
fn words(w: [u64; 6]) -> Vec<u8> {
    w.iter().flat_map(|x| x.to_le_bytes()).collect()
}

#[test]
fn a_hostile_plan_is_refused_before_any_data_is_taken() {
    let honest = |g: usize| ExchangePart {
        rank: g,
        input: input(g, 8),
        sends: vec![Piece { peer: 1, at: 0, len: 8 }],
        recv: Receive::FromItsSender,
        out_len: 8,
    };
    for (plan, why) in [
        // An unknown receive kind.
        (words([9, 8, 8, 0, 0, 0]), "receive kind 9"),
        // A claim of 2^62 bytes for rank 0, whose output is 8.
        (words([1, 8, 1 << 62, 0, 0, 0]), "sends 4611686018427387904 bytes to group rank 0, whose output is 8"),
        // A receiver of its sender that names sources.
        (words([1, 8, 0, 0, 0, 8]), "names sources"),
        // Rank 1 expects 7 bytes from rank 0, which sends 8.
        (words([0, 7, 0, 0, 7, 0]), "group rank 0 sends 8 bytes to group rank 1, which expects 7"),
    ] {
        let mut ts = mem::group(2, Duration::from_secs(5)).into_iter();
        let (Some(mut t0), Some(t1)) = (ts.next(), ts.next()) else { panic!("group of 2") };
        let h = std::thread::spawn(move || hostile(t1, plan));
        let span = Span::new(vec![0, 1], 0);
        let r = collective(&mut t0, &span, request(2, vec![honest(0)]));
        assert!(is_network(&r, why) && is_network(&r, "process 1"), "{why}: {r:?}");
        assert!(h.join().is_ok_and(|r| r.is_ok()));
    }
    // A plan of the wrong length is the transport's size error (network status).
    let mut ts = mem::group(2, Duration::from_secs(5)).into_iter();
    let (Some(mut t0), Some(t1)) = (ts.next(), ts.next()) else { panic!("group of 2") };
    let h = std::thread::spawn(move || hostile(t1, vec![0u8; 40]));
    let r = collective(&mut t0, &Span::new(vec![0, 1], 0), request(2, vec![honest(0)]));
    assert!(is_network(&r, "40 bytes from peer 1, 48 expected"), "{r:?}");
    let _ = h.join();
}

#[test]
fn a_dead_peer_fails_the_exchange_within_the_timeout() {
    for round in ["plan", "data"] {
        let mut ts = mem::group(2, Duration::from_millis(300)).into_iter();
        let (Some(mut t0), Some(t1)) = (ts.next(), ts.next()) else { panic!("group of 2") };
        // The peer dies before the plan round, or after it (a plan, then nothing).
        let h = std::thread::spawn(move || match round {
            "plan" => drop(t1),
            _ => {
                let _ = hostile(t1, words([1, 8, 8, 0, 0, 0]));
            }
        });
        let part = ExchangePart {
            rank: 0,
            input: input(0, 8),
            sends: vec![Piece { peer: 1, at: 0, len: 8 }],
            recv: Receive::FromItsSender,
            out_len: 8,
        };
        let t = Instant::now();
        let r = collective(&mut t0, &Span::new(vec![0, 1], 0), request(2, vec![part]));
        assert!(matches!(&r, Err(InterHostError::Network(m)) if m.contains("no progress")), "{round}: {r:?}");
        assert!(t.elapsed() < Duration::from_secs(5), "{round}: {:?}", t.elapsed());
        let _ = h.join();
    }
}

#[test]
fn local_plans_outside_their_buffers_are_malformed_collectives() {
    let procs: &[usize] = &[0, 1];
    let plan = |g: usize| ExchangePart {
        rank: g,
        input: input(g, 4),
        sends: vec![Piece { peer: 1 - g, at: 2, len: 4 }],
        recv: Receive::FromItsSender,
        out_len: 4,
    };
    for (me, r) in run(procs, Duration::from_millis(500), &plan).iter().enumerate() {
        assert!(
            matches!(r, Err(InterHostError::Collective(m)) if m.contains("4 bytes at 2 of 4")),
            "process {me}: {r:?}"
        );
    }
}
