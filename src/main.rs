//! Command line of gpu-bottleneck-exporter. No logic here: parse, load config, dispatch.

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use gpu_bottleneck_exporter::config::{Config, ConfigDuration, LogLevel, Overrides};
use gpu_bottleneck_exporter::daemon::{self, ServeError};
use gpu_bottleneck_exporter::source::demo::{DemoSource, ROTATION};
use gpu_bottleneck_exporter::{diagnose, top};

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
    /// Sample this node for a while and print why each GPU waits. Exit code 3 when a GPU has
    /// a bottleneck, 0 when none does.
    Diagnose(DiagnoseArgs),
    /// A live view of the node, one row per GPU, refreshed every second: busy, SM activity,
    /// memory, verdict, where the lost time goes, evidence, process, pod and frame. Samples
    /// this node (or --demo), or reads a running exporter (--url). A plain table when stdout
    /// is not a terminal.
    Top(TopArgs),
    /// Read a password on standard input and print its bcrypt hash for `basic_auth_users` in
    /// the web configuration file.
    HashPassword {
        /// bcrypt cost (work factor): each step doubles the time to check a password.
        #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(4..=31))]
        cost: u32,
    },
}

/// Options both commands share.
#[derive(Args, Clone)]
struct Common {
    /// YAML configuration file (see config.example.yaml); defaults apply without one.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// procfs mount point, overriding `paths.procfs`.
    #[arg(long = "path.procfs", value_name = "DIR")]
    procfs: Option<PathBuf>,
    /// sysfs mount point, overriding `paths.sysfs`.
    #[arg(long = "path.sysfs", value_name = "DIR")]
    sysfs: Option<PathBuf>,
    /// Log verbosity, overriding `log_level`.
    #[arg(long, value_enum, value_name = "LEVEL")]
    log_level: Option<LogLevel>,
    /// Use a built-in simulated node of twelve GPUs, one per kind of bottleneck, instead of
    /// this machine (everything it reports is made up; for trying the exporter without a GPU).
    #[arg(long)]
    demo: bool,
    /// With --demo: which node of a simulated fleet (0, 1, ...). Each has its own GPU UUIDs,
    /// pods and phase of the rotating cases, and the node name gpu-demo-<N> (NODE_NAME still
    /// wins), so that many demo exporters look like a fleet.
    #[arg(long, value_name = "N", requires = "demo", default_value_t = 0)]
    demo_node: u32,
    /// With --demo: how long each simulated GPU keeps its case before the cases move one GPU
    /// along (shorter for alerting tests).
    #[arg(long, value_name = "DURATION", requires = "demo", value_parser = parse_duration)]
    demo_rotation: Option<Duration>,
}

impl Common {
    /// The simulated node to serve, if any.
    fn demo_node(&self) -> Option<DemoSource> {
        self.demo.then(|| DemoSource {
            node: self.demo_node,
            rotation: self.demo_rotation.unwrap_or(ROTATION),
        })
    }
}

#[derive(Args, Clone)]
struct ServeArgs {
    #[command(flatten)]
    common: Common,
    /// Address to listen on, overriding `listen_address`.
    #[arg(long, visible_alias = "web.listen-address", value_name = "ADDR")]
    listen: Option<SocketAddr>,
    /// TLS and basic-auth file in the Prometheus exporter-toolkit format, overriding
    /// `web.config_file`.
    #[arg(long = "web.config.file", value_name = "FILE")]
    web_config_file: Option<PathBuf>,
}

