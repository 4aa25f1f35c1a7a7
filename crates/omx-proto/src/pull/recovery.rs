//! Loss recovery of pulls: frames passed over by a later reply are re-requested at
//! once, blocks without progress after their timeout, and links that keep timing out
//! close (their blocks move to the others).

use super::*;

impl Engine {
    /// Frame `k` of pull `pk` arrived from partner `pid`: every frame it asked for
    /// before that one is lost (replies come in request order). Returns the runs of
    /// those still missing, and a round-trip sample when `k` is the first reply to a
    /// request for frames never asked for before.
    pub(super) fn passed_over(
        &mut self,
        now: Time,
        pid: PartnerId,
        path: u8,
        pk: Key,
        k: u32,
    ) -> (Vec<(Key, u32, u32)>, Option<Time>) {
        let awaited = &mut self.partners[pid].path_mut(path).awaited;
        let Some(at) = awaited
            .iter()
            .position(|r| r.pull == pk && r.start <= k && k < r.end)
        else {
            return (Vec::new(), None);
        };
        let mut lost = Vec::new();
        let mut runs = Vec::new();
        // Requests sent shortly before this one may just have been overtaken (a link
        // may reorder a little): they are lost only when asked a quarter round trip
        // earlier, as in TCP's RACK.
        let asked = awaited[at].asked_at;
        let reorder_window = self.partners[pid].path(path).rtt.srtt / 4;
        let awaited = &mut self.partners[pid].path_mut(path).awaited;
        let mut kept = 0;
        for _ in 0..at {
            let r = awaited.remove(kept).expect("counted");
            if r.asked_at + reorder_window > asked {
                awaited.insert(kept, r);
                kept += 1;
                continue;
            }
            if let Some(pull) = self.pulls.get(r.pull) {
                runs.clear();
                pull.missing_runs(r.start, r.end, &mut runs);
                lost.extend(runs.iter().map(|&(s, e)| (r.pull, s, e)));
            }
        }
        let at = kept;
        let front = &mut awaited[at];
        let run = *front;
        let sample = (run.fresh && run.start == k && at == 0).then(|| now - run.asked_at);
        if k + 1 >= run.end {
            awaited.remove(at);
        } else {
            front.start = k + 1;
            front.fresh = false;
        }
        if let Some(pull) = self.pulls.get(pk) {
            runs.clear();
            pull.missing_runs(run.start, k, &mut runs);
            lost.extend(runs.iter().map(|&(s, e)| (pk, s, e)));
        }
        (lost, sample)
    }

    /// A pull ended: its replies are no longer awaited.
    pub(super) fn forget_awaited(&mut self, pid: PartnerId, pk: Key) {
        let p = &mut self.partners[pid];
        p.pull.awaited.retain(|r| r.pull != pk);
        for s in &mut p.stripes {
            s.pull.awaited.retain(|r| r.pull != pk);
        }
    }

    /// Frames passed over by a later reply: request them again now. A long run of them
    /// is a burst (a full queue somewhere): fewer blocks go in flight for a while.
    pub(super) fn rerequest_lost(
        &mut self,
        now: Time,
        pid: PartnerId,
        path: u8,
        lost: Vec<(Key, u32, u32)>,
    ) {
        let rto = self.partners[pid].path(path).rto(&self.cfg);
        let burst = lost
            .iter()
            .any(|&(_, s, e)| e - s >= self.cfg.pull_burst_frames.max(1));
        if burst {
            self.cut_pull_window(now, pid, path);
        }
        for (pk, s, e) in lost {
            let Some(pull) = self.pulls.get_mut(pk) else {
                continue;
            };
            // Asked again on the path its block is on now (it may have moved).
            let mut on = path;
            if let Some(b) = pull.blocks.iter_mut().find(|b| b.start <= s && e <= b.end) {
                b.requested_at = now;
                b.rto = rto;
                on = b.path;
            }
            self.counters.pull_rerequests += 1;
            self.counters.pull_fast_rerequests += 1;
            self.counters.pull_frames_rerequested += (e - s) as u64;
            self.request_frames(now, pk, s, e, false, on);
        }
        self.hint_deadline(now + rto);
    }

    fn cut_pull_window(&mut self, now: Time, pid: PartnerId, path: u8) {
        let configured = self.cfg.pull_blocks_outstanding;
        let p = self.partners[pid].path_mut(path);
        let rtt = p.rtt.srtt;
        if p.cut_window(now, configured, rtt) {
            self.counters.pull_window_cuts += 1;
        }
    }

