//! The terminal view of `top` (ratatui on crossterm): one row per GPU with its busy fraction,
//! SM activity, memory, verdict, a bar of where its lost time went, the strongest evidence,
//! process, pod and the main thread's frame. `s` sorts, ↑/↓ select, Enter opens the selected
//! GPU's full diagnosis (Esc or Enter back), `q` quits.

use std::time::{Duration, Instant};

use crossterm::event::{self, Event, KeyCode, KeyEventKind};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Cell, Paragraph, Row as TableRow, Table, TableState, Wrap};
use ratatui::Frame;
use serde_json::Value;

use super::fetch::{Source, REFRESH};
use super::{lost_text, rows, step_text, verdict_text, Order, Row};
use crate::snapshot::{Cause, Kind};

/// Each cause's colour in the lost-time bar, by its label (the view reads the diagnosis
/// JSON); an exhaustive match, so a new cause gets a colour or a compile error.
fn colour(cause: &str) -> Color {
    let Some(cause) = Cause::ALL.into_iter().find(|c| c.name() == cause) else {
        return Color::DarkGray;
    };
    match cause {
        Cause::Kind(kind) => match kind {
            Kind::DataIo => Color::Red,
            Kind::DataCpu => Color::LightRed,
            Kind::HostBound => Color::Yellow,
            Kind::SyncStall => Color::Magenta,
            Kind::Communication => Color::Blue,
            Kind::Contention => Color::Cyan,
            Kind::KernelEfficiency => Color::Green,
            Kind::Throttling => Color::LightYellow,
            // Not causes of lost time: their cost is not measured.
            Kind::MemoryPressure | Kind::Hardware => Color::DarkGray,
        },
        Cause::Unexplained => Color::DarkGray,
    }
}

/// The lost-time bar: each cause's share of `width` cells in its colour, then the rest idle.
fn bar(row: &Row, width: usize) -> Line<'static> {
    let mut spans = Vec::new();
    let mut used = 0;
    for (cause, share) in &row.lost {
        let cells = ((share * width as f64).round() as usize).min(width - used);
        if cells > 0 {
            spans.push(Span::styled(
                "█".repeat(cells),
                Style::default().fg(colour(cause)),
            ));
            used += cells;
        }
    }
    spans.push(Span::raw("·".repeat(width - used)));
    spans.push(Span::raw(format!(" {}", lost_text(row))));
    Line::from(spans)
}

fn percent(value: Option<f64>) -> String {
    value.map_or("-".into(), |v| format!("{:.0}%", 100.0 * v))
}

/// What the view holds between refreshes.
struct View {
    diagnosis: Value,
    rows: Vec<Row>,
    order: Order,
    selected: TableState,
    detail: bool,
    error: String,
    source: String,
}

impl View {
    fn refresh(&mut self, diagnosis: Result<Value, String>) {
        match diagnosis {
            Ok(diagnosis) => {
                self.rows = rows(&diagnosis);
                self.order.sort(&mut self.rows);
                self.diagnosis = diagnosis;
                self.error.clear();
            }
            Err(error) => self.error = error,
        }
        if self.selected.selected().is_none() && !self.rows.is_empty() {
            self.selected.select(Some(0));
        }
    }

    /// The full diagnosis of the selected GPU, as the text report words it.
    fn detail_text(&self) -> Vec<Line<'static>> {
        let Some(row) = self.selected.selected().and_then(|i| self.rows.get(i)) else {
            return vec![Line::from("no GPU selected")];
        };
        let gpus = self.diagnosis["gpus"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let Some(g) = gpus.iter().find(|g| g["gpu"].as_u64() == Some(row.gpu)) else {
            return vec![Line::from("the GPU is gone")];
        };
        let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
        let mut lines = vec![
            Line::styled(
                format!(
                    "GPU {} {}: {}",
                    row.gpu,
                    text(&g["uuid"]),
                    verdict_text(row)
                ),
                Style::default().add_modifier(Modifier::BOLD),
            ),
            Line::from(text(&g["explanation"])),
            Line::from(format!("Lost time: {}", text(&g["lost_time"]["summary"]))),
        ];
        for reason in g["lost_time"]["reasons"].as_array().into_iter().flatten() {
            lines.push(Line::from(format!("  - {}", text(reason))));
        }
        if let Some(hang) = g.get("hang") {
            lines.push(Line::from(format!("Hang: {}", text(&hang["summary"]))));
        }
        if let Some(step) = g.get("step") {
            lines.push(Line::from(format!("Loop: {}", text(&step["summary"]))));
        }
        lines.push(Line::from(format!("Evidence: {}", row.evidence)));
        for (who, value) in [
            ("Process", &row.process),
            ("Pod", &row.pod),
            ("Frame", &row.frame),
        ] {
            if !value.is_empty() {
                lines.push(Line::from(format!("{who}: {value}")));
            }
        }
        lines.push(Line::from("Next steps:"));
        for (n, step) in g["next_steps"].as_array().into_iter().flatten().enumerate() {
            lines.push(Line::from(format!("  {}. {}", n + 1, text(step))));
        }
        lines
    }

