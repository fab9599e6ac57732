//! The harness: a daemon per test, workloads built with gcc, and helpers to
//! ask for profiles and read folded stacks.

use std::{
    collections::HashMap,
    fs,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{Arc, LazyLock, Mutex},
    time::{Duration, Instant},
};

use profilerd_client::{
    self as client,
    v1::{self, profiler_client::ProfilerClient},
};
use tonic::transport::Channel;

pub type Client = ProfilerClient<Channel>;

/// profilerctl, built beside the daemon (`cargo xtask test` builds it
/// first; it is a package of its own, so that it does not compile the
/// daemon's dependencies).
pub fn profilerctl_binary() -> PathBuf {
    let binary = Path::new(env!("CARGO_BIN_EXE_profilerd")).with_file_name("profilerctl");
    assert!(
        binary.is_file(),
        "{} is missing: build it with `cargo build -p profilerctl` (cargo xtask test does)",
        binary.display()
    );
    binary
}

/// Sampling frequency of test daemons: high, so short profiles hold enough
/// samples for tight statistical checks.
pub const TEST_FREQUENCY_HZ: u32 = 499;

pub fn require_root() {
    assert!(
        rustix::process::geteuid().is_root(),
        "these tests load eBPF programs and must run as root: use `cargo xtask test`"
    );
}

/// `setpriv` arguments that drop to the user and group `nobody`.
pub const NOBODY: [&str; 4] = [
    "--reuid=65534",
    "--regid=65534",
    "--clear-groups",
    "--inh-caps=-all",
];

/// An unprivileged user (uid and gid alike) the tests act as, through
/// `setpriv`, with copies of profilerctl and of the workloads it can run.
pub struct User {
    pub uid: u32,
    dir: tempfile::TempDir,
    profilerctl: PathBuf,
}

impl User {
    /// `nobody`, able to reach `daemon`'s socket.
    pub fn nobody(daemon: &Daemon) -> Self {
        Self::new(65534, daemon)
    }

    /// The user `uid` (it need not exist in /etc/passwd), able to reach
    /// `daemon`'s socket.
    pub fn new(uid: u32, daemon: &Daemon) -> Self {
        use std::os::unix::fs::PermissionsExt as _;
        // The socket is open to everyone (the daemon checks each request);
        // its directory must be reachable too.
        let socket_dir = daemon.socket.parent().expect("a directory");
        fs::set_permissions(socket_dir, fs::Permissions::from_mode(0o755))
            .expect("the socket's directory is opened");
        let dir = tempfile::tempdir().expect("a temporary directory");
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755))
            .expect("the directory is opened");
        let profilerctl = dir.path().join("profilerctl");
        copy_program(&crate::support::profilerctl_binary(), &profilerctl);
        Self {
            uid,
            dir,
            profilerctl,
        }
    }

    /// A copy of the workload `name` the user can run, named `name`.
    pub fn program(&self, name: &str) -> PathBuf {
        let copy = self.dir.path().join(name);
        if !copy.exists() {
            copy_program(&build_workload(name), &copy);
        }
        copy
    }

    /// A command that runs `program` as this user.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut command = Command::new("setpriv");
        command
            .arg(format!("--reuid={}", self.uid))
            .arg(format!("--regid={}", self.uid))
            .args(["--clear-groups", "--inh-caps=-all"])
            .arg(program);
        command
    }

    /// Starts the workload `name` as this user.
    pub fn start(&self, name: &str, args: &[&str]) -> Workload {
        let program = self.program(name);
        let child = self
            .command(&program)
            .args(args)
            .stdout(Stdio::null())
            .spawn()
            .unwrap_or_else(|err| panic!("setpriv (util-linux) starts: {err}"));
        Workload {
            child,
            program: Some(program),
        }
    }

    /// profilerctl as this user, against the daemon at `socket`.
    pub fn profilerctl_command(&self, socket: &Path) -> Command {
        let mut command = self.command(&self.profilerctl);
        command.arg("--socket").arg(socket);
        command
    }

    /// profilerctl with `args`, as this user, against the daemon at
    /// `socket`, off the async threads.
    pub async fn profilerctl(&self, socket: &Path, args: &[&str]) -> std::process::Output {
        let mut command = self.profilerctl_command(socket);
        command.args(args);
        tokio::task::spawn_blocking(move || command.output().expect("setpriv runs profilerctl"))
            .await
            .expect("profilerctl finishes")
    }
}

