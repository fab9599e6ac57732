use std::process::Command;

use super::super::tests::{run_until_it_prints, runnable_pythons as pythons};
use super::*;

/// Code objects with lines far apart (deltas past one varint chunk), lines
/// going back (a call's arguments over several lines), no line (the
/// generator's start), nested functions, a method and a comprehension:
/// each with its table of locations and the line of every code unit, as
/// the interpreter itself decodes them (`co_lines`).
const LINES_SCRIPT: &str = r#"
import json
source = "def far(a):\n    b = a + 1\n" + "\n" * 300 + "    c = len(\n        [b,\n         b])\n" \
    + "    return sum(\n        (x for x in range(c)),\n        start=b)\n" \
    + "class K:\n    def m(self):\n        try:\n            return [i * 2 for i in range(3)]\n" \
    + "        except Exception:\n            return None\n"
namespace = {}
exec(compile(source, "generated.py", "exec"), namespace)
codes, todo = [], [namespace["far"].__code__, namespace["K"].m.__code__]
while todo:
    code = todo.pop()
    codes.append(code)
    todo.extend(c for c in code.co_consts if hasattr(c, "co_lines"))
out = []
for code in codes:
    units = []
    for start, end, line in code.co_lines():
        units.extend((unit, line) for unit in range(start // 2, end // 2))
    out.append({"name": code.co_qualname, "first": code.co_firstlineno,
                "table": code.co_linetable.hex(), "units": units})
print(json.dumps(out))
"#;

#[test]
fn lines_are_decoded_as_the_interpreter_decodes_them() {
    let pythons = pythons();
    if pythons.is_empty() {
        eprintln!("no CPython 3.11+ on this machine: nothing to check against");
        return;
    }
    for python in pythons {
        let output = Command::new(&python)
            .args(["-c", LINES_SCRIPT])
            .output()
            .expect("python runs");
        assert!(output.status.success(), "{}: {output:?}", python.display());
        let codes: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
        let codes = codes.as_array().expect("a list");
        assert!(codes.len() >= 3, "{codes:?}");
        for code in codes {
            let table: Vec<u8> = (0..code["table"].as_str().unwrap().len() / 2)
                .map(|at| {
                    u8::from_str_radix(&code["table"].as_str().unwrap()[2 * at..2 * at + 2], 16)
                        .unwrap()
                })
                .collect();
            let first = code["first"].as_u64().unwrap() as u32;
            for unit in code["units"].as_array().unwrap() {
                let at = unit[0].as_u64().unwrap() as u32;
                let expected = unit[1].as_u64().map(|line| line as u32);
                assert_eq!(
                    line_at(&table, first, at),
                    expected,
                    "{}: {} unit {at}",
                    python.display(),
                    code["name"]
                );
            }
        }
    }
}

/// Prints, for a method, a function with a name beyond ASCII and one
/// beyond the Basic Multilingual Plane, the address of its code object
/// (`id`), its qualified name, file and first line; then waits to be read.
const OBJECTS_SCRIPT: &str = r#"
import json, sys
class K:
    def m(self):
        return 1
def größe_名前():
    return 2
exec(compile("def emoji_\U0001d4b3():\n    return 3\n", "/tmp/ünïcode.py", "exec"))
codes = [K.m.__code__, größe_名前.__code__, emoji_𝒳.__code__]
print(json.dumps([[id(c), c.co_qualname, c.co_filename, c.co_firstlineno] for c in codes]), flush=True)
sys.stdin.read()
"#;

#[test]
fn code_objects_are_read_from_a_live_interpreter() {
    for python in pythons() {
        let (mut child, line) = run_until_it_prints(&python, OBJECTS_SCRIPT);
        let pid = child.id();
        let (layout, types) = interpreter_of(pid);
        let memory = ProcMem::open(pid).expect("its memory opens");
        let expected: serde_json::Value = serde_json::from_str(&line).expect("JSON");
        for code in expected.as_array().unwrap() {
            let read = read_code(&memory, code[0].as_u64().unwrap(), &layout, &types)
                .unwrap_or_else(|err| panic!("{}: {err}", python.display()));
            assert_eq!(
                read.qualname,
                code[1].as_str().unwrap(),
                "{}",
                python.display()
            );
            assert_eq!(read.filename, code[2].as_str().unwrap());
            assert_eq!(u64::from(read.first_line), code[3].as_u64().unwrap());
        }
        // Something else than a code object is refused, not misread: a
        // `str` (the qualified name's address is not known here, but the
        // code object's type object is no code object).
        assert!(matches!(
            read_code(&memory, types.code, &layout, &types),
            Err(CodeError::WrongType(_) | CodeError::Unreadable(_))
        ));
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// The layout and type objects of the interpreter process `pid` runs.
fn interpreter_of(pid: u32) -> (CodeLayout, TypeObjects) {
    let process = super::super::threads::tests::python_process(pid);
    let layout = CodeLayout::of(process.interpreter.version).expect("a known layout");
    (layout, process.types)
}

#[test]
fn varints_are_six_bits_a_byte_lowest_first() {
    let mut at = 0;
    assert_eq!(varint(&[0x41, 0x02], &mut at), Some(1 | (2 << 6)));
    assert_eq!(at, 2);
    let mut at = 0;
    assert_eq!(signed_varint(&[0x05], &mut at), Some(-2));
    let mut at = 0;
    assert_eq!(varint(&[0x41], &mut at), None, "cut short");
}
