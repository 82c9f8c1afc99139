//! The clock and the precise hold.
//!
//! Times are CLOCK_MONOTONIC nanoseconds, the clock of Python's `time.monotonic_ns()`, so the
//! server's records compare with a client's times on the same machine.
//!
//! tokio's timer has millisecond granularity (a 2 ms sleep ends 2–3 ms later), so holds do not
//! use it: one timer thread keeps the pending deadlines in a heap of its own and sleeps until the
//! earliest (`park_timeout`: a futex wait), its timer slack set to 1 ns (`prctl(PR_SET_TIMERSLACK)`;
//! the default 50 µs would make every hold late by up to that). When it wakes it reads the clock
//! and ends every hold that is due, before it takes any lock, and wakes each held task with that
//! time: the service end the records keep (what really happened, not what was asked). Tasks
//! register a hold in a short vector behind a mutex, which the thread empties after firing, and
//! wake the thread only when their deadline comes before the one it sleeps to. The thread asks for
//! SCHED_FIFO priority 1 (granted to root or with CAP_SYS_NICE): on a loaded machine a normal
//! thread's wake-up waits for the other runnable threads (milliseconds at a load of 15 on 2 cores).
//! The last `spin_ns` before a deadline it may spin on the clock instead of sleeping (0: never).

use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, TryLockError};
use std::thread::{JoinHandle, Thread};
use std::time::Duration;

use tokio::sync::oneshot;

/// CLOCK_MONOTONIC now, in nanoseconds.
pub fn monotonic_ns() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given; CLOCK_MONOTONIC always exists on Linux
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64
}

struct Pending {
    deadline_ns: u64,
    order: u64,
    done: oneshot::Sender<u64>,
}

impl PartialEq for Pending {
    fn eq(&self, other: &Self) -> bool {
        (self.deadline_ns, self.order) == (other.deadline_ns, other.order)
    }
}

impl Eq for Pending {}

impl PartialOrd for Pending {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Pending {
    // BinaryHeap is a max-heap: the earliest deadline (then the first registered) is the greatest
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (other.deadline_ns, other.order).cmp(&(self.deadline_ns, self.order))
    }
}

/// Nothing to wake for.
const IDLE: u64 = u64::MAX;
/// The thread is awake: it looks at every registered hold before it sleeps again.
const AWAKE: u64 = 0;
/// When the registrations' lock is taken, the thread looks again this much later (or at its
/// next deadline, if sooner).
const RETRY_NS: u64 = 20_000;

struct TimerShared {
    /// Holds registered since the thread last looked.
    incoming: Mutex<Vec<Pending>>,
    registered: AtomicU64,
    /// The deadline the thread sleeps to (IDLE: none); an earlier one must wake it.
    sleeps_to_ns: AtomicU64,
    stop: AtomicBool,
    /// Whether the thread got SCHED_FIFO.
    realtime: AtomicBool,
    thread: OnceLock<Thread>,
}

impl TimerShared {
    fn wake(&self) {
        if let Some(thread) = self.thread.get() {
            thread.unpark();
        }
    }
}

/// The hold timer: `hold_until(deadline)` resolves once the deadline has passed, with the time
/// the timer thread saw it pass.
pub struct HoldTimer {
    shared: Arc<TimerShared>,
    thread: Option<JoinHandle<()>>,
}

impl HoldTimer {
    /// Start the timer thread.
    pub fn start(spin_ns: u64) -> std::io::Result<HoldTimer> {
        let shared = Arc::new(TimerShared {
            incoming: Mutex::new(Vec::with_capacity(1024)),
            registered: AtomicU64::new(0),
            sleeps_to_ns: AtomicU64::new(AWAKE),
            stop: AtomicBool::new(false),
            realtime: AtomicBool::new(false),
            thread: OnceLock::new(),
        });
        let for_thread = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("refserver-hold".into())
            .spawn(move || run_timer(&for_thread, spin_ns))?;
        let _ = shared.thread.set(thread.thread().clone());
        Ok(HoldTimer {
            shared,
            thread: Some(thread),
        })
    }

