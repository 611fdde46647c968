//! The diagnosis as a person or a script reads it: a ranked text report (`diagnose`) and a
//! JSON document (`diagnose --json`, `/api/v1/diagnosis`), both from the same verdicts.

use std::fmt::Write as _;

use serde_json::{json, Value};

use crate::analysis::{explanation, next_steps, text};
use crate::analysis::{Cause, GpuVerdict, InputSource, KindVerdict, LostTime, Primary};
use crate::snapshot::{Activity, ProcessStacks};

/// Where the main GPU process's main thread was, as JSON: its shares per activity and the
/// frames seen most (function, `file:line`, activity, share).
fn stacks_json(stacks: &ProcessStacks) -> Value {
    let shares: serde_json::Map<String, Value> = Activity::ALL
        .iter()
        .map(|a| (a.name().to_string(), json!(stacks.share(*a))))
        .collect();
    let frames: Vec<Value> = stacks
        .top_frames
        .iter()
        .map(|f| json!({"function": f.function, "location": f.location, "activity": f.activity.name(), "share": f.share}))
        .collect();
    json!({"pid": stacks.pid, "samples": stacks.samples, "activity": shares, "top_frames": frames})
}

/// The same, as lines of the text report.
fn stacks_text(stacks: &ProcessStacks) -> String {
    let mut shares: Vec<(Activity, f64)> = Activity::ALL
        .iter()
        .map(|a| (*a, stacks.share(*a)))
        .filter(|(_, share)| *share >= 0.005)
        .collect();
    shares.sort_by(|a, b| b.1.total_cmp(&a.1));
    let shares: Vec<String> = shares
        .iter()
        .map(|(a, share)| format!("{} {:.0} %", a.name(), 100.0 * share))
        .collect();
    let mut out = format!(
        "  Main thread (pid {}, {} stack samples): {}
",
        stacks.pid,
        stacks.samples,
        shares.join(", ")
    );
    for f in &stacks.top_frames {
        let _ = writeln!(
            out,
            "    {:>3.0} %  {} at {} ({})",
            100.0 * f.share,
            f.function,
            f.location,
            f.activity.name()
        );
    }
    out
}

/// The causes that cost something, largest first.
fn costly_causes(lost: &LostTime) -> Vec<(Cause, f64)> {
    let mut causes: Vec<(Cause, f64)> = Cause::ALL
        .iter()
        .map(|c| (*c, lost.share(*c)))
        .filter(|(_, share)| *share >= 0.005)
        .collect();
    causes.sort_by(|a, b| b.1.total_cmp(&a.1));
    causes
}

/// "idle 62 % of the window (observed): data_io 48 % (input from a remote source), ..."
fn lost_time_summary(lost: &LostTime) -> String {
    let parts: Vec<String> = costly_causes(lost)
        .iter()
        .map(|(cause, share)| {
            let note = match (cause, lost.input) {
                (Cause::Kind(crate::analysis::Kind::DataIo), Some(InputSource::Remote)) => {
                    " (input from a remote source)"
                }
                (Cause::Kind(crate::analysis::Kind::DataIo), Some(InputSource::LocalStorage)) => {
                    " (input from local storage)"
                }
                _ => "",
            };
            format!("{} {:.0} %{note}", cause.name(), 100.0 * share)
        })
        .collect();
    format!(
        "idle {:.0} % of the window, {:.0} % of the GPU's time lost ({}){}{}",
        100.0 * lost.idle,
        100.0 * lost.total(),
        lost.basis.name(),
        if parts.is_empty() { "" } else { ": " },
        parts.join(", ")
    )
}

fn lost_time_json(lost: &LostTime) -> Value {
    let causes: serde_json::Map<String, Value> = Cause::ALL
        .iter()
        .map(|c| (c.name().to_string(), json!(lost.share(*c))))
        .collect();
    json!({
        "basis": lost.basis.name(),
        "idle": lost.idle,
        "total": lost.total(),
        "causes": causes,
        "input": lost.input.map(|i| match i {
            InputSource::LocalStorage => "local_storage",
            InputSource::Remote => "remote",
        }),
        "summary": lost_time_summary(lost),
        "reasons": lost.reasons.iter().map(text::reason).collect::<Vec<_>>(),
    })
}

