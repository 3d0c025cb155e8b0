//! FINALIZE: the error-ring sweep, the latched causes and the verdict.

use super::*;

impl ExecTracker {
    /// Sweep NC `nc`'s error ring; `false` if the source failed.
    pub(super) fn sweep_errors<S: NotificationSource>(&mut self, nc: usize, src: &mut S) -> bool {
        let mut buf = std::mem::take(&mut self.error_buf);
        let mut consumed = 0usize;
        let mut ok = true;
        loop {
            buf.clear();
            if let Err(e) = src.poll_errors(&mut buf, self.cfg.error_batch) {
                self.source_failed(nc, &e);
                ok = false;
                break;
            }
            if buf.is_empty() {
                break;
            }
            for rec in buf.iter() {
                self.ncs[nc].errors.consume(rec, self.cfg.arch, &self.cfg.decode);
            }
            consumed += buf.len();
            if consumed >= self.cfg.max_error_records {
                cold::many_errors(nc, consumed);
                break;
            }
        }
        buf.clear();
        self.error_buf = buf;
        ok
    }

    pub(super) fn classify_causes(n: &mut NcState) {
        let c = n.causes;
        if c.is_empty() {
            // Nothing latched (every clean execution): nothing to classify.
            return;
        }
        if c.contains(FatalCauses::HBM_UE) || c.contains(FatalCauses::HBM_UE_REPAIRABLE) {
            tracing::error!("(FATAL-RT-UNDEFINED-STATE) Uncorrectable HBM memory error is detected");
        }
        if n.fatal.get(ExecFatalStatus::Timeout) {
            // exec_request_process_errors, timeout branch: only 1201 is tested (docs/facts/libnrt-runtime-model.md §B.4 (COMPLETE-1)).
            let chosen = if c.contains(FatalCauses::HBM_UE) {
                Some(NrtStatus::ExecHwErrHbmUe)
            } else if c.contains(FatalCauses::DMA_ABORT) {
                Some(NrtStatus::ExecHwErrDmaAbort)
            } else if c.contains(FatalCauses::CC_ERROR) {
                tracing::error!("(FATAL-RT-UNDEFINED-STATE) Suspected hang in collectives");
                Some(NrtStatus::ExecHwErrCollectives)
            } else {
                None
            };
            if let Some(s) = chosen {
                // The classification replaces a plain timeout; anything else merges by priority.
                n.ret = if n.ret == NrtStatus::Timeout { s } else { worse(n.ret, s) };
            }
        } else {
            for (set, s) in [
                (c.contains(FatalCauses::HBM_UE), NrtStatus::ExecHwErrHbmUe),
                (c.contains(FatalCauses::HBM_UE_REPAIRABLE), NrtStatus::ExecHwErrRepairableHbmUe),
                (c.contains(FatalCauses::DMA_ABORT), NrtStatus::ExecHwErrDmaAbort),
                (c.contains(FatalCauses::CC_ERROR), NrtStatus::ExecHwErrCollectives),
            ] {
                if set {
                    n.ret = worse(n.ret, s);
                }
            }
        }
        // 1202 is the error ring's verdict (the ECC record, consumed in the sweep); the NC-UE
        // interrupt line only ends the wait. A line with no record (the record lost, e.g. to an
        // overflowing error ring) still reports 1202.
        if c.contains(FatalCauses::NC_UE) && !n.errors.nc_ue {
            tracing::error!(
                "(FATAL-RT-UNDEFINED-STATE) Uncorrectable memory error is detected (interrupt, no error record)"
            );
            n.ret = worse(n.ret, NrtStatus::ExecHwErrNcUe);
        }
        if c.contains(FatalCauses::NET_PROXY) {
            n.ret = worse(n.ret, NrtStatus::NetworkProxyFailure);
        }
    }

    pub(super) fn finalize<S: NotificationSource>(&mut self, sources: &mut [S], cause: NrtStatus) -> Step {
        let mut hw_fault = false;
        let nc_count = self.ncs.len();
        for (nc, src) in sources.iter_mut().enumerate().take(nc_count) {
            // A failed sweep is fatal like a latched cause (the NC's result holds its status).
            hw_fault |= !self.sweep_errors(nc, src);
            let causes = src.fatal_causes();
            let n = &mut self.ncs[nc];
            if let Some(s) = n.errors.status {
                n.ret = worse(n.ret, s);
            }
            n.causes = causes;
            hw_fault |= classified(&causes);
            Self::classify_causes(n);
        }
        let best = worst(self.ncs.iter().map(|n| n.ret));
        let (status, verdict) = if cause == NrtStatus::Success && !hw_fault {
            (best, Step::Done)
        } else if best != NrtStatus::Success {
            (best, Step::DoneWithError)
        } else {
            (NrtStatus::Failure, Step::DoneWithError)
        };
        self.state = ExecState::Done;
        self.status = status;
        self.verdict = Some(verdict);
        verdict
    }
}
