//! Open loop: the pacer thread that makes arrivals due on a precise clock, and each target's
//! queue of arrivals waiting for a sender (`traffic/scheduler.py`'s `ArrivalQueue`).
//!
//! The pacer is one OS thread (timer slack 1 ns), not a tokio timer (those are millisecond
//! grained). It waits on a condition variable until shortly before the next arrival (a feed or
//! a stop wakes it), sleeps most of the rest with an absolute `clock_nanosleep` on
//! CLOCK_MONOTONIC and spins the last microseconds (a sleep on this machine ends ~30 µs late),
//! then counts the arrival and offers it to its target: to the longest idle sender at once, else
//! to the waiting queue, else (the queue full) it is unsent. A sender that finishes takes the
//! oldest waiting arrival before it goes idle again.
//!
//! The hand-off leads the intended time by an arrival's `lead_ns` (at most 100 µs, at most a
//! quarter of the gap to the previous arrival), because waking a parked sender takes tens of
//! microseconds too; the sender then waits out the rest (yielding to the runtime's other tasks,
//! spinning the last microseconds) and writes. No request is ever written before its intended
//! time. An arrival whose hand-over is less than `RELEASE_EARLY_NS` away when the pacer looks is
//! let go at once instead of slept for: at high rates the pacer then hands over a run of arrivals
//! per wake-up instead of sleeping between each (`bench.cpu_split`: its CPU per arrival fell from
//! 13–25 µs to 5–7 µs at 19–26k req/s, docs/benchmarks.md).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;

use super::clock::{monotonic_ns, precise_timers_for_this_thread, sleep_until_ns};

/// One arrival: when it is meant to be sent (monotonic ns, and the wall-clock time it was fed
/// as, which windows count it by), and its request (None: the next of the target's cursor).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Arrival {
    pub intended_ns: u64,
    pub intended_s: f64,
    pub request_index: Option<usize>,
    /// how long before `intended_ns` it is handed to a sender (set by `Pacer::feed`)
    pub lead_ns: u64,
    /// when the pacer thread let it go (CLOCK_MONOTONIC ns; 0 until then): for the lag profile
    pub released_ns: u64,
}

impl Arrival {
    /// When the pacer hands it over.
    pub fn handoff_ns(&self) -> u64 {
        self.intended_ns.saturating_sub(self.lead_ns)
    }
}

/// The most an arrival is handed over ahead of its intended time.
pub const MAX_LEAD_NS: u64 = 100_000;

/// An arrival's lead: `MAX_LEAD_NS`, or a quarter of the gap to the previous one if less.
pub fn lead_for(previous_ns: Option<u64>, intended_ns: u64) -> u64 {
    match previous_ns {
        Some(previous) => (intended_ns.saturating_sub(previous) / 4).min(MAX_LEAD_NS),
        None => MAX_LEAD_NS,
    }
}

/// A sender waiting for an arrival.
struct IdleSender {
    slot: u64,
    hand: mpsc::Sender<Arrival>,
}

#[derive(Default)]
struct QueueState {
    waiting: VecDeque<Arrival>,
    idle: VecDeque<IdleSender>,
}

/// What became of an arrival offered to its target.
#[derive(Debug, PartialEq, Eq)]
pub enum Offered {
    /// handed to an idle sender
    Sent,
    /// waiting for the next sender that finishes
    Queued,
    /// every sender busy and `max_queue` arrivals waiting already
    Unsent,
}

/// An open-loop target's arrivals waiting for senders, and its idle senders.
pub struct OpenLoop {
    max_queue: usize,
    state: Mutex<QueueState>,
}

impl OpenLoop {
    pub fn new(max_queue: usize) -> OpenLoop {
        OpenLoop {
            max_queue,
            state: Mutex::new(QueueState::default()),
        }
    }

