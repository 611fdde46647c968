//! The RAS client's side of NCCL's protocol (src/ras/client.cc, protocol 2): a line per
//! command, `OK` or `ERROR: …` back, then the `STATUS` answer until the service closes the
//! connection.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use super::parse::{self, Parsed};
use crate::source::environ::variable;

/// NCCL's client port and protocol (`NCCL_RAS_CLIENT_PORT`, `NCCL_RAS_CLIENT_PROTOCOL`).
pub const DEFAULT_PORT: u16 = 28028;
const PROTOCOL: u32 = 2;
/// Seconds RAS waits for a peer's leg of its gathering before it gives up on it
/// (`RAS_COLLECTIVE_LEG_TIMEOUT_SEC`); a whole gathering takes at most twice that.
const LEG_TIMEOUT_S: u64 = 5;
/// The answer's size past which it is refused: a thousand-rank job's JSON is a few MB.
const ANSWER_BYTES_MAX: u64 = 32 << 20;

/// Where a process's RAS service listens, from its environment (`NCCL_RAS_ADDR`, as NCCL
/// reads it: `host:port`, `[v6]:port`), or `Err` when the job turned RAS off.
pub fn address(environ: &[u8]) -> Result<SocketAddr, String> {
    let get = |name: &str| variable(environ, name);
    if get("NCCL_RAS_ENABLE") == Some("0") {
        return Err("the job turned RAS off (NCCL_RAS_ENABLE=0)".into());
    }
    let Some(text) = get("NCCL_RAS_ADDR") else {
        return Ok(SocketAddr::from(([127, 0, 0, 1], DEFAULT_PORT)));
    };
    let (host, port) = text
        .rsplit_once(':')
        .ok_or_else(|| format!("NCCL_RAS_ADDR={text:?} has no port"))?;
    let port: u16 = port
        .parse()
        .map_err(|_| format!("NCCL_RAS_ADDR={text:?}: the port is not a number"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let ip = match host {
        // Resolved inside the job's namespace by NCCL; the exporter's resolver may differ.
        "localhost" | "" => [127, 0, 0, 1].into(),
        _ => host
            .parse()
            .map_err(|_| format!("NCCL_RAS_ADDR={text:?}: not an address the exporter resolves"))?,
    };
    Ok(SocketAddr::new(ip, port))
}

/// Connections tried before giving up on a service that accepts but does not answer.
const ATTEMPTS: usize = 6;
/// How long a live RAS thread takes at most to answer a command line (its poll loop answers
/// at once).
const COMMAND_TIMEOUT: Duration = Duration::from_secs(2);

/// Asks the service at `address` (in the calling thread's network namespace) for the job's
/// communicators: JSON where NCCL speaks it (2.28.7 and later), else its text. Every NCCL
/// process of the namespace listens on the address (SO_REUSEPORT) and the kernel hands each
/// connection to one of them: one whose process is frozen (stopped, or stuck with its RAS
/// thread) accepts and never answers, so a connection that gets no greeting is tried again,
/// and lands elsewhere with each new source port.
pub fn status(address: SocketAddr) -> Result<Parsed, String> {
    let mut last = String::new();
    for _ in 0..ATTEMPTS {
        match attempt(address) {
            Err(Silent(why)) => last = why,
            Ok(answer) => return answer,
        }
    }
    Err(format!(
        "{last} ({ATTEMPTS} connections; the processes listening there do not answer)"
    ))
}

/// A connection whose service never greeted.
struct Silent(String);

fn attempt(address: SocketAddr) -> Result<Result<Parsed, String>, Silent> {
    Ok(match exchange(address) {
        Err(why) if why.contains("no answer to \"CLIENT PROTOCOL") => return Err(Silent(why)),
        answer => answer,
    })
}

fn exchange(address: SocketAddr) -> Result<Parsed, String> {
    let stream =
        TcpStream::connect_timeout(&address, Duration::from_secs(2)).map_err(|e| {
            match e.kind() {
                std::io::ErrorKind::ConnectionRefused => format!(
                "nothing listens on {address} (NCCL before 2.24, or RAS off or on another address)"
            ),
                _ => format!("connecting to {address}: {e}"),
            }
        })?;
    // The commands answer at once; the status takes up to two legs of RAS's own gathering.
    stream
        .set_read_timeout(Some(COMMAND_TIMEOUT))
        .map_err(|e| e.to_string())?;
    let mut writer = stream.try_clone().map_err(|e| e.to_string())?;
    let mut reader = BufReader::new(stream);
    let mut ask = |command: &str| -> Result<String, String> {
        writer
            .write_all(format!("{command}\n").as_bytes())
            .map_err(|e| format!("RAS at {address}: sending {command:?}: {e}"))?;
        let mut line = String::new();
        match reader.read_line(&mut line) {
            Ok(0) => Err(format!(
                "RAS at {address} closed the connection after {command:?}"
            )),
            Ok(_) => Ok(line.trim_end().to_string()),
            Err(e) => Err(format!("RAS at {address}: no answer to {command:?}: {e}")),
        }
    };
    let hello = ask(&format!("CLIENT PROTOCOL {PROTOCOL}"))?;
    if !hello.to_ascii_uppercase().starts_with("SERVER PROTOCOL ") {
        return Err(format!("{address} does not speak RAS: {hello:?}"));
    }
    let timeout = ask(&format!("TIMEOUT {LEG_TIMEOUT_S}"))?;
    if !timeout.eq_ignore_ascii_case("OK") {
        return Err(format!("RAS at {address} refused the timeout: {timeout:?}"));
    }
    // NCCL before 2.28.7 answers "ERROR: Unknown command SET FORMAT json": it speaks text.
    let json = ask("SET FORMAT json")?.eq_ignore_ascii_case("OK");
    let mut stream = reader.into_inner();
    stream
        .set_read_timeout(Some(Duration::from_secs(3 * LEG_TIMEOUT_S)))
        .map_err(|e| e.to_string())?;
    stream
        .write_all(b"STATUS\n")
        .map_err(|e| format!("RAS at {address}: sending STATUS: {e}"))?;
    let mut answer = String::new();
    (&mut stream)
        .take(ANSWER_BYTES_MAX)
        .read_to_string(&mut answer)
        .map_err(|e| format!("RAS at {address}: reading the status: {e}"))?;
    if json {
        parse::json(&answer)
    } else {
        Ok(parse::text(&answer))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An environ file's bytes with these variables.
    fn env(pairs: &[(&str, &str)]) -> Vec<u8> {
        pairs
            .iter()
            .flat_map(|(k, v)| format!("{k}={v}\0").into_bytes())
            .collect()
    }

    #[test]
    fn the_address_is_nccls_default_unless_the_job_sets_one() {
        assert_eq!(address(&[]).unwrap(), "127.0.0.1:28028".parse().unwrap());
        let set = env(&[("NCCL_RAS_ADDR", "localhost:29000")]);
        assert_eq!(address(&set).unwrap(), "127.0.0.1:29000".parse().unwrap());
        let v6 = env(&[("NCCL_RAS_ADDR", "[::1]:28028")]);
        assert_eq!(address(&v6).unwrap(), "[::1]:28028".parse().unwrap());
        let off = env(&[("NCCL_RAS_ENABLE", "0")]);
        assert!(address(&off).unwrap_err().contains("NCCL_RAS_ENABLE=0"));
        let bad = env(&[("NCCL_RAS_ADDR", "node7")]);
        assert!(address(&bad).unwrap_err().contains("no port"));
    }

    #[test]
    fn a_port_nothing_listens_on_is_said_plainly() {
        // A port just freed: nothing listens there.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let free = listener.local_addr().unwrap();
        drop(listener);
        assert!(status(free).unwrap_err().contains("nothing listens"));
    }

    #[test]
    fn a_service_that_is_not_ras_is_refused() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let at = listener.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (mut peer, _) = listener.accept().unwrap();
            let mut line = String::new();
            BufReader::new(peer.try_clone().unwrap())
                .read_line(&mut line)
                .unwrap();
            peer.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n").unwrap();
        });
        assert!(status(at).unwrap_err().contains("does not speak RAS"));
        server.join().unwrap();
    }
}
