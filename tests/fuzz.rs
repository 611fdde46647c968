//! Bounded fuzzing of every parser of untrusted text: the configuration and each /proc, /sys
//! and cgroup parser get mutated versions of real inputs (bytes flipped, inserted, deleted,
//! duplicated, truncated) and must return Ok or Err, never panic. The run is deterministic
//! (seeded) and bounded for the test command; a longer run:
//!
//!     FUZZ_ITERATIONS=1000000 FUZZ_SEED=7 cargo test --release --test fuzz -- --nocapture
//!
//! A crash found this way becomes a regression test in the parser's own module.

use std::panic::{catch_unwind, AssertUnwindSafe};

use gpu_bottleneck_exporter::config::{Config, ConfigDuration};
use gpu_bottleneck_exporter::source::host::{cpu, disk, memory, pressure};
use gpu_bottleneck_exporter::source::network::{mounts, nic};
use gpu_bottleneck_exporter::source::process::{cgroup, procfs};
use gpu_bottleneck_exporter::web::auth::credentials;
use gpu_bottleneck_exporter::web::config_file::WebConfigFile;

/// xorshift64*: a tiny deterministic generator, enough to drive mutations.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Characters that matter to these formats, plus some that never should appear.
const ALPHABET: &[char] = &[
    '0', '1', '9', '-', '+', '.', ',', ':', ' ', '\t', '\n', '=', '(', ')', '/', '_', 'e', 'x',
    'k', 'B', 's', 'm', 'h', '[', ']', '{', '}', '\'', '"', '#', '\u{0}', 'é', '∞',
];

fn mutate(rng: &mut Rng, input: &str) -> String {
    let mut chars: Vec<char> = input.chars().collect();
    for _ in 0..=rng.below(4) {
        let at = rng.below(chars.len() + 1);
        match rng.below(6) {
            0 if !chars.is_empty() => {
                let at = at.min(chars.len() - 1);
                chars[at] = ALPHABET[rng.below(ALPHABET.len())];
            }
            1 => chars.insert(at, ALPHABET[rng.below(ALPHABET.len())]),
            2 if !chars.is_empty() => {
                let end = (at + rng.below(8)).min(chars.len());
                chars.drain(at.min(end)..end);
            }
            3 => chars.truncate(at),
            4 if !chars.is_empty() => {
                // Duplicate a run: repeated keys, very long numbers.
                let start = at.min(chars.len() - 1);
                let end = (start + 1 + rng.below(12)).min(chars.len());
                let run: Vec<char> = chars[start..end].to_vec();
                for (i, c) in run.into_iter().enumerate() {
                    chars.insert(end + i, c);
                }
            }
            _ => {
                // A huge number in a random place.
                let digits = "9".repeat(1 + rng.below(40));
                for (i, c) in digits.chars().enumerate() {
                    chars.insert(at + i, c);
                }
            }
        }
    }
    chars.into_iter().collect()
}