/// Spawns `command()` so that its process gets the id `pid` (which must be
/// free): the kernel hands out the id after `ns_last_pid` next, and another
/// fork may come first, so this retries.
pub fn spawn_with_pid(pid: u32, mut command: impl FnMut() -> Command) -> Child {
    for _ in 0..500 {
        fs::write("/proc/sys/kernel/ns_last_pid", (pid - 1).to_string())
            .expect("root may set the next pid");
        let mut child = command()
            .stdout(Stdio::null())
            .spawn()
            .expect("the command starts");
        if child.id() == pid {
            return child;
        }
        let _ = child.kill();
        let _ = child.wait();
    }
    panic!("pid {pid} could not be had (other processes kept taking it)");
}

/// A report's text, or the whole output when the command failed.
pub fn stdout_of(output: &std::process::Output) -> String {
    assert!(
        output.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The error a failing command printed (which must be one line), after
/// checking that it failed.
pub fn error_of(output: &std::process::Output) -> String {
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        !output.status.success(),
        "it must fail: {}\n{stderr}",
        String::from_utf8_lossy(&output.stdout)
    );
    stderr
}

/// Tests share the machine's CPUs: most run side by side, but a test that
/// measures how much CPU its workload gets runs alone.
static CPUS: LazyLock<Arc<tokio::sync::RwLock<()>>> =
    LazyLock::new(|| Arc::new(tokio::sync::RwLock::new(())));

enum CpuShare {
    Shared(
        #[expect(dead_code, reason = "held, not read: released when the daemon stops")]
        tokio::sync::OwnedRwLockReadGuard<()>,
    ),
    Alone(
        #[expect(dead_code, reason = "held, not read: released when the daemon stops")]
        tokio::sync::OwnedRwLockWriteGuard<()>,
    ),
}

/// A daemon of its own for one test, on a socket in a temporary directory,
/// with its state (peek reports) there too.
pub struct Daemon {
    /// The flags given beyond the socket, frequency and state directory,
    /// and how it is launched: kept to start it again.
    args: Vec<String>,
    through: Vec<String>,
    env: Vec<(String, std::ffi::OsString)>,
    child: Child,
    dir: tempfile::TempDir,
    pub socket: PathBuf,
    /// Released after the child is stopped (fields drop after `drop`).
    _cpus: CpuShare,
}

/// How a daemon is started beyond its flags.
#[derive(Clone, Copy, Default)]
pub struct Launch<'a> {
    /// Extra environment variables.
    pub env: &'a [(&'a str, &'a std::ffi::OsStr)],
    /// A command (and its arguments) the daemon is run through, e.g.
    /// `setpriv` with a capability set.
    pub through: &'a [&'a str],
}

impl Daemon {
    pub async fn start() -> Self {
        Self::start_with(&[]).await
    }

    pub async fn start_with(args: &[&str]) -> Self {
        let share = CpuShare::Shared(CPUS.clone().read_owned().await);
        let mut daemon = Self::spawn(args, Launch::default(), share).await;
        daemon.wait_until_serving().await;
        daemon
    }

    /// A daemon started through `wrapper`, a command (and its arguments)
    /// given the daemon's command line to exec, e.g. `unshare -m …`.
    pub async fn start_wrapped(wrapper: &[&str], args: &[&str]) -> Self {
        let launch = Launch {
            through: wrapper,
            ..Launch::default()
        };
        let mut daemon = Self::launch(args, launch).await;
        daemon.wait_until_serving().await;
        daemon
    }

    /// A daemon for a test that no other test's workload may compete with
    /// for CPU time while it runs.
    pub async fn start_alone(args: &[&str]) -> Self {
        Self::start_alone_after(args, async || ()).await.0
    }

