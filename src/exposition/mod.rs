//! Snapshot → exposition bytes. The only place metric names, HELP texts and units appear.
//!
//! Each tick's families are built once; each text format (and its gzip form) is rendered from
//! them once, when first scraped, so a scrape only copies bytes out. The one figure that
//! depends on the scrape's own time, the sample age, is appended at scrape time: a stuck
//! sampler then shows as a growing age, not a frozen page. The family builders live in one
//! module per area (host, gpu, process, verdict).

mod cuda;
mod gpu;
mod host;
mod network;
mod page;
mod process;
mod verdict;

use std::fmt::Write as _;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use bytes::Bytes;

pub use self::page::Page;
use crate::analysis::GpuVerdict;
use crate::config::Metrics;
use crate::snapshot::{HttpCounters, Rejection, Snapshot};

/// How a metric family behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricType {
    /// Monotonic; samples carry the `_total` suffix.
    Counter,
    /// Any value.
    Gauge,
    /// Identity, valued 1; samples carry the `_info` suffix.
    Info,
}

/// The fixed description of one metric family.
#[derive(Debug)]
pub struct MetricDef {
    /// Family name without the `_total` / `_info` suffix.
    pub name: &'static str,
    /// Counter, gauge or info.
    pub kind: MetricType,
    /// Base unit the name ends with (`seconds`, `bytes`, `ratio`), for OpenMetrics' UNIT line.
    pub unit: Option<&'static str>,
    /// One-line help text.
    pub help: &'static str,
    /// Label names, in the order values are given.
    pub labels: &'static [&'static str],
}

impl MetricDef {
    /// The name samples are exposed under (`_total` for counters, `_info` for info metrics).
    pub fn sample_name(&self) -> String {
        match self.kind {
            MetricType::Counter => format!("{}_total", self.name),
            MetricType::Info => format!("{}_info", self.name),
            MetricType::Gauge => self.name.to_string(),
        }
    }
}

/// Exposition format chosen by content negotiation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Prometheus classic text format 0.0.4.
    Text,
    /// OpenMetrics 1.0 text.
    OpenMetrics,
}

impl Format {
    /// The Content-Type header of a response in this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Text => "text/plain; version=0.0.4; charset=utf-8",
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }
}

/// One family with its samples: label values in the order of `def.labels`, and the value.
#[derive(Debug)]
struct Family {
    def: &'static MetricDef,
    samples: Vec<(Vec<String>, f64)>,
}

impl Family {
    fn new(def: &'static MetricDef) -> Self {
        Family {
            def,
            samples: Vec::new(),
        }
    }

    fn add<S: AsRef<str>>(&mut self, labels: &[S], value: f64) {
        debug_assert_eq!(labels.len(), self.def.labels.len(), "{}", self.def.name);
        self.samples.push((
            labels.iter().map(|l| l.as_ref().to_string()).collect(),
            value,
        ));
    }

    fn single(def: &'static MetricDef, value: f64) -> Self {
        let mut family = Family::new(def);
        family.add::<&str>(&[], value);
        family
    }
}

/// A published exposition: one snapshot, its families built when first asked for and each
/// format's page (without the scrape-time families and `# EOF`) rendered from them when first
/// asked for. A tick publishes one every second and Prometheus scrapes every 15 s or so: most
/// are never rendered (building the families of a node of eight ranks, a thousand series of
/// labels, was a tenth of the exporter's CPU when done at every tick).
#[derive(Debug)]
pub struct Exposition {
    snapshot: Snapshot,
    tick_seconds: f64,
    metrics: Arc<Metrics>,
    families: OnceLock<Vec<Family>>,
    text: OnceLock<Page>,
    openmetrics: OnceLock<Page>,
    /// When the snapshot behind it was taken.
    pub sampled_at: Instant,
}

impl Exposition {
    /// The verdicts of the snapshot, for `/api/v1/diagnosis` (rendered only when asked).
    pub fn verdicts(&self) -> &[GpuVerdict] {
        &self.snapshot.verdicts
    }

