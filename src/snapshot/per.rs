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

impl PerCause<f64> {
    /// The sum over the causes.
    pub fn total(&self) -> f64 {
        self.0.iter().sum()
    }
}
