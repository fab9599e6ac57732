use std::{
    io::Write,
    process::{Command, Stdio},
};

use super::render;
use crate::profile::{LocationKind, ProfileMode};
use crate::report::test_support::{Builder, frame, location};

/// A Python function `name` of `app.py` defined at `first_line`, running
/// `line`.
fn python(builder: &mut Builder, name: &str, first_line: u64, line: u32) -> u32 {
    builder.location(location(
        LocationKind::Python,
        "/srv/app.py",
        first_line,
        vec![frame(name, Some("/srv/app.py"), line, false)],
    ))
}

/// What Python's own `pstats` reads from `bytes`: per function
/// `file:line(name)`, its (cc, nc, tt, ct) and its callers' (nc, cc, tt,
/// ct), as JSON.
fn read_by_python(bytes: &[u8]) -> serde_json::Value {
    // pstats reads files only: Python writes the bytes to one of its own.
    let script = "import json, pstats, sys, tempfile\n\
        f = tempfile.NamedTemporaryFile(suffix='.pstats')\n\
        f.write(sys.stdin.buffer.read()); f.flush()\n\
        s = pstats.Stats(f.name)\n\
        name = lambda f: '%s:%d(%s)' % f\n\
        out = {name(f): [cc, nc, round(tt, 6), round(ct, 6),\n\
               {name(c): [round(x, 6) for x in v] for c, v in callers.items()}]\n\
               for f, (cc, nc, tt, ct, callers) in s.stats.items()}\n\
        out['total_tt'] = round(s.total_tt, 6)\n\
        print(json.dumps(out, sort_keys=True))\n";
    let mut python = Command::new("python3")
        .args(["-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 (a test dependency) runs");
    python
        .stdin
        .take()
        .expect("its input")
        .write_all(bytes)
        .expect("written");
    let output = python.wait_with_output().expect("python3 ends");
    assert!(
        output.status.success(),
        "pstats cannot read it: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("JSON")
}

#[test]
fn python_reads_each_function_s_samples_own_and_cumulative_time_and_callers() {
    let mut builder = Builder::new();
    let start = builder.named("_start");
    let eval = builder.named("_PyEval_EvalFrameDefault");
    let builtin = builder.named("builtin_sorted");
    let module = python(&mut builder, "<module>", 1, 20);
    let outer = python(&mut builder, "outer", 10, 12);
    let key = python(&mut builder, "key", 3, 4);
    let down = python(&mut builder, "down", 6, 7);
    let down_again = python(&mut builder, "down", 6, 8);
    // 3 samples in key, called by outer through a C builtin; 2 in outer
    // itself; 5 in a recursion of down (twice on the stack, at two lines);
    // 4 with no Python frame at all.
    builder.sample(
        0,
        vec![start, eval, module, eval, outer, builtin, eval, key],
        3,
    );
    builder.sample(0, vec![start, eval, module, eval, outer], 2);
    builder.sample(0, vec![start, module, down, down_again], 5);
    builder.sample(0, vec![start, builtin], 4);
    let profile = builder.build();

    let read = read_by_python(&render(&profile).expect("rendered"));
    let expected = serde_json::json!({
        "/srv/app.py:1(<module>)": [10, 10, 0.0, 0.1, {}],
        "/srv/app.py:10(outer)": [5, 5, 0.02, 0.05,
            {"/srv/app.py:1(<module>)": [5, 5, 0.02, 0.05]}],
        "/srv/app.py:3(key)": [3, 3, 0.03, 0.03,
            {"/srv/app.py:10(outer)": [3, 3, 0.03, 0.03]}],
        // Each sample once, though down is on its stack twice.
        "/srv/app.py:6(down)": [5, 5, 0.05, 0.05,
            {"/srv/app.py:1(<module>)": [5, 5, 0.0, 0.05],
             "/srv/app.py:6(down)": [5, 5, 0.05, 0.05]}],
        "total_tt": 0.1,
    });
    assert_eq!(read, expected);
}

#[test]
fn a_profile_without_python_frames_is_refused_with_what_to_do() {
    let mut builder = Builder::new();
    let main = builder.named("main");
    builder.sample(0, vec![main], 7);
    let refused = render(&builder.build()).expect_err("refused").to_string();
    assert!(refused.contains("CPython process"), "{refused}");
}

#[test]
fn counts_past_32_bits_are_read_whole() {
    let mut builder = Builder::new();
    let spin = python(&mut builder, "spin", 1, 2);
    builder.sample(0, vec![spin], 5_000_000_000);
    let read = read_by_python(&render(&builder.build()).expect("rendered"));
    assert_eq!(read["/srv/app.py:1(spin)"][0], 5_000_000_000_u64);
}

#[test]
fn an_allocation_profile_is_refused_with_what_to_ask_for() {
    let mut builder = Builder::new();
    let main = builder.named("main");
    builder.sample(0, vec![main], 1);
    let mut profile = builder.build();
    profile.mode = ProfileMode::Allocated;
    let refused = render(&profile).expect_err("refused").to_string();
    assert!(refused.contains("pprof"), "{refused}");
}
