//! `cargo xtask install` and `uninstall`: where an installation's files go
//! (the binaries under the prefix, the systemd unit, the example
//! configuration), putting them there and taking them away again.
//!
//! Owns that layout and the unit's templating (its ExecStart follows the
//! prefix). It must not build (see `commands`), and it never starts, stops
//! or enables the service, nor creates users or groups: it prints those
//! commands for the administrator.

use std::fs;
use std::io::Write as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Component, Path, PathBuf};

use anyhow::{Context as _, Result, bail};

/// The installed programs.
pub const BINARIES: [&str; 2] = ["profilerd", "profilerctl"];
/// Where the unit and the configuration go (not under the prefix: systemd
/// and the unit read them there).
const UNIT_PATH: &str = "/etc/systemd/system/profilerd.service";
const CONFIG_PATH: &str = "/etc/profilerd/profilerd.toml";
/// The unit's state directory (`StateDirectory=profilerd`, the
/// configuration's default `state_dir`).
const STATE_DIR: &str = "/var/lib/profilerd";
/// The prefix deploy/profilerd.service is written for.
const UNIT_PREFIX: &str = "/usr/local";

/// Where an installation's files go: `destdir` (a staging root, as for
/// packaging) + `prefix` for the binaries, `destdir` + /etc for the rest.
#[derive(Debug, Clone)]
pub struct Layout {
    pub prefix: PathBuf,
    pub destdir: Option<PathBuf>,
}

impl Layout {
    pub fn new(prefix: &Path, destdir: Option<&Path>) -> Result<Self> {
        if !prefix.is_absolute() {
            bail!(
                "--prefix must be an absolute path (the unit's ExecStart names the daemon by it), \
                 not {}",
                prefix.display()
            );
        }
        if prefix
            .components()
            .any(|part| matches!(part, Component::ParentDir))
            || prefix
                .to_str()
                .is_none_or(|text| text.contains(char::is_whitespace))
        {
            bail!(
                "--prefix {} must be a plain absolute path without `..` or spaces (systemd \
                 would split ExecStart at a space)",
                prefix.display()
            );
        }
        Ok(Self {
            prefix: prefix.to_owned(),
            destdir: destdir.map(Path::to_owned),
        })
    }

    /// `path` (absolute, as the installed system sees it) under the destdir.
    fn staged(&self, path: &Path) -> PathBuf {
        match &self.destdir {
            Some(root) => root.join(path.strip_prefix("/").unwrap_or(path)),
            None => path.to_owned(),
        }
    }

    /// The installed binary `name`, as the system will see it.
    pub fn binary(&self, name: &str) -> PathBuf {
        self.prefix.join("bin").join(name)
    }

    fn unit(&self) -> PathBuf {
        self.staged(Path::new(UNIT_PATH))
    }

    fn config(&self) -> PathBuf {
        self.staged(Path::new(CONFIG_PATH))
    }
}

/// The unit with its ExecStart naming the daemon under `prefix`.
pub fn templated_unit(unit: &str, layout: &Layout) -> Result<String> {
    let written = format!("ExecStart={UNIT_PREFIX}/bin/profilerd ");
    let wanted = format!("ExecStart={} ", layout.binary("profilerd").display());
    let exec_starts = unit
        .lines()
        .filter(|line| line.starts_with("ExecStart="))
        .count();
    if exec_starts != 1 || !unit.contains(&written) {
        bail!(
            "deploy/profilerd.service must have exactly one line starting with `{written}` \
             for the installer to point it at the installed daemon"
        );
    }
    Ok(unit.replace(&written, &wanted))
}

/// What the files to install are made from.
pub struct Sources<'a> {
    /// The directory holding the built `profilerd` and `profilerctl`.
    pub binaries: PathBuf,
    /// deploy/profilerd.service and deploy/config.toml, as text.
    pub unit: &'a str,
    pub config: &'a str,
}

/// Installs the binaries, the unit and (unless one is there) the example
/// configuration; returns one line per thing done, to print.
pub fn install(layout: &Layout, sources: &Sources<'_>) -> Result<Vec<String>> {
    let mut done = Vec::new();
    for name in BINARIES {
        let from = sources.binaries.join(name);
        let bytes = fs::read(&from)
            .with_context(|| format!("cannot read the built {name} at {}", from.display()))?;
        let to = layout.staged(&layout.binary(name));
        write_replacing(&to, &bytes, 0o755)?;
        done.push(format!("installed {}", to.display()));
    }

    let unit = templated_unit(sources.unit, layout)?;
    write_replacing(&layout.unit(), unit.as_bytes(), 0o644)?;
    done.push(format!("installed {}", layout.unit().display()));

    let config = layout.config();
    match fs::read(&config) {
        Ok(existing) if existing == sources.config.as_bytes() => {
            done.push(format!("{} is the example already", config.display()));
        }
        Ok(_) => done.push(format!(
            "kept your {} (not overwritten; compare it with deploy/config.toml for new keys)",
            config.display()
        )),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            write_replacing(&config, sources.config.as_bytes(), 0o644)?;
            done.push(format!(
                "installed the example configuration {}",
                config.display()
            ));
        }
        Err(err) => {
            return Err(err).with_context(|| format!("cannot read {}", config.display()));
        }
    }
    Ok(done)
}