    /// `ArrivalQueue.offer`: to an idle sender, else queued unless `max_queue` already wait
    /// (the Python rule `qsize >= max_queue + idle_senders`: an arrival a Python sender has not
    /// taken yet is still in the queue, here it is handed over at once).
    pub fn offer(&self, mut arrival: Arrival) -> Offered {
        let mut state = self.state.lock().expect("open-loop queue");
        while let Some(sender) = state.idle.pop_front() {
            match sender.hand.try_send(arrival) {
                Ok(()) => return Offered::Sent,
                Err(
                    mpsc::error::TrySendError::Closed(back) | mpsc::error::TrySendError::Full(back),
                ) => arrival = back,
            }
        }
        if state.waiting.len() >= self.max_queue {
            return Offered::Unsent;
        }
        state.waiting.push_back(arrival);
        Offered::Queued
    }

    /// A sender is free: the oldest waiting arrival, or None (it is registered as idle and gets
    /// the next arrival through `hand`).
    pub fn take_or_wait(&self, slot: u64, hand: &mpsc::Sender<Arrival>) -> Option<Arrival> {
        let mut state = self.state.lock().expect("open-loop queue");
        if let Some(arrival) = state.waiting.pop_front() {
            return Some(arrival);
        }
        state.idle.push_back(IdleSender {
            slot,
            hand: hand.clone(),
        });
        None
    }

    /// A stopped sender is no longer idle.
    pub fn forget_sender(&self, slot: u64) {
        self.state
            .lock()
            .expect("open-loop queue")
            .idle
            .retain(|sender| sender.slot != slot);
    }

    /// The arrivals still waiting (they count as unsent at the run's stop); the queue is left empty.
    pub fn drain_waiting(&self) -> Vec<Arrival> {
        self.state
            .lock()
            .expect("open-loop queue")
            .waiting
            .drain(..)
            .collect()
    }

    #[cfg(test)]
    fn idle_senders(&self) -> usize {
        self.state.lock().unwrap().idle.len()
    }
}

/// The pacer's schedule: fed arrivals not yet due, per target, in order.
#[derive(Default)]
struct Schedule {
    targets: HashMap<usize, VecDeque<Arrival>>,
    /// each target's last fed intended time (the gap to the next one sets its lead)
    last_fed: HashMap<usize, u64>,
    stop: bool,
}

impl Schedule {
    /// The next arrival due over all targets: (when, target).
    fn next_due(&self) -> Option<(u64, usize)> {
        self.targets
            .iter()
            .filter_map(|(target, queue)| queue.front().map(|a| (a.handoff_ns(), *target)))
            .min()
    }
}

/// Waits on the condition variable only until this long before an arrival; the rest is one
/// absolute sleep (which a feed cannot cut short: an earlier arrival fed into this last stretch
/// waits at most this long).
const COARSE_WAKE_NS: u64 = 2_000_000;

/// An arrival whose hand-over is this close is let go at once rather than slept for: a sleep that
/// short costs the pacer two context switches and ends ~30 µs late anyway. At high rates (gaps of
/// tens of µs) this lets the pacer hand over runs of arrivals per wake-up; the sender waits out the
/// rest of each (it never writes before the intended time). At low rates the pacer's sleep still
/// ends at the hand-over: it is only the last stretch that is not slept.
pub const RELEASE_EARLY_NS: u64 = 100_000;