    /// Whether the snapshot is the simulated node.
    pub fn simulated(&self) -> bool {
        self.snapshot.simulated
    }

    /// The families served, built on first use.
    fn families(&self) -> &[Family] {
        self.families.get_or_init(|| {
            let mut families = families(&self.snapshot, self.tick_seconds);
            families.retain(|family| {
                self.metrics
                    .serves(family.def.name, &family.def.sample_name())
            });
            families
        })
    }

    /// The page of one format, rendered on first use.
    pub fn page(&self, format: Format) -> &Page {
        let cell = match format {
            Format::Text => &self.text,
            Format::OpenMetrics => &self.openmetrics,
        };
        cell.get_or_init(|| Page::new(encode(self.families(), format)))
    }

    /// The full response body at time `now`: the page plus the sample age and HTTP counters
    /// (and OpenMetrics' closing `# EOF`).
    pub fn body(&self, format: Format, now: Instant, http: &HttpCounters) -> Vec<u8> {
        self.body_parts(format, now, http, false).concat()
    }

    /// The same body as two parts to send in order, gzip-compressed if asked: the page (shared,
    /// compressed once per snapshot) and the scrape-time tail.
    pub fn body_parts(
        &self,
        format: Format,
        now: Instant,
        http: &HttpCounters,
        gzip: bool,
    ) -> [Bytes; 2] {
        let page = self.page(format);
        let age = now.saturating_duration_since(self.sampled_at).as_secs_f64();
        let mut tail = encode(&scrape_families(age, http), format);
        if format == Format::OpenMetrics {
            tail.push_str("# EOF\n");
        }
        if gzip {
            page.gzip_with(tail.as_bytes())
        } else {
            [page.plain.clone(), Bytes::from(tail)]
        }
    }
}

/// The exposition of a snapshot, less the families `metrics` excludes (built when first
/// scraped). `tick_seconds` is how long taking it lasted.
pub fn render(
    snapshot: Snapshot,
    tick_seconds: f64,
    sampled_at: Instant,
    metrics: Arc<Metrics>,
) -> Exposition {
    Exposition {
        snapshot,
        tick_seconds,
        metrics,
        families: OnceLock::new(),
        text: OnceLock::new(),
        openmetrics: OnceLock::new(),
        sampled_at,
    }
}

#[rustfmt::skip]
mod catalog;
pub use catalog::*;

/// Commit the binary was built from (set by build.rs; "unknown" outside a git checkout).
pub const COMMIT: &str = env!("GPU_EXPORTER_COMMIT");

/// The families that change between ticks, rendered at each scrape.
fn scrape_families(sample_age: f64, http: &HttpCounters) -> Vec<Family> {
    let mut rejected = Family::new(&HTTP_REJECTED);
    for (reason, count) in Rejection::ALL.iter().zip(http.rejected) {
        rejected.add(&[reason.label()], count as f64);
    }
    vec![
        Family::single(&HTTP_OPEN_CONNECTIONS, http.open_connections as f64),
        rejected,
        Family::single(&WEB_CONFIG_OK, flag(!http.web_config_reload_failed)),
        Family::single(&SAMPLE_AGE, sample_age),
    ]
}

fn families(snapshot: &Snapshot, tick_seconds: f64) -> Vec<Family> {
    let mut out = Vec::new();
    host::self_families(snapshot, tick_seconds, &mut out);
    host::cpu_families(snapshot, &mut out);
    host::disk_families(snapshot, &mut out);
    host::pressure_families(snapshot, &mut out);
    host::memory_families(snapshot, &mut out);
    network::network_families(&snapshot.network, &mut out);
    if let Some(gpu) = &snapshot.gpu {
        gpu::gpu_families(gpu, &snapshot.node, &mut out);
        gpu::pod_families(gpu, &mut out);
        process::process_context_families(gpu, &snapshot.processes, &mut out);
        process::process_stack_families(gpu, &snapshot.stacks, &mut out);
        cuda::process_cuda_families(gpu, &snapshot.cuda, &mut out);
        network::process_network_families(gpu, &snapshot.network, &mut out);
    }
    verdict::verdict_families(&snapshot.verdicts, snapshot.gpu.as_ref(), &mut out);
    if let Some(ratio) = snapshot.other_cpu_ratio {
        out.push(Family::single(&OTHER_CPU, ratio));
    }
    if let Some(enabled) = snapshot.delay_accounting {
        out.push(Family::single(&DELAY_ACCOUNTING, flag(enabled)));
    }
    if let Some(culprits) = &snapshot.culprits {
        host::culprit_families(culprits, &mut out);
    }
    out.retain(|family| !family.samples.is_empty());
    out
}