    /// Whether the timer thread runs at real-time priority (SCHED_FIFO).
    pub fn realtime(&self) -> bool {
        self.shared.realtime.load(Ordering::Acquire)
    }

    /// Wait until `deadline_ns` (CLOCK_MONOTONIC) has passed; the time it was seen to pass.
    pub async fn hold_until(&self, deadline_ns: u64) -> u64 {
        let now = monotonic_ns();
        if deadline_ns <= now {
            return now;
        }
        let (done, fired) = oneshot::channel();
        let order = self.shared.registered.fetch_add(1, Ordering::Relaxed);
        self.shared
            .incoming
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Pending {
                deadline_ns,
                order,
                done,
            });
        if deadline_ns < self.shared.sleeps_to_ns.load(Ordering::SeqCst) {
            self.shared.wake();
        }
        // the timer thread only drops a sender when it stops: then the hold ends now
        fired.await.unwrap_or_else(|_| monotonic_ns())
    }
}

impl Drop for HoldTimer {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.wake();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn set_timer_slack_1ns() {
    // SAFETY: PR_SET_TIMERSLACK takes one integer argument and affects the calling thread only
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0);
    }
}

/// Ask for SCHED_FIFO priority 1 for this thread, so that a busy machine's other runnable threads
/// do not delay its wake-ups; where that is not allowed (no CAP_SYS_NICE, no RLIMIT_RTPRIO) it
/// stays at normal priority. It never spins unless `spin_ns` says so, so it cannot hog a core.
fn ask_for_realtime_priority() -> bool {
    let parameters = libc::sched_param { sched_priority: 1 };
    // SAFETY: pid 0 is the calling thread; the parameters live through the call
    unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &parameters) == 0 }
}

