//! Typed configuration: YAML file, then command-line overrides, on top of the defaults.
//!
//! Every value is validated while it is deserialized (durations, addresses, regexes), so an
//! invalid value is reported with the file, line and column of that value, exactly like a
//! syntax error or an unknown key.

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer};

mod analysis;
mod sources;

pub use analysis::Thresholds;
pub use sources::*;

/// The port we listen on by default: not node_exporter's 9100, dcgm-exporter's 9400 nor
/// nvidia_gpu_exporter's 9835, so the exporter can run beside all of them.
pub const DEFAULT_PORT: u16 = 9842;

/// The whole configuration of the daemon.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Address and port the HTTP server listens on.
    pub listen_address: ListenAddress,
    /// HTTP server hardening, TLS and authentication.
    pub web: Web,
    /// How often the sampler reads every source and publishes a new exposition.
    pub sample_interval: ConfigDuration,
    /// Log verbosity: error, warn, info, debug or trace.
    pub log_level: LogLevel,
    /// Where the host's pseudo-filesystems are mounted (inside a container: /host/proc, /host/sys).
    pub paths: Paths,
    /// Which sources run and how each one selects what it reads.
    pub sources: Sources,
    /// How verdicts are decided: window, hysteresis and every rule's thresholds.
    pub analysis: Thresholds,
    /// Which metric families `/metrics` serves.
    pub metrics: Metrics,
}

/// Which metric families are served, like node_exporter's collector flags or dcgm-exporter's
/// counters file. Selection only trims the page: the analysis still reads every signal, so
/// verdicts do not change.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Metrics {
    /// When not empty, only families whose name matches one of these regexes are served.
    pub include: Vec<FamilyPattern>,
    /// Families whose name matches one of these regexes are not served (after `include`).
    pub exclude: Vec<FamilyPattern>,
}

impl Metrics {
    /// Whether a family is served; `name` is the family name and `sample_name` the name its
    /// samples carry (with `_total` or `_info`), so either spelling selects it.
    pub fn serves(&self, name: &str, sample_name: &str) -> bool {
        let matches =
            |FamilyPattern(Pattern(p)): &FamilyPattern| p.is_match(name) || p.is_match(sample_name);
        (self.include.is_empty() || self.include.iter().any(matches))
            && !self.exclude.iter().any(matches)
    }
}

/// A regular expression that must match a whole metric family name (it is anchored).
#[derive(Debug, Clone, PartialEq)]
pub struct FamilyPattern(pub Pattern);

impl<'de> Deserialize<'de> for FamilyPattern {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Pattern::parse(&format!("^(?:{text})$"))
            .map(FamilyPattern)
            .map_err(|e| {
                D::Error::custom(format!(
                    "invalid metric family pattern {text:?}: expected a regex over family names such as gpu_process_.*: {e}"
                ))
            })
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen_address: ListenAddress(SocketAddr::from(([0, 0, 0, 0], DEFAULT_PORT))),
            web: Web::default(),
            sample_interval: ConfigDuration(Duration::from_secs(1)),
            log_level: LogLevel::Info,
            paths: Paths::default(),
            sources: Sources::default(),
            analysis: Thresholds::default(),
            metrics: Metrics::default(),
        }
    }
}

/// Limits that keep slow or hostile clients from tying the server up, and the optional
/// TLS/authentication file.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Web {
    /// Web configuration file in the Prometheus exporter-toolkit format (TLS certificate and
    /// key, client certificates, basic-auth users with bcrypt hashes, security headers); empty:
    /// plain HTTP without authentication. Re-read when it or a file it names changes.
    pub config_file: PathBuf,
    /// Most connections served at once; a connection past it gets 503 (over TLS: is closed).
    #[serde(deserialize_with = "at_least::<1, _>")]
    pub max_connections: usize,
    /// A request head must arrive complete within this long of the connection opening or of
    /// the previous response; also how long an idle keep-alive connection is kept.
    pub header_read_timeout: ConfigDuration,
    /// Longest a request may take to answer, basic-auth check included (503 past it).
    pub request_timeout: ConfigDuration,
    /// A response write that makes no progress this long closes the connection (a client
    /// that stopped reading).
    pub write_timeout: ConfigDuration,
    /// Largest request head (request line and headers) accepted; larger gets 431.
    #[serde(deserialize_with = "at_least::<1024, _>")]
    pub max_header_bytes: usize,
}

