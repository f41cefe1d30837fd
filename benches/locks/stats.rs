//! Latency samples, percentiles and medians across repetitions.

use std::time::Duration;

/// Latency samples in nanoseconds (one run of one contender).
#[derive(Default, Clone)]
pub(crate) struct Samples {
    nanos: Vec<u64>,
    sorted: bool,
}

impl Samples {
    pub(crate) fn with_capacity(n: usize) -> Self {
        Samples {
            nanos: Vec::with_capacity(n),
            sorted: false,
        }
    }

    pub(crate) fn push(&mut self, d: Duration) {
        self.nanos.push(d.as_nanos() as u64);
        self.sorted = false;
    }

    pub(crate) fn push_nanos(&mut self, n: u64) {
        self.nanos.push(n);
        self.sorted = false;
    }

    pub(crate) fn extend(&mut self, other: Samples) {
        self.nanos.extend(other.nanos);
        self.sorted = false;
    }

    pub(crate) fn len(&self) -> usize {
        self.nanos.len()
    }

    /// The `q` quantile (0..=1) in microseconds, nearest rank; NaN without samples.
    pub(crate) fn quantile_us(&mut self, q: f64) -> f64 {
        if self.nanos.is_empty() {
            return f64::NAN;
        }
        if !self.sorted {
            self.nanos.sort_unstable();
            self.sorted = true;
        }
        let rank = ((q * self.nanos.len() as f64).ceil() as usize).clamp(1, self.nanos.len());
        self.nanos[rank - 1] as f64 / 1000.0
    }
}

/// Median of the finite values (NaN if there are none).
pub(crate) fn median(values: &[f64]) -> f64 {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    }
}

/// Jain's fairness index of per-task counts: 1.0 when every task got the same share.
pub(crate) fn jain(counts: &[u64]) -> f64 {
    let n = counts.len() as f64;
    let sum: f64 = counts.iter().map(|&c| c as f64).sum();
    let squares: f64 = counts.iter().map(|&c| (c as f64).powi(2)).sum();
    if squares == 0.0 {
        return f64::NAN;
    }
    sum * sum / (n * squares)
}

/// A number for a table: thousands separators for big values, a few digits for small ones.
pub(crate) fn fmt_num(x: f64) -> String {
    if !x.is_finite() {
        return "–".to_owned();
    }
    if x.abs() >= 1000.0 {
        let s = format!("{:.0}", x);
        let (sign, digits) = s.strip_prefix('-').map_or(("", s.as_str()), |d| ("-", d));
        let mut out = String::new();
        for (i, c) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i) % 3 == 0 {
                out.push(',');
            }
            out.push(c);
        }
        format!("{sign}{out}")
    } else if x == x.trunc() || x.abs() >= 100.0 {
        format!("{x:.0}")
    } else if x.abs() >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

/// Medians of a B1/B2 run: cycles/s, p50 µs, p99 µs, Redis CPU µs per cycle, Redis commands
/// per cycle, client CPU µs per cycle.
pub(crate) type CycleRow = [f64; 6];

/// Medians of a B3 run: sections/s, gap p50 µs, gap p99 µs, min share, max share, Jain's index,
/// Redis CPU µs per section, Redis commands per section, client CPU µs per section.
pub(crate) type HandoffRow = [f64; 9];
