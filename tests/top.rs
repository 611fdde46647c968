//! `top` as a person uses it: under tmux against the demo node (rows and verdicts on the
//! screen, `s` sorts, Enter opens a GPU's diagnosis, `q` quits), and in its plain mode against
//! a running exporter's `/api/v1/diagnosis`.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

fn binary() -> &'static str {
    env!("CARGO_BIN_EXE_gpu-bottleneck-exporter")
}

fn tmux(args: &[&str]) -> String {
    let output = Command::new("tmux").args(args).output().expect("tmux runs");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Ends its tmux session (and the `top` in it) when dropped, a failed assertion included: a
/// session left behind keeps a demo `top` running on the machine.
struct Session(String);

impl Drop for Session {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["kill-session", "-t", &self.0])
            .status();
    }
}

/// The pane's text once `ready` holds (or after 30 s, for the assertion to show it).
fn pane_when(session: &str, ready: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let pane = tmux(&["capture-pane", "-p", "-t", session]);
        if ready(&pane) || Instant::now() > deadline {
            return pane;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[test]
fn the_live_view_under_tmux_shows_every_gpu_and_answers_its_keys() {
    if Command::new("tmux").arg("-V").output().is_err() {
        eprintln!("skipped: needs tmux (scripts/test.sh installs it)");
        return;
    }
    let session = format!("gbe-top-{}", std::process::id());
    let command = format!("{} top --demo --log-level error", binary());
    let started = Command::new("tmux")
        .args([
            "new-session",
            "-d",
            "-s",
            &session,
            "-x",
            "200",
            "-y",
            "40",
            &command,
        ])
        .status()
        .unwrap();
    assert!(started.success());
    let _session = Session(session.clone());
    // Once the latches settle (10 s of evidence), every case has its verdict on its row.
    let pane = pane_when(&session, |p| p.contains("data_io 1.00 observed"));
    assert!(pane.contains("SIMULATED NODE (--demo)"), "{pane}");
    assert!(pane.contains("sorted by urgency"), "{pane}");
    for verdict in [
        "data_io",
        "data_cpu",
        "host_bound",
        "sync_stall",
        "communication",
        "contention",
        "idle",
    ] {
        assert!(
            pane.contains(&format!(" {verdict} ")),
            "{verdict} missing:\n{pane}"
        );
    }
    assert!(pane.contains("vision/train-0"), "the pod: {pane}");
    assert!(pane.contains("pid 100000 (python3)"), "the process: {pane}");
    assert!(pane.contains("████"), "the lost-time bar: {pane}");
    // `s` sorts by lost time: the idle GPU (all of its time lost) comes first.
    tmux(&["send-keys", "-t", &session, "s"]);
    let pane = pane_when(&session, |p| p.contains("sorted by lost time"));
    let first = pane.lines().nth(3).unwrap_or_default();
    assert!(first.contains("idle"), "{pane}");
    // Enter opens the selected GPU's diagnosis, Esc goes back, q quits.
    tmux(&["send-keys", "-t", &session, "Down", "Enter"]);
    // Waits for the whole view: a capture can fall between two parts of one redraw.
    let whole = |p: &str| {
        p.contains("diagnosis (Esc back)") && p.contains("Next steps:") && p.contains("Lost time:")
    };
    let pane = pane_when(&session, whole);
    assert!(whole(&pane), "{pane}");
    tmux(&["send-keys", "-t", &session, "Escape"]);
    pane_when(&session, |p| p.contains("EVIDENCE"));
    tmux(&["send-keys", "-t", &session, "q"]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while Command::new("tmux")
        .args(["has-session", "-t", &session])
        .status()
        .is_ok_and(|s| s.success())
    {
        assert!(Instant::now() < deadline, "q did not quit");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn the_plain_view_reads_a_running_exporter() {
    let exporter = common::Exporter::start(&["--demo"]);
    let output = Command::new(binary())
        .args([
            "top",
            "--url",
            &format!("http://{}", exporter.address),
            "--refreshes",
            "2",
        ])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8_lossy(&output.stdout);
    let tables: Vec<&str> = text
        .split("\n\n")
        .filter(|t| t.contains("VERDICT"))
        .collect();
    assert_eq!(tables.len(), 2, "one table a refresh: {text}");
    assert_eq!(
        tables[1].lines().count(),
        13,
        "a header and twelve GPUs: {text}"
    );
    assert!(tables[1].contains("vision/train-0"), "{text}");
    // A wrong address is an error, said so.
    let refused = Command::new(binary())
        .args(["top", "--url", "http://127.0.0.1:9", "--refreshes", "1"])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("127.0.0.1:9"));
}
