//! profilerd: loads the sampling programs, runs the sample pipeline and
//! serves profiles over gRPC on a Unix socket (and optionally TCP) until
//! SIGINT or SIGTERM; reloads its configuration on SIGHUP.
//!
//! This file only wires the modules together: flags and configuration,
//! logging, the runtime, readiness (told to systemd once the programs are
//! attached and the socket listens), and shutdown.

use std::{
    path::PathBuf,
    process::ExitCode,
    sync::{Arc, Mutex, RwLock},
    time::Instant,
};

use anyhow::{Context as _, Result};
use clap::Parser;
use profilerd::{
    allocs::AllocationProfiler,
    daemon::config::{Config, Overrides},
    daemon::reload::{Reloader, SetLogFilter},
    daemon::systemd,
    kernel::families::Families,
    kernel::offcpu::{OffCpuRecorder, RecordingMaps},
    kernel::programs::{
        KernelAllocationProbes, KernelPeekClocks, KernelSwitchPrograms, KernelWaitingThreads,
        LoadedPrograms, ProgramSettings,
    },
    memory::Part,
    peek::{self, Peeker},
    pipeline::Inboxes,
    pipeline::{DrainIntervals, Pipeline, PipelineBounds},
    service::{DaemonInfo, HttpSettings, Service, ServiceParts, limits::ServiceLimits},
    source_files::{MAX_READS, MAX_SOURCE_BYTES, READ_TIMEOUT, SourceFiles},
    store::Store,
    transport::{
        http::{AllowedHost, HttpListener},
        listeners::{self, Listeners, TcpListener, TlsFiles},
    },
};
use tracing::{error, info, warn};

/// The always-on, system-wide sampling profiler daemon.
#[derive(Debug, Parser)]
#[command(version, about, long_about = None)]
struct Args {
    /// TOML configuration file; flags override its keys
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    #[command(flatten)]
    overrides: Overrides,
    /// Print the completion script of SHELL and exit (for packaging)
    #[arg(long, value_name = "SHELL", hide = true, exclusive = true)]
    completions: Option<clap_complete::Shell>,
    /// Print the man page (roff) and exit (for packaging)
    #[arg(long, hide = true, exclusive = true)]
    man_page: bool,
}

/// Writes what `--completions` or `--man-page` asks for to standard output;
/// false when neither was given.
fn print_generated(args: &Args) -> std::io::Result<bool> {
    use clap::CommandFactory as _;
    use std::io::Write as _;
    let mut command = Args::command();
    let mut text = Vec::new();
    if let Some(shell) = args.completions {
        clap_complete::generate(shell, &mut command, "profilerd", &mut text);
    } else if args.man_page {
        clap_mangen::Man::new(command.name("profilerd"))
            .section("8")
            .render(&mut text)?;
    } else {
        return Ok(false);
    }
    std::io::stdout().write_all(&text)?;
    Ok(true)
}

/// The heap counted, so that the memory each part holds can be checked
/// against what is really allocated.
#[global_allocator]
static ALLOCATOR: profilerd::memory::counting::CountingAllocator =
    profilerd::memory::counting::CountingAllocator;

fn main() -> ExitCode {
    profilerd::memory::trim::tune();
    let args = Args::parse();
    match print_generated(&args) {
        Ok(false) => {}
        Ok(true) => return ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("profilerd: cannot write to standard output: {err}");
            return ExitCode::FAILURE;
        }
    }
    let config = Config::load(args.config.as_deref(), &args.overrides);
    let log_level = config
        .as_ref()
        .map_or("info", |config| config.log_level.as_str());
    let set_log_filter = profilerd::daemon::logging::init(log_level);
    let config = match config {
        Ok(config) => config,
        Err(err) => {
            error!("{err}");
            systemd::failed(&err.to_string());
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("profilerd-rpc")
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            error!("cannot start the async runtime: {err}");
            systemd::failed(&format!("cannot start the async runtime: {err}"));
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(run(config, args, set_log_filter));
    // Blocking tasks still running (a report being rendered for a client
    // that is gone) must not hold up the exit.
    runtime.shutdown_timeout(std::time::Duration::from_millis(500));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            error!("{err:#}");
            systemd::failed(&format!("{err:#}"));
            ExitCode::FAILURE
        }
    }
}