    /// A daemon started alone (see [`Daemon::start_alone`]) once `before`
    /// (e.g. a load that must already run when it starts) has run, with
    /// what `before` returned. No other test runs meanwhile.
    pub async fn start_alone_after<T>(args: &[&str], before: impl AsyncFnOnce() -> T) -> (Self, T) {
        let share = CpuShare::Alone(CPUS.clone().write_owned().await);
        let before = before().await;
        let mut daemon = Self::spawn(args, Launch::default(), share).await;
        daemon.wait_until_serving().await;
        (daemon, before)
    }

    /// A daemon started as `launch` says; returns at once, without waiting
    /// for it to serve (see [`Daemon::wait_until_serving`]).
    pub async fn launch(args: &[&str], launch: Launch<'_>) -> Self {
        let share = CpuShare::Shared(CPUS.clone().read_owned().await);
        Self::spawn(args, launch, share).await
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn state_dir(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    async fn spawn(args: &[&str], launch: Launch<'_>, share: CpuShare) -> Self {
        require_root();
        let dir = tempfile::tempdir().expect("a temporary directory");
        let socket = dir.path().join("profilerd.sock");
        let args: Vec<String> = args.iter().map(|arg| arg.to_string()).collect();
        let through: Vec<String> = launch.through.iter().map(|arg| arg.to_string()).collect();
        let env: Vec<(String, std::ffi::OsString)> = launch
            .env
            .iter()
            .map(|(name, value)| (name.to_string(), value.to_os_string()))
            .collect();
        let child = Self::command_in(dir.path(), &socket, &args, &through, &env)
            .spawn()
            .expect("profilerd starts");
        Self {
            args,
            through,
            env,
            child,
            dir,
            socket,
            _cpus: share,
        }
    }

    /// The daemon's command line: run through `through` (when given), its
    /// socket and state in `dir`, its log appended to `dir`/daemon.log.
    fn command_in(
        dir: &Path,
        socket: &Path,
        args: &[String],
        through: &[String],
        env: &[(String, std::ffi::OsString)],
    ) -> Command {
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("daemon.log"))
            .expect("a log file");
        let daemon = env!("CARGO_BIN_EXE_profilerd");
        let mut command = match through.split_first() {
            Some((program, args)) => {
                let mut command = Command::new(program);
                command.args(args).arg(daemon);
                command
            }
            None => Command::new(daemon),
        };
        command.arg("--socket").arg(socket);
        // Unless the test sets it (on the command line or in a file).
        if !args
            .iter()
            .any(|arg| arg == "--frequency-hz" || arg == "--config")
        {
            command
                .arg("--frequency-hz")
                .arg(TEST_FREQUENCY_HZ.to_string());
        }
        // A dozen unoptimized daemons share two busy CPUs during the
        // tests, each unwinding the whole machine's stacks: their stack
        // copies get more room than a lone release daemon needs, so that a
        // test that counts losses is not failed by a slow neighbour.
        if !args
            .iter()
            .any(|arg| arg == "--stack-copy-buffer" || arg == "--config")
        {
            command.args(["--stack-copy-buffer", "64MiB"]);
        }
        // Likewise the allocation ring, for the tests that count every
        // allocation.
        if !args
            .iter()
            .any(|arg| arg == "--alloc-stack-copy-buffer" || arg == "--config")
        {
            command.args(["--alloc-stack-copy-buffer", "64MiB"]);
        }
        // Those rings are mapped twice (256 MiB): the budget makes room for
        // them, and for the debug build's larger program.
        if !args
            .iter()
            .any(|arg| arg == "--memory-budget" || arg == "--config")
        {
            command.args(["--memory-budget", "512MiB"]);
        }
        command
            .arg("--state-dir")
            .arg(dir.join("state"))
            .args(args)
            // PROFILERD_TEST_LOG sets the daemons' log filter, to debug a test.
            .env(
                "PROFILERD_LOG",
                std::env::var("PROFILERD_TEST_LOG").unwrap_or_else(|_| "info".to_owned()),
            )
            .envs(env.iter().map(|(name, value)| (name, value)))
            .stdout(Stdio::null())
            .stderr(log);
        command
    }

    fn command(&self) -> Command {
        Self::command_in(
            self.dir.path(),
            &self.socket,
            &self.args,
            &self.through,
            &self.env,
        )
    }

    /// Waits until the daemon answers GetStatus (at most [`PATIENCE`]).
    pub async fn wait_until_serving(&mut self) {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("profilerd exited early ({status}):\n{}", self.log());
            }
            if let Ok(mut client) = client::connect(&self.socket).await
                && client
                    .get_status(v1::GetStatusRequest::default())
                    .await
                    .is_ok()
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "profilerd did not start serving within {PATIENCE:?}:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The daemon's status, as root asks for it.
    pub async fn status(&self) -> v1::StatusReply {
        self.client()
            .await
            .get_status(v1::GetStatusRequest::default())
            .await
            .unwrap_or_else(|status| panic!("GetStatus failed: {status:?}\n{}", self.log()))
            .into_inner()
    }

    pub async fn client(&self) -> Client {
        client::connect(&self.socket)
            .await
            .unwrap_or_else(|err| panic!("{err}\n{}", self.log()))
    }

    /// The daemon's log so far, for failure messages.
    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.path().join("daemon.log")).unwrap_or_default()
    }

    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    pub fn signal(&self, signal: rustix::process::Signal) {
        let pid = rustix::process::Pid::from_raw(self.pid() as i32).expect("a pid");
        rustix::process::kill_process(pid, signal).expect("the daemon can be signalled");
    }

    /// Waits up to `within` for the daemon to exit, and returns how it did.
    pub async fn exit_status(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        None
    }

    /// Starts the daemon again (after it exited) on the same socket and
    /// state directory, with the same flags.
    pub async fn restart(&mut self) {
        assert!(!self.is_running(), "restart a daemon that has exited");
        self.child = self.command().spawn().expect("profilerd starts");
        self.wait_until_serving().await;
    }

    /// Runs a second daemon with this one's flags (and so its socket) to
    /// its end, which must come within 20 s.
    pub async fn run_another(&self) -> std::process::Output {
        let mut command = self.command();
        command.stderr(Stdio::piped());
        tokio::task::spawn_blocking(move || {
            let mut child = command.spawn().expect("profilerd starts");
            let deadline = Instant::now() + Duration::from_secs(20);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    return child.wait_with_output().expect("its output");
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            terminate(&mut child);
            panic!("a second daemon on the same socket kept running");
        })
        .await
        .expect("finishes")
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        terminate(&mut self.child);
    }
}

