//! The command line's parsing, as users type it.

use super::values::{id, parse_duration, parse_noisefloor};
use super::*;

#[test]
fn numbers_say_what_is_wrong() {
    let pid = id("a process id");
    assert_eq!(pid("42"), Ok(42));
    assert_eq!(pid("-1").unwrap_err(), "a process id cannot be negative");
    assert!(pid("x").unwrap_err().contains("whole number"));
    assert!(
        pid("4294967296")
            .unwrap_err()
            .contains("at most 4294967295")
    );
    assert!(parse_noisefloor("-1").is_err());
    assert_eq!(parse_noisefloor("2"), Ok(2.0));
    assert!(parse_duration("-5s").unwrap_err().contains("negative"));
    assert_eq!(parse_duration("1m"), Ok(Duration::from_secs(60)));
}

#[test]
fn the_command_line_is_well_formed() {
    use clap::CommandFactory as _;
    Cli::command().debug_assert();
    let cli = Cli::try_parse_from(["profilerctl", "profile", "--pid", "-1", "-d", "1s"]);
    let message = cli.unwrap_err().to_string();
    assert!(
        message.contains("a process id cannot be negative"),
        "{message}"
    );
    let cli = Cli::try_parse_from(["profilerctl", "record", "--", "sleep", "-1"]).unwrap();
    assert!(matches!(cli.command, Command::Record { command, .. } if command.len() == 2));
}

/// perf's and py-spy's habits: `-p PID`, `-d` in seconds without a
/// unit, no duration (until Ctrl-C); the long forms still work.
#[test]
fn profile_takes_perf_and_py_spy_habits() {
    let profile = |args: &[&str]| {
        let cli = Cli::try_parse_from([&["profilerctl", "profile"], args].concat())
            .unwrap_or_else(|err| panic!("{args:?}: {err}"));
        match cli.command {
            Command::Profile {
                selector,
                duration,
                frequency,
                ..
            } => (selector.pids, duration, frequency),
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(
        profile(&["-p", "42", "-d", "5"]),
        (vec![42], Some(Duration::from_secs(5)), None)
    );
    assert_eq!(
        profile(&["--pid", "42", "--duration", "1.5"]),
        (vec![42], Some(Duration::from_millis(1500)), None)
    );
    assert_eq!(
        profile(&["-p", "1", "-p", "2", "-d", "2s"]),
        (vec![1, 2], Some(Duration::from_secs(2)), None)
    );
    assert_eq!(profile(&["-p", "42"]), (vec![42], None, None));
    assert_eq!(
        profile(&["-p", "42", "-F", "997", "-d", "2"]),
        (vec![42], Some(Duration::from_secs(2)), Some(997))
    );
    assert_eq!(
        profile(&["--pid", "42", "--frequency", "99"]),
        (vec![42], None, Some(99))
    );
    for refused in [
        &["-F", "99"][..],
        &["-p", "1", "-F", "0"],
        &["-p", "1", "-F", "5000"],
    ] {
        let args = [&["profilerctl", "profile"], refused].concat();
        assert!(Cli::try_parse_from(args).is_err(), "{refused:?}");
    }
    assert!(parse_duration("5x").unwrap_err().contains("examples"));
    assert!(parse_duration("NaN").is_err());
    assert!(parse_duration("inf").is_err());
}

/// `diff --function` names functions as `callers` does, repeatably.
#[test]
fn diff_takes_the_functions_it_shows() {
    let cli = Cli::try_parse_from([
        "profilerctl",
        "diff",
        "--base-since",
        "10m",
        "--since",
        "5m",
        "--function",
        "malloc",
        "--function",
        "app::spin",
    ])
    .unwrap_or_else(|err| panic!("{err}"));
    match cli.command {
        Command::Diff(diff) => assert_eq!(diff.functions, ["malloc", "app::spin"]),
        other => panic!("{other:?}"),
    }
}
