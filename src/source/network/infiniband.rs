//! InfiniBand and RoCE ports from `/sys/class/infiniband/<device>/ports/<port>/`, with the
//! counter semantics of node_exporter's infiniband collector: data counters count 4-byte
//! words, `rate` reads "200 Gb/sec (4X HDR)", `state` reads "4: ACTIVE".

use std::path::Path;

use crate::snapshot::IbPortCounters;

/// A port as read from sysfs, before rates.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct IbPort {
    /// Its counters.
    pub counters: IbPortCounters,
    /// Signalling rate in bytes per second.
    pub rate_bytes_per_second: Option<f64>,
    /// Whether the port is ACTIVE.
    pub active: bool,
    /// `InfiniBand` or `Ethernet`.
    pub link_layer: String,
}

/// The data counters count 4-byte words ("octets divided by four").
const WORD_BYTES: u64 = 4;

/// `rate` as bytes per second: "200 Gb/sec (4X HDR)" → 25e9.
pub fn parse_rate(text: &str) -> Option<f64> {
    let (value, unit) = text.trim().split_once(' ')?;
    let gigabits: f64 = value.parse().ok()?;
    unit.starts_with("Gb/sec")
        .then_some(gigabits * 125_000_000.0)
}

/// `state` ("4: ACTIVE") is ACTIVE.
pub fn parse_active(text: &str) -> bool {
    text.split_once(':')
        .is_some_and(|(_, name)| name.trim() == "ACTIVE")
}

fn read_counter(dir: &Path, names: &[&str]) -> Option<u64> {
    names.iter().find_map(|name| {
        std::fs::read_to_string(dir.join(name))
            .ok()?
            .trim()
            .parse()
            .ok()
    })
}

/// Every port of every HCA under `class` (`<sysfs>/class/infiniband`), sorted by device and
/// port. A missing class directory is an empty list: most nodes have no HCA.
pub fn read_ports(class: &Path) -> std::io::Result<Vec<IbPort>> {
    let devices = match std::fs::read_dir(class) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut ports = Vec::new();
    for device in devices.flatten() {
        let name = device.file_name().to_string_lossy().into_owned();
        let Ok(entries) = std::fs::read_dir(device.path().join("ports")) else {
            continue;
        };
        for entry in entries.flatten() {
            let Ok(port) = entry.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            ports.push(read_port(&entry.path(), &name, port));
        }
    }
    ports.sort_by(|a, b| {
        (&a.counters.device, a.counters.port).cmp(&(&b.counters.device, b.counters.port))
    });
    Ok(ports)
}

fn read_port(dir: &Path, device: &str, port: u32) -> IbPort {
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap_or_default();
    let counters = dir.join("counters");
    let legacy = dir.join("counters_ext");
    let data = |name: &str, legacy_name: &str| {
        read_counter(&counters, &[name])
            .or_else(|| read_counter(&legacy, &[legacy_name]))
            .map(|words| words.saturating_mul(WORD_BYTES))
    };
    IbPort {
        counters: IbPortCounters {
            device: device.to_string(),
            port,
            receive_bytes: data("port_rcv_data", "port_rcv_data_64"),
            transmit_bytes: data("port_xmit_data", "port_xmit_data_64"),
            transmit_wait_ticks: read_counter(&counters, &["port_xmit_wait"]),
            symbol_errors: read_counter(&counters, &["symbol_error"]),
            link_downed: read_counter(&counters, &["link_downed"]),
        },
        rate_bytes_per_second: parse_rate(&read("rate")),
        active: parse_active(&read("state")),
        link_layer: read("link_layer").trim().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_and_state_as_the_kernel_writes_them() {
        assert_eq!(parse_rate("200 Gb/sec (4X HDR)\n"), Some(25e9));
        assert_eq!(parse_rate("25 Gb/sec (1X EDR)"), Some(3.125e9));
        assert_eq!(parse_rate("2.5 Gb/sec (1X SDR)"), Some(312_500_000.0));
        assert_eq!(parse_rate("garbage"), None);
        assert!(parse_active("4: ACTIVE\n"));
        assert!(!parse_active("1: DOWN\n"));
        assert!(!parse_active(""));
    }
}
