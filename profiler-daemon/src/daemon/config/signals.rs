//! Signals by name or number, for `peek_signal`.

/// Signals by name, as `kill -l` lists them (without the `SIG`).
const SIGNALS: [(&str, i32); 29] = [
    ("HUP", libc::SIGHUP),
    ("INT", libc::SIGINT),
    ("QUIT", libc::SIGQUIT),
    ("ILL", libc::SIGILL),
    ("TRAP", libc::SIGTRAP),
    ("ABRT", libc::SIGABRT),
    ("BUS", libc::SIGBUS),
    ("FPE", libc::SIGFPE),
    ("KILL", libc::SIGKILL),
    ("USR1", libc::SIGUSR1),
    ("SEGV", libc::SIGSEGV),
    ("USR2", libc::SIGUSR2),
    ("PIPE", libc::SIGPIPE),
    ("ALRM", libc::SIGALRM),
    ("TERM", libc::SIGTERM),
    ("STKFLT", libc::SIGSTKFLT),
    ("CHLD", libc::SIGCHLD),
    ("CONT", libc::SIGCONT),
    ("STOP", libc::SIGSTOP),
    ("TSTP", libc::SIGTSTP),
    ("TTIN", libc::SIGTTIN),
    ("TTOU", libc::SIGTTOU),
    ("URG", libc::SIGURG),
    ("XCPU", libc::SIGXCPU),
    ("XFSZ", libc::SIGXFSZ),
    ("VTALRM", libc::SIGVTALRM),
    ("PROF", libc::SIGPROF),
    ("WINCH", libc::SIGWINCH),
    ("SYS", libc::SIGSYS),
];

/// A signal's number from its name (`SIGUSR1`, `usr1`) or number; `off`
/// is 0. SIGKILL and SIGSTOP cannot be handled, so they are refused.
pub fn parse_signal(text: &str) -> Result<u32, String> {
    let text = text.trim();
    if text.eq_ignore_ascii_case("off") {
        return Ok(0);
    }
    let upper = text.to_ascii_uppercase();
    let name = upper.strip_prefix("SIG").unwrap_or(&upper);
    let number = match name.parse::<i32>() {
        Ok(number) if (1..=64).contains(&number) => number,
        Ok(number) => return Err(format!("{number} is not a signal number; accepted: 1-64")),
        Err(_) => SIGNALS
            .iter()
            .find(|(known, _)| *known == name)
            .map(|&(_, number)| number)
            .ok_or_else(|| {
                format!("{text:?} is not a signal; use a name such as SIGUSR1 or SIGUSR2, a number, or off")
            })?,
    };
    if number == libc::SIGKILL || number == libc::SIGSTOP {
        return Err(format!(
            "{text} cannot be caught by anyone, so peeking on it would always kill or stop \
             the process; use SIGUSR1, SIGUSR2 or a real-time signal"
        ));
    }
    Ok(number as u32)
}
