//! The web configuration in force, re-read when a file it depends on changes.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use super::config_file::{WebConfigFile, WebSettings};
use super::stats::HttpStats;

/// The web configuration in force, re-read when the file or a file it names changes (checked
/// at most once a second, on use). A broken new version is logged and counted; the previous
/// settings stay in force until it is fixed.
pub struct WebConfig {
    path: Option<PathBuf>,
    stats: Arc<HttpStats>,
    state: Mutex<State>,
}

struct State {
    current: Arc<WebSettings>,
    /// Modification time and length of every file read, to notice changes cheaply.
    fingerprint: Vec<Option<(SystemTime, u64)>>,
    watched: Vec<PathBuf>,
    checked_at: Instant,
    last_error: Option<String>,
}

const RECHECK_EVERY: Duration = Duration::from_secs(1);

impl WebConfig {
    /// Loads `path` (None or empty: plain HTTP). An error here refuses the start.
    pub fn load(path: Option<&Path>, stats: Arc<HttpStats>) -> Result<WebConfig, String> {
        let path = path
            .filter(|p| !p.as_os_str().is_empty())
            .map(Path::to_path_buf);
        let (current, watched) = match &path {
            Some(path) => read(path)?,
            None => (WebSettings::plain(), Vec::new()),
        };
        Ok(WebConfig {
            path,
            stats,
            state: Mutex::new(State {
                current: Arc::new(current),
                fingerprint: fingerprint(&watched),
                watched,
                checked_at: Instant::now(),
                last_error: None,
            }),
        })
    }

    /// The settings to apply now.
    pub fn current(&self) -> Arc<WebSettings> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let Some(path) = &self.path else {
            return state.current.clone();
        };
        if state.checked_at.elapsed() < RECHECK_EVERY {
            return state.current.clone();
        }
        state.checked_at = Instant::now();
        let now = fingerprint(&state.watched);
        if now == state.fingerprint {
            return state.current.clone();
        }
        match read(path) {
            Ok((settings, watched)) => {
                tracing::info!(file = %path.display(), "web configuration reloaded");
                state.current = Arc::new(settings);
                state.fingerprint = fingerprint(&watched);
                state.watched = watched;
                state.last_error = None;
                self.stats.set_web_config_ok(true);
            }
            Err(error) => {
                // Remember what was seen so a broken file is reported once, not every second.
                state.fingerprint = now;
                if state.last_error.as_ref() != Some(&error) {
                    tracing::error!(%error, "web configuration not reloaded; the previous one stays in force");
                    state.last_error = Some(error);
                }
                self.stats.set_web_config_ok(false);
            }
        }
        state.current.clone()
    }
}

/// Reads and builds the file; returns the settings and every file they depend on.
fn read(path: &Path) -> Result<(WebSettings, Vec<PathBuf>), String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read web configuration {}: {e}", path.display()))?;
    let file = WebConfigFile::parse(&text, &path.display().to_string())?;
    let dir = path.parent().unwrap_or(Path::new("."));
    let settings = WebSettings::build(&file, dir)
        .map_err(|e| format!("web configuration {}: {e}", path.display()))?;
    let mut watched = vec![path.to_path_buf()];
    watched.extend(file.files(dir));
    Ok((settings, watched))
}

fn fingerprint(files: &[PathBuf]) -> Vec<Option<(SystemTime, u64)>> {
    files
        .iter()
        .map(|file| {
            let meta = std::fs::metadata(file).ok()?;
            Some((meta.modified().ok()?, meta.len()))
        })
        .collect()
}