async fn run(config: Config, args: Args, set_log_filter: SetLogFilter) -> Result<()> {
    let started = Instant::now();
    tokio::spawn(systemd::keep_watchdog_alive());
    // First, so that a second daemon fails before touching the kernel.
    let (listener, _socket_file) = listeners::bind_socket(&config.socket)?;
    tokio::spawn(profilerd::memory::trim::trim_when_idle());
    let mut programs = LoadedPrograms::start(&ProgramSettings {
        frequency_hz: config.frequency_hz,
        drain_interval: config.drain_interval,
        max_stacks: config.max_stacks,
        max_sample_keys: config.max_sample_keys,
        peek_signal: config.peek_signal_number(),
        peek_frequency_hz: config.peek_frequency_hz,
        stack_copy_pages: config.stack_copy_pages(),
        stack_copy_buffer: config.stack_copy_buffer.as_u64(),
        alloc_stack_copy_buffer: config.alloc_stack_copy_buffer.as_u64(),
        offcpu_max_pending: config.offcpu_max_pending,
    })
    .context("cannot start sampling")?;
    let budget = config
        .memory_budget(programs.ring_buffer_bytes())
        .context("invalid value for `memory_budget`")?;
    info!("{}", budget.describe());
    let cgroup = profilerd::memory::cgroup::own_limits();
    if let Some(advice) = profilerd::memory::cgroup::advice(cgroup, budget.total) {
        warn!("{advice}");
    }
    let store = Arc::new(RwLock::new(Store::new(config.store_settings(&budget))));
    let (offcpu_maps, offcpu_intervals) = match programs.take_offcpu() {
        Ok((maps, intervals)) => (
            Ok(Box::new(maps) as Box<dyn RecordingMaps>),
            Some(intervals),
        ),
        Err(reason) => (Err(reason), None),
    };
    let offcpu = OffCpuRecorder::new(offcpu_maps, config.offcpu);
    offcpu.set_limitation(programs.switch_program().limitation.clone());
    let offcpu_intervals = offcpu_intervals.map(|intervals| (intervals, offcpu.recorded()));
    let inboxes = Inboxes::default();
    // Each inbox may take a quarter of the peeks' share (the peek reports
    // kept take the other half, see peek::archive).
    inboxes.peeks.set_limit(budget.share(Part::Peeks) / 4);
    inboxes.allocations.set_limit(budget.share(Part::Peeks) / 4);
    let pipeline = Pipeline::start(
        &mut programs,
        store.clone(),
        inboxes.clone(),
        DrainIntervals {
            every: config.drain_interval,
            watched: config.watched_drain_interval,
        },
        PipelineBounds {
            unwind_info: budget.share(Part::UnwindInfo),
            jit_names: budget.share(Part::JitNames),
            symbolizer: budget.share(Part::Symbolizer),
            processes: budget.share(Part::Processes),
        },
        offcpu_intervals,
    )
    .context("cannot start the sample pipeline")?;
    let peek_signals = programs
        .take_peek_signals()
        .context("cannot set up peeks")?;
    let targets = programs
        .take_targets()
        .context("cannot set up the sampling targets")?;
    let families = match programs.take_families() {
        Ok(maps) => {
            let families = Families::new(Ok(maps.followed));
            tokio::spawn(families.clone().follow_joins(maps.joins));
            families
        }
        Err(reason) => Families::new(Err(reason)),
    };
    let protection = peek::protection(programs.signal_guard());
    let (cpus, frequency_hz) = (programs.cpus().to_vec(), programs.frequency_hz());
    let cpus_sampled = cpus.len();
    let peek_signal_off = programs.signal_watch().err().map(|err| err.to_string());
    let programs = Arc::new(Mutex::new(programs));
    let peek_clocks = KernelPeekClocks::new(programs.clone()).context("cannot set up peeks")?;
    offcpu.set_thread_source(Arc::new(KernelWaitingThreads::new(programs.clone())));
    offcpu.set_switch_programs(Arc::new(KernelSwitchPrograms::new(programs.clone())));
    let allocations = AllocationProfiler::new(
        Arc::new(KernelAllocationProbes::new(programs.clone())),
        inboxes.allocations.clone(),
        pipeline.handle(),
    );
    if let Some(reason) = allocations.unavailable() {
        warn!("allocation profiling is off: {reason}");
    }
    let peeker = Peeker::new(
        config.peek_settings(&budget),
        Arc::new(peek_clocks),
        inboxes.peeks.clone(),
        pipeline.handle(),
        protection,
    );
    peeker.record_waits_with(offcpu.clone(), config.stack_copy_pages());
    peek::warn_about_protection(&peeker);
    let (reload_store, reload_peeker) = (store.clone(), peeker.clone());
    tokio::spawn(peek::follow_signals(peeker.clone(), peek_signals));
    let service = Service::new(ServiceParts {
        pipeline: pipeline.handle(),
        store,
        peeker,
        families,
        access: profilerd::service::access::AccessPolicy::new(&config.admin_group),
        limits: ServiceLimits {
            max_sessions: config.max_sessions as usize,
            max_sessions_per_caller: config.max_sessions_per_caller as usize,
            max_streams_per_caller: config.max_streams_per_caller as usize,
            max_response_bytes: config.max_response_bytes.as_u64(),
        },
        targets,
        offcpu: offcpu.clone(),
        allocations: Some(allocations),
        info: DaemonInfo {
            cpus,
            frequency_hz,
            stack_copy_bytes: u64::from(config.stack_copy_pages())
                * profiler_common::STACK_COPY_PAGE as u64,
            max_profile_duration: config.max_profile_duration(),
            started,
            peek_signal_off,
            http: config.http_listen.map(|address| HttpSettings {
                address,
                tls: config.tls_cert.is_some(),
                source_dirs: config.http_source_dirs.clone(),
                max_source_bytes: MAX_SOURCE_BYTES,
                max_source_reads: MAX_READS,
                source_read_timeout: READ_TIMEOUT,
            }),
        },
        warm_report_indexes: config.warm_report_indexes,
        budget: Some(budget.clone()),
    });

    info!(
        socket = %config.socket.display(),
        frequency_hz = config.frequency_hz,
        retention = %humantime::format_duration(config.retention),
        resolution = %humantime::format_duration(config.resolution),
        memory_budget = %config.memory_budget,
        "profilerd is serving"
    );
    let tls = match (&config.tls_cert, &config.tls_key, &config.tls_client_ca) {
        (Some(cert), Some(key), Some(client_ca)) => Some(TlsFiles {
            cert: cert.clone(),
            key: key.clone(),
            client_ca: client_ca.clone(),
        }),
        _ => None,
    };
    let listeners = Listeners {
        tcp: config.tcp_listen.map(|address| TcpListener {
            address,
            tls: tls.clone(),
        }),
        metrics: config.metrics_listen,
        http: config.http_listen.map(|address| HttpListener {
            address,
            tls,
            allowed_hosts: config
                .http_allowed_hosts
                .iter()
                // Validated with the configuration.
                .filter_map(|host| AllowedHost::parse(host).ok())
                .collect(),
            sources: SourceFiles::new(config.http_source_dirs.clone(), args.config.as_deref()),
        }),
    };
    let service = Arc::new(service);
    tokio::spawn(service.clone().keep_stack_indexes_current());
    let mut exporter = profilerd::export::Exporter::new(
        service.clone(),
        &config.state_dir,
        budget.share(Part::Export),
    );
    exporter
        .apply(&config.push_settings())
        .context("cannot start pushing profiles (push in the configuration)")?;
    tokio::spawn(profilerd::daemon::reload::follow_hangups(Reloader {
        path: args.config,
        overrides: args.overrides,
        running: config.clone(),
        sampler: programs.clone(),
        store: reload_store,
        budget: budget.clone(),
        peeker: reload_peeker,
        service: service.clone(),
        exporter,
        set_log_filter,
    }));
    let ready_status = format!(
        "serving on {}; sampling {} CPUs at {} Hz",
        config.socket.display(),
        cpus_sampled,
        config.frequency_hz
    );
    // `serve` polls this future once its servers run: only then is the
    // daemon ready.
    let until_shutdown = async move {
        systemd::ready(&ready_status);
        shutdown_signal().await;
        systemd::stopping("shutting down");
    };
    let served = listeners::serve(service, listener, listeners, until_shutdown).await;
    drop(pipeline);
    drop(programs);
    served.context("the gRPC server failed")?;
    info!("profilerd stopped");
    Ok(())
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut interrupt), Ok(mut terminate)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        error!("cannot listen for SIGINT/SIGTERM; stop profilerd with SIGKILL");
        return std::future::pending().await;
    };
    tokio::select! {
        _ = interrupt.recv() => info!("SIGINT received, shutting down"),
        _ = terminate.recv() => info!("SIGTERM received, shutting down"),
    }
}
