//! `diagnose`: sample the node for a while in the foreground and print why each GPU waits.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use crate::config::Config;
use crate::report;
use crate::sampler::Sampler;

/// Exit code when at least one GPU has an active bottleneck (scripts can branch on it).
pub const EXIT_BOTTLENECK: u8 = 3;

/// What `diagnose` was asked to do.
#[derive(Debug, Clone)]
pub struct Options {
    /// How long to sample; also the analysis window.
    pub duration: Duration,
    /// Print JSON instead of the text report.
    pub json: bool,
    /// Diagnose this simulated node instead of this machine.
    pub demo: Option<crate::source::demo::DemoSource>,
}

/// Samples for `options.duration` and prints the report on stdout. Returns whether any GPU
/// has an active bottleneck.
pub fn run(mut config: Config, options: &Options) -> Result<bool, String> {
    // The whole run is the window; a verdict needs a third of it to settle (or the
    // configured minimum, if shorter), so even a short run can conclude.
    config.analysis.window.0 = options.duration;
    config.analysis.min_duration.0 = config.analysis.min_duration.0.min(options.duration / 3);
    let mut sampler = match options.demo {
        Some(demo) => Sampler::demo(&config, demo),
        None => Sampler::from_config(&config),
    };
    let interval = config.sample_interval.0;
    let progress = std::io::stderr().is_terminal();
    let start = Instant::now();
    let mut snapshot = sampler.tick(Duration::ZERO);
    while start.elapsed() < options.duration {
        if progress {
            draw_progress(start.elapsed(), options.duration);
        }
        std::thread::sleep(
            interval
                .min(options.duration.saturating_sub(start.elapsed()))
                .max(Duration::from_millis(10)),
        );
        snapshot = sampler.tick(start.elapsed());
    }
    if progress {
        eprint!("\r{:60}\r", "");
    }
    let mut stdout = std::io::stdout().lock();
    let text = if options.json {
        serde_json::to_string_pretty(&report::diagnosis_json(
            &snapshot.verdicts,
            snapshot.simulated,
        ))
        .map_err(|e| e.to_string())?
            + "\n"
    } else {
        report::text_report(&snapshot.verdicts, snapshot.simulated)
    };
    stdout
        .write_all(text.as_bytes())
        .map_err(|e| format!("cannot write the report: {e}"))?;
    Ok(report::any_bottleneck(&snapshot.verdicts))
}

fn draw_progress(elapsed: Duration, total: Duration) {
    let width = 30;
    let done =
        ((elapsed.as_secs_f64() / total.as_secs_f64()) * width as f64).min(width as f64) as usize;
    eprint!(
        "\rsampling [{}{}] {:>3.0}/{:.0} s",
        "#".repeat(done),
        ".".repeat(width - done),
        elapsed.as_secs_f64(),
        total.as_secs_f64()
    );
}
