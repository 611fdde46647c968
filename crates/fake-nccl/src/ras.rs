//! NCCL's RAS service (NCCL 2.24 and later, src/ras/ of NVIDIA/nccl 2.30.7 read): a thread
//! of each process, started with its first communicator, that listens for clients on
//! `NCCL_RAS_ADDR` (localhost:28028; SO_REUSEPORT, so every process of a node binds it and
//! any answers) and answers `STATUS` with every communicator of the job. The real threads
//! gather over a network of their own; here the ranks' shared files hold what they would
//! exchange: each rank's collectives by function, and a heartbeat its process's RAS thread
//! writes every [`BEAT`]. A rank whose heartbeat is older than RAS's leg timeout (5 s) does
//! not answer (its process stopped, crashed or lost); one silent for 60 s is considered dead.
//!
//! The protocol is client_support.cc's: `CLIENT PROTOCOL n` → `SERVER PROTOCOL 2`,
//! `TIMEOUT n` → `OK` (or `ERROR: Invalid timeout value …`), `SET FORMAT json|text` → `OK`
//! from 2.28.7 (before: `ERROR: Unknown command …`), `MONITOR` from 2.29, `[VERBOSE] STATUS`
//! → the answer, then the connection closes; anything else `ERROR: Unknown command …`. The
//! version is `FAKE_NCCL_VERSION` (2.28.9 by default); before 2.24 nothing listens.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::FromRawFd;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use crate::comm::now_ns;
use crate::shared::{RankRecord, Shared, FUNCTIONS};

/// How often a process's RAS thread says it is alive.
const BEAT: Duration = Duration::from_millis(500);
/// RAS's leg timeout (`RAS_COLLECTIVE_LEG_TIMEOUT_SEC`): a peer silent for longer does not
/// answer; after 60 s of silence it is considered dead (docs: troubleshooting/ras.rst).
const LEG_TIMEOUT_NS: u64 = 5_000_000_000;
const DEAD_AFTER_NS: u64 = 60_000_000_000;
/// `ncclFuncToString` of the counted functions.
const FUNCTION_NAMES: [&str; FUNCTIONS] = [
    "Broadcast",
    "Reduce",
    "AllGather",
    "ReduceScatter",
    "AllReduce",
];

/// (major, minor, patch) of the NCCL this stub says it is.
pub fn version() -> (u32, u32, u32) {
    static VERSION: OnceLock<(u32, u32, u32)> = OnceLock::new();
    *VERSION.get_or_init(|| {
        let text = std::env::var("FAKE_NCCL_VERSION").unwrap_or_default();
        let parts: Vec<u32> = text.split('.').filter_map(|p| p.parse().ok()).collect();
        match parts[..] {
            [major, minor, patch] => (major, minor, patch),
            _ => (2, 28, 9),
        }
    })
}

/// `NCCL_VERSION(major, minor, patch)` as `ncclGetVersion` returns it.
pub fn version_code() -> i32 {
    let (major, minor, patch) = version();
    (major * 10000 + minor * 100 + patch) as i32
}

fn at_least(minor: u32, patch: u32) -> bool {
    let (major, m, p) = version();
    major > 2 || (major == 2 && (m, p) >= (minor, patch))
}

/// A communicator of this process, as its RAS thread knows it.
struct Registered {
    shared: Weak<Shared>,
    rank: usize,
    ranks: usize,
}

fn registry() -> &'static Mutex<Vec<Registered>> {
    static COMMS: Mutex<Vec<Registered>> = Mutex::new(Vec::new());
    &COMMS
}

/// Adds a communicator to this process's RAS thread, starting the thread with the first.
pub fn register(shared: &Arc<Shared>, rank: usize, ranks: usize) {
    shared.beat(rank, now_ns());
    registry()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(Registered {
            shared: Arc::downgrade(shared),
            rank,
            ranks,
        });
    static STARTED: OnceLock<()> = OnceLock::new();
    STARTED.get_or_init(|| {
        let enabled = std::env::var("NCCL_RAS_ENABLE").map_or(true, |v| v != "0");
        if enabled && at_least(24, 0) {
            let _ = std::thread::Builder::new()
                .name("nccl-ras".into())
                .spawn(serve);
        }
    });
}