/// The pacer: its schedule and its thread.
pub struct Pacer {
    shared: Arc<(Mutex<Schedule>, Condvar)>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Pacer {
    /// Starts the pacer thread; `due` gets each arrival at its intended time (on that thread).
    pub fn start(due: impl Fn(usize, Arrival) + Send + 'static) -> std::io::Result<Pacer> {
        let shared: Arc<(Mutex<Schedule>, Condvar)> = Arc::default();
        let inside = shared.clone();
        let thread = std::thread::Builder::new()
            .name("inferload-pacer".into())
            .spawn(move || run(&inside, due))?;
        Ok(Pacer {
            shared,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Appends arrivals (ascending) to a target's schedule, each with its lead.
    pub fn feed(&self, target: usize, arrivals: impl IntoIterator<Item = Arrival>) {
        let (schedule, wake) = &*self.shared;
        let mut guard = schedule.lock().expect("schedule");
        let mut previous = guard.last_fed.get(&target).copied();
        let queue = guard.targets.entry(target).or_default();
        for mut arrival in arrivals {
            arrival.lead_ns = lead_for(previous, arrival.intended_ns);
            previous = Some(arrival.intended_ns);
            queue.push_back(arrival);
        }
        if let Some(last) = previous {
            guard.last_fed.insert(target, last);
        }
        drop(guard);
        wake.notify_one();
    }

    /// Takes a target's arrivals not handed over yet out of the schedule (the caller counts those
    /// already due: the pacer's thread was late; the rest are dropped uncounted).
    pub fn end(&self, target: usize) -> Vec<Arrival> {
        let (schedule, wake) = &*self.shared;
        let dropped = schedule
            .lock()
            .expect("schedule")
            .targets
            .remove(&target)
            .map_or_else(Vec::new, Vec::from);
        wake.notify_one();
        dropped
    }

    /// Stops the thread (idempotent).
    pub fn stop(&self) {
        let (schedule, wake) = &*self.shared;
        schedule.lock().expect("schedule").stop = true;
        wake.notify_one();
        if let Some(thread) = self.thread.lock().expect("pacer thread").take() {
            let _ = thread.join();
        }
    }
}

/// What the pacer does about the next hand-over at `when` (monotonic ns) seen at `now`.
#[derive(Debug, PartialEq, Eq)]
enum Step {
    /// far off: wait on the condition variable (a feed or a stop may come first) this long
    Wait(Duration),
    /// near: sleep until just before it, spin to it
    Sleep,
    /// due, or closer than `RELEASE_EARLY_NS`: let it go now
    Release,
}

fn step(when: u64, now: u64) -> Step {
    if when > now + COARSE_WAKE_NS {
        Step::Wait(Duration::from_nanos(when - now - COARSE_WAKE_NS / 2))
    } else if when > now + RELEASE_EARLY_NS {
        Step::Sleep
    } else {
        Step::Release
    }
}

fn run(shared: &(Mutex<Schedule>, Condvar), due: impl Fn(usize, Arrival)) {
    precise_timers_for_this_thread();
    let (schedule, wake) = shared;
    let mut guard = schedule.lock().expect("schedule");
    loop {
        if guard.stop {
            return;
        }
        let Some((when, target)) = guard.next_due() else {
            guard = wake.wait(guard).expect("schedule");
            continue;
        };
        match step(when, monotonic_ns()) {
            Step::Wait(timeout) => {
                guard = wake.wait_timeout(guard, timeout).expect("schedule").0;
                continue;
            }
            Step::Sleep => {
                let spin = guard
                    .targets
                    .get(&target)
                    .and_then(VecDeque::front)
                    .map_or(0, |a| a.lead_ns / 2);
                drop(guard);
                sleep_until_ns(when.saturating_sub(spin));
                while monotonic_ns() < when {
                    std::hint::spin_loop();
                }
                guard = schedule.lock().expect("schedule");
                continue; // look again: a feed or an end may have changed what is next
            }
            Step::Release => {}
        }
        let mut arrival = guard
            .targets
            .get_mut(&target)
            .and_then(VecDeque::pop_front)
            .expect("the arrival found due");
        drop(guard);
        arrival.released_ns = monotonic_ns();
        due(target, arrival);
        guard = schedule.lock().expect("schedule");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arrival(intended_ns: u64) -> Arrival {
        Arrival {
            lead_ns: 0,
            released_ns: 0,
            intended_ns,
            intended_s: 0.0,
            request_index: None,
        }
    }

    #[test]
    fn an_arrival_goes_to_an_idle_sender_else_waits_up_to_max_queue() {
        let queue = OpenLoop::new(2);
        let (hand, mut inbox) = mpsc::channel(1);
        assert_eq!(queue.take_or_wait(7, &hand), None);
        assert_eq!(queue.idle_senders(), 1);
        assert_eq!(queue.offer(arrival(1)), Offered::Sent);
        assert_eq!(inbox.try_recv().unwrap().intended_ns, 1);
        assert_eq!(queue.offer(arrival(2)), Offered::Queued);
        assert_eq!(queue.offer(arrival(3)), Offered::Queued);
        assert_eq!(queue.offer(arrival(4)), Offered::Unsent); // every sender busy, max_queue waiting
        assert_eq!(queue.take_or_wait(7, &hand).unwrap().intended_ns, 2); // the oldest first
        assert_eq!(queue.drain_waiting(), vec![arrival(3)]);
    }

    #[test]
    fn the_lead_is_a_quarter_of_the_gap_up_to_100_us() {
        assert_eq!(lead_for(None, 1_000_000), MAX_LEAD_NS);
        assert_eq!(lead_for(Some(0), 5_000_000), MAX_LEAD_NS); // 200 req/s
        assert_eq!(lead_for(Some(0), 100_000), 25_000); // 10,000 req/s
        assert_eq!(lead_for(Some(7), 7), 0); // two at once
        let early = Arrival {
            lead_ns: 100_000,
            ..arrival(50_000)
        };
        assert_eq!(early.handoff_ns(), 0);
    }

    #[test]
    fn the_pacer_waits_sleeps_or_lets_go_by_how_far_the_hand_over_is() {
        let now = 1_000_000_000;
        assert_eq!(
            step(now + 5_000_000, now),
            Step::Wait(Duration::from_nanos(5_000_000 - COARSE_WAKE_NS / 2))
        );
        assert_eq!(step(now + COARSE_WAKE_NS, now), Step::Sleep); // within the coarse wake
        assert_eq!(step(now + RELEASE_EARLY_NS + 1, now), Step::Sleep);
        assert_eq!(step(now + RELEASE_EARLY_NS, now), Step::Release); // too close to sleep for
        assert_eq!(step(now + 1, now), Step::Release);
        assert_eq!(step(now - 7, now), Step::Release); // late
    }

    #[test]
    fn a_stopped_sender_is_skipped() {
        let queue = OpenLoop::new(0);
        let (gone, inbox) = mpsc::channel(1);
        queue.take_or_wait(1, &gone);
        drop(inbox); // the sender's task ended without saying so
        let (hand, mut alive) = mpsc::channel(1);
        queue.take_or_wait(2, &hand);
        assert_eq!(queue.offer(arrival(5)), Offered::Sent);
        assert_eq!(alive.try_recv().unwrap().intended_ns, 5);
        queue.take_or_wait(3, &hand);
        queue.forget_sender(3);
        assert_eq!(queue.offer(arrival(6)), Offered::Unsent); // max_queue 0, nobody idle
    }

    #[test]
    fn the_pacer_hands_out_arrivals_in_time_order_across_targets_and_drops_ended_ones() {
        let (seen_tx, seen) = std::sync::mpsc::channel();
        let pacer = Pacer::start(move |target, arrival| {
            seen_tx
                .send((target, arrival.intended_ns, monotonic_ns()))
                .unwrap();
        })
        .unwrap();
        let start = monotonic_ns() + 20_000_000;
        pacer.feed(0, [arrival(start + 2_000_000), arrival(start + 6_000_000)]);
        pacer.feed(1, [arrival(start), arrival(start + 4_000_000)]);
        pacer.feed(2, [arrival(start + 500_000_000)]);
        let got: Vec<(usize, u64, u64)> = (0..4)
            .map(|_| seen.recv_timeout(Duration::from_secs(5)).unwrap())
            .collect();
        assert_eq!(
            got.iter().map(|(t, _, _)| *t).collect::<Vec<_>>(),
            vec![1, 0, 1, 0]
        );
        for (_, intended, at) in &got {
            assert!(
                *at + MAX_LEAD_NS + RELEASE_EARLY_NS >= *intended,
                "handed out more than its lead and the early release before its time"
            );
        }
        assert_eq!(pacer.end(2).len(), 1);
        pacer.stop();
        assert!(seen.recv_timeout(Duration::from_millis(100)).is_err());
        pacer.stop(); // idempotent
    }
}
