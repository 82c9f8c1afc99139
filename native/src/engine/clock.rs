//! The engine's clocks: CLOCK_MONOTONIC in nanoseconds (the clock of Python's `time.monotonic_ns()`
//! and of Triton's trace), the wall clock in seconds (`time.time()`), and a precise absolute sleep.

/// `time.monotonic_ns()`.
pub fn monotonic_ns() -> u64 {
    read(libc::CLOCK_MONOTONIC)
}

/// `time.time()` (seconds since the epoch).
pub fn wall_s() -> f64 {
    read(libc::CLOCK_REALTIME) as f64 / 1e9
}

/// The test-only receive-time shift (docs/calibration.md, "The test hook"): the environment
/// variable `INFERLOAD_TEST_RECEIVE_SHIFT_US` (whole µs, read once per process; absent or not a
/// number: 0) is added to every receive time the engine stamps, so that a calibration can be shown
/// to see a client error of a known size. The Python transport reads the same variable
/// (`inferload/users/client.py`). Never set it outside tests.
pub fn receive_shift_ns() -> u64 {
    static SHIFT_NS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *SHIFT_NS.get_or_init(|| {
        std::env::var("INFERLOAD_TEST_RECEIVE_SHIFT_US")
            .ok()
            .and_then(|text| text.trim().parse::<u64>().ok())
            .map_or(0, |us| us.saturating_mul(1_000))
    })
}

fn read(clock: libc::clockid_t) -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid timespec to write into; both clocks exist on every Linux
    unsafe { libc::clock_gettime(clock, &mut now) };
    now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64
}

/// Where the wall clock stood against the monotonic one, read as one close pair: maps a
/// wall-clock instant (seconds) onto the monotonic clock (ns).
#[derive(Clone, Copy, Debug)]
pub struct ClockMap {
    wall_ns: i128,
    mono_ns: i128,
}

impl ClockMap {
    /// Reads both clocks; the pair read in the shortest interval of three tries.
    pub fn now() -> ClockMap {
        let mut best: Option<(u64, ClockMap)> = None;
        for _ in 0..3 {
            let before = monotonic_ns();
            let wall = read(libc::CLOCK_REALTIME);
            let after = monotonic_ns();
            let pair = ClockMap {
                wall_ns: wall as i128,
                mono_ns: (before / 2 + after / 2) as i128,
            };
            let spread = after - before;
            match best {
                Some((shortest, _)) if shortest <= spread => {}
                _ => best = Some((spread, pair)),
            }
        }
        best.map(|(_, pair)| pair).expect("three reads")
    }

    #[cfg(test)]
    pub fn fixed(wall_s: f64, mono_ns: u64) -> ClockMap {
        ClockMap {
            wall_ns: (wall_s * 1e9).round() as i128,
            mono_ns: mono_ns as i128,
        }
    }

    /// The monotonic instant (ns) of a wall-clock instant (s); 0 for one before the clock's start.
    pub fn to_monotonic_ns(&self, wall_s: f64) -> u64 {
        let wall_ns = (wall_s * 1e9).round() as i128;
        (wall_ns - self.wall_ns + self.mono_ns).max(0) as u64
    }
}

/// Sleeps until the monotonic instant `deadline_ns` (an absolute `clock_nanosleep`, restarted
/// after a signal); returns at once when it has passed.
pub fn sleep_until_ns(deadline_ns: u64) {
    let until = libc::timespec {
        tv_sec: (deadline_ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (deadline_ns % 1_000_000_000) as libc::c_long,
    };
    loop {
        // SAFETY: a valid timespec; no remainder is wanted for an absolute sleep
        let rc = unsafe {
            libc::clock_nanosleep(
                libc::CLOCK_MONOTONIC,
                libc::TIMER_ABSTIME,
                &until,
                std::ptr::null_mut(),
            )
        };
        if rc != libc::EINTR {
            return;
        }
    }
}

/// This thread's timer slack to 1 ns (the default 50 µs would let every sleep end up to 50 µs late).
pub fn precise_timers_for_this_thread() {
    // SAFETY: PR_SET_TIMERSLACK takes one unsigned long and touches only this thread
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wall_instant_maps_onto_the_monotonic_clock_by_the_pair_read() {
        let map = ClockMap::fixed(1_000.0, 5_000_000_000);
        assert_eq!(map.to_monotonic_ns(1_000.0), 5_000_000_000);
        assert_eq!(map.to_monotonic_ns(1_000.25), 5_250_000_000);
        assert_eq!(map.to_monotonic_ns(999.5), 4_500_000_000);
        assert_eq!(map.to_monotonic_ns(990.0), 0); // before the monotonic clock's start
    }

    #[test]
    fn the_clocks_agree_with_a_fresh_map() {
        let map = ClockMap::now();
        let mapped = map.to_monotonic_ns(wall_s());
        let now = monotonic_ns();
        assert!(mapped.abs_diff(now) < 5_000_000, "{mapped} vs {now}");
    }

    #[test]
    fn an_absolute_sleep_does_not_end_early() {
        precise_timers_for_this_thread();
        let deadline = monotonic_ns() + 2_000_000;
        sleep_until_ns(deadline);
        assert!(monotonic_ns() >= deadline);
        sleep_until_ns(deadline - 1_000_000); // passed: returns at once
    }
}
