//! WAIT_BARRIER_PROXY and WAIT_CORE: the barrier wait, the sweep of each NC's
//! notification rings and the record matcher.

use super::*;

impl ExecTracker {
    pub(super) fn step_barrier<S: NotificationSource>(&mut self, sources: &mut [S], now: Instant) -> Step {
        let mut pending = false;
        for nc in 0..self.ncs.len() {
            if self.ncs[nc].barrier_done {
                continue;
            }
            match sources[nc].barrier_proxy() {
                ProxyPoll::Done => self.ncs[nc].barrier_done = true,
                ProxyPoll::Pending => pending = true,
                ProxyPoll::Failed => {
                    // libnrt finalizes with the barrier check's own status: the network
                    // proxy's when the transport to the other ranks failed (the device latched
                    // `net_proxy_fail`), else the collectives'.
                    let rc = if sources[nc].fatal_causes().contains(FatalCauses::NET_PROXY) {
                        NrtStatus::NetworkProxyFailure
                    } else {
                        NrtStatus::ExecHwErrCollectives
                    };
                    cold::barrier_failed(nc, rc);
                    let n = &mut self.ncs[nc];
                    n.fatal.set(ExecFatalStatus::Barrier);
                    n.ret = rc;
                    return self.finalize(sources, rc);
                }
            }
        }
        if pending {
            self.barrier_start.begin_once(now, self.cfg.clock);
            if self.barrier_start.elapsed(now) >= self.barrier_thresh {
                cold::barrier_warning(self.barrier_thresh);
                self.barrier_warnings = self.barrier_warnings.saturating_add(1);
                BARRIER_WARNINGS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                self.barrier_thresh = self.barrier_thresh.saturating_mul(2);
            }
            return Step::InFlight;
        }
        let expected = self.cfg.engines;
        for n in &mut self.ncs {
            for (e, st) in n.engines.iter_mut().enumerate() {
                *st = if expected[e] { EngineState::StartPending } else { EngineState::Complete };
            }
        }
        self.core_start.begin(now, self.cfg.clock);
        self.state = ExecState::WaitCore;
        Step::InFlight
    }

    pub(super) fn step_core<S: NotificationSource>(&mut self, sources: &mut [S], now: Instant) -> Step {
        for nc in 0..self.ncs.len() {
            if !self.ncs[nc].network_done {
                match sources[nc].network_proxy_at(now) {
                    ProxyPoll::Done => self.ncs[nc].network_done = true,
                    ProxyPoll::Pending => {}
                    ProxyPoll::Failed => {
                        cold::network_proxy_failed(nc);
                        let n = &mut self.ncs[nc];
                        n.fatal.set(ExecFatalStatus::NetworkProxy);
                        n.ret = NrtStatus::NetworkProxyFailure;
                        return self.finalize(sources, NrtStatus::NetworkProxyFailure);
                    }
                }
            }
            if let Err(cause) = self.consume_nc(nc, &mut sources[nc]) {
                return self.finalize(sources, cause);
            }
        }
        let complete = |n: &NcState| n.engines.iter().all(|&e| e == EngineState::Complete);
        if self.ncs.iter().all(complete) {
            // Nothing outstanding: no deadline to look at.
            return self.finalize(sources, NrtStatus::Success);
        }
        // Some engine is outstanding from here on.
        let elapsed = self.core_start.elapsed(now);
        let mut cause = NrtStatus::Success;
        let timeout = self.cfg.timeout;
        // `elapsed` is never more than the true time on either clock (TrackerConfig::clock).
        // Between sweeps, at most every SIGNAL_PROBE_INTERVAL: a device that raised the NQ
        // overflow line or latched a cause the engines cannot finish after ends the execution
        // now, through the same path (and so with the same status) as the timeout would.
        let probe =
            elapsed < timeout && self.probed.is_none_or(|p| now.saturating_duration_since(p) >= SIGNAL_PROBE_INTERVAL);
        if probe {
            self.probed = Some(now);
        }
        for (nc, (n, src)) in self.ncs.iter_mut().zip(sources.iter_mut()).enumerate() {
            if complete(n) {
                continue;
            }
            let signalled = probe && (src.nq_overflow() || stuck(&src.fatal_causes()));
            if elapsed >= timeout || signalled {
                if src.nq_overflow() {
                    cold::nq_overflow(nc);
                    n.fatal.set(ExecFatalStatus::SwNqOverflow);
                    n.ret = NrtStatus::ExecSwNqOverflow;
                } else if signalled {
                    cold::fatal_while_waiting(nc);
                    n.fatal.set(ExecFatalStatus::Timeout);
                    n.ret = NrtStatus::Timeout;
                } else {
                    cold::timeout(nc, timeout);
                    n.fatal.set(ExecFatalStatus::Timeout);
                    n.ret = NrtStatus::Timeout;
                }
                cause = n.ret;
            }
        }
        if cause != NrtStatus::Success {
            return self.finalize(sources, cause);
        }
        Step::InFlight
    }

