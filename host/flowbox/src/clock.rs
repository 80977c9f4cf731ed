//! The guest's deterministic clocks and random source, and the host's real clock (for the
//! journal's timestamps and a new run's virtual start) in one place.
//!
//! A script may read the time and draw random numbers and still replay exactly: both clocks
//! start from the run's recorded start and advance by a fixed step per reading plus whatever
//! the script "slept" (`time.sleep` and clock subscriptions are virtual, see
//! `monotonic_clock`), and the random bytes come from a generator seeded from the thread id.

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use sha2::{Digest, Sha256};
use wasmtime_wasi::{HostMonotonicClock, HostWallClock};

/// How far the virtual clocks move on every reading, so consecutive readings differ.
pub(crate) const TICK_NANOS: u64 = 1_000;

/// The last instant the guest can tell, in nanoseconds since the Unix epoch: Python holds a
/// time as signed 64-bit nanoseconds (`time.time()` raises `OverflowError` past it), which
/// ends in the year 2262.
const LAST_UNIX_NANOS: u64 = i64::MAX.unsigned_abs();

/// Nanoseconds since the run started, shared by both clocks, `sleep` and clock subscriptions.
/// It only moves forward, and stops where the wall clock would pass [`LAST_UNIX_NANOS`]: time
/// stands still there rather than wrap around.
#[derive(Debug, Clone)]
pub(crate) struct VirtualTime {
    elapsed: Arc<AtomicU64>,
    end: u64,
}

impl VirtualTime {
    /// Time for a run whose wall clock starts at `start_unix_nanos`.
    pub(crate) fn new(start_unix_nanos: u64) -> Self {
        Self {
            elapsed: Arc::default(),
            end: LAST_UNIX_NANOS.saturating_sub(start_unix_nanos),
        }
    }

    /// Nanoseconds since the run started, without a tick.
    pub(crate) fn elapsed(&self) -> u64 {
        self.elapsed.load(Ordering::Relaxed)
    }

    /// Moves time forward by `nanos` (the script's `time.sleep`).
    pub(crate) fn advance(&self, nanos: u64) -> u64 {
        self.update(|elapsed| elapsed.saturating_add(nanos))
    }

    /// Moves time forward to `elapsed`, if it is not there yet (a clock subscription that
    /// was waited for).
    pub(crate) fn advance_to(&self, elapsed: u64) {
        self.update(|now| now.max(elapsed));
    }

    /// A reading: time moves one tick and the new time is read.
    pub(crate) fn tick(&self) -> u64 {
        self.advance(TICK_NANOS)
    }

    /// Sets the time to `to(now)`, kept between now and the end; returns the new time.
    fn update(&self, to: impl Fn(u64) -> u64) -> u64 {
        let step = |now: u64| to(now).min(self.end).max(now);
        match self
            .elapsed
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |now| Some(step(now)))
        {
            Ok(previous) | Err(previous) => step(previous),
        }
    }
}

/// The guest's wall clock: the run's recorded start plus virtual time.
pub(crate) struct WallClock {
    pub(crate) start_unix_nanos: u64,
    pub(crate) time: VirtualTime,
}

impl HostWallClock for WallClock {
    fn resolution(&self) -> Duration {
        Duration::from_nanos(TICK_NANOS)
    }

    fn now(&self) -> Duration {
        Duration::from_nanos(self.start_unix_nanos.saturating_add(self.time.tick()))
    }
}

/// The guest's monotonic clock: virtual time since the run started. The guest reads it
/// through `monotonic_clock`, which is linked in place of wasmtime-wasi's interface; the WASI
/// context gets it too, so nothing of wasmtime-wasi ever reads real time.
pub(crate) struct MonotonicClock {
    pub(crate) time: VirtualTime,
}

impl HostMonotonicClock for MonotonicClock {
    fn resolution(&self) -> u64 {
        TICK_NANOS
    }

    fn now(&self) -> u64 {
        self.time.tick()
    }
}

/// A seeded generator (xoshiro256**) for the guest's random bytes. Its output is fixed by the
/// seed for good, unlike library generators that may change between versions, so journals
/// replay across flowbox upgrades.
pub(crate) struct SeededRandom {
    state: [u64; 4],
}

impl SeededRandom {
    /// A generator seeded from `seed` (the thread id, and a stream name).
    pub(crate) fn new(seed: &str, stream: &str) -> Self {
        let digest = Sha256::new()
            .chain_update(seed.as_bytes())
            .chain_update([0])
            .chain_update(stream.as_bytes())
            .finalize();
        let mut state = [0u64; 4];
        for (word, chunk) in state.iter_mut().zip(digest.chunks_exact(8)) {
            *word = u64::from_le_bytes(chunk.try_into().expect("8-byte chunk"));
        }
        if state == [0; 4] {
            state[0] = 1;
        }
        Self { state }
    }

