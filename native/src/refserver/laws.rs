//! Scripted service times and failures, drawn with a counter-based generator: draw `k` of a seed
//! depends on (seed, k) only, so the k-th request the server receives gets the same service time
//! whatever the threads do, and a run is reproducible.

use rand::{Rng, RngCore};
use rand_distr::{Distribution, LogNormal};

use super::config::{DelayConfig, FailureConfig};

/// The draws of one purpose come from their own stream of a seed.
#[derive(Clone, Copy)]
pub enum Stream {
    Delay = 1,
    Failure = 2,
}

/// SplitMix64's finalizer: a bijective mix of 64 bits.
const fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A small generator (SplitMix64) started from (seed, stream, k): draw `k` of `seed`'s stream.
pub struct CounterRng {
    state: u64,
}

impl CounterRng {
    pub fn new(seed: u64, stream: Stream, k: u64) -> CounterRng {
        let start =
            mix64(seed ^ mix64(stream as u64)) ^ mix64(k.wrapping_add(0x9e37_79b9_7f4a_7c15));
        CounterRng {
            state: mix64(start),
        }
    }
}

impl RngCore for CounterRng {
    fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }

    fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix64(self.state)
    }

    fn fill_bytes(&mut self, dst: &mut [u8]) {
        for chunk in dst.chunks_mut(8) {
            let bytes = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&bytes[..chunk.len()]);
        }
    }
}

const NS_PER_MS: f64 = 1e6;
const MAX_HOLD_NS: f64 = 3.6e12;

fn ms_to_ns(ms: f64) -> u64 {
    (ms * NS_PER_MS).clamp(0.0, MAX_HOLD_NS).round() as u64
}

/// A service-time law, ready to draw (nanoseconds).
#[derive(Debug, Clone)]
pub enum Law {
    None,
    Fixed(u64),
    Lognormal(LogNormal<f64>),
    Bimodal { p_slow: f64, fast: u64, slow: u64 },
    Tail { base: Box<Law>, p: f64, slow: u64 },
}

impl Law {
    /// The law of a validated configuration.
    pub fn from_config(delay: &DelayConfig) -> Law {
        match delay {
            DelayConfig::None => Law::None,
            DelayConfig::Fixed { ms } => Law::Fixed(ms_to_ns(*ms)),
            DelayConfig::Lognormal { median_ms, sigma } => {
                // validated: median > 0, sigma in [0, 10]
                let mu = (median_ms * NS_PER_MS).ln();
                Law::Lognormal(LogNormal::new(mu, *sigma).expect("validated lognormal parameters"))
            }
            DelayConfig::Bimodal {
                p_slow,
                fast_ms,
                slow_ms,
            } => Law::Bimodal {
                p_slow: *p_slow,
                fast: ms_to_ns(*fast_ms),
                slow: ms_to_ns(*slow_ms),
            },
            DelayConfig::Tail { base, p, slow_ms } => Law::Tail {
                base: Box::new(Law::from_config(base)),
                p: *p,
                slow: ms_to_ns(*slow_ms),
            },
        }
    }

    /// Whether every draw is 0 (no hold at all).
    pub fn is_none(&self) -> bool {
        matches!(self, Law::None | Law::Fixed(0))
    }

    fn sample(&self, rng: &mut CounterRng) -> u64 {
        match self {
            Law::None => 0,
            Law::Fixed(ns) => *ns,
            Law::Lognormal(law) => law.sample(rng).clamp(0.0, MAX_HOLD_NS).round() as u64,
            Law::Bimodal { p_slow, fast, slow } => {
                if rng.random::<f64>() < *p_slow {
                    *slow
                } else {
                    *fast
                }
            }
            Law::Tail { base, p, slow } => {
                if rng.random::<f64>() < *p {
                    *slow
                } else {
                    base.sample(rng)
                }
            }
        }
    }

    /// Draw `k` of `seed`: the hold of the k-th request (nanoseconds).
    pub fn draw(&self, seed: u64, k: u64) -> u64 {
        match self {
            Law::None => 0,
            Law::Fixed(ns) => *ns,
            _ => self.sample(&mut CounterRng::new(seed, Stream::Delay, k)),
        }
    }
}

/// The scripted failures: whether draw `k` of the seed fails.
#[derive(Debug, Clone)]
pub struct Failures {
    share: f64,
}

impl Failures {
    pub fn from_config(failures: &FailureConfig) -> Failures {
        Failures {
            share: failures.share,
        }
    }