/// Asks a child to stop (SIGTERM), then kills it if it lingers.
fn terminate(child: &mut Child) {
    if let Some(pid) = rustix::process::Pid::from_raw(child.id() as i32) {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// The usual set-up: a daemon of the test's own, the workload `name`
/// running with `args`, and a client.
pub async fn daemon_and_workload(name: &str, args: &[&str]) -> (Daemon, Workload, Client) {
    let daemon = Daemon::start().await;
    let workload = Workload::start(name, args);
    let client = daemon.client().await;
    (daemon, workload, client)
}

/// A running workload; killed when dropped.
pub struct Workload {
    child: Child,
    /// The program it runs once exec'd, when known.
    program: Option<PathBuf>,
}

impl From<Child> for Workload {
    fn from(child: Child) -> Self {
        Self {
            child,
            program: None,
        }
    }
}

impl Workload {
    /// Starts the C workload `name` (tests/workloads/<name>.c) with `args`.
    pub fn start(name: &str, args: &[&str]) -> Self {
        Self::spawn(&build_workload(name), args)
    }

    /// Starts the workload `name` under another command name, so that
    /// concurrent tests running the same workload cannot be mistaken for it.
    pub fn start_as(name: &str, comm: &str, args: &[&str]) -> Self {
        Self::spawn(&private_copy(&build_workload(name), comm), args)
    }

    /// Starts `binary` with `args` as the unprivileged user `nobody`.
    pub fn start_as_nobody(binary: &Path, args: &[&str]) -> Self {
        let child = Command::new("setpriv")
            .args(NOBODY)
            .arg(binary)
            .args(args)
            .stdout(Stdio::null())
            .spawn()
            .unwrap_or_else(|err| panic!("setpriv (util-linux) starts: {err}"));
        Self {
            child,
            program: Some(binary.to_owned()),
        }
    }

    /// Starts the program at `binary` with `args`.
    pub fn spawn(binary: &Path, args: &[&str]) -> Self {
        let name = binary.display();
        let child = Command::new(binary)
            .args(args)
            .stdout(Stdio::null())
            .spawn()
            .unwrap_or_else(|err| panic!("workload {name} starts: {err}"));
        Self {
            child,
            program: Some(binary.to_owned()),
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits until the workload runs its program: until its exec, it is a
    /// fork of the test (or `setpriv`, as another user), under another
    /// name and perhaps another user.
    pub async fn wait_until_running(&self) {
        let program = self
            .program
            .as_deref()
            .expect("a workload started from a program of its own");
        wait_for_exec(self.pid(), program).await;
    }

    /// Its exit status if it has exited, without waiting.
    pub fn try_wait(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Waits for the workload to exit by itself.
    pub fn wait(&mut self) {
        let _ = self.child.wait();
    }
}

impl Drop for Workload {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Copies the program `from` to `to` by `cp`, never through a file this
/// process opens for writing: while it held one, a test forking at the same
/// time would hand it to its child until that child's exec, and running the
/// copy then fails with ETXTBSY ("Text file busy").
pub fn copy_program(from: &Path, to: &Path) {
    let status = Command::new("cp")
        .arg("--")
        .arg(from)
        .arg(to)
        .status()
        .unwrap_or_else(|err| panic!("cp (coreutils) runs: {err}"));
    assert!(
        status.success(),
        "cp {} {} failed: {status}",
        from.display(),
        to.display()
    );
}

/// A copy of `binary` named `name` that only one test runs, made once per
/// test run (whole before it is run: written aside, then renamed).
pub fn private_copy(binary: &Path, name: &str) -> PathBuf {
    static COPIES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let copy = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    if !copy.exists() {
        // Tests copying at once each write their own and rename it.
        let nth = COPIES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let partial = copy.with_extension(format!("partial-{nth}"));
        copy_program(binary, &partial);
        fs::rename(&partial, &copy).expect("the copy is renamed");
    }
    copy
}

/// Compiles a workload once per test run: -O1 with frame pointers, named
/// functions kept out of line, and debug information for file:line.
pub fn build_workload(name: &str) -> PathBuf {
    build_workload_with(name, name, WORKLOAD_FLAGS)
}

/// How [`build_workload`] compiles.
pub const WORKLOAD_FLAGS: &[&str] = &["-O1", "-g", "-fno-omit-frame-pointer"];

/// Compiles the workload `name` with `flags` into a binary named
/// `workload-{output}`, once per test run.
pub fn build_workload_with(name: &str, output: &str, flags: &[&str]) -> PathBuf {
    build_workload_by(None, name, output, flags)
}

/// [`build_workload_with`] by `compiler` (gcc for C, g++ for C++ when
/// `None`).
pub fn build_workload_by(
    compiler: Option<&str>,
    name: &str,
    output: &str,
    flags: &[&str],
) -> PathBuf {
    static BUILT: Mutex<Vec<String>> = Mutex::new(Vec::new());
    // C, or C++ when there is no C source of that name.
    let workloads = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/workloads");
    let (source, default_compiler) = match workloads.join(format!("{name}.c")) {
        c if c.exists() => (c, "gcc"),
        _ => (workloads.join(format!("{name}.cpp")), "g++"),
    };
    let compiler = compiler.unwrap_or(default_compiler);
    let binary = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("workload-{output}"));
    let mut built = BUILT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if !built.iter().any(|done| done == output) {
        compile(compiler, &source, &binary, flags);
        built.push(output.to_owned());
    }
    binary
}

/// Compiles the C (or C++, by `compiler`) `source` into `binary` with
/// `flags`; the debug information names `source` as given.
pub fn compile(compiler: &str, source: &Path, binary: &Path, flags: &[&str]) {
    let output_of_gcc = Command::new(compiler)
        .args(flags)
        .args(["-pthread", "-o"])
        .arg(binary)
        .arg(source)
        .output()
        .unwrap_or_else(|err| {
            panic!("{compiler} runs (the tests build their workloads with it): {err}")
        });
    assert!(
        output_of_gcc.status.success(),
        "{compiler} failed to build {}:\n{}",
        source.display(),
        String::from_utf8_lossy(&output_of_gcc.stderr)
    );
}

/// Now, in nanoseconds since the Unix epoch, as the API takes times.
pub fn unix_nanos() -> i64 {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    i64::try_from(now.expect("after 1970").as_nanos()).expect("before 2262")
}

/// How long a test waits for what a healthy daemon does within a second or
/// two: long enough for a loaded two-CPU CI machine, so that only a real
/// fault runs out of it.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// Checks `check` every 50 ms until it gives `Ok`, and returns what it
/// gave. After `within` it panics, naming `what` never happened and what
/// was seen instead (the last `Err`).
pub async fn eventually<T, E: std::fmt::Display>(
    what: &str,
    within: Duration,
    mut check: impl AsyncFnMut() -> Result<T, E>,
) -> T {
    let deadline = Instant::now() + within;
    loop {
        match check().await {
            Ok(done) => return done,
            Err(seen) if Instant::now() >= deadline => {
                panic!("{what}: still not after {within:?}; last seen: {seen}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// Waits until process `pid` runs `program` (has exec'd it).
pub async fn wait_for_exec(pid: u32, program: &Path) {
    let program = fs::canonicalize(program).unwrap_or_else(|_| program.to_owned());
    eventually(
        &format!("process {pid} runs {}", program.display()),
        PATIENCE,
        async || match fs::read_link(format!("/proc/{pid}/exe")) {
            Ok(exe) if exe == program => Ok(()),
            Ok(exe) => Err(format!("it runs {}", exe.display())),
            Err(err) => Err(format!("its exe cannot be read: {err}")),
        },
    )
    .await;
}

/// The names of process `pid`'s threads (none once it is gone).
pub fn thread_names(pid: u32) -> Vec<String> {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .filter_map(|task| fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .map(|name| name.trim_end().to_owned())
        .collect()
}

/// The threads the `peek_threads` workload starts and names, once it has
/// set its SIGUSR1 handler (unless told not to).
pub const PEEK_THREADS: [&str; 3] = ["spin-alpha", "spin-beta", "sleeper"];

/// Waits until process `pid` has threads named `names` (the workload has
/// started them).
pub async fn wait_for_threads(pid: u32, names: &[&str]) {
    eventually(
        &format!("process {pid} has threads named {names:?}"),
        PATIENCE,
        async || {
            let threads = thread_names(pid);
            if names.iter().all(|name| threads.iter().any(|t| t == name)) {
                Ok(())
            } else {
                Err(format!("threads {threads:?}"))
            }
        },
    )
    .await;
}

/// The CPU time process `pid`'s threads have had so far, as the kernel
/// counts it (`/proc/PID/task/*/schedstat`).
pub fn cpu_time(pid: u32) -> Duration {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return Duration::ZERO;
    };
    let nanos = tasks
        .filter_map(|task| fs::read_to_string(task.ok()?.path().join("schedstat")).ok())
        .filter_map(|text| text.split_whitespace().next()?.parse::<u64>().ok())
        .sum();
    Duration::from_nanos(nanos)
}

/// Waits until process `pid` has had `at_least` of CPU time: more than
/// starting a workload takes, so that one that sleeps first is past its
/// sleep and at work.
pub async fn wait_for_cpu(pid: u32, at_least: Duration) {
    eventually(
        &format!("process {pid} has run for {at_least:?}"),
        PATIENCE,
        async || match cpu_time(pid) {
            ran if ran >= at_least => Ok(()),
            ran => Err(format!("{ran:?} of CPU time")),
        },
    )
    .await;
}

/// Waits until the daemon has drained the kernel's maps `count` times
/// more than it had when asked: what the kernel counted until then has
/// been read.
pub async fn wait_for_drains(client: &mut Client, count: u64) {
    let drains = async |client: &mut Client| {
        client
            .get_status(v1::GetStatusRequest::default())
            .await
            .expect("GetStatus answers")
            .into_inner()
            .drains
    };
    let before = drains(client).await;
    eventually(
        &format!("{count} more drains than {before}"),
        PATIENCE,
        async || match drains(client).await {
            now if now >= before + count => Ok(()),
            now => Err(format!("{now} drains")),
        },
    )
    .await;
}

/// Waits until the daemon holds at least `count` samples of `pids` with
/// `function` in their stacks from `since` (Unix nanoseconds) to now, and
/// returns the folded stacks of that window.
pub async fn wait_for_samples(
    client: &mut Client,
    pids: &[u32],
    since: i64,
    function: &str,
    count: u64,
) -> Vec<(Vec<String>, u64)> {
    eventually(
        &format!("{count} samples of {function} in processes {pids:?}"),
        PATIENCE,
        async || {
            let reply = client
                .query(v1::QueryRequest {
                    start_unix_nanos: since,
                    end_unix_nanos: 0,
                    selector: selector(pids),
                    options: Some(options(v1::Format::Folded)),
                    mode: v1::Mode::Cpu as i32,
                })
                .await
                .map_err(|status| format!("Query failed: {status:?}"))?;
            let stacks = folded(&reply.into_inner().report);
            match samples_containing(&stacks).get(function).copied() {
                Some(seen) if seen >= count => Ok(stacks),
                seen => Err(format!("{} samples of it", seen.unwrap_or(0))),
            }
        },
    )
    .await
}

pub fn selector(pids: &[u32]) -> Option<v1::Selector> {
    Some(v1::Selector {
        pids: pids.to_vec(),
        ..Default::default()
    })
}

/// Report options for `format`; Python frames by their names alone (as the
/// tests match them; `python_lines` is tested apart).
pub fn options(format: v1::Format) -> v1::ReportOptions {
    v1::ReportOptions {
        format: format as i32,
        python_lines: Some(false),
        ..Default::default()
    }
}

/// Profiles `pids` for `duration` and returns the reply.
pub async fn profile(
    client: &mut Client,
    pids: &[u32],
    duration: Duration,
    options: v1::ReportOptions,
) -> v1::ProfileReply {
    client
        .profile(v1::ProfileRequest {
            duration_ms: duration.as_millis() as u64,
            selector: selector(pids),
            options: Some(options),
            mode: v1::Mode::Cpu as i32,
            ..Default::default()
        })
        .await
        .unwrap_or_else(|status| panic!("Profile failed: {status:?}"))
        .into_inner()
}

/// Folded stacks: frames (root first) and sample count per line.
pub fn folded(report: &[u8]) -> Vec<(Vec<String>, u64)> {
    let text = std::str::from_utf8(report).expect("folded reports are UTF-8");
    text.lines()
        .map(|line| {
            let (stack, count) = line
                .rsplit_once(' ')
                .unwrap_or_else(|| panic!("not a folded line: {line:?}"));
            let count = count
                .parse()
                .unwrap_or_else(|_| panic!("bad count in {line:?}"));
            (stack.split(';').map(str::to_owned).collect(), count)
        })
        .collect()
}

/// Samples per function name: the samples whose stack contains it.
pub fn samples_containing(stacks: &[(Vec<String>, u64)]) -> HashMap<String, u64> {
    let mut counts = HashMap::new();
    for (frames, count) in stacks {
        let mut seen: Vec<&String> = frames.iter().collect();
        seen.sort();
        seen.dedup();
        for frame in seen {
            *counts.entry(frame.clone()).or_insert(0) += count;
        }
    }
    counts
}

/// Whether `frames` holds `chain` as consecutive frames.
pub fn has_chain(frames: &[String], chain: &[&str]) -> bool {
    frames
        .windows(chain.len())
        .any(|window| window.iter().zip(chain).all(|(frame, want)| frame == want))
}

pub fn total(stacks: &[(Vec<String>, u64)]) -> u64 {
    stacks.iter().map(|(_, count)| count).sum()
}

/// The samples of the stacks whose frames (root first) `wanted` accepts.
pub fn samples_where(stacks: &[(Vec<String>, u64)], wanted: impl Fn(&[String]) -> bool) -> u64 {
    (stacks.iter())
        .filter(|(frames, _)| wanted(frames))
        .map(|(_, count)| count)
        .sum()
}

/// What `go tool pprof -top` prints for the gzipped profile `bytes`
/// (panics, showing its error, when it cannot read them).
pub fn go_pprof_top(bytes: &[u8]) -> String {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("profile.pb.gz");
    fs::write(&path, bytes).expect("the profile is written");
    let output = Command::new("go")
        .args(["tool", "pprof", "-top"])
        .arg(&path)
        .env("HOME", dir.path())
        .env("PPROF_TMPDIR", dir.path())
        .output()
        .expect("`go` runs: install golang-go (cargo xtask test does)");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "go tool pprof failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// Decodes a gzipped pprof profile.
pub fn decode_pprof(bytes: &[u8]) -> profilerd_client::pprof::Profile {
    use std::io::Read as _;
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(bytes)
        .read_to_end(&mut raw)
        .expect("the profile is gzipped");
    prost::Message::decode(&raw[..]).expect("the profile is a pprof profile")
}

/// Parses an SVG document (panics when it is not well-formed XML).
pub fn parse_svg(svg: &str) -> roxmltree::Document<'_> {
    // inferno writes the SVG DOCTYPE, which roxmltree accepts when asked.
    let parsing = roxmltree::ParsingOptions {
        allow_dtd: true,
        ..roxmltree::ParsingOptions::default()
    };
    roxmltree::Document::parse_with_options(svg, parsing)
        .unwrap_or_else(|err| panic!("the SVG is not well-formed XML: {err}"))
}

/// Runs profilerctl against the daemon at `socket` with `args`, off the
/// async threads, and returns its output.
pub async fn profilerctl(socket: &Path, args: &[&str]) -> std::process::Output {
    let socket = socket.to_owned();
    let args: Vec<String> = args.iter().map(|arg| arg.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        Command::new(crate::support::profilerctl_binary())
            .arg("--socket")
            .arg(socket)
            .args(args)
            .output()
            .expect("profilerctl runs")
    })
    .await
    .expect("profilerctl finishes")
}

/// The kept peek reports of process `pid`.
pub async fn peeks_of(client: &mut Client, pid: u32) -> Vec<v1::PeekSummary> {
    client
        .list_peeks(v1::ListPeeksRequest {})
        .await
        .expect("ListPeeks answers")
        .into_inner()
        .peeks
        .into_iter()
        .filter(|peek| peek.pid == pid)
        .collect()
}

/// The next peek report of process `pid` that `watcher` (a WatchPeeks
/// stream) receives within `within` (other processes on the machine may be
/// peeked too); `None` when none comes.
pub async fn next_peek_of(
    watcher: &mut tonic::Streaming<v1::PeekReport>,
    pid: u32,
    within: Duration,
) -> Option<v1::PeekReport> {
    tokio::time::timeout(within, async {
        loop {
            let report = watcher
                .message()
                .await
                .expect("the stream stays open")
                .expect("a report arrives");
            if report.pid == pid {
                return report;
            }
        }
    })
    .await
    .ok()
}

/// Flags of a daemon held to the default memory budget, with room for the
/// debug build's larger program, and rings of a release daemon's size (the
/// tests' daemons otherwise have larger ones).
pub const BUDGETED: &[&str] = &[
    "--memory-budget",
    "320MiB",
    "--stack-copy-buffer",
    "16MiB",
    "--alloc-stack-copy-buffer",
    "8MiB",
];

/// A part of the memory budget as the status shows it.
pub fn memory_part(status: &v1::StatusReply, name: &str) -> v1::MemoryPart {
    let memory = status.memory.as_ref().expect("status says its memory");
    memory
        .parts
        .iter()
        .find(|part| part.name == name)
        .cloned()
        .unwrap_or_else(|| panic!("no part {name} in {memory:?}"))
}

/// Checks that the daemon's resident memory is within its budget.
pub fn assert_within_budget(status: &v1::StatusReply, daemon: &Daemon) {
    let memory = status.memory.as_ref().expect("status says its memory");
    assert!(
        memory.resident_bytes <= memory.budget_bytes,
        "resident {} MiB over the budget {} MiB: {memory:#?}\n{}",
        memory.resident_bytes >> 20,
        memory.budget_bytes >> 20,
        daemon.log()
    );
}