impl Default for Web {
    fn default() -> Self {
        Web {
            config_file: PathBuf::new(),
            max_connections: 256,
            header_read_timeout: ConfigDuration(Duration::from_secs(30)),
            request_timeout: ConfigDuration(Duration::from_secs(10)),
            write_timeout: ConfigDuration(Duration::from_secs(10)),
            max_header_bytes: 16 * 1024,
        }
    }
}

/// A count that must be at least `MIN` to make sense.
fn at_least<'de, const MIN: usize, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    let value = usize::deserialize(d)?;
    if value < MIN {
        return Err(D::Error::custom(format!(
            "{value} is too small: expected at least {MIN}"
        )));
    }
    Ok(value)
}

/// Roots of the host pseudo-filesystems, like node_exporter's `--path.procfs`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Paths {
    /// Mount point of procfs.
    pub procfs: PathBuf,
    /// Mount point of sysfs.
    pub sysfs: PathBuf,
}

impl Default for Paths {
    fn default() -> Self {
        Paths {
            procfs: PathBuf::from("/proc"),
            sysfs: PathBuf::from("/sys"),
        }
    }
}

/// A socket address, validated while parsing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListenAddress(pub SocketAddr);

impl<'de> Deserialize<'de> for ListenAddress {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map(ListenAddress).map_err(|_| {
            D::Error::custom(format!(
                "invalid listen address {text:?}: expected HOST:PORT such as 0.0.0.0:{DEFAULT_PORT} or [::]:{DEFAULT_PORT}"
            ))
        })
    }
}

/// A positive duration written with a unit: `500ms`, `1s`, `2m`, `1h`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConfigDuration(pub Duration);

impl ConfigDuration {
    /// Parses `<number><unit>` with unit ms, s, m or h; zero is refused.
    pub fn parse(text: &str) -> Result<Self, String> {
        let expected = "expected a positive duration such as 500ms, 1s, 2m or 1h";
        let text = text.trim();
        let split = text
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| format!("invalid duration {text:?}: missing unit; {expected}"))?;
        let (number, unit) = text.split_at(split);
        let number: f64 = number
            .parse()
            .map_err(|_| format!("invalid duration {text:?}: {expected}"))?;
        let seconds = match unit {
            "ms" => number / 1000.0,
            "s" => number,
            "m" => number * 60.0,
            "h" => number * 3600.0,
            _ => return Err(format!("invalid duration unit {unit:?}: {expected}")),
        };
        if !(seconds > 0.0 && seconds.is_finite()) {
            return Err(format!("invalid duration {text:?}: {expected}"));
        }
        // Found by tests/fuzz.rs: a duration past u64 seconds must be an error, not a panic.
        Duration::try_from_secs_f64(seconds)
            .map(ConfigDuration)
            .map_err(|_| format!("invalid duration {text:?}: too long; {expected}"))
    }
}

impl<'de> Deserialize<'de> for ConfigDuration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        ConfigDuration::parse(&text).map_err(D::Error::custom)
    }
}

/// A regular expression, compiled while parsing. The empty pattern matches everything.
#[derive(Debug, Clone)]
pub struct Pattern(pub regex::Regex);

impl Pattern {
    /// Compiles `text`, with the regex crate's message on failure.
    pub fn parse(text: &str) -> Result<Self, String> {
        regex::Regex::new(text)
            .map(Pattern)
            .map_err(|e| format!("invalid regex {text:?}: {e}"))
    }

    /// Whether the pattern is empty (and so selects everything).
    pub fn is_empty(&self) -> bool {
        self.0.as_str().is_empty()
    }
}

impl PartialEq for Pattern {
    fn eq(&self, other: &Self) -> bool {
        self.0.as_str() == other.0.as_str()
    }
}

