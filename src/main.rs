//! Command line of gpu-bottleneck-exporter. No logic here: parse, load config, dispatch.

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use gpu_bottleneck_exporter::config::{Config, LogLevel, Overrides};
use gpu_bottleneck_exporter::daemon;

/// Tells why a GPU waits: samples GPUs and the host around them and serves it on /metrics.
#[derive(Parser)]
#[command(version, about, args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    serve: ServeArgs,
}

#[derive(Subcommand)]
enum Command {
    /// Run the exporter (the default when no subcommand is given).
    Serve(ServeArgs),
}

#[derive(Args, Clone)]
struct ServeArgs {
    /// YAML configuration file (see config.example.yaml); defaults apply without one.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Address to listen on, overriding `listen_address`.
    #[arg(long, value_name = "ADDR")]
    listen: Option<SocketAddr>,
    /// procfs mount point, overriding `paths.procfs`.
    #[arg(long = "path.procfs", value_name = "DIR")]
    procfs: Option<PathBuf>,
    /// sysfs mount point, overriding `paths.sysfs`.
    #[arg(long = "path.sysfs", value_name = "DIR")]
    sysfs: Option<PathBuf>,
    /// Log verbosity, overriding `log_level`.
    #[arg(long, value_enum, value_name = "LEVEL")]
    log_level: Option<LogLevel>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let args = match cli.command {
        Some(Command::Serve(args)) => args,
        None => cli.serve,
    };
    let overrides = Overrides {
        listen_address: args.listen,
        procfs: args.procfs,
        sysfs: args.sysfs,
        log_level: args.log_level,
    };
    let config = match Config::load(args.config.as_deref(), &overrides) {
        Ok(config) => config,
        Err(error) => {
            eprintln!("{error}");
            return ExitCode::from(2);
        }
    };
    tracing_subscriber::fmt()
        .with_max_level(config.log_level.as_tracing())
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    match daemon::serve(config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!("{error}");
            ExitCode::FAILURE
        }
    }
}
