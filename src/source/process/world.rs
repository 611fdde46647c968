//! The distributed job a GPU process is a rank of, from the environment its launcher gave it
//! (`/proc/<pid>/environ`: the process's initial environment, readable with ptrace access).
//! Read once per process: what the launcher set does not change.

use crate::snapshot::World;
use crate::source::environ::variable;

/// The job as the first launcher whose variables are present describes it.
pub fn parse_environ(bytes: &[u8]) -> Option<World> {
    let get = |name: &str| -> Option<u32> { variable(bytes, name)?.trim().parse().ok() };
    // SLURM_NTASKS_PER_NODE may read "4(x2)": only the plain counts are used.
    let launchers = [
        ("WORLD_SIZE", Some("LOCAL_WORLD_SIZE"), None),
        (
            "OMPI_COMM_WORLD_SIZE",
            Some("OMPI_COMM_WORLD_LOCAL_SIZE"),
            None,
        ),
        ("SLURM_NTASKS", None, Some("SLURM_JOB_NUM_NODES")),
    ];
    launchers.iter().find_map(|(size, local, nodes)| {
        Some(World {
            ranks: get(size)?,
            local_ranks: local.and_then(get),
            nodes: nodes.and_then(get),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn environ(pairs: &[&str]) -> Vec<u8> {
        pairs.join("\0").into_bytes()
    }

    #[test]
    fn torchrun_open_mpi_and_slurm_describe_their_jobs() {
        let torchrun = environ(&["PATH=/bin", "WORLD_SIZE=16", "LOCAL_WORLD_SIZE=8", "RANK=3"]);
        let world = parse_environ(&torchrun).unwrap();
        assert_eq!((world.ranks, world.local_ranks), (16, Some(8)));
        assert_eq!(world.spans_nodes(), Some(true));
        let one_node = environ(&["WORLD_SIZE=8", "LOCAL_WORLD_SIZE=8"]);
        assert_eq!(parse_environ(&one_node).unwrap().spans_nodes(), Some(false));
        let mpi = environ(&["OMPI_COMM_WORLD_SIZE=4", "OMPI_COMM_WORLD_LOCAL_SIZE=4"]);
        assert_eq!(parse_environ(&mpi).unwrap().spans_nodes(), Some(false));
        let slurm = environ(&[
            "SLURM_NTASKS=16",
            "SLURM_JOB_NUM_NODES=2",
            "SLURM_NTASKS_PER_NODE=8(x2)",
        ]);
        let world = parse_environ(&slurm).unwrap();
        assert_eq!((world.ranks, world.nodes), (16, Some(2)));
        assert_eq!(world.spans_nodes(), Some(true));
    }

    #[test]
    fn a_process_without_a_launcher_is_no_rank() {
        assert_eq!(parse_environ(&environ(&["PATH=/bin", "HOME=/root"])), None);
        assert_eq!(parse_environ(b""), None);
        // Kubeflow's PyTorchJob sets WORLD_SIZE alone: a size, nothing said of the nodes.
        let kubeflow = parse_environ(&environ(&["WORLD_SIZE=4", "LOCAL_WORLD_SIZE=x"])).unwrap();
        assert_eq!((kubeflow.ranks, kubeflow.spans_nodes()), (4, None));
        // A variable name that only ends like one is not it.
        assert_eq!(parse_environ(&environ(&["MY_WORLD_SIZE=4"])), None);
    }
}