/// Removes what [`install`] put there. The configuration is removed only
/// if it is still the example, or with `purge` (which also removes the
/// state directory, peek reports included); returns one line per thing
/// done or kept, to print.
pub fn uninstall(layout: &Layout, example_config: &str, purge: bool) -> Result<Vec<String>> {
    let mut done = Vec::new();
    let mut paths: Vec<PathBuf> = BINARIES
        .iter()
        .map(|name| layout.staged(&layout.binary(name)))
        .collect();
    paths.push(layout.unit());
    for path in paths {
        if remove_file(&path)? {
            done.push(format!("removed {}", path.display()));
        }
    }

    let config = layout.config();
    match fs::read(&config) {
        Ok(text) if purge || text == example_config.as_bytes() => {
            remove_file(&config)?;
            done.push(format!("removed {}", config.display()));
        }
        Ok(_) => done.push(format!(
            "kept {} (it differs from the example: your settings); --purge removes it",
            config.display()
        )),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
        Err(err) => return Err(err).with_context(|| format!("cannot read {}", config.display())),
    }
    if let Some(dir) = config.parent()
        && fs::remove_dir(dir).is_ok()
    {
        done.push(format!("removed {}", dir.display()));
    }

    let state = layout.staged(Path::new(STATE_DIR));
    if state.exists() {
        if purge {
            fs::remove_dir_all(&state)
                .with_context(|| format!("cannot remove {}", state.display()))?;
            done.push(format!("removed {} (peek reports)", state.display()));
        } else {
            done.push(format!(
                "kept {} (peek reports); --purge removes it",
                state.display()
            ));
        }
    }
    Ok(done)
}

/// What to run after installing, for the administrator.
pub fn next_steps_after_install(layout: &Layout) -> Vec<String> {
    let mut steps = vec![
        "groupadd --system profilerd    # its members may profile every process (admin_group)"
            .to_owned(),
        "systemctl daemon-reload && systemctl enable --now profilerd".to_owned(),
        format!(
            "{} status    # check that it serves",
            layout.binary("profilerctl").display()
        ),
        "systemctl restart profilerd    # after an upgrade, if it was running".to_owned(),
    ];
    if layout.destdir.is_some() {
        steps.insert(
            0,
            "# files were staged under --destdir: copy them to / (or package them) first"
                .to_owned(),
        );
    }
    steps
}

/// What to run after uninstalling, for the administrator.
pub fn next_steps_after_uninstall() -> Vec<String> {
    vec![
        "systemctl daemon-reload".to_owned(),
        "groupdel profilerd    # if no one needs the group any more".to_owned(),
    ]
}

/// Writes `path` with `mode` through a temporary file renamed over it, so
/// a running daemon's binary is replaced, not rewritten in place, and a
/// reader never sees half a file.
fn write_replacing(path: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    let dir = path
        .parent()
        .with_context(|| format!("{} has no parent directory", path.display()))?;
    fs::create_dir_all(dir).with_context(|| {
        format!(
            "cannot create {}{}",
            dir.display(),
            hint_for_permissions(dir)
        )
    })?;
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let temporary = dir.join(format!(".{name}.xtask-install"));
    let write = || -> std::io::Result<()> {
        let mut file = fs::File::create(&temporary)?;
        file.write_all(bytes)?;
        file.set_permissions(fs::Permissions::from_mode(mode))?;
        file.sync_all()?;
        fs::rename(&temporary, path)
    };
    write().map_err(|err| {
        let _ = fs::remove_file(&temporary);
        anyhow::Error::new(err).context(format!(
            "cannot write {}{}",
            path.display(),
            hint_for_permissions(dir)
        ))
    })
}

/// Removes a file; `false` when there was none.
fn remove_file(path: &Path) -> Result<bool> {
    match fs::remove_file(path) {
        Ok(()) => Ok(true),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(err) => Err(err).with_context(|| {
            format!(
                "cannot remove {}{}",
                path.display(),
                hint_for_permissions(path)
            )
        }),
    }
}

