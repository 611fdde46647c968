//! What the network says about a waiting GPU: input fetched over the wire (a slow network
//! filesystem, a pod streaming its data set) and collectives crossing a saturated or slow
//! link. Pure: window figures in, evidence out, scored "high is bad" like every rule's.

use super::score::{high, high_ratio};
use super::text::{job_namespace, per_second};
use super::{Evidence, LinkLoad, WindowFigures};
use crate::config::Thresholds;
use crate::snapshot::Signal;

/// NFS requests per second below which a mount is not what a loop reads from.
const MOUNT_REQUESTS_MIN: f64 = 1.0;

/// Share of a link's speed the job's own traffic must carry for the link's load to be held
/// against the job (a node's link is not every job's).
const JOB_SHARE_MIN: f64 = 0.1;

/// Whether the link carries the job: its namespace's traffic is a real share of the link,
/// or, where that traffic is invisible (RDMA on an InfiniBand / RoCE port bypasses the
/// kernel's counters), the rank is seen in its collectives: in a collective's frame, or —
/// NCCL returning at once — its host waiting in the driver while it issues collectives.
fn carries_job(w: &WindowFigures, link: &LinkLoad, t: &Thresholds) -> bool {
    let own = w
        .job_ingress
        .unwrap_or(0.0)
        .max(w.job_egress.unwrap_or(0.0));
    let in_collectives = [
        w.stack_share(crate::snapshot::Activity::Collective),
        w.collective_wait,
    ]
    .into_iter()
    .flatten()
    .any(|s| s >= t.premise_share_min);
    own >= JOB_SHARE_MIN * link.speed_bytes_per_second || in_collectives
}

/// The share of its maximum bandwidth left to the GPU's own PCIe link, where it trained below
/// its maximum generation or width while the GPU works (more than half the time busy: idle
/// links drop their speed on purpose to save power); `None` on a healthy or idle link.
pub fn link_degraded_under_load(w: &WindowFigures) -> Option<f64> {
    w.pcie_bandwidth_share
        .filter(|share| *share < 1.0 && w.busy.is_some_and(|busy| busy > 0.5))
}

/// The share of the window the GPU spun in NCCL's kernels, where the process issues NCCL
/// collectives (`collective_wait` known: the CUDA probes saw one lately). Ranks that exchange
/// gradients step together, so a rank's GPU busier with empty SMs than its job's least busy
/// rank, or (ranks running the same kernels, not pipeline stages) with its SMs empty longer
/// than its peers', spun that much longer waiting for it (`spin_excess`; identical ranks spin alike, so a
/// balanced job's empty SMs are its own kernels'), whether or not its host waited for the GPU
/// meanwhile (a loop that syncs every few steps runs ahead). Where its collectives cross a
/// saturated or slow link (the evidence of [`inter_node`] at half strength or more), every
/// rank spins for the wire; where its job has ranks on other nodes (its launcher says so), a
/// slow one among them keeps every rank here spinning alike, out of this node's sight. Then
/// the spin is as long as its host waited in the driver after issuing collectives, at most as
/// long as its SMs sat empty.
pub fn spun_in_collectives(w: &WindowFigures, t: &Thresholds) -> Option<f64> {
    let wait = w.collective_wait?;
    let for_the_wire =
        inter_node(w, t).iter().any(|e| e.strength >= 0.5) || w.job_spans_nodes == Some(true);
    let wire = w
        .busy
        .filter(|_| for_the_wire)
        .map(|busy| wait.min((busy - w.sm_activity.unwrap_or(0.0)).max(0.0)));
    [w.spin_excess, wire].into_iter().flatten().reduce(f64::max)
}

/// "eth0 (25 Gb/s) at 80 % in, 3 % out".
fn describe_link(link: &LinkLoad) -> String {
    let waits = match link.transmit_wait_per_second {
        Some(w) if w > 0.0 => format!(", {w:.0} transmit-wait ticks/s (congestion)"),
        _ => String::new(),
    };
    format!(
        "{} ({:.0} Gb/s) at {:.0} % in, {:.0} % out{waits}",
        link.name,
        link.speed_bytes_per_second * 8.0 / 1e9,
        100.0 * link.receive_utilization,
        100.0 * link.transmit_utilization,
    )
}

/// Evidence that a starving loop's input comes over the network: the NFS mount it is most
/// likely reading (slow by its READ round trip), the job's ingress on a link whose receive
/// side is near saturation, and the network or FUSE filesystems mounted (named, not scored:
/// their traffic shows only as the job's ingress).
pub fn remote_input(w: &WindowFigures, t: &Thresholds) -> Vec<Evidence> {
    let mut evidence = Vec::new();
    if let Some(mount) = w
        .mount
        .as_ref()
        .filter(|m| m.requests_per_second >= MOUNT_REQUESTS_MIN)
    {
        evidence.push(Evidence {
            signal: Signal::BusiestMount,
            value: mount.read_rtt_seconds,
            threshold: t.nfs_rtt_high,
            strength: high(mount.read_rtt_seconds, t.nfs_rtt_high),
            detail: format!(
                "{} ({}, {}): {:.0} requests/s, READ round trip {:.1} ms, reading {}",
                mount.mount_point,
                mount.device,
                mount.fstype,
                mount.requests_per_second,
                1000.0 * mount.read_rtt_seconds,
                per_second(mount.read_bytes_per_second)
            ),
        });
    }
    if let Some(ingress) = w.job_ingress {
        // Input arrives: the link's receive side is what it can saturate.
        let (strength, link) = match &w.link {
            Some(l)
                if l.receive_utilization >= l.transmit_utilization
                    && ingress >= JOB_SHARE_MIN * l.speed_bytes_per_second =>
            {
                (
                    high_ratio(l.receive_utilization, t.link_utilization_high),
                    format!("; the busiest link: {}", describe_link(l)),
                )
            }
            _ => (0.0, String::new()),
        };
        evidence.push(Evidence {
            signal: Signal::JobIngress,
            value: ingress,
            threshold: 0.0,
            strength,
            detail: format!(
                "{} received {}{link}",
                job_namespace(w.job_interface.as_deref()),
                per_second(ingress)
            ),
        });
    }
    if !w.network_mounts.is_empty() {
        evidence.push(Evidence {
            signal: Signal::NetworkMounts,
            value: w.network_mounts.len() as f64,
            threshold: 0.0,
            strength: 0.0,
            detail: w.network_mounts.join(", "),
        });
    }
    evidence
}

