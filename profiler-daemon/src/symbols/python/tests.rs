use std::path::{Path, PathBuf};

use super::*;

#[test]
fn versions_are_read_from_py_version_hex() {
    let version = PythonVersion::from_hex(0x030b_02f0).expect("3.11.2 final");
    assert_eq!(version.to_string(), "3.11.2");
    assert_eq!(
        PythonVersion::from_hex(0x030d_00a1).map(|v| (v.minor, v.micro)),
        Some((13, 0))
    );
    assert_eq!(PythonVersion::from_hex(0x0207_12f0), None, "Python 2");
    assert_eq!(
        PythonVersion::from_hex(0x1_030b_02f0),
        None,
        "not a version"
    );
}

#[test]
fn interpreters_are_known_by_their_file_names() {
    for name in [
        "python3.11",
        "python3.13t",
        "python3.12d",
        "libpython3.12.so.1.0",
        "libpython3.13t.so.1.0",
    ] {
        assert!(named_like_python(name), "{name}");
    }
    for name in [
        "python3",
        "python3-config",
        "python",
        "libpython3.so",
        "pythonista",
        "libc.so.6",
    ] {
        assert!(!named_like_python(name), "{name}");
    }
    assert!(named_free_threaded("python3.13t"));
    assert!(named_free_threaded("libpython3.13t.so.1.0"));
    assert!(!named_free_threaded("libpython3.13.so.1.0"));
    assert!(!named_free_threaded("python3.13"));
}

#[test]
fn a_binary_not_named_like_python_is_not_opened_as_one() {
    let file = File::open("/proc/self/exe").expect("opens itself");
    assert_eq!(inspect("/usr/bin/profilerd", &file), Found::NotPython);
}

/// major, minor, micro.
type Version = (u8, u8, u8);

/// The CPython binaries on this machine: Debian's, and pyenv's (each
/// version's `python3.N` and `libpython3.N.so.1.0`), with the version
/// their path says (none for Debian's, whose micro version is not in it).
pub(super) fn pythons_here() -> Vec<(PathBuf, Option<Version>)> {
    let mut found = Vec::new();
    for minor in 8..=14 {
        let debian = PathBuf::from(format!("/usr/bin/python3.{minor}"));
        if debian.exists() {
            found.push((debian, None));
        }
    }
    let root = std::env::var_os("PYENV_ROOT")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| Path::new(&home).join(".pyenv")));
    let versions = root
        .and_then(|root| std::fs::read_dir(root.join("versions")).ok())
        .into_iter()
        .flatten()
        .flatten();
    for version in versions {
        let name = version.file_name().to_string_lossy().into_owned();
        let parts: Vec<u8> = name
            .split('.')
            .filter_map(|part| part.parse().ok())
            .collect();
        let [3, minor, micro] = parts[..] else {
            continue;
        };
        for file in [
            version.path().join(format!("bin/python3.{minor}")),
            version
                .path()
                .join(format!("lib/libpython3.{minor}.so.1.0")),
        ] {
            if file.exists() {
                found.push((file, Some((3, minor, micro))));
            }
        }
    }
    found
}

/// The CPython 3.11 to 3.13 programs of this machine (Debian's and
/// pyenv's `python3.N`).
pub(super) fn runnable_pythons() -> Vec<PathBuf> {
    pythons_here()
        .into_iter()
        .map(|(path, _)| path)
        .filter(|path| {
            let name = path
                .file_name()
                .map(|name| name.to_string_lossy().into_owned());
            name.is_some_and(|name| ["python3.11", "python3.12", "python3.13"].contains(&&*name))
        })
        .collect()
}

/// Runs `script` under `python`, its input and output piped, until it
/// prints its first line: the process and that line.
pub(super) fn run_until_it_prints(python: &Path, script: &str) -> (std::process::Child, String) {
    use std::io::BufRead as _;
    let mut child = std::process::Command::new(python)
        .args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python runs");
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.as_mut().expect("its output"))
        .read_line(&mut line)
        .expect("it prints");
    (child, line)
}

#[test]
fn the_pythons_of_this_machine_are_found_with_their_versions() {
    let pythons = pythons_here();
    if pythons.is_empty() {
        eprintln!("no CPython binary on this machine: nothing to inspect");
        return;
    }
    for (path, expected) in pythons {
        let file = File::open(&path).expect("opens");
        let found = inspect(&path.to_string_lossy(), &file);
        let links_libpython = path.to_string_lossy().contains("/bin/")
            && path.parent().and_then(Path::parent).is_some_and(|root| {
                root.join("lib").read_dir().is_ok_and(|mut dir| {
                    dir.any(|entry| {
                        entry.is_ok_and(|entry| {
                            entry
                                .file_name()
                                .to_string_lossy()
                                .starts_with("libpython3.")
                        })
                    })
                })
            });
        eprintln!("{}: {found:?}", path.display());
        let version_of = |version: PythonVersion| (version.major, version.minor, version.micro);
        match &found {
            // pyenv's `python3.N` runs the interpreter of its libpython.
            Found::NotPython => assert!(links_libpython, "{}: {found:?}", path.display()),
            Found::Refused(Refusal::TooOld, version) => {
                let minor = expected.map(|(_, minor, _)| minor);
                assert!(minor.is_none_or(|minor| minor < 11), "{}", path.display());
                if let (Some(version), Some(expected)) = (version, expected) {
                    assert_eq!(version_of(*version), expected);
                }
            }
            Found::Interpreter(interpreter) => {
                let version = version_of(interpreter.version);
                assert!(version >= (3, 11, 0), "{}: {found:?}", path.display());
                if let Some(expected) = expected {
                    assert_eq!(version, expected, "{}", path.display());
                }
                assert!(interpreter.runtime != 0 && !interpreter.eval_loop.is_empty());
                assert!(
                    interpreter
                        .eval_loop
                        .iter()
                        .all(|range| range.end > range.start)
                );
            }
            Found::Refused(reason, _) => panic!("{}: refused, {reason:?}", path.display()),
        }
    }
}
