//! `brook broker`: serves the log of a data directory over the Kafka protocol.

use std::io::{BufRead, IsTerminal};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use brook::log::{Log, LogError};
use brook_broker::sasl::{store, users_file, Users};
use brook_broker::{address_file, read_address, write_address, BrokerConfig, Server};
use clap::{Args, Subcommand};

/// Arguments of `brook broker`.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub(crate) struct BrokerArgs {
    #[command(subcommand)]
    command: Option<BrokerCommand>,
    /// Where Kafka clients connect (port 0: any free port; the address is written to
    /// `<data-dir>/broker.addr`). An address other than loopback needs SASL users
    /// (`brook broker user add`, or `--sasl-users`).
    #[arg(long, default_value = "127.0.0.1:9092")]
    listen: SocketAddr,
    /// The host clients are told to connect to (Kafka's `advertised.listeners`);
    /// default: the `--listen` address. Required with a wildcard `--listen`
    /// (0.0.0.0 or [::]).
    #[arg(long, value_name = "HOST")]
    advertised_host: Option<String>,
    /// A users file for SASL SCRAM authentication, instead of
    /// `<data-dir>/users.scram` (which is used when it exists). With users, every
    /// client must authenticate (SASL_PLAINTEXT), loopback ones too.
    #[arg(long, value_name = "FILE")]
    sasl_users: Option<PathBuf>,
    /// Create a topic a client asks for in a Metadata request (Kafka's
    /// `auto.create.topics.enable`; off by default in brook).
    #[arg(long)]
    auto_create_topics: bool,
    /// Partitions of topics created without a count (Kafka's `num.partitions`).
    #[arg(long, default_value_t = 1)]
    default_partitions: u32,
    /// The shortest `session.timeout.ms` a consumer group member may ask for (ms;
    /// Kafka's `group.min.session.timeout.ms`).
    #[arg(long, default_value_t = 6000)]
    group_min_session_timeout_ms: i64,
    /// Serve Prometheus metrics at http://ADDR/metrics while the broker runs: per
    /// topic and partition the log end and start offsets, the size, and the segments
    /// kept past time retention by a future timestamp (as `brook run --metrics-addr`:
    /// no token; give a loopback address unless the network is trusted).
    #[arg(long, value_name = "ADDR")]
    metrics_addr: Option<SocketAddr>,
}

/// `brook broker` subcommands.
#[derive(Debug, Subcommand)]
enum BrokerCommand {
    /// Manage the users Kafka clients authenticate as (SASL SCRAM).
    #[command(subcommand)]
    User(UserCommand),
}

/// `brook broker user ...`: the users file (`<data-dir>/users.scram`, or `--file`).
#[derive(Debug, Subcommand)]
enum UserCommand {
    /// Add a user, or set a new password: reads the password from the first line of
    /// standard input and stores SCRAM-SHA-256 and SCRAM-SHA-512 credentials (salted,
    /// 4096 iterations; never the password). A running broker reads users when it
    /// starts.
    Add {
        /// The user name: letters, digits, '.', '_', '-', '@'.
        name: String,
        /// The users file (default `<data-dir>/users.scram`).
        #[arg(long, value_name = "FILE")]
        file: Option<PathBuf>,
    },
    /// Remove a user.
    Remove {
        /// The user name.
        name: String,
        /// The users file (default `<data-dir>/users.scram`).
        #[arg(long, value_name = "FILE")]
        file: Option<PathBuf>,
    },
    /// List the users' names.
    List {
        /// The users file (default `<data-dir>/users.scram`).
        #[arg(long, value_name = "FILE")]
        file: Option<PathBuf>,
    },
}

