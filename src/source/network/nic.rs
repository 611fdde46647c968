//! Network interfaces: counters from `/proc/<pid>/net/dev`, link speed and state from
//! `/sys/class/net`.

use procfs_core::net::InterfaceDeviceStatus;

use crate::config::NetworkConfig;
use crate::snapshot::{InterfaceCounters, LinkRates};
use crate::source::parse_with_procfs;

/// Parses a `net/dev` file (procfs-core): two header lines, then `name: 16 counters` per
/// interface; sorted by name (the library keys them in a map).
pub fn parse_net_dev(text: &str) -> Result<Vec<InterfaceCounters>, String> {
    // Kernels before 3.9 let a long byte count touch the name ("eth0:123456789"); the
    // library splits on blanks. No `:` appears anywhere else in the file.
    let status: InterfaceDeviceStatus = parse_with_procfs(&text.replace(':', ": "))?;
    let mut interfaces: Vec<InterfaceCounters> = status
        .0
        .into_values()
        .map(|device| InterfaceCounters {
            name: device.name,
            receive_bytes: device.recv_bytes,
            receive_errors: device.recv_errs,
            receive_drops: device.recv_drop,
            transmit_bytes: device.sent_bytes,
            transmit_errors: device.sent_errs,
            transmit_drops: device.sent_drop,
        })
        .collect();
    interfaces.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(interfaces)
}

/// Bytes per second between two reads `seconds` apart; `None` when a counter went backwards
/// (the interface was re-created, or a 32-bit counter wrapped).
pub fn link_rates(
    (receive_before, transmit_before): (u64, u64),
    (receive_now, transmit_now): (u64, u64),
    seconds: f64,
) -> Option<LinkRates> {
    let receive = receive_now.checked_sub(receive_before)?;
    let transmit = transmit_now.checked_sub(transmit_before)?;
    Some(LinkRates {
        receive_bytes_per_second: receive as f64 / seconds,
        transmit_bytes_per_second: transmit as f64 / seconds,
    })
}

/// The traffic of a network namespace: every interface but loopback, summed.
pub fn namespace_bytes(interfaces: &[InterfaceCounters]) -> (u64, u64) {
    interfaces
        .iter()
        .filter(|i| i.name != "lo")
        .fold((0, 0), |(rx, tx), i| {
            (
                rx.saturating_add(i.receive_bytes),
                tx.saturating_add(i.transmit_bytes),
            )
        })
}

/// `/sys/class/net/<if>/speed` (megabits per second) as bytes per second; `None` for the
/// `-1` or the read error a link without a speed gives (down, virtual, some drivers).
pub fn parse_speed(text: &str) -> Option<f64> {
    let megabits: i64 = text.trim().parse().ok()?;
    (megabits > 0).then_some(megabits as f64 * 125_000.0)
}

/// Whether an interface is reported: physical ones (a `device` behind them in sysfs) unless
/// virtual ones are asked for, then the include and exclude regexes.
pub fn is_selected(name: &str, is_physical: bool, config: &NetworkConfig) -> bool {
    let included = config.include.is_empty() || config.include.0.is_match(name);
    let excluded = !config.exclude.is_empty() && config.exclude.0.is_match(name);
    (config.include_virtual || is_physical) && included && !excluded
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Pattern;

    const NET_DEV: &str = "Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:  104590     980    0    0    0     0          0         0   104590     980    0    0    0     0       0          0
  eth0:123456789 98765    3    7    0     0          0        12 987654321  87654    1    2    0     0       0          0
";

    #[test]
    fn parses_the_counters_it_needs() {
        let interfaces = parse_net_dev(NET_DEV).unwrap();
        assert_eq!(interfaces.len(), 2);
        let eth0 = &interfaces[0];
        assert_eq!(eth0.name, "eth0");
        assert_eq!(eth0.receive_bytes, 123456789);
        assert_eq!(eth0.receive_errors, 3);
        assert_eq!(eth0.receive_drops, 7);
        assert_eq!(eth0.transmit_bytes, 987654321);
        assert_eq!(eth0.transmit_errors, 1);
        assert_eq!(eth0.transmit_drops, 2);
        assert_eq!(namespace_bytes(&interfaces), (123456789, 987654321));
    }

    #[test]
    fn malformed_lines_are_errors() {
        let header = NET_DEV.lines().take(2).collect::<Vec<_>>().join("\n");
        let with = |line: &str| format!("{header}\n{line}\n");
        assert_eq!(
            parse_net_dev(&with("eth0: 1 2 3")).unwrap_err(),
            "a field is missing"
        );
        let error =
            parse_net_dev(&with("eth0: 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 x")).unwrap_err();
        assert!(error.contains("\"x\""), "{error}");
        assert_eq!(parse_net_dev(&header).unwrap(), vec![]);
    }

    #[test]
    fn rates_need_counters_that_move_forward() {
        let rates = link_rates((1000, 0), (3000, 500), 2.0).unwrap();
        assert_eq!(rates.receive_bytes_per_second, 1000.0);
        assert_eq!(rates.transmit_bytes_per_second, 250.0);
        assert_eq!(rates.utilization(2000.0), Some(0.5));
        assert_eq!(rates.utilization(0.0), None);
        assert_eq!(link_rates((1000, 0), (10, 500), 1.0), None);
    }

    #[test]
    fn speed_in_bytes_per_second_and_none_without_a_link() {
        assert_eq!(parse_speed("25000\n"), Some(25e9 / 8.0));
        assert_eq!(parse_speed("-1\n"), None);
        assert_eq!(parse_speed(""), None);
    }

    #[test]
    fn physical_interfaces_by_default() {
        let mut config = NetworkConfig::default();
        assert!(is_selected("eth0", true, &config));
        assert!(!is_selected("veth12ab", false, &config));
        assert!(!is_selected("lo", false, &config));
        config.include_virtual = true;
        assert!(is_selected("lo", false, &config));
        config.exclude = Pattern::parse("^lo$").unwrap();
        assert!(!is_selected("lo", false, &config));
        config.include = Pattern::parse("^ib").unwrap();
        assert!(!is_selected("eth0", true, &config));
    }
}
