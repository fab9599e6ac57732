use crate::profile::{Format, LocationKind, ReportOptions};
use crate::report::render;
use crate::report::test_support::{Builder, frame, location};

use super::is_python_interpreter;

#[test]
fn interpreters_are_told_by_their_file_names() {
    for module in [
        "/usr/bin/python3.11",
        "/root/.pyenv/versions/3.12.1/bin/python3.12",
        "/usr/lib/x86_64-linux-gnu/libpython3.11.so.1.0",
        "/opt/python/lib/libpython3.13t.so",
        "/usr/lib/libpython3.9d.so.1",
    ] {
        assert!(is_python_interpreter(module), "{module}");
    }
    for module in [
        "/usr/lib/python3/dist-packages/numpy/core/_multiarray_umath.cpython-311-x86_64-linux-gnu.so",
        "/usr/bin/python-argcomplete",
        "/usr/lib/x86_64-linux-gnu/libc.so.6",
        "/usr/local/bin/pythonista",
        "/usr/lib/libpython.so",
        // Links or stubs, never the file a process maps.
        "/usr/bin/python3",
        "/usr/lib/x86_64-linux-gnu/libpython3.so",
        "/srv/app.py",
        "[python]",
    ] {
        assert!(!is_python_interpreter(module), "{module}");
    }
}

#[test]
fn python_stacks_lose_the_interpreter_s_frames_and_keep_the_rest() {
    let mut builder = Builder::new();
    let native = |builder: &mut Builder, module: &str, name: &str| {
        builder.location(location(
            LocationKind::User,
            module,
            0x1000 + name.len() as u64,
            vec![frame(name, None, 0, false)],
        ))
    };
    let python_bin = "/usr/bin/python3.11";
    let libc = "/usr/lib/x86_64-linux-gnu/libc.so.6";
    let start = native(&mut builder, python_bin, "_start");
    let libc_main = native(&mut builder, libc, "__libc_start_call_main");
    let run_main = native(&mut builder, python_bin, "Py_RunMain");
    let eval = native(&mut builder, python_bin, "_PyEval_EvalFrameDefault");
    let call = native(
        &mut builder,
        "/usr/lib/x86_64-linux-gnu/libpython3.11.so.1.0",
        "PyObject_Call",
    );
    let extension = native(&mut builder, "/srv/_speedups.cpython-311.so", "fast_sum");
    let memcpy = native(&mut builder, libc, "memcpy");
    let page_fault = builder.named("k:asm_exc_page_fault");
    let main_c = builder.named("main");
    let cut = builder.location(location(
        LocationKind::Marker,
        "[python frames cut: more than 128 read]",
        0,
        vec![frame(
            "[python frames cut: more than 128 read]",
            None,
            0,
            false,
        )],
    ));
    let python = |builder: &mut Builder, name: &str| {
        builder.location(location(
            LocationKind::Python,
            "/srv/app.py",
            1,
            vec![frame(name, Some("/srv/app.py"), 5, false)],
        ))
    };
    let module = python(&mut builder, "<module>");
    let a = python(&mut builder, "a");
    let b = python(&mut builder, "b");
    // Through a C extension that calls back into Python, leaf in libc and
    // the kernel.
    builder.sample(
        0,
        vec![
            start, libc_main, run_main, module, eval, a, call, extension, call, eval, b, memcpy,
            page_fault,
        ],
        3,
    );
    // Two stacks alike once the interpreter's frames are out: summed.
    builder.sample(0, vec![start, libc_main, run_main, module, eval, a], 2);
    builder.sample(0, vec![start, module, eval, a, call], 4);
    // Frames cut short say so still.
    builder.sample(0, vec![start, cut, eval, b], 1);
    // Not Python: as it was.
    builder.sample(0, vec![start, libc_main, main_c], 5);
    let profile = builder.build();

    let folded = |interpreter| {
        let options = ReportOptions {
            format: Format::Folded,
            interpreter,
            python_lines: false,
            ..ReportOptions::default()
        };
        String::from_utf8(render(&profile, &options).expect("rendered")).expect("UTF-8")
    };
    let mut lines: Vec<String> = folded(false).lines().map(str::to_owned).collect();
    lines.sort();
    assert_eq!(
        lines,
        [
            "<module>;a 6",
            "<module>;a;fast_sum;b;memcpy;asm_exc_page_fault_[k] 3",
            "[python frames cut: more than 128 read];b 1",
            "_start;__libc_start_call_main;main 5",
        ]
    );
    // By default, every frame.
    assert!(folded(true).contains("_start;__libc_start_call_main;Py_RunMain;<module>"));

    // And by default, Python frames with their file and line (py-spy's
    // way), in every format made of folded stacks, from the index too.
    for format in [Format::Folded, Format::Speedscope, Format::Flamegraph] {
        let options = ReportOptions {
            format,
            ..ReportOptions::default()
        };
        let text = String::from_utf8(render(&profile, &options).expect("rendered")).expect("UTF-8");
        assert!(text.contains("a (/srv/app.py:5)"), "{format:?}: {text}");
        assert!(
            !text.contains("fast_sum (/"),
            "{format:?}: only Python frames"
        );
        if format == Format::Folded {
            assert!(!text.contains(";a;"), "{text}");
        }
    }
}