    fn draw(&mut self, frame: &mut Frame) {
        let [header, body] =
            Layout::vertical([Constraint::Length(1), Constraint::Min(3)]).areas(frame.area());
        let simulated = if self.diagnosis["simulated"] == true {
            " — SIMULATED NODE (--demo)"
        } else {
            ""
        };
        let status = if self.error.is_empty() {
            String::new()
        } else {
            format!(" — {}", self.error)
        };
        frame.render_widget(
            Paragraph::new(format!(
                "gpu-bottleneck-exporter top — {}{simulated} — sorted by {} — s sort, ↑↓ select, Enter details, q quit{status}",
                self.source,
                self.order.name()
            )),
            header,
        );
        if self.detail {
            let text = self.detail_text();
            frame.render_widget(
                Paragraph::new(text).wrap(Wrap { trim: false }).block(
                    Block::default()
                        .borders(Borders::ALL)
                        .title(" diagnosis (Esc back) "),
                ),
                body,
            );
            return;
        }
        let bar_width = 20;
        let rows: Vec<TableRow> = self
            .rows
            .iter()
            .map(|r| {
                let who = [r.process.as_str(), r.pod.as_str(), r.frame.as_str()]
                    .into_iter()
                    .filter(|s| !s.is_empty())
                    .collect::<Vec<_>>()
                    .join("  ");
                TableRow::new(vec![
                    Cell::from(r.gpu.to_string()),
                    Cell::from(percent(r.busy)),
                    Cell::from(percent(r.sm_activity)),
                    Cell::from(percent(r.memory_used)),
                    Cell::from(step_text(r)),
                    Cell::from(verdict_text(r)),
                    Cell::from(bar(r, bar_width)),
                    Cell::from(r.evidence.clone()),
                    Cell::from(who),
                ])
            })
            .collect();
        let table = Table::new(
            rows,
            [
                Constraint::Length(3),
                Constraint::Length(5),
                Constraint::Length(5),
                Constraint::Length(5),
                Constraint::Length(7),
                Constraint::Length(30),
                Constraint::Length(bar_width as u16 + 40),
                Constraint::Percentage(40),
                Constraint::Percentage(60),
            ],
        )
        .header(
            TableRow::new([
                "GPU",
                "BUSY",
                "SM",
                "MEM",
                "STEP",
                "VERDICT",
                "LOST TIME",
                "EVIDENCE",
                "PROCESS / POD / FRAME",
            ])
            .style(Style::default().add_modifier(Modifier::BOLD)),
        )
        .row_highlight_style(Style::default().add_modifier(Modifier::REVERSED))
        .block(Block::default().borders(Borders::ALL));
        frame.render_stateful_widget(table, body, &mut self.selected);
    }

    /// Handles a key; false to quit.
    fn key(&mut self, code: KeyCode) -> bool {
        let last = self.rows.len().saturating_sub(1);
        match code {
            KeyCode::Char('q') => return false,
            KeyCode::Esc if self.detail => self.detail = false,
            KeyCode::Esc => return false,
            KeyCode::Enter => self.detail = !self.detail,
            KeyCode::Char('s') => {
                self.order = self.order.next();
                self.rows = rows(&self.diagnosis);
                self.order.sort(&mut self.rows);
            }
            KeyCode::Down => {
                let next = self.selected.selected().map_or(0, |i| (i + 1).min(last));
                self.selected.select(Some(next));
            }
            KeyCode::Up => {
                let next = self.selected.selected().map_or(0, |i| i.saturating_sub(1));
                self.selected.select(Some(next));
            }
            _ => {}
        }
        true
    }
}

/// Runs the terminal view until `q`.
pub fn run(mut source: Source) -> Result<(), String> {
    let mut terminal = ratatui::init();
    let mut view = View {
        diagnosis: Value::Null,
        rows: Vec::new(),
        order: Order::Urgency,
        selected: TableState::default(),
        detail: false,
        error: String::new(),
        source: source.describe(),
    };
    let result = (|| -> Result<(), String> {
        let mut next_refresh = Instant::now();
        loop {
            if Instant::now() >= next_refresh {
                view.refresh(source.fetch());
                next_refresh += REFRESH;
            }
            terminal
                .draw(|frame| view.draw(frame))
                .map_err(|e| e.to_string())?;
            let wait = next_refresh.saturating_duration_since(Instant::now());
            if event::poll(wait.min(Duration::from_millis(250))).map_err(|e| e.to_string())? {
                if let Event::Key(key) = event::read().map_err(|e| e.to_string())? {
                    if key.kind == KeyEventKind::Press && !view.key(key.code) {
                        return Ok(());
                    }
                }
            }
        }
    })();
    ratatui::restore();
    result
}
