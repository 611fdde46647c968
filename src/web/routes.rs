//! HTTP routes. The server only reads what the sampler published; it never samples.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use tokio::sync::watch;

use crate::exposition::Format;
use crate::report;
use crate::sampler::Published;

use super::stats::HttpStats;

/// What the handlers read: the sampler's latest exposition and the HTTP layer's counters.
#[derive(Clone)]
pub struct AppState {
    /// The latest exposition (None until the first tick).
    pub published: watch::Receiver<Published>,
    /// Appended to every scrape.
    pub http: Arc<HttpStats>,
}

/// The routes: `/metrics`, `/healthz`, `/readyz`, `/api/v1/diagnosis` and the landing page
/// `/`. Each answers GET and HEAD; other methods get 405 with an `Allow` header.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/", get(landing))
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(ready))
        .route("/api/v1/diagnosis", get(diagnosis))
        .with_state(state)
}

async fn metrics(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let Some(exposition) = state.published.borrow().clone() else {
        return (StatusCode::SERVICE_UNAVAILABLE, "no sample taken yet\n").into_response();
    };
    let format = negotiate_format(header_text(&headers, header::ACCEPT));
    let gzip = accepts_gzip(header_text(&headers, header::ACCEPT_ENCODING));
    // The first scrape of a snapshot renders (and compresses) its page, once; on a blocking
    // pool it would cost a thread and a malloc arena per concurrent scrape for no gain.
    let parts = exposition.body_parts(format, Instant::now(), &state.http.counters(), gzip);
    let mut response_headers = HeaderMap::new();
    response_headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(format.content_type()),
    );
    response_headers.insert(
        header::VARY,
        HeaderValue::from_static("Accept, Accept-Encoding"),
    );
    if gzip {
        response_headers.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    }
    let [page, tail] = parts;
    (
        response_headers,
        Body::new(TwoChunks([Some(page), Some(tail)])),
    )
        .into_response()
}

/// A body of two chunks with a known length: the shared pre-rendered page goes out without
/// being copied into a new buffer per scrape, and hyper still sends `Content-Length`.
struct TwoChunks([Option<Bytes>; 2]);

impl http_body::Body for TwoChunks {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Infallible>>> {
        let next = self.0.iter_mut().find_map(Option::take);
        Poll::Ready(next.map(|chunk| Ok(http_body::Frame::data(chunk))))
    }

    fn is_end_stream(&self) -> bool {
        self.0.iter().all(Option::is_none)
    }

    fn size_hint(&self) -> http_body::SizeHint {
        let length = self.0.iter().flatten().map(|c| c.len() as u64).sum();
        http_body::SizeHint::with_exact(length)
    }
}

async fn diagnosis(State(state): State<AppState>) -> Response {
    let Some(exposition) = state.published.borrow().clone() else {
        return (StatusCode::SERVICE_UNAVAILABLE, "no sample taken yet\n").into_response();
    };
    let json = HeaderValue::from_static("application/json");
    let body = report::diagnosis_json(exposition.verdicts(), exposition.simulated()).to_string();
    ([(header::CONTENT_TYPE, json)], body).into_response()
}

async fn ready(State(state): State<AppState>) -> Response {
    if state.published.borrow().is_some() {
        (StatusCode::OK, "ready\n").into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "waiting for the first sample\n",
        )
            .into_response()
    }
}

async fn landing() -> Html<&'static str> {
    Html(concat!(
        "<!doctype html><html><head><title>gpu-bottleneck-exporter</title></head><body>",
        "<h1>gpu-bottleneck-exporter ",
        env!("CARGO_PKG_VERSION"),
        "</h1><p>Tells why a GPU waits, for Prometheus.</p><ul>",
        "<li><a href=\"/metrics\">/metrics</a> &mdash; raw signals and self-metrics</li>",
        "<li><a href=\"/healthz\">/healthz</a> &mdash; process is alive</li>",
        "<li><a href=\"/readyz\">/readyz</a> &mdash; first sample published</li>",
        "<li><a href=\"/api/v1/diagnosis\">/api/v1/diagnosis</a> &mdash; why each GPU waits (JSON)</li>",
        "</ul></body></html>\n"
    ))
}

fn header_text(headers: &HeaderMap, name: header::HeaderName) -> &str {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

/// Media ranges of an Accept-style header as (type, q), q defaulting to 1.
fn media_ranges(header: &str) -> impl Iterator<Item = (&str, f32)> {
    header.split(',').filter_map(|range| {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next().filter(|m| !m.is_empty())?;
        let q = parts
            .filter_map(|p| p.strip_prefix("q="))
            .find_map(|q| q.parse().ok())
            .unwrap_or(1.0);
        Some((media, q))
    })
}

/// OpenMetrics when the client asks for it with a q above that of the classic text format
/// (Prometheus' own scrape header does); the classic text format otherwise.
pub fn negotiate_format(accept: &str) -> Format {
    let quality = |wanted: &str| {
        media_ranges(accept)
            .filter(|(media, _)| media.eq_ignore_ascii_case(wanted))
            .map(|(_, q)| q)
            .fold(0.0f32, f32::max)
    };
    let openmetrics = quality("application/openmetrics-text");
    if openmetrics > 0.0 && openmetrics >= quality("text/plain") {
        Format::OpenMetrics
    } else {
        Format::Text
    }
}

/// Whether `Accept-Encoding` allows gzip (not listed with q=0).
pub fn accepts_gzip(accept_encoding: &str) -> bool {
    media_ranges(accept_encoding).any(|(coding, q)| coding.eq_ignore_ascii_case("gzip") && q > 0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiation_follows_prometheus_accept_headers() {
        let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(negotiate_format(prometheus), Format::OpenMetrics);
        assert_eq!(negotiate_format(""), Format::Text);
        assert_eq!(negotiate_format("*/*"), Format::Text);
        assert_eq!(negotiate_format("text/plain;version=0.0.4"), Format::Text);
        assert_eq!(
            negotiate_format("text/plain;q=1,application/openmetrics-text;q=0.5"),
            Format::Text
        );
        assert_eq!(
            negotiate_format("application/openmetrics-text;q=0"),
            Format::Text
        );
    }

    #[test]
    fn gzip_only_when_allowed() {
        assert!(accepts_gzip("gzip"));
        assert!(accepts_gzip("br, gzip;q=0.5"));
        assert!(!accepts_gzip("gzip;q=0"));
        assert!(!accepts_gzip("identity"));
        assert!(!accepts_gzip(""));
    }
}