/// The live communicators of this process.
fn communicators() -> Vec<(Arc<Shared>, usize, usize)> {
    let mut comms = registry().lock().unwrap_or_else(|p| p.into_inner());
    comms.retain(|c| c.shared.strong_count() > 0);
    comms
        .iter()
        .filter_map(|c| Some((c.shared.upgrade()?, c.rank, c.ranks)))
        .collect()
}

/// The RAS thread: beats for this process's ranks, and answers clients.
fn serve() {
    let listener = listen();
    loop {
        for (shared, rank, _) in communicators() {
            shared.beat(rank, now_ns());
        }
        if let Some(listener) = &listener {
            while let Ok((client, _)) = listener.accept() {
                let _ = std::thread::Builder::new()
                    .name("nccl-ras-client".into())
                    .spawn(move || answer(client));
            }
        }
        std::thread::sleep(BEAT);
    }
}

/// The client socket as rasClientInitSocket makes it; `None` (RAS runs without it, as NCCL's
/// does) where the address is bad or taken.
fn listen() -> Option<TcpListener> {
    let address = std::env::var("NCCL_RAS_ADDR").unwrap_or_else(|_| "localhost:28028".into());
    let address: SocketAddr = address.to_socket_addrs().ok()?.next()?;
    let family = if address.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    };
    // SAFETY: a new socket; the options and the address are plain values; the descriptor is
    // handed to a TcpListener that owns it from then on.
    unsafe {
        let fd = libc::socket(family, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return None;
        }
        let listener = TcpListener::from_raw_fd(fd);
        let on: libc::c_int = 1;
        for option in [libc::SO_REUSEADDR, libc::SO_REUSEPORT] {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                option,
                (&on as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as u32,
            );
        }
        let (storage, length) = socket_address(address);
        if libc::bind(
            fd,
            (&storage as *const libc::sockaddr_storage).cast(),
            length,
        ) != 0
            || libc::listen(fd, 128) != 0
        {
            return None;
        }
        listener.set_nonblocking(true).ok()?;
        Some(listener)
    }
}

fn socket_address(address: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain data, zero is a valid value of it.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let length = match address {
        SocketAddr::V4(v4) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: v4.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from(*v4.ip()).to_be(),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_in fits in sockaddr_storage.
            unsafe { std::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), sin) };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(v6) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: v6.port().to_be(),
                sin6_flowinfo: 0,
                sin6_addr: libc::in6_addr {
                    s6_addr: v6.ip().octets(),
                },
                sin6_scope_id: 0,
            };
            // SAFETY: as above.
            unsafe { std::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), sin6) };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (storage, length as libc::socklen_t)
}

/// A client's settings.
struct Client {
    timeout_s: u64,
    json: bool,
    verbose: bool,
}

/// Serves one client until it closes or its status is sent.
fn answer(stream: TcpStream) {
    let _ = stream.set_nonblocking(false);
    let Ok(mut writer) = stream.try_clone() else {
        return;
    };
    let mut client = Client {
        timeout_s: 5,
        json: false,
        verbose: false,
    };
    for line in BufReader::new(stream).lines() {
        let Ok(line) = line else { return };
        let command = line.trim_end_matches('\r');
        let lower = command.to_ascii_lowercase();
        let reply = if lower.starts_with("client protocol ") {
            "SERVER PROTOCOL 2\n".to_string()
        } else if let Some(value) = lower.strip_prefix("timeout ") {
            match value.parse::<i64>() {
                Ok(seconds) if seconds >= 0 => {
                    client.timeout_s = seconds as u64;
                    "OK\n".into()
                }
                _ => format!("ERROR: Invalid timeout value {}\n", &command[8..]),
            }
        } else if lower.starts_with("set format ") && at_least(28, 7) {
            match &lower[11..] {
                "text" | "json" => {
                    client.json = &lower[11..] == "json";
                    "OK\n".into()
                }
                _ => format!("ERROR: Invalid format {}\n", &command[11..]),
            }
        } else if lower == "status" || lower == "verbose status" {
            client.verbose = lower.starts_with("verbose");
            let _ = writer.write_all(status(&client).as_bytes());
            return;
        } else if (lower == "monitor" || lower.starts_with("monitor ")) && at_least(29, 0) {
            "OK\n".into()
        } else {
            format!("ERROR: Unknown command {command}\n")
        };
        if writer.write_all(reply.as_bytes()).is_err() {
            return;
        }
    }
}