    /// A 128-bit value from the generator (for WASI's `insecure-seed`).
    pub(crate) fn seed_u128(mut self) -> u128 {
        (u128::from(self.next()) << 64) | u128::from(self.next())
    }

    /// Fills `dest` with whole words, dropping what the last one has left over.
    fn fill(&mut self, dest: &mut [u8]) {
        for chunk in dest.chunks_mut(8) {
            let bytes = self.next().to_le_bytes();
            chunk.copy_from_slice(&bytes[..chunk.len()]);
        }
    }

    /// Moves on by `words`.
    fn advance(&mut self, words: u64) {
        for _ in 0..words {
            self.next();
        }
    }

    fn next(&mut self) -> u64 {
        let s = &mut self.state;
        let result = s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        result
    }
}

/// One of a run's random streams, as its WASI context draws from it and as the run's state
/// sees it: the clones share one generator and count the words drawn from it. That is how a
/// warm pool's instance, which set itself up on a placeholder's stream, has its run's stream
/// skip what that set-up drew, as it would have drawn it in a fresh instance (see `pool`).
#[derive(Clone)]
pub(crate) struct RandomStream(Arc<Mutex<Counted>>);

struct Counted {
    random: SeededRandom,
    /// Words (8 bytes, each draw taking whole ones) drawn so far.
    drawn: u64,
    /// Words the generator still passes, uncounted, before its first draw (see `new`).
    unpassed: u64,
}

impl RandomStream {
    /// The stream, moved on uncounted past its first `passed` words. It moves when first
    /// drawn from, as most runs never draw from a stream at all.
    pub(crate) fn new(seed: &str, stream: &str, passed: u64) -> Self {
        Self(Arc::new(Mutex::new(Counted {
            random: SeededRandom::new(seed, stream),
            drawn: 0,
            unpassed: passed,
        })))
    }

    /// The words drawn so far.
    pub(crate) fn drawn(&self) -> u64 {
        self.lock().drawn
    }

    /// Moves on as if `words` had been drawn.
    pub(crate) fn skip(&self, words: u64) {
        self.draw(|random| random.advance(words), words);
    }

    fn draw<T>(&self, draw: impl FnOnce(&mut SeededRandom) -> T, words: u64) -> T {
        let mut counted = self.lock();
        let unpassed = std::mem::take(&mut counted.unpassed);
        counted.random.advance(unpassed);
        counted.drawn += words;
        draw(&mut counted.random)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Counted> {
        // No draw panics: the stream is whole whoever held it last.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl rand_core::TryRng for RandomStream {
    type Error = Infallible;

    fn try_next_u32(&mut self) -> Result<u32, Infallible> {
        Ok(self.draw(|random| (random.next() >> 32) as u32, 1))
    }

    fn try_next_u64(&mut self) -> Result<u64, Infallible> {
        Ok(self.draw(SeededRandom::next, 1))
    }

    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), Infallible> {
        let words = dest.len().div_ceil(8) as u64;
        self.draw(|random| random.fill(dest), words);
        Ok(())
    }
}

/// A run's two random streams, for WASI's secure and insecure random interfaces; how far the
/// guest has drawn from them, and moving a new run's on by as much.
pub(crate) struct Randomness {
    pub(crate) secure: RandomStream,
    pub(crate) insecure: RandomStream,
}

/// The words the guest's set-up drew from the secure stream until it stopped reseeding
/// `random` on an instance's first call (2,496 bytes, a word each): every thread's secure stream
/// starts past them, so a thread draws the numbers it drew in the builds before, and their
/// journals replay.
const FORMER_SET_UP_WORDS: u64 = 2_496;

impl Randomness {
    /// The streams of thread `thread_id`.
    pub(crate) fn new(thread_id: &str) -> Self {
        Self {
            secure: RandomStream::new(thread_id, "secure", FORMER_SET_UP_WORDS),
            insecure: RandomStream::new(thread_id, "insecure", 0),
        }
    }

    /// The words drawn so far, per stream.
    pub(crate) fn drawn(&self) -> [u64; 2] {
        [self.secure.drawn(), self.insecure.drawn()]
    }

    /// Moves each stream on as if the words `drawn` had been drawn from it.
    pub(crate) fn skip(&self, [secure, insecure]: [u64; 2]) {
        self.secure.skip(secure);
        self.insecure.skip(insecure);
    }
}

/// A duration in whole milliseconds, saturating.
pub(crate) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use rand_core::TryRng;

