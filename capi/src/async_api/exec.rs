//! The tensor executor: what this library's XUs run (reads, writes, copies, one-rank
//! collectives); a request's status is its copy's.

use std::sync::Arc;

use neff::NrtStatus;
use runtime::completion::Step;
use runtime::xu::Executor;
use runtime::{RtError, Tensor};

/// A tensor request.
pub(super) enum Op {
    Write {
        t: Arc<Tensor>,
        buf: usize,
        off: u64,
        size: u64,
    },
    Read {
        t: Arc<Tensor>,
        buf: usize,
        off: u64,
        size: u64,
    },
    Copy {
        src: Arc<Tensor>,
        so: u64,
        dst: Arc<Tensor>,
        d_o: u64,
        size: u64,
    },
    /// A one-rank collective: every input copied to its output.
    Cc(Vec<(Arc<Tensor>, Arc<Tensor>)>),
}

/// Runs [`Op`]s; a request's status is its copy's.
pub(super) struct TensorExec;

impl Executor for TensorExec {
    type Request = Op;
    type Token = (Op, Option<NrtStatus>);

    fn submit(&mut self, req: Op, _seq_id: u64) -> Result<Self::Token, NrtStatus> {
        Ok((req, None))
    }

    fn step(&mut self, tok: &mut Self::Token) -> Step {
        let r: Result<(), RtError> = match &tok.0 {
            Op::Write { t, buf, off, size } => {
                // SAFETY: nrt_async.h: the caller keeps `size` readable bytes at `buf` until
                // the request completes; the range was checked when queued.
                let data = unsafe { std::slice::from_raw_parts(*buf as *const u8, *size as usize) };
                t.write(*off, data)
            }
            Op::Read { t, buf, off, size } => {
                // SAFETY: as above, `size` writable bytes, not accessed by the caller meanwhile.
                let out = unsafe { std::slice::from_raw_parts_mut(*buf as *mut u8, *size as usize) };
                t.read(*off, out)
            }
            Op::Copy { src, so, dst, d_o, size } => runtime::tensor_ops::copy(src, *so, dst, *d_o, *size),
            Op::Cc(pairs) => pairs.iter().try_for_each(|(i, o)| runtime::tensor_ops::copy(i, 0, o, 0, i.size)),
        };
        tok.1 = Some(r.map_or_else(|e| e.status, |_| NrtStatus::Success));
        Step::Done
    }

    fn complete(&mut self, tok: Self::Token) -> NrtStatus {
        tok.1.unwrap_or(NrtStatus::Failure)
    }

    fn abandon(&mut self, _tok: Self::Token) {}
}