/// One communicator as gathered: the ranks that answered, and those that did not (with
/// whether they are dead).
struct Gathered {
    hash: u64,
    size: usize,
    answered: Vec<(usize, RankRecord)>,
    missing: Vec<(usize, RankRecord, bool)>,
}

/// Ranks this process has found silent already: RAS waits out its leg timeout on a peer once,
/// then routes around it.
fn known_silent() -> &'static Mutex<BTreeSet<u32>> {
    static SILENT: Mutex<BTreeSet<u32>> = Mutex::new(BTreeSet::new());
    &SILENT
}

fn gather(client: &Client) -> (Vec<Gathered>, u32, f64) {
    let started = now_ns();
    let mut timeouts = 0;
    let mut gathered = Vec::new();
    for (shared, _, ranks) in communicators() {
        // A process with several ranks of one communicator reports it once.
        if gathered.iter().any(|g: &Gathered| g.hash == shared.hash) {
            continue;
        }
        let now = now_ns();
        let mut comm = Gathered {
            hash: shared.hash,
            size: ranks,
            answered: Vec::new(),
            missing: Vec::new(),
        };
        for rank in 0..ranks {
            let record = shared.record(rank);
            let silent = now.saturating_sub(record.heartbeat_ns);
            if record.heartbeat_ns > 0 && silent <= LEG_TIMEOUT_NS {
                comm.answered.push((rank, record));
                continue;
            }
            let first_time = known_silent()
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(record.pid);
            if first_time {
                timeouts += 1;
                std::thread::sleep(Duration::from_secs(client.timeout_s.min(5)));
            }
            // Dead once silent for a minute after it had answered.
            let dead = record.heartbeat_ns > 0 && silent > DEAD_AFTER_NS;
            comm.missing.push((rank, record, dead));
        }
        gathered.push(comm);
    }
    let seconds = now_ns().saturating_sub(started) as f64 / 1e9;
    (gathered, timeouts, seconds)
}

fn status(client: &Client) -> String {
    let (comms, timeouts, seconds) = gather(client);
    if client.json {
        json(&comms, timeouts, seconds)
    } else {
        text(&comms, timeouts, seconds, client.verbose)
    }
}

fn version_text() -> String {
    let (major, minor, patch) = version();
    format!("{major}.{minor}.{patch}")
}

