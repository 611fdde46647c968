//! `top`: a live view of the node, one row per GPU, refreshed every second. It reads the same
//! diagnosis document `/api/v1/diagnosis` serves, from a running exporter (`--url`) or from a
//! sampler of its own, and shows it as a terminal UI (`tui.rs`) or, when stdout is not a
//! terminal, as a plain table printed on every refresh.

mod fetch;
mod tui;

use serde_json::Value;

pub use fetch::{Remote, Source};

/// One GPU as the view shows it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Row {
    /// GPU index.
    pub gpu: u64,
    /// Mean busy fraction over the window.
    pub busy: Option<f64>,
    /// GPM SM activity.
    pub sm_activity: Option<f64>,
    /// Device memory used share.
    pub memory_used: Option<f64>,
    /// The primary verdict.
    pub primary: String,
    /// Its score, where it is a kind.
    pub score: Option<f64>,
    /// observed or inferred.
    pub basis: String,
    /// The lost-time split, largest first: (cause, share of the GPU's time).
    pub lost: Vec<(String, f64)>,
    /// The primary kind's strongest evidence, as `name value (detail)`.
    pub evidence: String,
    /// The main GPU process.
    pub process: String,
    /// The pod the GPU is assigned to.
    pub pod: String,
    /// The main thread's most seen frame, where stacks are read.
    pub frame: String,
    /// The loop's step in seconds, and the share of it the GPU's rank costs its ranks on the
    /// node (where measured).
    pub step: Option<f64>,
    pub behind_ranks: Option<f64>,
}

impl Row {
    /// The time the GPU lost, all causes.
    pub fn lost_total(&self) -> f64 {
        self.lost.iter().map(|(_, s)| s).sum()
    }
}

fn text(value: &Value) -> String {
    value.as_str().unwrap_or_default().to_string()
}

/// The rows of a diagnosis document, in the document's order (most urgent first).
pub fn rows(diagnosis: &Value) -> Vec<Row> {
    let gpus = diagnosis["gpus"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    gpus.iter()
        .map(|g| {
            let primary = text(&g["primary"]);
            let kind = g["kinds"]
                .as_array()
                .and_then(|kinds| kinds.iter().find(|k| k["kind"] == g["primary"]));
            let evidence = kind
                .and_then(|k| k["evidence"].as_array())
                .and_then(|evidence| {
                    evidence
                        .iter()
                        // The busy fraction and the cost have columns of their own.
                        .filter(|e| e["input"] != "gpu_busy" && e["input"] != "lost_time_share")
                        .max_by(|a, b| {
                            let strength = |e: &Value| e["strength"].as_f64().unwrap_or(0.0);
                            strength(a).total_cmp(&strength(b))
                        })
                })
                .map(|e| {
                    let detail = text(&e["detail"]);
                    let value = e["value"].as_f64().unwrap_or(0.0);
                    if detail.is_empty() {
                        format!("{} {value:.2}", text(&e["input"]))
                    } else {
                        format!("{} {value:.2} ({detail})", text(&e["input"]))
                    }
                })
                .unwrap_or_default();
            let mut lost: Vec<(String, f64)> = g["lost_time"]["causes"]
                .as_object()
                .map(|causes| {
                    causes
                        .iter()
                        .filter_map(|(cause, share)| Some((cause.clone(), share.as_f64()?)))
                        .filter(|(_, share)| *share >= 0.005)
                        .collect()
                })
                .unwrap_or_default();
            lost.sort_by(|a, b| b.1.total_cmp(&a.1));
            let frame = g["main_thread"]["top_frames"]
                .as_array()
                .and_then(|frames| frames.first())
                .map(|f| format!("{} at {}", text(&f["function"]), text(&f["location"])))
                .unwrap_or_default();
            let figures = &g["figures"];
            Row {
                gpu: g["gpu"].as_u64().unwrap_or(0),
                busy: figures["busy"].as_f64(),
                sm_activity: figures["sm_activity"].as_f64(),
                memory_used: figures["memory_used"].as_f64(),
                score: kind.and_then(|k| k["score"].as_f64()),
                basis: text(&g["basis"]),
                primary,
                lost,
                evidence,
                process: text(&figures["process"]),
                pod: text(&figures["pod"]),
                frame,
                step: g["step"]["seconds"].as_f64(),
                behind_ranks: g["step"]["behind_node_ranks"].as_f64(),
            }
        })
        .collect()
}

/// How the rows are ordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// As the diagnosis ranks them: hung, bottlenecks by score, then the rest.
    Urgency,
    /// The GPU that loses the most time first.
    LostTime,
    /// By GPU index.
    Index,
}

impl Order {
    /// The next order (the `s` key).
    pub fn next(self) -> Order {
        match self {
            Order::Urgency => Order::LostTime,
            Order::LostTime => Order::Index,
            Order::Index => Order::Urgency,
        }
    }

    /// Its name, for the header.
    pub fn name(self) -> &'static str {
        match self {
            Order::Urgency => "urgency",
            Order::LostTime => "lost time",
            Order::Index => "GPU",
        }
    }

    /// Sorts `rows` (given in urgency order) in this order.
    pub fn sort(self, rows: &mut [Row]) {
        match self {
            Order::Urgency => {}
            Order::LostTime => rows.sort_by(|a, b| b.lost_total().total_cmp(&a.lost_total())),
            Order::Index => rows.sort_by_key(|r| r.gpu),
        }
    }
}

fn percent(value: Option<f64>) -> String {
    value.map_or("-".into(), |v| format!("{:.0}%", 100.0 * v))
}

