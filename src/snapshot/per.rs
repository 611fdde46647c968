//! A value per activity or per cause, indexed by the enum instead of a position.

use std::ops::{Index, IndexMut};

use super::{Activity, Cause};

macro_rules! per {
    ($(#[$doc:meta])* $name:ident, $key:ident, $n:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, Default, PartialEq)]
        pub struct $name<T>(pub [T; $n]);

        impl<T> $name<T> {
            /// Each key with its value, in the key's label order.
            pub fn iter(&self) -> impl Iterator<Item = ($key, &T)> {
                $key::ALL.into_iter().zip(&self.0)
            }
        }

        impl<T> Index<$key> for $name<T> {
            type Output = T;
            fn index(&self, key: $key) -> &T {
                &self.0[slot(&$key::ALL, key)]
            }
        }

        impl<T> IndexMut<$key> for $name<T> {
            fn index_mut(&mut self, key: $key) -> &mut T {
                &mut self.0[slot(&$key::ALL, key)]
            }
        }
    };
}

/// Where `key` sits among `all` (every key is in its own `ALL`).
fn slot<K: PartialEq>(all: &[K], key: K) -> usize {
    all.iter().position(|k| *k == key).unwrap_or(0)
}

per!(
    /// A value per [`Activity`] of the main thread.
    PerActivity,
    Activity,
    5
);
per!(
    /// A value per [`Cause`] of lost time.
    PerCause,
    Cause,
    9
);

impl PerActivity<f64> {
    /// The shares with `activity`'s set to `share` (a better measure of it than the samples),
    /// the others scaled to share the rest as they did; where the samples saw nothing else,
    /// the rest is `Other` (the thread was somewhere no sample showed).
    pub fn with_share(&self, activity: Activity, share: f64) -> PerActivity<f64> {
        let share = share.clamp(0.0, 1.0);
        let rest = 1.0 - self[activity];
        let mut shares = *self;
        if rest > 1e-9 {
            for value in shares.0.iter_mut() {
                *value *= (1.0 - share) / rest;
            }
        } else {
            shares[Activity::Other] = 1.0 - share;
        }
        shares[activity] = share;
        shares
    }
}

impl PerCause<f64> {
    /// The sum over the causes.
    pub fn total(&self) -> f64 {
        self.0.iter().sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_measured_share_replaces_the_sampled_one_and_the_rest_keep_their_proportions() {
        let sampled = PerActivity([0.2, 0.1, 0.0, 0.6, 0.1]);
        let rounded = |shares: PerActivity<f64>| shares.0.map(|v| (v * 100.0).round() / 100.0);
        let timed = sampled.with_share(Activity::GpuSync, 0.28);
        assert_eq!(rounded(timed), [0.16, 0.28, 0.0, 0.48, 0.08]);
        assert!((timed.0.iter().sum::<f64>() - 1.0).abs() < 1e-9);
        // Every sample in a sync, the timing saying 80 %: the rest is where no sample was.
        let all_sync = PerActivity([0.0, 1.0, 0.0, 0.0, 0.0]);
        assert_eq!(
            rounded(all_sync.with_share(Activity::GpuSync, 0.8)),
            [0.0, 0.8, 0.0, 0.0, 0.2]
        );
    }
}