/// GPUs in report order: hung ones, bottlenecks (strongest first), then undetermined, idle,
/// busy.
fn ranked(verdicts: &[GpuVerdict]) -> Vec<&GpuVerdict> {
    let rank = |v: &GpuVerdict| match v.primary {
        Primary::Hung => 0,
        Primary::Bottleneck(_) => 1,
        Primary::Undetermined => 2,
        Primary::Idle => 3,
        Primary::Busy => 4,
    };
    let mut ordered: Vec<&GpuVerdict> = verdicts.iter().collect();
    ordered.sort_by(|a, b| {
        rank(a)
            .cmp(&rank(b))
            .then(primary_score(b).total_cmp(&primary_score(a)))
            .then(a.index.cmp(&b.index))
    });
    ordered
}

fn primary_kind(verdict: &GpuVerdict) -> Option<&KindVerdict> {
    match verdict.primary {
        Primary::Bottleneck(kind) => verdict.kinds.iter().find(|k| k.scored.kind == kind),
        _ => None,
    }
}

fn primary_score(verdict: &GpuVerdict) -> f64 {
    primary_kind(verdict)
        .and_then(|k| k.scored.score)
        .unwrap_or(0.0)
}

/// Whether any GPU has an active bottleneck or is hung (the `diagnose` exit code).
pub fn any_bottleneck(verdicts: &[GpuVerdict]) -> bool {
    verdicts
        .iter()
        .any(|v| matches!(v.primary, Primary::Bottleneck(_) | Primary::Hung))
}

/// "in all_reduce at /job/train.py:97 for 3 min 20 s, the GPU spinning busy".
/// The loop's step and how far behind it is, as people read it: `step 0.42 s (best 0.35 s:
/// 17 % behind; costs its node's other ranks 40 % of their step)`.
fn step_summary(v: &GpuVerdict) -> Option<String> {
    let step = v.figures.step?;
    let mut out = format!(
        "step {:.3} s (best {:.3} s",
        step.seconds, step.best_seconds
    );
    let behind = step.behind_best();
    if behind >= 0.01 {
        let _ = write!(out, ": {:.0} % behind its best", 100.0 * behind);
    }
    match v.behind_ranks {
        Some(cost) if cost >= 0.01 => {
            let _ = write!(
                out,
                "; the straggler of its ranks on this node, costing them {:.0} % of their step",
                100.0 * cost
            );
        }
        Some(_) => out.push_str("; keeps pace with its ranks on this node"),
        None => {}
    }
    out.push(')');
    Some(out)
}

fn hang_summary(hang: &crate::analysis::Hang) -> String {
    let seconds = hang.seconds.round() as u64;
    let frame = if hang.frame.is_empty() {
        "a collective".to_string()
    } else {
        hang.frame.clone()
    };
    let waiting = hang
        .waiting_for
        .as_ref()
        .map(|peer| format!("; not hung: it waits for {peer}"))
        .unwrap_or_default();
    let peers = hang
        .peers
        .as_ref()
        .map(|p| format!("; {}", p.summary))
        .unwrap_or_default();
    let gpu = if hang.host_side {
        "the GPU idle"
    } else {
        "the GPU spinning busy"
    };
    format!(
        "in {frame} for {} min {} s, {gpu}{waiting}{peers}",
        seconds / 60,
        seconds % 60
    )
}

/// The JSON document: per GPU the primary verdict, explanation, next steps, and every kind
/// with its state, score and evidence.
pub fn diagnosis_json(verdicts: &[GpuVerdict], simulated: bool) -> Value {
    let gpus: Vec<Value> = ranked(verdicts)
        .into_iter()
        .map(|v| {
            let kinds: Vec<Value> = v
                .kinds
                .iter()
                .map(|k| {
                    let evidence: Vec<Value> = k
                        .scored
                        .evidence
                        .iter()
                        .map(|e| {
                            let mut item = json!({"input": e.signal.name(), "value": e.value, "threshold": e.threshold, "strength": e.strength});
                            if !e.detail.is_empty() {
                                item["detail"] = json!(e.detail);
                            }
                            item
                        })
                        .collect();
                    json!({
                        "kind": k.scored.kind.name(),
                        "active": k.active,
                        "unknown": k.scored.score.is_none(),
                        "score": k.scored.score,
                        "basis": k.basis.name(),
                        "cost": k.cost,
                        "evidence": evidence,
                    })
                })
                .collect();
            let figures = &v.figures;
            let mut gpu = json!({
                "gpu": v.index,
                "uuid": v.uuid,
                "figures": {
                    "busy": figures.busy,
                    "sm_activity": figures.sm_activity,
                    "memory_used": figures.memory_used_ratio,
                    "process": figures.main_process,
                    "pod": figures.pod,
                },
                "primary": v.primary.name(),
                "basis": v.basis().name(),
                "explanation": explanation(v),
                "next_steps": next_steps(v),
                "kinds": kinds,
            });
            if let Some(lost) = &v.lost {
                gpu["lost_time"] = lost_time_json(lost);
            }
            if let Some(hang) = &v.hang {
                gpu["hang"] = json!({
                    "seconds": hang.seconds,
                    "frame": hang.frame,
                    "waiting_for": hang.waiting_for,
                    "nccl_ras": hang.peers.as_ref().map(|p| json!({
                        "answered": p.answered,
                        "missing_ranks": p.missing_ranks,
                        "ranks_behind": p.ranks_behind,
                        "summary": p.summary,
                    })),
                    "summary": hang_summary(hang),
                });
            }
            if let Some(stacks) = &v.figures.stacks {
                gpu["main_thread"] = stacks_json(stacks);
            }
            if let Some(step) = v.figures.step {
                gpu["step"] = json!({
                    "seconds": step.seconds,
                    "best_seconds": step.best_seconds,
                    "behind_best": step.behind_best(),
                    "behind_node_ranks": v.behind_ranks,
                    "summary": step_summary(v),
                });
            }
            gpu
        })
        .collect();
    json!({"simulated": simulated, "gpus": gpus})
}

