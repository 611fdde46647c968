//! Figures as people read them, for the evidence details and the reasons of the split.

/// Bytes per second (`310 MB/s`).
pub fn per_second(bytes: f64) -> String {
    match bytes {
        b if b >= 1e9 => format!("{:.1} GB/s", b / 1e9),
        b if b >= 1e6 => format!("{:.0} MB/s", b / 1e6),
        b if b >= 1e3 => format!("{:.0} kB/s", b / 1e3),
        b => format!("{b:.0} B/s"),
    }
}

/// A share as a whole percentage (`62 %`).
pub fn percent(share: f64) -> String {
    format!("{:.0} %", 100.0 * share)
}
