//! The known truth every protocol shares: the k-th request gets draw k (its service time and
//! whether it fails), waits for a slot, is held, and leaves a record of what really happened.

use std::sync::atomic::{AtomicU64, Ordering};

use super::config::Config;
use super::hold::{monotonic_ns, HoldTimer};
use super::laws::{Failures, Law};
use super::records::{Outcome, Protocol, Record, Records};
use super::slots::{Slot, Slots};

/// The timer thread spins the last this many nanoseconds before a deadline (measured: see
/// docs/reference-server.md; 0 sleeps to the deadline).
pub const HOLD_SPIN_NS: u64 = 0;

pub struct Truth {
    pub config: Config,
    law: Law,
    failures: Failures,
    slots: Slots,
    timer: HoldTimer,
    pub records: Records,
    received: AtomicU64,
    failed: AtomicU64,
    rejected: AtomicU64,
}

/// One admitted request: its draw.
pub struct Admitted {
    pub seq: u64,
    pub received_ns: u64,
    pub hold_ns: u64,
    pub fails: bool,
    pub protocol: Protocol,
    pub batch: u32,
}

/// A request being served: records itself when finished, or as cancelled when dropped before
/// (the client went away and the transport dropped its handler).
pub struct InFlight<'a> {
    truth: &'a Truth,
    pub admitted: Admitted,
    pub start_ns: u64,
    pub end_ns: u64,
    /// All of its holds (a streamed request's responses have one each).
    pub hold_total_ns: u64,
    /// A streamed generation's first and last content events handed to the transport (0: none yet).
    pub first_event_ns: u64,
    pub last_event_ns: u64,
    pub id: String,
    done: bool,
}

impl InFlight<'_> {
    /// The answer is handed to the transport: keep the record; the request's id back (to echo).
    pub fn finish(mut self, outcome: Outcome) -> String {
        self.record(outcome);
        std::mem::take(&mut self.id)
    }

    fn record(&mut self, outcome: Outcome) {
        self.done = true;
        let answered_ns = monotonic_ns();
        // never in service (a scripted failure, or cancelled while it waited): no queue, no service
        let start_ns = if self.start_ns == 0 {
            self.admitted.received_ns
        } else {
            self.start_ns
        };
        self.truth.records.push(&Record {
            seq: self.admitted.seq,
            received_ns: self.admitted.received_ns,
            start_ns,
            end_ns: if self.end_ns == 0 {
                start_ns
            } else {
                self.end_ns
            },
            answered_ns,
            first_event_ns: self.first_event_ns,
            last_event_ns: self.last_event_ns,
            hold_ns: self.hold_total_ns,
            batch: self.admitted.batch,
            protocol: self.admitted.protocol,
            outcome,
            id: &self.id,
        });
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.record(Outcome::Cancelled);
        }
    }
}

impl Truth {
    pub fn new(config: Config, timer: HoldTimer) -> Truth {
        Truth {
            law: Law::from_config(&config.delay),
            failures: Failures::from_config(&config.failures),
            slots: Slots::new(config.concurrency),
            records: Records::new(config.record_capacity),
            timer,
            received: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
            config,
        }
    }

    /// A request was fully read and names the model: it gets the next draw.
    pub fn admit(&self, received_ns: u64, protocol: Protocol, batch: u32) -> Admitted {
        let seq = self.received.fetch_add(1, Ordering::AcqRel);
        let fails = self.failures.draw(self.config.seed, seq);
        if fails {
            self.failed.fetch_add(1, Ordering::AcqRel);
        }
        Admitted {
            seq,
            received_ns,
            hold_ns: if fails {
                0
            } else {
                self.law.draw(self.config.seed, seq)
            },
            fails,
            protocol,
            batch,
        }
    }

    /// A request refused before any draw (unknown model, bad body): counted, not recorded.
    pub fn reject(&self) {
        self.rejected.fetch_add(1, Ordering::AcqRel);
    }

    pub fn in_flight(&self, admitted: Admitted, id: String) -> InFlight<'_> {
        InFlight {
            truth: self,
            admitted,
            start_ns: 0,
            end_ns: 0,
            hold_total_ns: 0,
            first_event_ns: 0,
            last_event_ns: 0,
            id,
            done: false,
        }
    }

    /// Wait for a slot, then hold `holds` times the request's draw, calling `between(i)` after
    /// each hold but the last (a stream's responses). A scripted failure takes no slot and no hold.
    pub async fn serve<F: FnMut(u32)>(
        &self,
        request: &mut InFlight<'_>,
        holds: u32,
        mut between: F,
    ) {
        if request.admitted.fails {
            return;
        }
        let _slot = self.slots.take().await;
        let start = monotonic_ns();
        request.start_ns = start;
        let hold = request.admitted.hold_ns;
        let mut end = start;
        for index in 0..holds {
            if hold > 0 {
                // deadlines from the start, not from the last wake-up: late wake-ups do not add up
                end = self
                    .timer
                    .hold_until(start + hold * u64::from(index + 1))
                    .await;
            } else {
                end = monotonic_ns();
            }
            request.hold_total_ns += hold;
            request.end_ns = end;
            if index + 1 < holds {
                between(index);
            }
        }
        request.end_ns = end;
    }

    /// Take a service slot for `request` (FIFO) and mark its start: the caller holds each of its
    /// events with `hold_event` and drops the slot when it is done.
    pub async fn start_service(&self, request: &mut InFlight<'_>) -> Slot<'_> {
        let slot = self.slots.take().await;
        request.start_ns = monotonic_ns();
        request.end_ns = request.start_ns;
        slot
    }

    /// Hold `request`'s `index`-th event (from 0) until start + (index + 1) draws; the time it ended.
    pub async fn hold_event(&self, request: &mut InFlight<'_>, index: u32) -> u64 {
        let hold = request.admitted.hold_ns;
        let end = if hold > 0 {
            self.timer
                .hold_until(request.start_ns + hold * u64::from(index + 1))
                .await
        } else {
            monotonic_ns()
        };
        request.hold_total_ns += hold;
        request.end_ns = end;
        end
    }

    pub fn received(&self) -> u64 {
        self.received.load(Ordering::Acquire)
    }

    pub fn stats_json(&self) -> serde_json::Value {
        let counts = self.records.counts();
        serde_json::json!({
            "received": self.received(),
            "failed": self.failed.load(Ordering::Acquire),
            "rejected": self.rejected.load(Ordering::Acquire),
            "recorded": counts.kept,
            "dropped": counts.dropped,
            "record_capacity": self.records.capacity(),
            "in_service": self.slots.in_service(),
            "most_in_service": self.slots.most_in_service(),
            "hold_thread_realtime": self.timer.realtime(),
            "config": serde_json::to_value(&self.config).unwrap_or_default(),
        })
    }

    /// Records and counters start afresh, and the draws from k = 0 again.
    pub fn reset(&self) {
        self.received.store(0, Ordering::Release);
        self.failed.store(0, Ordering::Release);
        self.rejected.store(0, Ordering::Release);
        self.records.clear();
        self.slots.reset_most();
    }
}