/// The JSON of rasDumpCommsToJSON, field for field.
fn json(comms: &[Gathered], timeouts: u32, seconds: f64) -> String {
    let mut out = String::new();
    out += "{\n";
    out += &format!("  \"nccl_version\": \"{}\",\n", version_text());
    out += "  \"cuda_runtime_version\": 12080,\n  \"cuda_driver_version\": 12080,\n";
    out += &format!("  \"timestamp\": \"{}\",\n", timestamp());
    out += &format!("  \"communicators_count\": {},\n", comms.len());
    out += "  \"communicators\": [\n";
    for (i, comm) in comms.iter().enumerate() {
        if i > 0 {
            out += ",\n";
        }
        out += "    {\n";
        out += &format!("      \"hash\": \"0x{:x}\",\n", comm.hash);
        out += &format!(
            "      \"secondary_hash\": \"0x{:x}:0x{:x}\",\n",
            comm.hash.rotate_left(17),
            comm.hash.rotate_left(41)
        );
        out += &format!("      \"size\": {},\n", comm.size);
        out += &format!("      \"ranks_count\": {},\n", comm.answered.len());
        out += &format!("      \"missing_ranks_count\": {},\n", comm.missing.len());
        out += "      \"ranks\": [\n";
        for (j, (rank, record)) in comm.answered.iter().enumerate() {
            if j > 0 {
                out += ",\n";
            }
            out += "        {\n";
            out += &rank_fields(*rank, record);
            out += "          \"status\": {\n";
            out += "            \"init_state\": 0,\n            \"async_error\": 0,\n";
            out +=
                "            \"finalize_called\": false,\n            \"destroy_flag\": false,\n";
            out += &format!("            \"abort_flag\": {}\n", record.aborted);
            out += "          },\n          \"collective_counts\": {\n";
            for (f, name) in FUNCTION_NAMES.iter().enumerate() {
                let comma = if f + 1 < FUNCTIONS { "," } else { "" };
                out += &format!("            \"{name}\": {}{comma}\n", record.issued[f]);
            }
            out += "          }\n        }";
        }
        out += "\n      ],\n      \"missing_ranks\": [\n";
        for (j, (rank, record, dead)) in comm.missing.iter().enumerate() {
            if j > 0 {
                out += ",\n";
            }
            out += "        {\n";
            out += &rank_fields(*rank, record);
            out += "          \"status\": {\n            \"unresponsive\": true,\n";
            out += &format!("            \"considered_dead\": {dead}\n          }}\n        }}");
        }
        out += "\n      ]\n    }";
    }
    out += "\n  ],\n  \"ras\": {\n";
    out += &format!("    \"collection_time_sec\": {seconds:.3},\n");
    out += &format!("    \"timeouts_count\": {timeouts}\n  }}\n}}\n");
    out
}

fn rank_fields(rank: usize, record: &RankRecord) -> String {
    // RAS prints -1 for a process it has no information on.
    let pid = if record.pid == 0 {
        -1
    } else {
        i64::from(record.pid)
    };
    format!(
        "          \"rank\": {rank},\n          \"host\": \"127.0.0.1\",\n          \"pid\": {pid},\n          \"cuda_dev\": {0},\n          \"nvml_dev\": {0},\n",
        record.device
    )
}

/// `%F %T` in local time, as RAS stamps its answers.
fn timestamp() -> String {
    let mut buffer = [0u8; 64];
    // SAFETY: time and localtime_r into locals; strftime writes at most the buffer's length.
    unsafe {
        let now = libc::time(std::ptr::null_mut());
        let mut tm: libc::tm = std::mem::zeroed();
        libc::localtime_r(&now, &mut tm);
        let n = libc::strftime(
            buffer.as_mut_ptr().cast(),
            buffer.len(),
            c"%F %T".as_ptr(),
            &tm,
        );
        String::from_utf8_lossy(&buffer[..n]).into_owned()
    }
}

/// A group of ranks worth listing one by one (rasCountIsOutlier).
fn outlier(count: usize, total: usize, verbose: bool) -> bool {
    count == 1
        || if verbose {
            (count as f64) < total as f64 * 0.5
        } else {
            count <= 10 && count as f64 <= total as f64 * 0.25
        }
}

fn who(record: &RankRecord) -> String {
    format!(
        "GPU {} managed by process {} on node 127.0.0.1",
        record.device, record.pid
    )
}