fn flag(value: bool) -> f64 {
    if value {
        1.0
    } else {
        0.0
    }
}

/// Encodes families in one format. Families without samples were removed by the caller.
fn encode(families: &[Family], format: Format) -> String {
    let mut out = String::with_capacity(families.len() * 160);
    for family in families {
        let def = family.def;
        let sample_name = def.sample_name();
        let (header_name, type_name) = match (format, def.kind) {
            (Format::Text, MetricType::Counter) => (sample_name.as_str(), "counter"),
            (Format::Text, MetricType::Info) => (sample_name.as_str(), "gauge"),
            (Format::Text, MetricType::Gauge) => (def.name, "gauge"),
            (Format::OpenMetrics, MetricType::Counter) => (def.name, "counter"),
            (Format::OpenMetrics, MetricType::Info) => (def.name, "info"),
            (Format::OpenMetrics, MetricType::Gauge) => (def.name, "gauge"),
        };
        let _ = writeln!(out, "# HELP {header_name} {}", escape_help(def.help));
        let _ = writeln!(out, "# TYPE {header_name} {type_name}");
        if let (Format::OpenMetrics, Some(unit)) = (format, def.unit) {
            let _ = writeln!(out, "# UNIT {header_name} {unit}");
        }
        for (values, value) in &family.samples {
            out.push_str(&sample_name);
            if !values.is_empty() {
                out.push('{');
                for (i, (name, label_value)) in def.labels.iter().zip(values).enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    let _ = write!(out, "{name}=\"{}\"", escape_label(label_value));
                }
                out.push('}');
            }
            out.push(' ');
            out.push_str(&format_value(*value));
            out.push('\n');
        }
    }
    out
}

/// Formats a sample value the way both formats accept it.
pub fn format_value(value: f64) -> String {
    if value.is_nan() {
        "NaN".into()
    } else if value == f64::INFINITY {
        "+Inf".into()
    } else if value == f64::NEG_INFINITY {
        "-Inf".into()
    } else {
        value.to_string()
    }
}

fn escape_label(value: &str) -> String {
    value
        .replace('\\', r"\\")
        .replace('"', "\\\"")
        .replace('\n', r"\n")
}

