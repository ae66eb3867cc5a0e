//! How many pages per second the agents re-arm at least: many while the communication
//! pattern is new or changing, few once it is known.
//!
//! Re-arming is what detection costs the program. On the 2-core KVM guest one private page
//! taken out and faulted back in cost the `ring` workload 29-71 us of its time (bench/detect
//! measures it; /proc/interrupts counted 0.6 TLB-shootdown and 1.6 function-call IPIs per
//! page), so a fixed 300 pages/s took about 2 % from a program of two threads. The events are needed most at the start and after a phase change; in between
//! they only confirm what the matrix already says. So the floor is `high` for the first
//! [`START_NS`] and for [`BOOST_NS`] after recent events fell mostly on pairs the matrix of
//! the last seconds calls weak, and `low` otherwise. CDSM re-arms a fixed 1 % of pages per
//! second, which it calls the most it may take; the agents' budget is max(rate x pages,
//! floor), and while the floor is `low` the detector scales the rate by `low / high` too
//! (1 % -> 0.25 % at the defaults): under `huddle run`, ring x8 threads re-armed 151 pages/s
//! at a steady 1 %, about 0.45 % of the program's time at 30 us a page.

/// High floor for this long after the start: nothing is known yet.
pub const START_NS: u64 = 1_500_000_000;
/// High floor for this long after a window of mostly new pairs.
pub const BOOST_NS: u64 = 1_000_000_000;
/// A window is judged once it holds this many events and is 100 ms old (judging is
/// O(tasks^2)), or once it is a second old.
const WINDOW_EVENTS: u64 = 4;
const WINDOW_MIN_NS: u64 = 100_000_000;
const WINDOW_MAX_NS: u64 = 1_000_000_000;
/// Weight of the trend matrix left after one second (half-life 2 s).
const DECAY_PER_S: f64 = 0.707;
/// A pair is weak when its trend weight is under this share of the stronger of its two
/// tasks' strongest pairs; a window is new when over half its events fall on weak pairs.
const WEAK_SHARE: f64 = 0.25;
const NEW_SHARE: f64 = 0.5;
/// A window is judged against a trend of at least this many (decayed) events only. A thinner
/// trend (a program that hardly communicates: `false-sharing`'s only events are its barrier
/// word) holds no pattern for a boost to overturn, and any pair of it looks weak.
const MIN_TREND: f64 = 32.0;

/// Chooses the program-wide re-arm floor (pages/s) from the communication events: `high`
/// for [`START_NS`] after the start and for [`BOOST_NS`] after a window of mostly weak
/// pairs, `low` otherwise. Times are CLOCK_MONOTONIC ns; tasks are task indexes.
pub struct Budget {
    high: u64,
    low: u64,
    start_ns: u64,
    boosted_until_ns: u64,
    window_start_ns: u64,
    window_events: u64,
    /// Events of the current window, per task pair (row-major, grown as tasks appear).
    window: Vec<Vec<u64>>,
    /// Exponentially decayed counts of the windows judged so far.
    trend: Vec<Vec<f64>>,
    /// Times the floor went up after the start.
    pub boosts: u64,
}

impl Budget {
    /// A budget started at `now_ns`, so high until `now_ns + START_NS`; `low` is capped at
    /// `high`.
    pub fn new(high: u64, low: u64, now_ns: u64) -> Budget {
        Budget {
            high,
            low: low.min(high),
            start_ns: now_ns,
            boosted_until_ns: now_ns + START_NS,
            window_start_ns: now_ns,
            window_events: 0,
            window: Vec::new(),
            trend: Vec::new(),
            boosts: 0,
        }
    }

    /// One line for the report: the floors and the boosts.
    pub fn summary(&self) -> String {
        format!(
            "re-arm floor: {} pages/s for the first {:.1} s, then {}, raised back for {:.1} s \
             after each of {} pattern changes",
            self.high,
            START_NS as f64 / 1e9,
            self.low,
            BOOST_NS as f64 / 1e9,
            self.boosts
        )
    }

    /// Agents woken at `now_ns` (see `Session::set_dormant`): high for [`START_NS`] again.
    pub fn wake(&mut self, now_ns: u64) {
        self.boosted_until_ns = self.boosted_until_ns.max(now_ns + START_NS);
    }

    /// One communication event between tasks `a` and `b`.
    pub fn event(&mut self, a: usize, b: usize) {
        let (a, b) = (a.min(b), a.max(b));
        grow(&mut self.window, b + 1, 0);
        self.window[a][b] += 1;
        self.window_events += 1;
    }

    /// The floor to use now (pages per second).
    pub fn floor(&mut self, now_ns: u64) -> u64 {
        let age = now_ns.saturating_sub(self.window_start_ns);
        if (self.window_events >= WINDOW_EVENTS && age >= WINDOW_MIN_NS) || age >= WINDOW_MAX_NS {
            self.judge(age);
            self.window_start_ns = now_ns;
        }
        if now_ns < self.boosted_until_ns {
            self.high
        } else {
            self.low
        }
    }