    /// Re-requests missing frames of blocks without progress for a timeout (the tail
    /// of the traffic, where no later reply reveals a loss); aborts stalled pulls.
    pub(crate) fn pull_timeouts(&mut self, now: Time) {
        let abort_after = self.cfg.pull_timeout_total();
        let keys = self.pulls.keys();
        for pk in keys {
            let Some(pull) = self.pulls.get(pk) else {
                continue;
            };
            if now.saturating_sub(pull.last_progress) >= abort_after {
                self.counters.pull_timeout_abort += 1;
                self.finish_pull(now, pk, Some(StatusCode::EndpointUnreachable));
                continue;
            }
            let pid = pull.partner;
            let partner = &self.partners[pid];
            let overdue = |b: &Block| b.requested_at.max(partner.path(b.path).heard) + b.rto <= now;
            let mut timed_out: Vec<u8> = pull
                .blocks
                .iter()
                .filter(|b| overdue(b))
                .map(|b| b.path)
                .collect();
            if timed_out.is_empty() {
                continue;
            }
            timed_out.sort_unstable();
            timed_out.dedup();
            for &path in &timed_out {
                self.path_timed_out(now, pid, path);
            }
            let partner = &self.partners[pid];
            let overdue = |b: &Block| b.requested_at.max(partner.path(b.path).heard) + b.rto <= now;
            let pull = self.pulls.get_mut(pk).expect("present");
            let mut expired = Vec::new();
            let blocks_on =
                |blocks: &[Block], path: u8| blocks.iter().filter(|b| b.path == path).count();
            for i in 0..pull.blocks.len() {
                if !overdue(&pull.blocks[i]) {
                    continue;
                }
                let old = pull.blocks[i].path;
                if old != 0
                    && partner
                        .stripes
                        .get(old as usize - 1)
                        .is_none_or(|s| s.closed)
                {
                    // Its path was closed: the open path with the fewest of its blocks.
                    let open = (0..=partner.stripes.len() as u8)
                        .filter(|&p| p == 0 || !partner.stripes[p as usize - 1].closed);
                    let to = open
                        .min_by_key(|&p| blocks_on(&pull.blocks, p))
                        .unwrap_or(0);
                    pull.blocks[i].path = to;
                }
                let b = &mut pull.blocks[i];
                b.requested_at = now;
                b.rto = partner.path(b.path).rto(&self.cfg);
                expired.push((b.start, b.end, b.path));
            }
            let mut runs = Vec::new();
            let mut missing = Vec::new();
            for &(s, e, path) in &expired {
                missing.clear();
                pull.missing_runs(s, e, &mut missing);
                runs.extend(missing.iter().map(|&(s, e)| (s, e, path)));
            }
            // What was awaited of these blocks is asked for again below.
            let p = &mut self.partners[pid];
            for path in 0..=p.stripes.len() as u8 {
                p.path_mut(path).awaited.retain(|r| {
                    r.pull != pk || !expired.iter().any(|&(s, e, _)| s <= r.start && r.end <= e)
                });
            }
            self.counters.pull_block_timeouts += 1;
            for &(_, _, path) in &expired {
                let rto = self.partners[pid].path(path).rto(&self.cfg);
                self.hint_deadline(now + rto);
            }
            for (s, e, path) in runs {
                self.counters.pull_rerequests += 1;
                self.counters.pull_frames_rerequested += (e - s) as u64;
                self.request_frames(now, pk, s, e, false, path);
            }
        }
    }

    /// Blocks on `path` timed out: its timeout backs off and its window shrinks; a
    /// path other than 0 that times out [`crate::stripe::STRIPE_TIMEOUTS_MAX`] times in
    /// a row without a reply is closed (its blocks move when they time out next).
    /// Blocks asked at different times expire one after the other in one silence:
    /// only the first expiry of a round counts, the next round starts when the blocks
    /// asked again now expire (as TCP counts a segment's retransmissions, not every
    /// segment's), so a stall of a loaded host does not close a healthy link.
    fn path_timed_out(&mut self, now: Time, pid: PartnerId, path: u8) {
        let p = self.partners[pid].path_mut(path);
        if now < p.round_ends {
            return;
        }
        p.rtt.back_off();
        p.round_ends = now + p.rto(&self.cfg);
        self.cut_pull_window(now, pid, path);
        let Some(s) = self.partners[pid]
            .stripes
            .get_mut((path as usize).wrapping_sub(1))
        else {
            return;
        };
        s.timeouts += 1;
        if s.timeouts >= crate::stripe::STRIPE_TIMEOUTS_MAX && !s.closed {
            s.closed = true;
            s.closed_at = now;
            s.pull.awaited.clear();
            self.counters.stripe_paths_closed += 1;
        }
    }
}