/// The text answer of NCCL 2.26 – 2.28: version, the communicators' table, the INCOMPLETE
/// errors and the per-function MISMATCH warnings (the job summary and the RAS network's own
/// sections are left out).
fn text(comms: &[Gathered], timeouts: u32, seconds: f64, verbose: bool) -> String {
    let mut out = format!(
        "NCCL version {} compiled with CUDA 12.8\nCUDA runtime version 12080, driver version 12080\n\n",
        version_text()
    );
    out += &format!("Communicators... ({seconds:.2}s)\n=============\n\n");
    out += "Group     Comms     Nodes     Ranks     Ranks     Ranks    Status  Errors\n";
    out += "    #  in group  per comm  per node  per comm  in group\n";
    let mismatched = |comm: &Gathered| {
        (0..FUNCTIONS).any(|f| {
            let mut counts = comm.answered.iter().map(|(_, r)| r.issued[f]);
            let first = counts.next();
            counts.any(|c| Some(c) != first)
        })
    };
    for (i, comm) in comms.iter().enumerate() {
        let mut errors = Vec::new();
        if !comm.missing.is_empty() {
            errors.push("INCOMPLETE");
        }
        if mismatched(comm) {
            errors.push("MISMATCH");
        }
        let errors = if errors.is_empty() {
            "OK".to_string()
        } else {
            errors.join(",")
        };
        out += &format!(
            "{i:5}  {:8}  {:8}  {:>8}  {:8}  {:8}  {:>8}  {errors:>6}\n",
            1, 1, comm.size, comm.size, comm.size, "RUNNING"
        );
    }
    if comms.iter().any(|c| !c.missing.is_empty()) {
        out += "\nErrors\n======\n\n";
        for (i, comm) in comms
            .iter()
            .enumerate()
            .filter(|(_, c)| !c.missing.is_empty())
        {
            let n = comm.missing.len();
            out += &format!(
                "#{i}-0 ({:016x}) INCOMPLETE\n  Missing communicator data from {n} rank{}\n",
                comm.hash,
                if n > 1 { "s" } else { "" }
            );
            if outlier(n, comm.size, verbose) {
                for (rank, record, _) in &comm.missing {
                    out += &format!("  Rank {rank} -- {}\n", who(record));
                }
            }
            out += "\n";
        }
    }
    if timeouts > 0 || comms.iter().any(mismatched) {
        out += "\nWarnings\n========\n\n";
        if timeouts > 0 {
            out += &format!(
                "TIMEOUT\n  Encountered {timeouts} communication timeout{} while gathering communicator data\n\n",
                if timeouts > 1 { "s" } else { "" }
            );
        }
        for (i, comm) in comms.iter().enumerate().filter(|(_, c)| mismatched(c)) {
            out += &format!("#{i}-0 ({:016x}) MISMATCH\n", comm.hash);
            for (f, name) in FUNCTION_NAMES.iter().enumerate() {
                let mut by_count: Vec<(u64, Vec<&(usize, RankRecord)>)> = Vec::new();
                for entry in &comm.answered {
                    let count = entry.1.issued[f];
                    match by_count.iter_mut().find(|(c, _)| *c == count) {
                        Some((_, group)) => group.push(entry),
                        None => by_count.push((count, vec![entry])),
                    }
                }
                if by_count.len() < 2 {
                    continue;
                }
                by_count.sort_by_key(|group| std::cmp::Reverse(group.1.len()));
                out += &format!("  Communicator ranks have different {name} operation counts\n");
                for (count, group) in &by_count {
                    if group.len() > 1 {
                        out += &match count {
                            0 => format!(
                                "  {} ranks have not launched any operations\n",
                                group.len()
                            ),
                            c => format!(
                                "  {} ranks have launched up to operation {c}\n",
                                group.len()
                            ),
                        };
                    }
                    if !outlier(group.len(), comm.size, verbose) {
                        continue;
                    }
                    for (rank, record) in group {
                        out += &match (group.len(), count) {
                            (1, 0) => format!(
                                "  Rank {rank} has not launched any operations -- {}\n",
                                who(record)
                            ),
                            (1, c) => format!(
                                "  Rank {rank} has launched up to operation {c} -- {}\n",
                                who(record)
                            ),
                            _ => format!("  Rank {rank} -- {}\n", who(record)),
                        };
                    }
                }
                out += "\n";
            }
        }
    }
    out
}