    use super::*;

    #[test]
    fn clocks_advance_by_ticks_and_sleeps_only() {
        let time = VirtualTime::new(1_000_000_000);
        let wall = WallClock {
            start_unix_nanos: 1_000_000_000,
            time: time.clone(),
        };
        let mono = MonotonicClock { time: time.clone() };
        assert_eq!(mono.now(), TICK_NANOS);
        assert_eq!(
            wall.now(),
            Duration::from_nanos(1_000_000_000 + 2 * TICK_NANOS)
        );
        time.advance(5_000_000_000);
        assert_eq!(mono.now(), 5_000_000_000 + 3 * TICK_NANOS);
    }

    #[test]
    fn time_stops_at_the_last_instant_and_never_runs_backwards() {
        let start = 1_800_000_000_000_000_000;
        let time = VirtualTime::new(start);
        let wall = WallClock {
            start_unix_nanos: start,
            time: time.clone(),
        };
        let mono = MonotonicClock { time: time.clone() };
        time.advance(7_000_000_000_000_000_000);
        let before = (mono.now(), wall.now());
        // 1.16e19 more would wrap a u64 around; it stops at the end instead.
        time.advance(11_600_000_000_000_000_000);
        time.advance_to(u64::MAX);
        let end = LAST_UNIX_NANOS - start;
        assert_eq!(mono.now(), end);
        assert_eq!(mono.now(), end);
        assert_eq!(wall.now(), Duration::from_nanos(LAST_UNIX_NANOS));
        assert!(before.0 < end && before.1 < wall.now());
        time.advance_to(5);
        assert_eq!(time.elapsed(), end);
        // A start past the end leaves the clocks where they start.
        let late = VirtualTime::new(u64::MAX);
        late.advance(10);
        assert_eq!(late.elapsed(), 0);
    }

    #[test]
    fn a_stream_counts_whole_words_and_skipping_them_is_drawing_them() {
        let drawn = RandomStream::new("thread-a", "secure", 0);
        let mut draws = drawn.clone();
        let mut bytes = [0u8; 20];
        draws.try_fill_bytes(&mut bytes).unwrap();
        draws.try_next_u32().unwrap();
        draws.try_next_u64().unwrap();
        // Three words for the 20 bytes, one each for the numbers, seen through either clone.
        assert_eq!((drawn.drawn(), draws.drawn()), (5, 5));

        let mut skipped = RandomStream::new("thread-a", "secure", 0);
        skipped.skip(5);
        assert_eq!(skipped.drawn(), 5);
        assert_eq!(
            skipped.try_next_u64().unwrap(),
            draws.try_next_u64().unwrap()
        );

        // A thread's secure stream starts, uncounted, past what the former set-up drew.
        let mut passed = RandomStream::new("thread-b", "secure", 0);
        passed.skip(FORMER_SET_UP_WORDS);
        let started = Randomness::new("thread-b");
        assert_eq!(started.drawn(), [0, 0]);
        assert_eq!(
            started.secure.clone().try_next_u64().unwrap(),
            passed.try_next_u64().unwrap()
        );
        // A pooled run's skip comes after those words, and only the skip is counted.
        let handed_over = Randomness::new("thread-b");
        handed_over.skip([3, 0]);
        passed.skip(2);
        assert_eq!(handed_over.drawn(), [3, 0]);
        assert_eq!(
            handed_over.secure.clone().try_next_u64().unwrap(),
            passed.try_next_u64().unwrap()
        );

        let randomness = Randomness::new("thread-b");
        randomness.skip([3, 0]);
        assert_eq!(randomness.drawn(), [3, 0]);
        let mut fresh = RandomStream::new("thread-b", "insecure", 0);
        assert_eq!(
            randomness.insecure.clone().try_next_u64().unwrap(),
            fresh.try_next_u64().unwrap()
        );
    }

    #[test]
    fn random_bytes_are_fixed_by_the_seed() {
        let draw = |seed: &str| {
            let mut rng = RandomStream::new(seed, "secure", 0);
            let mut bytes = [0u8; 20];
            rng.try_fill_bytes(&mut bytes).unwrap();
            bytes
        };
        assert_eq!(draw("thread-a"), draw("thread-a"));
        assert_ne!(draw("thread-a"), draw("thread-b"));
        let mut other_stream = RandomStream::new("thread-a", "insecure", 0);
        assert_ne!(other_stream.try_next_u64().unwrap(), {
            let mut same = RandomStream::new("thread-a", "secure", 0);
            same.try_next_u64().unwrap()
        });
    }
}