/// Evidence that a rank's collectives cross a saturated or slow link: the busiest link near
/// saturation with traffic in both directions (an all-reduce sends what it receives; input
/// only arrives), and a link below `link_speed_min` carrying traffic.
pub fn inter_node(w: &WindowFigures, t: &Thresholds) -> Vec<Evidence> {
    let Some(link) = &w.link else {
        return Vec::new();
    };
    let mut evidence = Vec::new();
    let symmetric = link.transmit_utilization >= 0.5 * link.receive_utilization;
    let utilization = link.utilization();
    let carries = carries_job(w, link, t);
    evidence.push(Evidence {
        signal: Signal::BusiestLink,
        value: utilization,
        threshold: t.link_utilization_high,
        strength: if symmetric && carries {
            high_ratio(utilization, t.link_utilization_high)
        } else {
            0.0
        },
        detail: describe_link(link),
    });
    // A slow link that carries a real share of traffic (a tenth of it) is what the ranks
    // wait on when they wait in collectives.
    if carries && link.speed_bytes_per_second < t.link_speed_min && utilization >= 0.1 {
        evidence.push(Evidence {
            signal: Signal::SlowLink,
            value: link.speed_bytes_per_second,
            threshold: t.link_speed_min,
            strength: 0.5,
            detail: format!(
                "{} runs at {:.0} Gb/s, below the {:.0} Gb/s multi-node training needs",
                link.name,
                link.speed_bytes_per_second * 8.0 / 1e9,
                t.link_speed_min * 8.0 / 1e9
            ),
        });
    }
    evidence
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::score::strongest;
    use crate::snapshot::MountLoad;

    fn link(receive: f64, transmit: f64, gbits: f64) -> Option<LinkLoad> {
        Some(LinkLoad {
            name: "eth0".into(),
            speed_bytes_per_second: gbits * 125e6,
            receive_utilization: receive,
            transmit_utilization: transmit,
            transmit_wait_per_second: None,
        })
    }

    #[test]
    fn a_slow_mount_and_a_saturated_receive_side_point_at_remote_input() {
        let t = Thresholds::default();
        let w = WindowFigures {
            mount: Some(MountLoad {
                mount_point: "/data".into(),
                device: "nas:/data".into(),
                fstype: "nfs4".into(),
                requests_per_second: 400.0,
                read_rtt_seconds: 0.025,
                read_bytes_per_second: 5e7,
            }),
            job_ingress: Some(2.4e9),
            link: link(0.95, 0.02, 25.0),
            ..WindowFigures::default()
        };
        let evidence = remote_input(&w, &t);
        assert_eq!(evidence[0].signal, Signal::BusiestMount);
        assert_eq!(evidence[0].strength, 1.0, "25 ms is five times slow");
        assert!(evidence[0].detail.contains("READ round trip 25.0 ms"));
        assert_eq!(evidence[1].signal, Signal::JobIngress);
        assert!(evidence[1].strength > 0.7);
        assert!(evidence[1].detail.contains("eth0 (25 Gb/s) at 95 % in"));
        // A quick mount and an idle link: named, not held against anyone.
        let calm = WindowFigures {
            mount: w.mount.clone().map(|m| MountLoad {
                read_rtt_seconds: 0.0005,
                ..m
            }),
            link: link(0.05, 0.01, 25.0),
            ..w
        };
        assert!(strongest(&remote_input(&calm, &t)) < 0.1);
    }

    #[test]
    fn collectives_load_both_directions_and_a_slow_link_is_named() {
        let t = Thresholds::default();
        // The job sends and receives most of what the link carries.
        let busy = |receive: f64, transmit: f64, gbits: f64| WindowFigures {
            link: link(receive, transmit, gbits),
            job_ingress: Some(receive * gbits * 125e6),
            job_egress: Some(transmit * gbits * 125e6),
            ..WindowFigures::default()
        };
        let all_reduce = inter_node(&busy(0.9, 0.92, 100.0), &t);
        assert!(all_reduce[0].strength > 0.6);
        assert_eq!(all_reduce.len(), 1, "100 Gb/s is not slow");
        // Input arriving saturates one direction only: not the collectives' link.
        assert_eq!(inter_node(&busy(0.95, 0.05, 100.0), &t)[0].strength, 0.0);
        let slow = inter_node(&busy(0.5, 0.5, 10.0), &t);
        assert_eq!(slow[1].signal, Signal::SlowLink);
        assert!(slow[1].detail.contains("10 Gb/s, below the 25 Gb/s"));
        // Another job's traffic on the node's link is not held against this one.
        let others = WindowFigures {
            job_ingress: Some(1e6),
            job_egress: Some(1e6),
            ..busy(0.9, 0.92, 10.0)
        };
        let evidence = inter_node(&others, &t);
        assert_eq!((evidence.len(), evidence[0].strength), (1, 0.0));
    }
}
