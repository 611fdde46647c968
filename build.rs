//! Records the git commit the binary is built from, for `gpu_exporter_build_info`.
use std::process::Command;

fn main() {
    let commit = std::env::var("GPU_EXPORTER_COMMIT").ok().or_else(|| {
        let output = Command::new("git")
            .args(["rev-parse", "--short=12", "HEAD"])
            .output()
            .ok()?;
        output
            .status
            .success()
            .then(|| String::from_utf8_lossy(&output.stdout).trim().to_string())
    });
    println!(
        "cargo:rustc-env=GPU_EXPORTER_COMMIT={}",
        commit.unwrap_or_else(|| "unknown".into())
    );
    println!("cargo:rerun-if-env-changed=GPU_EXPORTER_COMMIT");
    println!("cargo:rerun-if-changed=.git/HEAD");
    println!("cargo:rerun-if-changed=.git/refs/heads");
}