fn escape_help(help: &str) -> String {
    help.replace('\\', r"\\").replace('\n', r"\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::{SourceOutcome, SourceStatus};

    fn snapshot() -> Snapshot {
        Snapshot {
            sources: vec![
                SourceStatus {
                    name: "cpu",
                    outcome: SourceOutcome::Ok,
                    duration_seconds: 0.25,
                    errors_total: 0,
                },
                SourceStatus {
                    name: "pressure",
                    outcome: SourceOutcome::Unsupported("no psi".into()),
                    duration_seconds: 0.5,
                    errors_total: 0,
                },
            ],
            samples_total: 3,
            ..Snapshot::default()
        }
    }

    #[test]
    fn classic_text_names_counters_with_total_in_type_line() {
        let exposition = render(snapshot(), 0.5, Instant::now(), Arc::default());
        let text = String::from_utf8(exposition.page(Format::Text).plain.to_vec()).unwrap();
        assert!(
            text.contains(
                "# TYPE gpu_exporter_samples_total counter\ngpu_exporter_samples_total 3\n"
            ),
            "{text}"
        );
        assert!(text.contains("# TYPE gpu_exporter_build_info gauge\n"));
        assert!(text.contains("gpu_exporter_source_up{source=\"cpu\"} 1\n"));
        assert!(text.contains("gpu_exporter_source_up{source=\"pressure\"} 0\n"));
        assert!(text.contains("gpu_exporter_source_supported{source=\"pressure\"} 0\n"));
        assert!(!text.contains("# UNIT"));
        assert!(!text.contains("# EOF"));
    }

    #[test]
    fn openmetrics_has_family_names_units_and_eof() {
        let exposition = render(snapshot(), 0.5, Instant::now(), Arc::default());
        let body = String::from_utf8(exposition.body(
            Format::OpenMetrics,
            exposition.sampled_at,
            &HttpCounters::default(),
        ))
        .unwrap();
        assert!(
            body.contains("# TYPE gpu_exporter_samples counter\ngpu_exporter_samples_total 3\n")
        );
        assert!(body.contains("# TYPE gpu_exporter_build info\n"));
        assert!(body.contains("# UNIT gpu_exporter_sample_duration_seconds seconds\n"));
        assert!(
            body.ends_with("gpu_exporter_sample_age_seconds 0\n# EOF\n"),
            "{body}"
        );
    }

    #[test]
    fn scrape_time_families_are_appended() {
        let exposition = render(snapshot(), 0.5, Instant::now(), Arc::default());
        let later = exposition.sampled_at + std::time::Duration::from_millis(2500);
        let mut http = HttpCounters {
            open_connections: 3,
            web_config_reload_failed: true,
            ..HttpCounters::default()
        };
        http.rejected[Rejection::Unauthorized as usize] = 7;
        let body = String::from_utf8(exposition.body(Format::Text, later, &http)).unwrap();
        assert!(body.contains("gpu_exporter_http_open_connections 3\n"));
        assert!(body.contains("gpu_exporter_http_rejected_total{reason=\"unauthorized\"} 7\n"));
        assert!(body.contains("gpu_exporter_http_rejected_total{reason=\"header_timeout\"} 0\n"));
        assert!(body.contains("gpu_exporter_web_config_last_reload_successful 0\n"));
        assert!(
            body.ends_with("gpu_exporter_sample_age_seconds 2.5\n"),
            "{body}"
        );
    }

    #[test]
    fn excluded_families_are_not_served_and_formats_render_when_asked() {
        let metrics: Metrics =
            serde_saphyr::from_str("exclude: [gpu_exporter_source_.*, gpu_exporter_samples_total]")
                .unwrap();
        let exposition = render(snapshot(), 0.5, Instant::now(), Arc::new(metrics));
        assert!(exposition.openmetrics.get().is_none() && exposition.text.get().is_none());
        let text = String::from_utf8(exposition.body(
            Format::Text,
            Instant::now(),
            &HttpCounters::default(),
        ))
        .unwrap();
        assert!(exposition.text.get().is_some() && exposition.openmetrics.get().is_none());
        assert!(!text.contains("gpu_exporter_source_"), "{text}");
        assert!(!text.contains("gpu_exporter_samples_total"));
        // Patterns match the whole name: a prefix alone does not drop a family.
        assert!(text.contains("gpu_exporter_sample_duration_seconds"));
        assert!(text.contains("gpu_exporter_build_info"));
    }

    #[test]
    fn values_and_labels_are_escaped() {
        assert_eq!(format_value(f64::NAN), "NaN");
        assert_eq!(format_value(f64::INFINITY), "+Inf");
        assert_eq!(format_value(1e-7), "0.0000001");
        assert_eq!(format_value(3.0), "3");
        assert_eq!(escape_label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }

    #[test]
    fn every_unit_is_the_suffix_of_its_name() {
        for def in [
            &CPU_SECONDS,
            &DISK_READ_BYTES,
            &PSI_RATIO,
            &SAMPLE_AGE,
            &MEM_TOTAL,
        ] {
            assert!(def.name.ends_with(def.unit.unwrap()), "{}", def.name);
        }
    }
}