    pub fn draw(&self, seed: u64, k: u64) -> bool {
        if self.share <= 0.0 {
            return false;
        }
        if self.share >= 1.0 {
            return true;
        }
        CounterRng::new(seed, Stream::Failure, k).random::<f64>() < self.share
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn law(text: &str) -> Law {
        Law::from_config(&serde_json::from_str(text).unwrap())
    }

    fn draws(law: &Law, seed: u64, n: u64) -> Vec<u64> {
        (0..n).map(|k| law.draw(seed, k)).collect()
    }

    #[test]
    fn a_draw_depends_on_the_seed_and_its_index_only() {
        let lognormal = law(r#"{"law": "lognormal", "median_ms": 2, "sigma": 0.5}"#);
        let forward = draws(&lognormal, 7, 1000);
        let backward: Vec<u64> = (0..1000).rev().map(|k| lognormal.draw(7, k)).collect();
        assert_eq!(forward, backward.into_iter().rev().collect::<Vec<_>>());
        assert_ne!(forward, draws(&lognormal, 8, 1000));
        // consecutive draws are not one value
        assert!(forward.windows(2).filter(|pair| pair[0] == pair[1]).count() < 5);
    }

    #[test]
    fn the_fixed_law_is_its_value() {
        assert_eq!(
            draws(&law(r#"{"law": "fixed", "ms": 2.5}"#), 1, 10),
            vec![2_500_000; 10]
        );
        assert_eq!(draws(&law(r#"{"law": "none"}"#), 1, 3), vec![0; 3]);
    }

    #[test]
    fn the_lognormal_median_and_spread_are_its_parameters() {
        let n = 20_000;
        let mut sample = draws(
            &law(r#"{"law": "lognormal", "median_ms": 2, "sigma": 0.5}"#),
            3,
            n,
        );
        sample.sort_unstable();
        let median_ms = sample[sample.len() / 2] as f64 / 1e6;
        // the sample median of 20,000 draws: standard error ≈ 1.25·σ·m/√n ≈ 0.9 %
        assert!((1.94..2.06).contains(&median_ms), "median {median_ms} ms");
        let logs: Vec<f64> = sample.iter().map(|&ns| (ns as f64 / 1e6).ln()).collect();
        let mean = logs.iter().sum::<f64>() / logs.len() as f64;
        let sd =
            (logs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (logs.len() - 1) as f64).sqrt();
        assert!((0.48..0.52).contains(&sd), "sigma {sd}");
    }

    #[test]
    fn the_bimodal_share_of_slow_draws_is_p_slow() {
        let n = 20_000;
        let sample = draws(
            &law(r#"{"law": "bimodal", "p_slow": 0.2, "fast_ms": 1, "slow_ms": 10}"#),
            5,
            n,
        );
        assert!(sample.iter().all(|&ns| ns == 1_000_000 || ns == 10_000_000));
        let slow = sample.iter().filter(|&&ns| ns == 10_000_000).count() as f64 / n as f64;
        // binomial standard error: sqrt(0.2·0.8/20000) ≈ 0.0028; ±5 of them
        assert!((0.186..0.214).contains(&slow), "slow share {slow}");
    }

    #[test]
    fn the_tail_adds_a_slow_share_to_its_base() {
        let n = 50_000;
        let sample = draws(
            &law(r#"{"law": "tail", "base": {"law": "fixed", "ms": 1}, "slow_ms": 40}"#),
            9,
            n,
        );
        let slow = sample.iter().filter(|&&ns| ns == 40_000_000).count() as f64 / n as f64;
        assert!(sample.iter().all(|&ns| ns == 1_000_000 || ns == 40_000_000));
        // p = 0.01 by default; standard error ≈ 0.00045
        assert!((0.0078..0.0122).contains(&slow), "tail share {slow}");
        let mean_ms = sample.iter().sum::<u64>() as f64 / n as f64 / 1e6;
        assert!(
            (1.30..1.48).contains(&mean_ms),
            "mean {mean_ms} ms (expected 1 + 0.01 x 39 = 1.39)"
        );
    }

    #[test]
    fn failures_are_their_share_reproducibly_and_apart_from_the_delays() {
        let failures = Failures::from_config(&FailureConfig {
            share: 0.1,
            ..FailureConfig::default()
        });
        let n = 20_000u64;
        let failed: Vec<bool> = (0..n).map(|k| failures.draw(11, k)).collect();
        let share = failed.iter().filter(|&&f| f).count() as f64 / n as f64;
        assert!((0.093..0.107).contains(&share), "failure share {share}");
        assert_eq!(
            failed,
            (0..n).map(|k| failures.draw(11, k)).collect::<Vec<_>>()
        );
        let none = Failures::from_config(&FailureConfig::default());
        assert!((0..1000).all(|k| !none.draw(11, k)));
    }
}
