//! `serve`: wires config, sampler thread and HTTP server together, and shuts down cleanly.

use std::sync::{mpsc, Arc};
use std::thread;

use tokio::sync::watch;

use crate::config::Config;
use crate::sampler::{self, Sampler};
use crate::source::demo::DemoSource;
use crate::web::listener;
use crate::web::reload::WebConfig;
use crate::web::routes::{self, AppState};
use crate::web::stats::HttpStats;

/// Why `serve` gave up.
#[derive(Debug)]
pub enum ServeError {
    /// The web configuration file is invalid (exit code 2, like a bad configuration).
    WebConfig(String),
    /// Anything else at start-up (port in use, no threads).
    Start(String),
}

/// Runs the exporter until SIGTERM or SIGINT (on the simulated node `demo` when given). Errors are
/// start-up failures.
pub fn serve(config: Config, demo: Option<DemoSource>) -> Result<(), ServeError> {
    let http = Arc::new(HttpStats::default());
    let web = WebConfig::load(Some(&config.web.config_file), http.clone())
        .map_err(ServeError::WebConfig)?;
    serve_with(config, demo, Arc::new(web), http).map_err(ServeError::Start)
}

/// Everything after the web configuration loaded: runtime, sampler thread, listener.
fn serve_with(
    config: Config,
    demo: Option<DemoSource>,
    web: Arc<WebConfig>,
    http: Arc<HttpStats>,
) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    runtime.block_on(async move {
        let address = config.listen_address.0;
        let listener = tokio::net::TcpListener::bind(address)
            .await
            .map_err(|e| format!("cannot listen on {address}: {e}"))?;

        let (publish, published) = watch::channel(None);
        let (stop, stopped) = mpsc::channel();
        let sampler = match demo {
            Some(demo) => {
                tracing::warn!(
                    node = demo.node,
                    "DEMO MODE: serving a simulated GPU node; nothing on /metrics is real"
                );
                Sampler::demo(&config, demo)
            }
            None => Sampler::from_config(&config),
        };
        let interval = config.sample_interval.0;
        let sampler_thread = thread::Builder::new()
            .name("sampler".into())
            .spawn(move || sampler::run(sampler, interval, publish, stopped))
            .map_err(|e| format!("cannot start the sampler thread: {e}"))?;

        let tls = web.current().tls.is_some();
        tracing::info!(%address, tls, interval_seconds = interval.as_secs_f64(), "listening");
        let app = routes::router(AppState {
            published,
            http: http.clone(),
        });
        listener::serve(listener, app, web, &config.web, http, shutdown_signal()).await;

        // The sampler may be inside a blocking read; it sees the stop at its next wait, and
        // the process exit does not wait for it.
        let _ = stop.send(());
        drop(sampler_thread);
        tracing::info!("stopped");
        Ok(())
    })
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let terminate = async {
        match signal(SignalKind::terminate()) {
            Ok(mut stream) => {
                stream.recv().await;
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await
            }
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT received, shutting down"),
        _ = terminate => tracing::info!("SIGTERM received, shutting down"),
    }
}