/// A hint for a failure to write under `path`: the usual cause.
fn hint_for_permissions(path: &Path) -> String {
    let readonly = fs::metadata(path).is_ok_and(|meta| meta.permissions().readonly());
    if readonly || !crate::process::is_root().unwrap_or(true) {
        " (run as root to install system-wide, or pass --destdir DIR to stage the files there)"
            .to_owned()
    } else {
        String::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const UNIT: &str = include_str!("../../deploy/profilerd.service");
    const CONFIG: &str = include_str!("../../deploy/config.toml");

    /// A staging root with fake built binaries.
    struct Staging {
        dir: PathBuf,
    }

    impl Staging {
        fn new(name: &str) -> Self {
            let dir =
                std::env::temp_dir().join(format!("xtask-install-{name}-{}", std::process::id()));
            let _ = fs::remove_dir_all(&dir);
            fs::create_dir_all(dir.join("built")).unwrap();
            for binary in BINARIES {
                fs::write(dir.join("built").join(binary), format!("#!{binary}\n")).unwrap();
            }
            Self { dir }
        }

        fn root(&self) -> PathBuf {
            self.dir.join("root")
        }

        fn sources(&self) -> Sources<'static> {
            Sources {
                binaries: self.dir.join("built"),
                unit: UNIT,
                config: CONFIG,
            }
        }
    }

    impl Drop for Staging {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }

    fn mode(path: &Path) -> u32 {
        fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn installs_under_destdir_and_uninstalls() -> Result<()> {
        let staging = Staging::new("roundtrip");
        let root = staging.root();
        let layout = Layout::new(Path::new("/opt/prof"), Some(&root))?;
        let sources = staging.sources();
        let done = install(&layout, &sources)?;
        assert_eq!(done.len(), 4, "{done:#?}");

        for binary in BINARIES {
            let installed = root.join("opt/prof/bin").join(binary);
            assert_eq!(fs::read_to_string(&installed)?, format!("#!{binary}\n"));
            assert_eq!(mode(&installed), 0o755);
        }
        let unit = fs::read_to_string(root.join("etc/systemd/system/profilerd.service"))?;
        assert!(
            unit.contains(
                "\nExecStart=/opt/prof/bin/profilerd --config /etc/profilerd/profilerd.toml\n"
            ),
            "{unit}"
        );
        assert!(!unit.contains("/usr/local"), "{unit}");
        let config = root.join("etc/profilerd/profilerd.toml");
        assert_eq!(fs::read_to_string(&config)?, CONFIG);
        assert_eq!(mode(&config), 0o644);
        // No temporary files are left behind.
        assert!(fs::read_dir(root.join("opt/prof/bin"))?.count() == 2);

        // Installing again keeps a changed configuration and says so.
        fs::write(&config, "frequency_hz = 99\n")?;
        let again = install(&layout, &sources)?;
        assert!(
            again.iter().any(|line| line.starts_with("kept your")),
            "{again:#?}"
        );
        assert_eq!(fs::read_to_string(&config)?, "frequency_hz = 99\n");

        // Uninstalling keeps it too, and the state directory, saying so.
        fs::create_dir_all(root.join("var/lib/profilerd/peeks"))?;
        let removed = uninstall(&layout, CONFIG, false)?;
        assert!(
            removed
                .iter()
                .any(|line| line.starts_with("kept") && line.contains("profilerd.toml")),
            "{removed:#?}"
        );
        assert!(
            removed
                .iter()
                .any(|line| line.starts_with("kept") && line.contains("var/lib/profilerd")),
            "{removed:#?}"
        );
        assert!(config.exists());
        assert!(!root.join("opt/prof/bin/profilerd").exists());
        assert!(!root.join("opt/prof/bin/profilerctl").exists());
        assert!(!root.join("etc/systemd/system/profilerd.service").exists());

        // --purge takes the rest.
        let purged = uninstall(&layout, CONFIG, true)?;
        assert!(!config.exists(), "{purged:#?}");
        assert!(!root.join("etc/profilerd").exists());
        assert!(!root.join("var/lib/profilerd").exists());
        Ok(())
    }

    #[test]
    fn uninstall_removes_an_unchanged_example_configuration() -> Result<()> {
        let staging = Staging::new("unchanged");
        let root = staging.root();
        let layout = Layout::new(Path::new("/usr/local"), Some(&root))?;
        let sources = staging.sources();
        install(&layout, &sources)?;
        let unit = fs::read_to_string(root.join("etc/systemd/system/profilerd.service"))?;
        assert_eq!(
            unit, UNIT,
            "the default prefix installs the unit as written"
        );
        uninstall(&layout, CONFIG, false)?;
        assert!(!root.join("etc/profilerd").exists());
        Ok(())
    }

    #[test]
    fn a_missing_binary_is_named() -> Result<()> {
        let staging = Staging::new("missing");
        let sources = staging.sources();
        fs::remove_file(sources.binaries.join("profilerctl"))?;
        let layout = Layout::new(Path::new("/usr/local"), Some(&staging.root()))?;
        let err = install(&layout, &sources).unwrap_err();
        assert!(format!("{err:#}").contains("profilerctl"), "{err:#}");
        Ok(())
    }

    #[test]
    fn prefixes_must_be_plain_absolute_paths() {
        assert!(Layout::new(Path::new("usr/local"), None).is_err());
        assert!(Layout::new(Path::new("/opt/my prof"), None).is_err());
        assert!(Layout::new(Path::new("/opt/../usr"), None).is_err());
        assert!(Layout::new(Path::new("/opt/prof"), None).is_ok());
    }

    #[test]
    fn the_unit_must_name_the_daemon_once() -> Result<()> {
        let layout = Layout::new(Path::new("/usr"), None)?;
        assert!(templated_unit("[Service]\nExecStart=/bin/true\n", &layout).is_err());
        let unit = templated_unit(UNIT, &layout)?;
        assert!(unit.contains("ExecStart=/usr/bin/profilerd --config"));
        Ok(())
    }
}