/// The lost-time split as text: `data_io 41% host_bound 10%`.
pub fn lost_text(row: &Row) -> String {
    row.lost
        .iter()
        .filter(|(cause, _)| cause != "unexplained")
        .take(3)
        .map(|(cause, share)| format!("{cause} {:.0}%", 100.0 * share))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The step as shown: `0.31s`, with `!` when the rank costs its node's other ranks 10 % or
/// more of their step (the straggler).
pub fn step_text(row: &Row) -> String {
    let Some(step) = row.step else {
        return "-".into();
    };
    let straggler = if row.behind_ranks.is_some_and(|b| b >= 0.1) {
        "!"
    } else {
        ""
    };
    format!("{step:.2}s{straggler}")
}

/// The verdict as shown: `data_io 1.00 observed`.
pub fn verdict_text(row: &Row) -> String {
    match row.score {
        Some(score) => format!("{} {score:.2} {}", row.primary, row.basis),
        None => format!("{} {}", row.primary, row.basis),
    }
}

/// The plain table printed on every refresh when stdout is not a terminal.
pub fn plain_table(rows: &[Row]) -> String {
    let mut out = format!(
        "{:>3}  {:>5}  {:>5}  {:>5}  {:>7}  {:<34}  {:<40}  {}\n",
        "GPU", "BUSY", "SM", "MEM", "STEP", "VERDICT", "LOST TIME", "PROCESS / POD / FRAME"
    );
    for row in rows {
        let who = [row.process.as_str(), row.pod.as_str(), row.frame.as_str()]
            .into_iter()
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join("  ");
        out += &format!(
            "{:>3}  {:>5}  {:>5}  {:>5}  {:>7}  {:<34}  {:<40}  {}\n",
            row.gpu,
            percent(row.busy),
            percent(row.sm_activity),
            percent(row.memory_used),
            step_text(row),
            verdict_text(row),
            lost_text(row),
            who
        );
    }
    out
}

/// Runs the view until `q` (terminal) or for `refreshes` refreshes (plain text; `None`: until
/// interrupted).
pub fn run(source: Source, refreshes: Option<u64>) -> Result<(), String> {
    use std::io::IsTerminal;
    if std::io::stdout().is_terminal() {
        tui::run(source)
    } else {
        plain(source, refreshes)
    }
}

fn plain(mut source: Source, refreshes: Option<u64>) -> Result<(), String> {
    use std::io::Write;
    let mut done = 0;
    loop {
        if done > 0 {
            std::thread::sleep(fetch::REFRESH);
        }
        let diagnosis = if done == 0 {
            source.fetch_first()?
        } else {
            source.fetch()?
        };
        let mut stdout = std::io::stdout().lock();
        writeln!(stdout, "{}", plain_table(&rows(&diagnosis))).map_err(|e| e.to_string())?;
        stdout.flush().map_err(|e| e.to_string())?;
        done += 1;
        if refreshes.is_some_and(|n| done >= n) {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn diagnosis() -> Value {
        json!({"gpus": [
            {"gpu": 3, "primary": "busy", "basis": "inferred", "kinds": [],
             "figures": {"busy": 0.97, "sm_activity": 0.8, "memory_used": 0.5}},
            {"gpu": 0, "primary": "data_io", "basis": "observed",
             "figures": {"busy": 0.35, "sm_activity": 0.3, "memory_used": 0.6,
                         "process": "pid 10 (python3)", "pod": "vision/train-0"},
             "kinds": [{"kind": "data_io", "score": 1.0, "evidence": [
                 {"input": "gpu_busy", "value": 0.35, "strength": 1.0},
                 {"input": "main_thread_waits_for_loader", "value": 0.7, "strength": 1.0,
                  "detail": "train at /w/train.py:61, 70 % of the samples"}]}],
             "lost_time": {"causes": {"data_io": 0.41, "host_bound": 0.1, "unexplained": 0.03, "busy_none": 0.0}},
             "step": {"seconds": 0.4123, "best_seconds": 0.2, "behind_node_ranks": 0.38},
             "main_thread": {"top_frames": [{"function": "train", "location": "/w/train.py:61"}]}}
        ]})
    }

    #[test]
    fn rows_carry_what_the_view_shows() {
        let rows = rows(&diagnosis());
        assert_eq!(rows.len(), 2);
        let starved = &rows[1];
        assert_eq!(starved.gpu, 0);
        assert_eq!(verdict_text(starved), "data_io 1.00 observed");
        assert_eq!(lost_text(starved), "data_io 41% host_bound 10%");
        assert!(starved
            .evidence
            .starts_with("main_thread_waits_for_loader 0.70 (train at"));
        assert_eq!(starved.frame, "train at /w/train.py:61");
        assert_eq!(verdict_text(&rows[0]), "busy inferred");
        let table = plain_table(&rows);
        assert!(table.contains("pid 10 (python3)  vision/train-0  train at /w/train.py:61"));
        assert!(table.lines().nth(2).unwrap().contains(" 35%"));
        // The straggler's step is marked; a GPU without a step found shows none.
        assert_eq!(step_text(starved), "0.41s!");
        assert_eq!(step_text(&rows[0]), "-");
        assert!(table.lines().nth(2).unwrap().contains("0.41s!"));
    }

    #[test]
    fn orders() {
        let mut rows = rows(&diagnosis());
        Order::LostTime.sort(&mut rows);
        assert_eq!(rows[0].gpu, 0);
        Order::Index.sort(&mut rows);
        assert_eq!(rows.iter().map(|r| r.gpu).collect::<Vec<_>>(), [0, 3]);
        assert_eq!(Order::Index.next(), Order::Urgency);
    }
}