#[derive(Args, Clone)]
struct DiagnoseArgs {
    #[command(flatten)]
    common: Common,
    /// How long to sample (the analysis window), e.g. 30s or 2m.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    duration: Duration,
    /// Print the diagnosis as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Clone)]
struct TopArgs {
    #[command(flatten)]
    common: Common,
    /// Read a running exporter instead of sampling this node: http://host:port or
    /// https://host:port.
    #[arg(long, value_name = "URL", conflicts_with = "demo")]
    url: Option<String>,
    /// Basic-auth user for --url.
    #[arg(long, value_name = "USER", requires = "url")]
    user: Option<String>,
    /// File whose first line is the basic-auth password.
    #[arg(long, value_name = "FILE", requires = "user")]
    password_file: Option<PathBuf>,
    /// PEM CA certificate that signed the exporter's certificate (https).
    #[arg(long = "tls.ca-file", value_name = "FILE", requires = "url")]
    ca_file: Option<PathBuf>,
    /// PEM client certificate, where the exporter requires one.
    #[arg(long = "tls.cert-file", value_name = "FILE", requires = "key_file")]
    cert_file: Option<PathBuf>,
    /// PEM key of the client certificate.
    #[arg(long = "tls.key-file", value_name = "FILE", requires = "cert_file")]
    key_file: Option<PathBuf>,
    /// In the plain-text mode (stdout not a terminal): stop after this many refreshes.
    #[arg(long, value_name = "N")]
    refreshes: Option<u64>,
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    ConfigDuration::parse(text).map(|d| d.0)
}

fn load(common: &Common, serve: Option<&ServeArgs>) -> Result<Config, ExitCode> {
    let overrides = Overrides {
        listen_address: serve.and_then(|s| s.listen),
        web_config_file: serve.and_then(|s| s.web_config_file.clone()),
        procfs: common.procfs.clone(),
        sysfs: common.sysfs.clone(),
        log_level: common.log_level,
    };
    let config = Config::load(common.config.as_deref(), &overrides).map_err(|error| {
        eprintln!("{error}");
        ExitCode::from(2)
    })?;
    tracing_subscriber::fmt()
        .with_max_level(config.log_level.as_tracing())
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    Ok(config)
}

fn hash_password(cost: u32) -> ExitCode {
    let mut password = String::new();
    if let Err(error) = std::io::stdin().read_line(&mut password) {
        eprintln!("cannot read the password: {error}");
        return ExitCode::FAILURE;
    }
    let password = password.trim_end_matches(['\n', '\r']);
    if password.is_empty() {
        eprintln!("empty password: type it on standard input");
        return ExitCode::from(2);
    }
    match bcrypt::hash(password, cost) {
        Ok(hash) => {
            println!("{hash}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("cannot hash the password: {error}");
            ExitCode::FAILURE
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command.unwrap_or(Command::Serve(cli.serve)) {
        Command::Serve(args) => {
            let config = match load(&args.common, Some(&args)) {
                Ok(config) => config,
                Err(code) => return code,
            };
            match daemon::serve(config, args.common.demo_node()) {
                Ok(()) => ExitCode::SUCCESS,
                Err(ServeError::WebConfig(error)) => {
                    eprintln!("{error}");
                    ExitCode::from(2)
                }
                Err(ServeError::Start(error)) => {
                    tracing::error!("{error}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::HashPassword { cost } => hash_password(cost),
        Command::Top(args) => {
            let config = match load(&args.common, None) {
                Ok(config) => config,
                Err(code) => return code,
            };
            let source = match args.url {
                Some(url) => top::Source::Remote(top::Remote {
                    url,
                    user: args.user,
                    password_file: args.password_file,
                    ca_file: args.ca_file,
                    cert_file: args.cert_file,
                    key_file: args.key_file,
                }),
                None => top::Source::local(&config, args.common.demo_node()),
            };
            match top::run(source, args.refreshes) {
                Ok(()) => ExitCode::SUCCESS,
                Err(error) => {
                    eprintln!("{error}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Diagnose(args) => {
            let config = match load(&args.common, None) {
                Ok(config) => config,
                Err(code) => return code,
            };
            let options = diagnose::Options {
                duration: args.duration,
                json: args.json,
                demo: args.common.demo_node(),
            };
            match diagnose::run(config, &options) {
                Ok(true) => ExitCode::from(diagnose::EXIT_BOTTLENECK),
                Ok(false) => ExitCode::SUCCESS,
                Err(error) => {
                    eprintln!("{error}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}
