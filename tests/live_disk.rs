//! Against the live host: while `dd oflag=direct` writes to a temporary file, the disk source's
//! utilization, write await and write throughput for that file's block device agree with
//! `iostat -x` over the same interval.
//!
//! Tolerances: iostat and the exporter read /proc/diskstats a few milliseconds apart at each
//! end of a 3 s interval, and the load itself is bursty at that scale, so utilization may
//! differ by 0.10 (10 points of %util), write await by 25 % (plus 0.2 ms for very fast
//! devices) and write throughput by 15 %.

mod common;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use gpu_bottleneck_exporter::config::{DiskConfig, Pattern};
use gpu_bottleneck_exporter::snapshot::{DiskRates, Snapshot};
use gpu_bottleneck_exporter::source::host::disk::DiskSource;
use gpu_bottleneck_exporter::source::{HostRoots, Source};

const INTERVAL_SECONDS: u64 = 3;

/// The whole-disk name under the filesystem holding `dir`, if it sits on a block device.
fn block_device_of(dir: &Path) -> Result<String, String> {
    let dev = std::fs::metadata(dir).map_err(|e| e.to_string())?.dev();
    let major = ((dev >> 32) & 0xffff_f000) | ((dev >> 8) & 0xfff);
    let minor = ((dev >> 12) & 0xffff_ff00) | (dev & 0xff);
    let sys = PathBuf::from(format!("/sys/dev/block/{major}:{minor}"));
    let device = std::fs::canonicalize(&sys)
        .map_err(|_| format!("{} is on device {major}:{minor}, which is not a block device (overlay, tmpfs, network fs)", dir.display()))?;
    // A partition's sysfs directory sits inside its disk's; the disk is what iostat -x and
    // our default selection report.
    let disk = if device.join("partition").exists() {
        device.parent().unwrap()
    } else {
        &device
    };
    Ok(disk.file_name().unwrap().to_string_lossy().into_owned())
}

/// iostat -x figures for `device` over one interval: (util ratio, w_await s, write bytes/s).
fn iostat(device: &str) -> (f64, f64, f64) {
    let output = Command::new("iostat")
        .args(["-x", "-y", "-d", device, &INTERVAL_SECONDS.to_string(), "1"])
        .env("LC_ALL", "C")
        .output()
        .expect("iostat not found: install sysstat (scripts/test.sh does)");
    let text = String::from_utf8_lossy(&output.stdout);
    let header: Vec<&str> = text
        .lines()
        .find(|l| l.starts_with("Device"))
        .unwrap_or_else(|| panic!("no header in iostat output:\n{text}"))
        .split_whitespace()
        .collect();
    let row: Vec<&str> = text
        .lines()
        .find(|l| l.split_whitespace().next() == Some(device))
        .unwrap_or_else(|| panic!("no {device} row in iostat output:\n{text}"))
        .split_whitespace()
        .collect();
    let column = |name: &str| -> f64 {
        let i = header
            .iter()
            .position(|h| *h == name)
            .unwrap_or_else(|| panic!("no {name} column"));
        row[i].parse().unwrap()
    };
    (
        column("%util") / 100.0,
        column("w_await") / 1000.0,
        column("wkB/s") * 1024.0,
    )
}

fn start_writer(dir: &Path, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    let file = dir.join("load");
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            let status = Command::new("dd")
                .arg("if=/dev/zero")
                .arg(format!("of={}", file.display()))
                .args([
                    "bs=256k",
                    "count=200",
                    "oflag=direct",
                    "conv=notrunc",
                    "status=none",
                ])
                .stderr(Stdio::null())
                .status()
                .expect("run dd");
            assert!(status.success(), "dd failed");
        }
    })
}

#[test]
fn disk_rates_agree_with_iostat_under_direct_writes() {
    let scratch = common::TempDir::new("live-disk");
    let device = match block_device_of(scratch.path()) {
        Ok(device) => device,
        Err(why) => {
            println!("SKIPPED: {why}");
            return;
        }
    };
    let stop = Arc::new(AtomicBool::new(false));
    let writer = start_writer(scratch.path(), stop.clone());
    std::thread::sleep(Duration::from_millis(700)); // let the load reach a steady state

    let roots = HostRoots {
        procfs: "/proc".into(),
        sysfs: "/sys".into(),
    };
    let config = DiskConfig {
        include: Pattern::parse(&format!("^{}$", regex::escape(&device))).unwrap(),
        ..DiskConfig::default()
    };
    let mut source = DiskSource::new(roots, config);
    let iostat_thread = std::thread::spawn({
        let device = device.clone();
        move || iostat(&device)
    });
    let start = std::time::Instant::now();
    let mut snapshot = Snapshot::default();
    source.sample(&mut snapshot, Duration::ZERO).unwrap();
    let (util, w_await, write_bps) = iostat_thread.join().unwrap();
    source.sample(&mut snapshot, start.elapsed()).unwrap();
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();

    let ours: DiskRates = snapshot
        .disks
        .iter()
        .find(|d| d.counters.name == device)
        .and_then(|d| d.rates)
        .expect("rates for the device");
    println!("device {device} over {INTERVAL_SECONDS} s:");
    println!(
        "  utilization   exporter {:.3}   iostat {:.3}",
        ours.utilization_ratio, util
    );
    println!(
        "  w_await (ms)  exporter {:.3}   iostat {:.3}",
        ours.write_await_seconds * 1e3,
        w_await * 1e3
    );
    println!(
        "  write MB/s    exporter {:.1}   iostat {:.1}",
        ours.write_bytes_per_second / 1e6,
        write_bps / 1e6
    );
    assert!(
        write_bps > 1e6,
        "the dd load did not reach the device (iostat saw {write_bps} B/s)"
    );
    assert!(
        (ours.utilization_ratio - util).abs() <= 0.10,
        "utilization {} vs iostat {util}",
        ours.utilization_ratio
    );
    assert!(
        (ours.write_await_seconds - w_await).abs() <= 0.25 * w_await + 0.0002,
        "w_await {} vs iostat {w_await}",
        ours.write_await_seconds
    );
    assert!(
        (ours.write_bytes_per_second - write_bps).abs() <= 0.15 * write_bps,
        "write throughput {} vs iostat {write_bps}",
        ours.write_bytes_per_second
    );
}
