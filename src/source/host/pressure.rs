//! Pressure stall information (PSI) from `/proc/pressure/{cpu,io,memory}`.

use std::collections::HashMap;
use std::io;
use std::time::Duration;

use super::super::{counter_delta, elapsed_since, HostRoots, Previous, Source, SourceError};
use crate::snapshot::{Pressure, PressureLine, PressureRates, PressureSnapshot, Snapshot};

/// The PSI resources we read, in exposition order.
pub const RESOURCES: [&str; 3] = ["cpu", "io", "memory"];

/// Parses one PSI file. `some` is required; `full` is optional because the cpu file of
/// kernels before 5.13 has no such line.
pub fn parse_pressure(text: &str) -> Result<Pressure, String> {
    let mut some = None;
    let mut full = None;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let (kind, rest) = line
            .split_once(' ')
            .ok_or_else(|| format!("malformed line {line:?}"))?;
        let parsed = parse_line(rest).map_err(|e| format!("{e} in line {line:?}"))?;
        match kind {
            "some" => some = Some(parsed),
            "full" => full = Some(parsed),
            _ => return Err(format!("unknown line kind {kind:?}")),
        }
    }
    Ok(Pressure {
        some: some.ok_or("no `some` line")?,
        full,
    })
}

fn parse_line(rest: &str) -> Result<PressureLine, String> {
    let mut values = HashMap::new();
    for pair in rest.split_ascii_whitespace() {
        let (key, value) = pair
            .split_once('=')
            .ok_or_else(|| format!("expected key=value, found {pair:?}"))?;
        let value: f64 = value
            .parse()
            .map_err(|_| format!("not a number: {pair:?}"))?;
        if !value.is_finite() || value < 0.0 {
            return Err(format!("out of range: {pair:?}"));
        }
        values.insert(key, value);
    }
    let get = |key: &str| {
        values
            .get(key)
            .copied()
            .ok_or_else(|| format!("missing {key}"))
    };
    Ok(PressureLine {
        avg10: get("avg10")? / 100.0,
        avg60: get("avg60")? / 100.0,
        avg300: get("avg300")? / 100.0,
        total_seconds: get("total")? / 1e6,
    })
}

/// Stalled shares between two reads `seconds` apart; `None` if a total went backwards.
pub fn pressure_rates(
    previous: &Pressure,
    current: &Pressure,
    seconds: f64,
) -> Option<PressureRates> {
    let share = |p: &PressureLine, c: &PressureLine| {
        counter_delta(p.total_seconds, c.total_seconds).map(|d| (d / seconds).min(1.0))
    };
    let full_ratio = match (&previous.full, &current.full) {
        (Some(p), Some(c)) => Some(share(p, c)?),
        _ => None,
    };
    Some(PressureRates {
        some_ratio: share(&previous.some, &current.some)?,
        full_ratio,
    })
}

/// The pressure source.
pub struct PressureSource {
    roots: HostRoots,
    previous: HashMap<&'static str, Previous<Pressure>>,
}

impl PressureSource {
    /// A source reading `<procfs>/pressure/*`.
    pub fn new(roots: HostRoots) -> Self {
        PressureSource {
            roots,
            previous: HashMap::new(),
        }
    }
}

/// EOPNOTSUPP: the files exist but PSI was disabled at boot (`psi=0`).
const EOPNOTSUPP: i32 = 95;

impl Source for PressureSource {
    fn name(&self) -> &'static str {
        "pressure"
    }

    fn sample(&mut self, snapshot: &mut Snapshot, now: Duration) -> Result<(), SourceError> {
        let directory = self.roots.procfs.join("pressure");
        if !directory.is_dir() {
            return Err(SourceError::Unsupported(format!(
                "{} does not exist (kernel older than 4.20 or built without CONFIG_PSI)",
                directory.display()
            )));
        }
        let mut found = Vec::new();
        for resource in RESOURCES {
            let path = directory.join(resource);
            let text = match std::fs::read_to_string(&path) {
                Ok(text) => text,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) if e.raw_os_error() == Some(EOPNOTSUPP) => {
                    return Err(SourceError::Unsupported(format!(
                        "{}: PSI disabled at boot (psi=0)",
                        path.display()
                    )))
                }
                Err(e) => return Err(SourceError::io(&path, &e)),
            };
            let pressure = parse_pressure(&text)
                .map_err(|e| SourceError::Failed(format!("{}: {e}", path.display())))?;
            let rates = elapsed_since(self.previous.get(resource), now)
                .and_then(|(seconds, before)| pressure_rates(before, &pressure, seconds));
            found.push(PressureSnapshot {
                resource,
                pressure,
                rates,
            });
        }
        self.previous = found
            .iter()
            .map(|p| {
                let previous = Previous {
                    at: now,
                    value: p.pressure,
                };
                (p.resource, previous)
            })
            .collect();
        snapshot.pressure = found;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_some_and_full() {
        let p = parse_pressure(
            "some avg10=0.29 avg60=2.74 avg300=1.26 total=5069282\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=12\n",
        )
        .unwrap();
        assert_eq!(p.some.avg10, 0.0029);
        assert_eq!(p.some.avg60, 0.0274);
        assert_eq!(p.some.total_seconds, 5.069282);
        assert_eq!(p.full.unwrap().total_seconds, 0.000012);
    }

    #[test]
    fn cpu_file_without_full_line() {
        let p = parse_pressure("some avg10=1.00 avg60=0.00 avg300=0.00 total=100\n").unwrap();
        assert_eq!(p.full, None);
    }

    #[test]
    fn malformed_files_are_errors() {
        for bad in [
            "",
            "full avg10=0 avg60=0 avg300=0 total=1\n",
            "some avg10=0 avg60=0 avg300=0\n",
            "some avg10=x avg60=0 avg300=0 total=1\n",
            "some avg10=0 avg60=0 avg300=0 total=-1\n",
            "some avg10 avg60=0 avg300=0 total=1\n",
            "partial avg10=0 avg60=0 avg300=0 total=1\n",
            "some\n",
        ] {
            assert!(parse_pressure(bad).is_err(), "{bad:?}");
        }
    }

    fn pressure(some_total: f64, full_total: Option<f64>) -> Pressure {
        let line = |total_seconds| PressureLine {
            total_seconds,
            ..PressureLine::default()
        };
        Pressure {
            some: line(some_total),
            full: full_total.map(line),
        }
    }

    #[test]
    fn rates_are_stalled_share_of_the_interval() {
        let rates =
            pressure_rates(&pressure(1.0, Some(0.5)), &pressure(1.5, Some(0.6)), 2.0).unwrap();
        assert_eq!(rates.some_ratio, 0.25);
        assert!((rates.full_ratio.unwrap() - 0.05).abs() < 1e-12);
        let no_full = pressure_rates(&pressure(1.0, None), &pressure(2.0, None), 2.0).unwrap();
        assert_eq!(no_full.full_ratio, None);
        assert_eq!(
            pressure_rates(&pressure(2.0, None), &pressure(1.0, None), 1.0),
            None
        );
    }
}