impl<'de> Deserialize<'de> for Pattern {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Pattern::parse(&text).map_err(D::Error::custom)
    }
}

/// Log verbosity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    /// Only failures.
    Error,
    /// Failures and degraded sources.
    Warn,
    /// Start-up, shutdown and source state changes.
    Info,
    /// Plus per-source details such as unsupported features.
    Debug,
    /// Everything.
    Trace,
}

impl LogLevel {
    /// The matching `tracing` level.
    pub fn as_tracing(self) -> tracing::Level {
        match self {
            LogLevel::Error => tracing::Level::ERROR,
            LogLevel::Warn => tracing::Level::WARN,
            LogLevel::Info => tracing::Level::INFO,
            LogLevel::Debug => tracing::Level::DEBUG,
            LogLevel::Trace => tracing::Level::TRACE,
        }
    }
}

/// Command-line values that, when given, replace what the file says.
#[derive(Debug, Default, Clone)]
pub struct Overrides {
    /// `--listen`
    pub listen_address: Option<SocketAddr>,
    /// `--web.config.file`
    pub web_config_file: Option<PathBuf>,
    /// `--path.procfs`
    pub procfs: Option<PathBuf>,
    /// `--path.sysfs`
    pub sysfs: Option<PathBuf>,
    /// `--log-level`
    pub log_level: Option<LogLevel>,
}

/// A configuration that could not be loaded; the message names file, line and column.
#[derive(Debug)]
pub struct ConfigError(pub String);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

impl Config {
    /// Parses YAML text; `origin` names the file in error messages.
    pub fn from_yaml(text: &str, origin: &str) -> Result<Config, ConfigError> {
        // serde-saphyr's message starts with "error: line L column C: what was expected"
        // and ends with a snippet pointing at the value.
        serde_saphyr::from_str::<Config>(text)
            .map_err(|e| ConfigError(format!("invalid configuration in {origin}: {e}")))
    }