    /// Sweep one NC's expected, incomplete engines. `Err(cause)` = matcher fault.
    pub(super) fn consume_nc<S: NotificationSource>(&mut self, nc: usize, src: &mut S) -> Result<(), NrtStatus> {
        let mut buf = std::mem::take(&mut self.infer_buf);
        let mut result = Ok(());
        'engines: for engine in 0..Engine::COUNT {
            if self.ncs[nc].engines[engine] == EngineState::Complete {
                continue;
            }
            buf.clear();
            if let Err(e) = src.poll_infer(engine, &mut buf, self.cfg.reads_per_sweep) {
                result = Err(self.source_failed(nc, &e));
                break 'engines;
            }
            for rec in buf.iter() {
                if self.ncs[nc].engines[engine] == EngineState::Complete {
                    self.ncs[nc].discarded += 1;
                    continue;
                }
                if let Err(cause) = self.match_record(nc, engine, rec, src) {
                    result = Err(cause);
                    break 'engines;
                }
                if self.ncs[nc].engines[engine] == EngineState::Complete {
                    if let Err(e) = src.drain_infer(engine) {
                        result = Err(self.source_failed(nc, &e));
                        break 'engines;
                    }
                }
            }
        }
        buf.clear();
        self.infer_buf = buf;
        result
    }

    /// A source failure on NC `nc`: logged, merged into the NC's result; its status.
    #[cold]
    #[inline(never)]
    pub(super) fn source_failed(&mut self, nc: usize, e: &SourceError) -> NrtStatus {
        let status = e.status();
        tracing::error!(nc, error = %e, "notification harvest failed");
        let n = &mut self.ncs[nc];
        n.ret = worse(n.ret, status);
        status
    }

    #[cold]
    #[inline(never)]
    pub(super) fn out_of_order<S: NotificationSource>(
        &mut self,
        nc: usize,
        engine: usize,
        what: &str,
        src: &mut S,
    ) -> NrtStatus {
        let got = self.ncs[nc].engines[engine] as u8;
        if src.nq_overflow() {
            tracing::error!(nc, engine, got, "Expected state to be {what} pending [overflow detected]");
            let n = &mut self.ncs[nc];
            n.fatal.set(ExecFatalStatus::SwNqOverflow);
            n.ret = NrtStatus::ExecSwNqOverflow;
            NrtStatus::ExecSwNqOverflow
        } else {
            tracing::error!(nc, engine, got, "Expected state to be {what} pending");
            NrtStatus::Failure
        }
    }

    pub(super) fn match_record<S: NotificationSource>(
        &mut self,
        nc: usize,
        engine: usize,
        rec: &InferStatus,
        src: &mut S,
    ) -> Result<(), NrtStatus> {
        match rec.hint {
            0 => {}
            1 => self.ncs[nc].drain_hints += 1,
            h => {
                cold::unexpected_hint(nc, engine, h, rec.subtype);
                return Err(NrtStatus::Failure);
            }
        }
        let ts = rec.timestamp;
        match rec.kind() {
            Subtype::Start => {
                if self.ncs[nc].engines[engine] != EngineState::StartPending {
                    return Err(self.out_of_order(nc, engine, "start", src));
                }
                let n = &mut self.ncs[nc];
                keep_earliest(&mut n.start_ts[engine], ts);
                n.engines[engine] = EngineState::EndPending;
            }
            Subtype::End => {
                if self.ncs[nc].engines[engine] != EngineState::EndPending {
                    return Err(self.out_of_order(nc, engine, "end", src));
                }
                let n = &mut self.ncs[nc];
                keep_latest(&mut n.end_ts[engine], ts);
                n.engines[engine] = EngineState::Complete;
            }
            Subtype::CcStart => keep_earliest(&mut self.ncs[nc].cc_start, ts),
            Subtype::CcEnd => keep_latest(&mut self.ncs[nc].cc_end, ts),
            Subtype::Custom => return self.custom(nc, engine, rec),
            Subtype::Unexpected(t) => {
                cold::unexpected_notification(nc, engine, rec.hint, t);
                return Err(NrtStatus::Failure);
            }
        }
        Ok(())
    }

    #[inline(never)]
    pub(super) fn custom(&mut self, nc: usize, engine: usize, rec: &InferStatus) -> Result<(), NrtStatus> {
        let mut tag = rec.tag;
        if *self.cfg.arch != csr_maps::SUNDA && engine == TAG_FIXUP_ENGINE.index() {
            tag = TAG_FIXUP_VALUE;
        }
        let line = u32::from(rec.line) | (u32::from(rec.line_hi) << 16);
        let event = TensorEvent { nc, engine, var_id: line, timestamp: rec.timestamp, tag };
        match rec.sub_id {
            s if custom::is_out_of_bounds(s) => {
                tracing::error!(nc, engine, sub_id = rec.sub_id, isa_line = line, tag, "out-of-bounds access");
                let n = &mut self.ncs[nc];
                n.fatal.set(ExecFatalStatus::Oob);
                n.ret = NrtStatus::ExecOob;
                Err(NrtStatus::ExecOob)
            }
            custom::DEBUG => {
                tracing::info!(nc, engine, value = line, tag, "custom debug notification");
                self.ncs[nc].debug_notifications += 1;
                Ok(())
            }
            custom::TENSOR_COMPLETION => {
                tracing::trace!(nc, engine, var_id = line, "tensor completion");
                self.tensor_completions.push(event);
                Ok(())
            }
            custom::DEBUG_TENSOR_READ => {
                tracing::debug!(nc, engine, var_id = line, "debug tensor read");
                self.debug_tensor_reads.push(event);
                Ok(())
            }
            other => {
                tracing::error!(nc, engine, sub_id = other, "unknown custom notification type");
                self.ncs[nc].ret = NrtStatus::HwError;
                Err(NrtStatus::HwError)
            }
        }
    }
}