/// Serves until SIGINT or SIGTERM. `open_log` takes the data directory's lock, as
/// `brook run` does: while the broker serves, other brook processes cannot open it.
pub(crate) fn broker(
    args: BrokerArgs,
    data_dir: &Path,
    open_log: impl FnOnce() -> Result<Log>,
) -> Result<()> {
    if let Some(BrokerCommand::User(cmd)) = args.command {
        return user_command(cmd, data_dir);
    }
    let sasl_users = sasl_users(args.sasl_users.as_deref(), data_dir)?;
    let config = BrokerConfig {
        listen: args.listen,
        advertised_host: args.advertised_host,
        sasl_users,
        auto_create_topics: args.auto_create_topics,
        default_partitions: args.default_partitions,
        group_min_session_timeout_ms: args.group_min_session_timeout_ms,
    };
    // A bad address is refused before the data directory is touched.
    config.validate().context("brook broker")?;
    let log = open_log()?;
    let _metrics = match args.metrics_addr {
        Some(addr) => {
            let held = log.clone();
            let server = super::metrics_http::serve(addr, move || {
                brook::log_metrics::log_prometheus(&held)
            })?;
            eprintln!("brook broker metrics on http://{}/metrics", server.addr);
            Some(server)
        }
        None => None,
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let address_file = address_file(data_dir);
    let served = rt.block_on(async {
        let server = Server::bind(&config, log.clone()).await?;
        let addr = server.local_addr();
        write_address(data_dir, addr)
            .with_context(|| format!("writing {}", address_file.display()))?;
        let protocol = match &config.sasl_users {
            Some(users) => format!(
                "SASL_PLAINTEXT, SCRAM-SHA-256/512, users: {}",
                users.names().len()
            ),
            None => "PLAINTEXT".to_owned(),
        };
        eprintln!(
            "brook broker serving {} on {addr} (Kafka protocol, {protocol})",
            data_dir.display()
        );
        tokio::select! {
            r = server.run() => r.context("brook broker"),
            r = stop_signal() => r,
        }
    });
    // The address is stale once the broker stops serving.
    let _ = std::fs::remove_file(&address_file);
    rt.shutdown_timeout(std::time::Duration::from_secs(1));
    log.close().context("closing the log")?;
    served
}

/// The SASL users: `file` if given (it must exist), else `<data-dir>/users.scram` if
/// it exists, else none (a plaintext listener).
fn sasl_users(file: Option<&Path>, data_dir: &Path) -> Result<Option<Arc<Users>>> {
    let path = match file {
        Some(path) => path.to_owned(),
        None => {
            let path = users_file(data_dir);
            if !path.exists() {
                return Ok(None);
            }
            path
        }
    };
    let users = store::load(&path).context("reading SASL users")?;
    Ok(Some(Arc::new(users)))
}

fn user_command(cmd: UserCommand, data_dir: &Path) -> Result<()> {
    let path = |file: Option<PathBuf>| file.unwrap_or_else(|| users_file(data_dir));
    match cmd {
        UserCommand::Add { name, file } => {
            let path = path(file);
            // Checked before waiting for a password.
            brook_broker::sasl::users::check_name(&name).context("brook broker user add")?;
            let stdin = std::io::stdin();
            if stdin.is_terminal() {
                eprintln!("password for {name} (one line; it is shown as typed):");
            }
            let mut password = String::new();
            stdin
                .lock()
                .read_line(&mut password)
                .context("reading the password from standard input")?;
            let password = password.trim_end_matches(['\n', '\r']);
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir)
                    .with_context(|| format!("creating {}", dir.display()))?;
            }
            let existed = store::add_user(&path, &name, password.as_bytes())
                .context("brook broker user add")?;
            let verb = if existed {
                "changed the password of"
            } else {
                "added"
            };
            println!(
                "{verb} user {name} (SCRAM-SHA-256, SCRAM-SHA-512) in {}; a running broker reads users when it starts",
                path.display()
            );
        }
        UserCommand::Remove { name, file } => {
            let path = path(file);
            if !store::remove_user(&path, &name).context("brook broker user remove")? {
                anyhow::bail!("no user {name} in {}", path.display());
            }
            println!("removed user {name} from {}", path.display());
        }
        UserCommand::List { file } => {
            let path = path(file);
            let users = store::load(&path).context("brook broker user list")?;
            for name in users.names() {
                println!("{name}");
            }
        }
    }
    Ok(())
}

/// `e`, and when it is the data directory's lock held by a live `brook broker` (its
/// address file names a port that accepts connections), the broker's address and what
/// to do: a user whose command could not reach the broker otherwise reads only "in use
/// by another brook process" (the log commands go through the broker: cli::log_access). The [`LogError`] stays in the chain (the runner's
/// children look for [`LogError::Locked`]).
pub(crate) fn name_the_broker(e: LogError, data_dir: &Path) -> anyhow::Error {
    let locked = matches!(e, LogError::Locked { .. });
    let e = anyhow::Error::new(e);
    // A broker killed with SIGKILL leaves its address file behind: only a port that
    // answers is named.
    match read_address(data_dir).filter(|addr| {
        locked && TcpStream::connect_timeout(addr, Duration::from_millis(500)).is_ok()
    }) {
        Some(addr) => e.context(format!(
            "brook broker serves this data directory on {addr}: brook topic, produce, consume, \
             group and run go through it, as any Kafka client (kcat -b {addr} -L)"
        )),
        None => e,
    }
}

async fn stop_signal() -> Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing the SIGTERM handler")?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r.context("waiting for SIGINT"),
        _ = term.recv() => Ok(()),
    }
}