    /// Share of the window's events on weak pairs, then the window joins the trend.
    fn judge(&mut self, age_ns: u64) {
        let n = self.window.len();
        grow(&mut self.trend, n, 0.0);
        let strongest: Vec<f64> = (0..n)
            .map(|i| {
                (0..n)
                    .map(|j| self.trend[i.min(j)][i.max(j)])
                    .fold(0.0, f64::max)
            })
            .collect();
        let mut weak = 0;
        for a in 0..n {
            for b in a + 1..n {
                let w = self.window[a][b];
                if w > 0 && self.trend[a][b] < WEAK_SHARE * strongest[a].max(strongest[b]) {
                    weak += w;
                }
            }
        }
        // A window too thin to say anything (a quiet program) changes nothing.
        let trend_total: f64 = self.trend.iter().flatten().sum();
        if self.window_events >= WINDOW_EVENTS
            && trend_total >= MIN_TREND
            && weak as f64 > NEW_SHARE * self.window_events as f64
        {
            let now = self.window_start_ns + age_ns;
            if now >= self.boosted_until_ns && now >= self.start_ns + START_NS {
                self.boosts += 1;
            }
            self.boosted_until_ns = self.boosted_until_ns.max(now + BOOST_NS);
        }
        let keep = DECAY_PER_S.powf(age_ns as f64 / 1e9);
        for a in 0..n {
            for b in a + 1..n {
                self.trend[a][b] = self.trend[a][b] * keep + self.window[a][b] as f64;
                self.window[a][b] = 0;
            }
        }
        self.window_events = 0;
    }
}

/// Makes `m` at least n x n.
fn grow<T: Clone>(m: &mut Vec<Vec<T>>, n: usize, zero: T) {
    if m.len() < n {
        m.resize(n, Vec::new());
    }
    for row in m.iter_mut() {
        if row.len() < n {
            row.resize(n, zero.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    /// Feeds `per_window` events on `pairs` every 100 ms from `from` to `to` (ms), and
    /// returns the floor after each step.
    fn feed(b: &mut Budget, pairs: &[(usize, usize)], from: u64, to: u64) -> Vec<u64> {
        let mut floors = Vec::new();
        let mut t = from;
        while t < to {
            for k in 0..20 {
                let (x, y) = pairs[k % pairs.len()];
                b.event(x, y);
            }
            t += 100;
            floors.push(b.floor(t * MS));
        }
        floors
    }

    #[test]
    fn high_at_start_then_low_while_the_pattern_holds() {
        let mut b = Budget::new(300, 75, 0);
        let pairs = [(0, 1), (2, 3), (4, 5), (6, 7)];
        let f = feed(&mut b, &pairs, 0, 5000);
        assert_eq!(f[0], 300);
        assert_eq!(f[13], 300, "still within the start");
        assert!(f[16..].iter().all(|&x| x == 75), "{f:?}");
        assert_eq!(b.boosts, 0);
    }

    #[test]
    fn a_phase_change_raises_the_floor_within_a_window_and_it_falls_again() {
        let mut b = Budget::new(300, 75, 0);
        feed(&mut b, &[(0, 1), (2, 3), (4, 5), (6, 7)], 0, 5000);
        // distant pairs: none of these pairs communicated before
        let f = feed(&mut b, &[(0, 4), (1, 5), (2, 6), (3, 7)], 5000, 10000);
        assert_eq!(f[0], 300, "{f:?}");
        assert_eq!(b.boosts, 1);
        assert_eq!(
            *f.last().unwrap(),
            75,
            "the new pattern is the trend by now: {f:?}"
        );
        assert!(
            b.summary()
                .ends_with("then 75, raised back for 1.0 s after each of 1 pattern changes"),
            "{}",
            b.summary()
        );
    }

    #[test]
    fn background_events_on_weak_pairs_do_not_boost() {
        let mut b = Budget::new(300, 75, 0);
        let mut t = 0;
        while t < 6000 {
            // a ring of 4 (5 events per pair), plus a barrier every task touches: one
            // event on each of the other two pairs
            for k in 0..20 {
                let i = k % 4;
                b.event(i, (i + 1) % 4);
            }
            b.event(0, 2);
            b.event(1, 3);
            t += 100;
            b.floor(t * MS);
        }
        assert_eq!(b.boosts, 0);
        assert_eq!(b.floor(t * MS), 75);
    }

    #[test]
    fn a_thin_trend_is_not_overturned() {
        // A few events a second on changing pairs of 8 tasks (a barrier word all touch).
        let mut b = Budget::new(300, 75, 0);
        let mut t = 0;
        let mut k = 0usize;
        while t < 20_000 {
            for _ in 0..5 {
                k = (k * 29 + 3) % 56;
                let (x, y) = (k / 7, k % 7);
                b.event(x, if y >= x { y + 1 } else { y });
            }
            t += 1000;
            b.floor(t * MS);
        }
        assert_eq!(b.boosts, 0);
        // A pattern that builds a trend is still followed when it changes.
        feed(&mut b, &[(0, 1), (2, 3), (4, 5), (6, 7)], t, t + 5000);
        feed(
            &mut b,
            &[(0, 4), (1, 5), (2, 6), (3, 7)],
            t + 5000,
            t + 6000,
        );
        assert_eq!(b.boosts, 1);
    }

    #[test]
    fn a_quiet_program_gets_the_low_floor_after_the_start() {
        let mut b = Budget::new(300, 75, 0);
        assert_eq!(b.floor(100 * MS), 300);
        b.event(0, 1);
        assert_eq!(b.floor(1600 * MS), 75);
        assert_eq!(b.floor(4000 * MS), 75);
    }

    #[test]
    fn low_never_exceeds_high() {
        let mut b = Budget::new(50, 75, 0);
        assert_eq!(b.floor(10_000 * MS), 50);
    }
}