    /// Reads the file if one is given (defaults otherwise), then applies the overrides.
    pub fn load(path: Option<&Path>, overrides: &Overrides) -> Result<Config, ConfigError> {
        let mut config = match path {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    ConfigError(format!("cannot read configuration {}: {e}", path.display()))
                })?;
                Config::from_yaml(&text, &path.display().to_string())?
            }
            None => Config::default(),
        };
        if let Some(address) = overrides.listen_address {
            config.listen_address = ListenAddress(address);
        }
        if let Some(file) = &overrides.web_config_file {
            config.web.config_file = file.clone();
        }
        if let Some(procfs) = &overrides.procfs {
            config.paths.procfs = procfs.clone();
        }
        if let Some(sysfs) = &overrides.sysfs {
            config.paths.sysfs = sysfs.clone();
        }
        if let Some(level) = overrides.log_level {
            config.log_level = level;
        }
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error_of(yaml: &str) -> String {
        Config::from_yaml(yaml, "test.yaml").unwrap_err().0
    }

    #[test]
    fn empty_file_gives_defaults() {
        assert_eq!(Config::from_yaml("", "x").unwrap(), Config::default());
        assert_eq!(
            Config::from_yaml("# nothing\n", "x").unwrap(),
            Config::default()
        );
    }

    #[test]
    fn example_file_lists_every_default() {
        let text = include_str!("../../config.example.yaml");
        assert_eq!(
            Config::from_yaml(text, "config.example.yaml").unwrap(),
            Config::default()
        );
    }

    #[test]
    fn values_are_read() {
        let config = Config::from_yaml(
            "listen_address: 127.0.0.1:1234\nsample_interval: 250ms\nlog_level: debug\nsources:\n  disk:\n    include: '^nvme'\n  pressure:\n    enabled: false\n",
            "x",
        )
        .unwrap();
        assert_eq!(config.listen_address.0, "127.0.0.1:1234".parse().unwrap());
        assert_eq!(config.sample_interval.0, Duration::from_millis(250));
        assert_eq!(config.log_level, LogLevel::Debug);
        assert!(config.sources.disk.include.0.is_match("nvme0n1"));
        assert!(!config.sources.pressure.enabled);
        assert!(config.sources.cpu.enabled);
    }

    #[test]
    fn unknown_key_names_file_line_and_column() {
        let message = error_of("sources:\n  disk:\n    exclud: x\n");
        assert!(message.contains("test.yaml"), "{message}");
        assert!(message.contains("line 3 column 5"), "{message}");
        assert!(message.contains("unknown field `exclud`"), "{message}");
    }

    #[test]
    fn wrong_type_is_refused() {
        let message = error_of("sources:\n  cpu:\n    enabled: maybe\n");
        assert!(message.contains("line 3 column 14"), "{message}");
    }

    #[test]
    fn invalid_values_are_refused_at_their_position() {
        let message = error_of("sample_interval: 0s\n");
        assert!(message.contains("line 1 column 18"), "{message}");
        assert!(message.contains("positive duration"), "{message}");

        let message = error_of("listen_address: localhost\n");
        assert!(message.contains("line 1 column 17"), "{message}");
        assert!(message.contains("HOST:PORT"), "{message}");

        let message = error_of("sources:\n  disk:\n    include: '(unclosed'\n");
        assert!(message.contains("line 3 column 14"), "{message}");
        assert!(message.contains("invalid regex"), "{message}");

        let message = error_of("web:\n  max_connections: 0\n");
        assert!(message.contains("line 2 column 20"), "{message}");
        assert!(message.contains("at least 1"), "{message}");

        let message = error_of("sources:\n  cuda:\n    launch_windows_every: 100ms\n");
        assert!(message.contains("line 3 column 27"), "{message}");
        assert!(message.contains("at least 1s"), "{message}");

        let message = error_of("log_level: loud\n");
        assert!(message.contains("line 1 column 12"), "{message}");

        // The second pattern of the list is the bad one: its own position is reported.
        let message = error_of("metrics:\n  exclude:\n    - gpu_process_.*\n    - 'gpu_(xid'\n");
        assert!(message.contains("line 4 column 7"), "{message}");
        assert!(
            message.contains("invalid metric family pattern"),
            "{message}"
        );
    }

    #[test]
    fn metric_patterns_match_whole_family_names_in_either_spelling() {
        let config: Config = serde_saphyr::from_str(
            "metrics:\n  include: ['gpu_.*']\n  exclude: [gpu_xid_errors_total, gpu_process_.*]\n",
        )
        .unwrap();
        let m = &config.metrics;
        assert!(m.serves("gpu_up", "gpu_up"));
        assert!(!m.serves("gpu_xid_errors", "gpu_xid_errors_total"));
        assert!(!m.serves("gpu_process_threads", "gpu_process_threads"));
        // Anchored: `gpu_.*` does not select a family that merely contains it.
        assert!(!m.serves("node_gpu_up", "node_gpu_up"));
        assert!(Metrics::default().serves("anything", "anything"));
    }

    #[test]
    fn durations() {
        assert_eq!(
            ConfigDuration::parse("1.5s").unwrap().0,
            Duration::from_millis(1500)
        );
        assert_eq!(
            ConfigDuration::parse("2m").unwrap().0,
            Duration::from_secs(120)
        );
        for bad in [
            "",
            "1",
            "s",
            "0ms",
            "-1s",
            "1d",
            "1 s x",
            "99999999999999999999999999999999999991s",
        ] {
            assert!(ConfigDuration::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn overrides_win_over_the_file() {
        let dir = std::env::temp_dir().join(format!("gbe-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("c.yaml");
        std::fs::write(&file, "listen_address: 127.0.0.1:1\npaths:\n  procfs: /a\n").unwrap();
        let overrides = Overrides {
            listen_address: Some("127.0.0.1:2".parse().unwrap()),
            ..Overrides::default()
        };
        let config = Config::load(Some(&file), &overrides).unwrap();
        assert_eq!(config.listen_address.0.port(), 2);
        assert_eq!(config.paths.procfs, PathBuf::from("/a"));
        assert!(Config::load(Some(&dir.join("missing.yaml")), &overrides).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