fn run_timer(shared: &TimerShared, spin_ns: u64) {
    set_timer_slack_1ns();
    shared
        .realtime
        .store(ask_for_realtime_priority(), Ordering::Release);
    let mut pending: BinaryHeap<Pending> = BinaryHeap::with_capacity(1024);
    let mut arrived: Vec<Pending> = Vec::with_capacity(1024);
    loop {
        if shared.stop.load(Ordering::SeqCst) {
            return; // the pending senders drop: their holds end at once
        }
        // end what is due first, with the time read on waking, before any lock
        let now = monotonic_ns();
        while pending.peek().is_some_and(|first| first.deadline_ns <= now) {
            if let Some(due) = pending.pop() {
                let _ = due.done.send(now); // a receiver gone (its request was cancelled) is no matter
            }
        }
        // then take what was registered meanwhile, never waiting for the lock: a task holding it
        // may have been preempted (normal priority), and the holds due meanwhile must still end
        let took = match shared.incoming.try_lock() {
            Ok(mut incoming) => {
                std::mem::swap(&mut *incoming, &mut arrived);
                true
            }
            Err(TryLockError::Poisoned(poisoned)) => {
                std::mem::swap(&mut *poisoned.into_inner(), &mut arrived);
                true
            }
            Err(TryLockError::WouldBlock) => false,
        };
        pending.extend(arrived.drain(..));
        let next = pending.peek().map_or(IDLE, |first| first.deadline_ns);
        let now = monotonic_ns();
        if next <= now {
            continue;
        }
        if !took {
            std::thread::park_timeout(Duration::from_nanos(RETRY_NS.min(next - now)));
            continue;
        }
        shared.sleeps_to_ns.store(next, Ordering::SeqCst);
        // a hold registered after the swap but before the store may have seen the older deadline
        let registered_meanwhile = match shared.incoming.try_lock() {
            Ok(incoming) => Some(!incoming.is_empty()),
            Err(TryLockError::Poisoned(poisoned)) => Some(!poisoned.into_inner().is_empty()),
            Err(TryLockError::WouldBlock) => None, // a task is registering one now
        };
        if registered_meanwhile != Some(false) {
            shared.sleeps_to_ns.store(AWAKE, Ordering::SeqCst);
            if registered_meanwhile.is_none() {
                // never spin waiting for it: at real-time priority that could starve the task itself
                let now = monotonic_ns();
                std::thread::park_timeout(Duration::from_nanos(
                    RETRY_NS.min(next.saturating_sub(now)),
                ));
            }
            continue;
        }
        let now = monotonic_ns();
        if next == IDLE {
            std::thread::park();
        } else if next > now + spin_ns {
            std::thread::park_timeout(Duration::from_nanos(next - spin_ns - now));
        } else {
            let mut now = now;
            while now < next && !shared.stop.load(Ordering::Relaxed) {
                std::hint::spin_loop();
                now = monotonic_ns();
            }
        }
        shared.sleeps_to_ns.store(AWAKE, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_is_python_s_monotonic_clock() {
        let before = monotonic_ns();
        let instant = std::time::Instant::now();
        std::thread::sleep(Duration::from_millis(2));
        let elapsed = monotonic_ns() - before;
        assert!(
            elapsed >= 2_000_000 && elapsed as u128 <= instant.elapsed().as_nanos() + 1_000_000
        );
    }

    #[test]
    fn holds_end_after_their_deadline_in_deadline_order() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let timer = Arc::new(HoldTimer::start(0).unwrap());
        let start = monotonic_ns();
        let offsets_ms = [5u64, 1, 3, 2, 4, 1];
        let ends: Vec<(u64, u64)> = runtime.block_on(async {
            let tasks: Vec<_> = offsets_ms
                .iter()
                .map(|&ms| {
                    let timer = Arc::clone(&timer);
                    let deadline = start + ms * 1_000_000;
                    tokio::spawn(async move { (deadline, timer.hold_until(deadline).await) })
                })
                .collect();
            let mut ends = Vec::new();
            for task in tasks {
                ends.push(task.await.unwrap());
            }
            ends
        });
        for (deadline, ended) in &ends {
            assert!(
                ended >= deadline,
                "a hold ended {} ns early",
                deadline - ended
            );
            // late by less than 20 ms even on a busy machine (the precision is measured in the docs)
            assert!(
                ended - deadline < 20_000_000,
                "a hold ended {} ns late",
                ended - deadline
            );
        }
        let past = runtime.block_on(timer.hold_until(start));
        assert!(past >= start);
    }

    #[test]
    fn thousands_of_holds_from_several_threads_all_end_after_their_deadlines() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(3)
            .enable_all()
            .build()
            .unwrap();
        let timer = Arc::new(HoldTimer::start(0).unwrap());
        let early = runtime.block_on(async {
            let tasks: Vec<_> = (0..3000u64)
                .map(|index| {
                    let timer = Arc::clone(&timer);
                    tokio::spawn(async move {
                        // deadlines spread over 0–5 ms, registered in no order
                        let deadline = monotonic_ns() + (index * 7919) % 5_000_000;
                        let ended = timer.hold_until(deadline).await;
                        ended < deadline
                    })
                })
                .collect();
            let mut early = 0;
            for task in tasks {
                let finished = tokio::time::timeout(Duration::from_secs(20), task).await;
                early += usize::from(finished.expect("a hold never ended").unwrap());
            }
            early
        });
        assert_eq!(early, 0);
    }

    #[test]
    fn spinning_the_last_microseconds_still_ends_after_the_deadline() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let timer = HoldTimer::start(50_000).unwrap();
        for _ in 0..20 {
            let deadline = monotonic_ns() + 200_000;
            let ended = runtime.block_on(timer.hold_until(deadline));
            assert!(ended >= deadline);
        }
    }
}