fn iterations() -> usize {
    std::env::var("FUZZ_ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000)
}

/// Runs `parse` on mutations of every seed; fails naming the input that panicked.
fn fuzz(name: &str, seeds: &[&str], parse: impl Fn(&str)) {
    let seed = std::env::var("FUZZ_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x5eed_u64);
    let mut rng = Rng(seed ^ name.len() as u64 ^ 0x9e37_79b9_7f4a_7c15);
    for i in 0..iterations() {
        let input = mutate(&mut rng, seeds[i % seeds.len()]);
        if catch_unwind(AssertUnwindSafe(|| parse(&input))).is_err() {
            panic!("{name} panicked on input {input:?}");
        }
    }
}

#[test]
fn configuration() {
    let example = include_str!("../config.example.yaml");
    fuzz(
        "config",
        &[
            example,
            "sample_interval: 1s\nsources:\n  disk:\n    include: '^nvme'\n",
            "analysis:\n  window: 30s\n  enter_score: 0.5\n",
        ],
        |text| {
            let _ = Config::from_yaml(text, "fuzz.yaml");
        },
    );
    fuzz("duration", &["1s", "250ms", "1.5m", "2h"], |text| {
        let _ = ConfigDuration::parse(text);
    });
    fuzz(
        "web config",
        &[
            "tls_server_config:\n  cert_file: a.crt\n  key_file: a.key\n  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n  min_version: TLS13\n  cipher_suites: [TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256]\n  curve_preferences: [X25519]\n",
            "http_server_config:\n  http2: true\n  headers:\n    X-Frame-Options: deny\nbasic_auth_users:\n  alice: $2y$10$X0h1gDsPszWURQaxFh.zoubFi6DXncSjhoQNJgRrnGs7EsimhC7zG\n",
        ],
        |text| {
            let _ = WebConfigFile::parse(text, "web.yml");
        },
    );
    // Authorization headers reach the base64 and credential parsing before any check.
    fuzz(
        "basic auth header",
        &["Basic YWxpY2U6czNjcjN0", "basic Og=="],
        |text| {
            if let Ok(header) = axum::http::HeaderValue::from_str(text) {
                let _ = credentials(&header);
            }
        },
    );
}

#[test]
fn host_parsers() {
    fuzz("stat", &["cpu  2358 10 1489 24517 151 0 31 5 0 0\ncpu0 994 0 701 12540 40 0 3 2 0 0\nctxt 987654\nprocs_running 3\nprocs_blocked 1\n"], |t| {
        let _ = cpu::parse_stat(t);
    });
    fuzz("diskstats", &[" 254       0 vda 28678 5266 2292266 6160 7187 11012 1707896 2787 0 6448 9162 3643 71 197296 186 1015 27\n   7       0 loop0 0 0 0 0 0 0 0 0 0 0 0\n"], |t| {
        let _ = disk::parse_diskstats(t);
    });
    fuzz("pressure", &["some avg10=0.29 avg60=2.74 avg300=1.26 total=5069282\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=12\n"], |t| {
        let _ = pressure::parse_pressure(t);
    });
    let meminfo = include_str!("fixtures/busy-node/t0/proc/meminfo");
    let vmstat = include_str!("fixtures/busy-node/t0/proc/vmstat");
    fuzz("meminfo+vmstat", &[meminfo, vmstat], |t| {
        let _ = memory::memory_counters(t, vmstat);
        let _ = memory::memory_counters(meminfo, t);
    });
}

#[test]
fn network_parsers() {
    fuzz(
        "net/dev",
        &[include_str!("fixtures/network-node/t0/proc/net/dev")],
        |t| {
            let _ = nic::parse_net_dev(t);
        },
    );
    fuzz(
        "mountinfo and mountstats",
        &[
            include_str!("fixtures/network-node/t0/proc/4242/mountinfo"),
            include_str!("fixtures/network-node/t0/proc/1/mountstats"),
        ],
        |t| {
            let _ = mounts::parse_mountinfo(t);
            let _ = mounts::parse_mountstats(t);
        },
    );
}

#[test]
fn process_and_cgroup_parsers() {
    fuzz("pid stat", &["4242 (python3 (main)) S 4200 4242 4200 0 -1 4194560 12000 0 5 0 1500 250 0 0 20 0 24 0 987654 5000000000 300000 18446744073709551615 1 1 0 0 0 0 0 16781312 1073757422 0 0 0 17 7 0 0 33 0 0 0 0 0 0 0 0 0 0"], |t| {
        let _ = procfs::parse_stat(t);
    });
    fuzz("status", &["Name:\tpython3\nCpus_allowed_list:\t0-3,8\nvoluntary_ctxt_switches:\t150\nnonvoluntary_ctxt_switches:\t7\n"], |t| {
        let _ = procfs::parse_status(t);
        let _ = procfs::parse_switches(t);
        let _ = procfs::parse_cpu_list(t);
    });
    fuzz(
        "io and children",
        &[
            include_str!("fixtures/process-v2/t0/proc/1000/io"),
            "12 13 14 ",
        ],
        |t| {
            let _ = procfs::parse_io(t);
            let _ = procfs::parse_comm(t);
            let _ = procfs::parse_children(t);
        },
    );
    fuzz("cgroup", &[
        "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0a1b2c3d_4e5f_4a6b_8c7d_9e0f1a2b3c4d.slice/cri-containerd-3f4e5d6c7b8a99887766554433221100ffeeddccbbaa99887766554433221100.scope\n",
        "4:cpu,cpuacct:/slurm/uid_1000/job_42/step_0\n0::/\n",
    ], |t| {
        if let Ok(paths) = cgroup::parse_proc_cgroup(t) {
            let _ = cgroup::identity(paths.naming_path().unwrap_or(""));
        }
        let _ = cgroup::identity(t);
    });
    fuzz(
        "cpu.stat and quotas",
        &[
            "nr_periods 50\nnr_throttled 20\nthrottled_usec 1500000\n",
            "max 100000\n",
            "250000 100000\n",
        ],
        |t| {
            let _ = cgroup::parse_cpu_stat(t);
            let _ = cgroup::parse_cpu_max(t);
            let _ = cgroup::parse_cfs_quota(t, "100000");
        },
    );
}