/// The readable report, one block per GPU, most urgent first.
pub fn text_report(verdicts: &[GpuVerdict], simulated: bool) -> String {
    let mut out = String::new();
    if simulated {
        out.push_str("SIMULATED NODE (--demo): these verdicts describe made-up GPUs.\n\n");
    }
    if verdicts.is_empty() {
        out.push_str("No GPU found (is the NVIDIA driver loaded? see gpu_exporter_nvml_up).\n");
        return out;
    }
    for v in ranked(verdicts) {
        let headline = match primary_kind(v) {
            Some(k) => format!(
                "{} (score {:.2}, {}{})",
                v.primary.name(),
                k.scored.score.unwrap_or(0.0),
                k.basis.name(),
                k.cost
                    .map(|c| format!(", costs {:.0} % of the GPU's time", 100.0 * c))
                    .unwrap_or_default()
            ),
            None => match (&v.hang, v.primary) {
                (Some(hang), Primary::Hung) => format!("hung ({})", hang_summary(hang)),
                _ => v.primary.name().to_string(),
            },
        };
        let _ = writeln!(out, "GPU {} {}: {headline}", v.index, v.uuid);
        let _ = writeln!(out, "  {}", explanation(v));
        if let Some(step) = step_summary(v) {
            let _ = writeln!(out, "  Loop: {step}");
        }
        if let Some(hang) = v.hang.as_ref().filter(|h| h.waiting_for.is_some()) {
            let _ = writeln!(out, "  Collective: {}", hang_summary(hang));
        }
        if let Some(lost) = &v.lost {
            let _ = writeln!(out, "  Lost time: {}", lost_time_summary(lost));
            for reason in &lost.reasons {
                let _ = writeln!(out, "    - {}", text::reason(reason));
            }
        }
        if let Some(k) = primary_kind(v) {
            let evidence: Vec<String> = k
                .scored
                .evidence
                .iter()
                .filter(|e| e.strength >= 0.5)
                .map(|e| {
                    let figure = format!(
                        "{} {:.3} (threshold {:.3})",
                        e.signal.name(),
                        e.value,
                        e.threshold
                    );
                    if e.detail.is_empty() {
                        figure
                    } else {
                        format!("{figure}: {}", e.detail)
                    }
                })
                .collect();
            let _ = writeln!(out, "  Evidence: {}", evidence.join(", "));
        }
        let others: Vec<String> = v
            .kinds
            .iter()
            .filter(|k| k.active && Some(k.scored.kind) != primary_kind(v).map(|p| p.scored.kind))
            .map(|k| {
                format!(
                    "{} ({:.2})",
                    k.scored.kind.name(),
                    k.scored.score.unwrap_or(0.0)
                )
            })
            .collect();
        if !others.is_empty() {
            let _ = writeln!(out, "  Also active: {}", others.join(", "));
        }
        if let Some(stacks) = &v.figures.stacks {
            out.push_str(&stacks_text(stacks));
        }
        let unknown: Vec<&str> = v
            .kinds
            .iter()
            .filter(|k| k.scored.score.is_none())
            .map(|k| k.scored.kind.name())
            .collect();
        if !unknown.is_empty() {
            let _ = writeln!(
                out,
                "  Cannot judge (inputs missing): {}",
                unknown.join(", ")
            );
        }
        out.push_str("  Next steps:\n");
        for (i, step) in next_steps(v).iter().enumerate() {
            let _ = writeln!(out, "    {}. {step}", i + 1);
        }
        out.push('\n');
    }
    out
}
