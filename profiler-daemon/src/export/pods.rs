//! Kubernetes pods' names and namespaces by uid, read from the kubelet's
//! pod log directory (`/var/log/pods/<namespace>_<name>_<uid>/`, one per pod
//! on the node), for service names (`push_service_name = ["pod"]`): a
//! process's cgroup path holds its pod's uid only.
//!
//! Owns the names it read; it must not block on anything but one bounded
//! directory listing, made again only when a uid is not known and the last
//! listing is older than [`RELIST_AFTER`]. Where the directory is not there
//! (no kubelet, or the DaemonSet does not mount it), pods keep their uid.

use std::{
    collections::HashMap,
    fs,
    path::PathBuf,
    time::{Duration, Instant},
};

/// Where the kubelet writes its pods' logs, one directory per pod.
pub const POD_LOG_DIR: &str = "/var/log/pods";

/// A listing at most this often, however many unknown uids are asked.
pub const RELIST_AFTER: Duration = Duration::from_secs(10);

/// Entries of the directory read at most (a node runs at most a few
/// hundred pods; the kubelet's default is 110).
pub const MAX_PODS: usize = 4096;

/// Pods' `namespace/name` by uid.
#[derive(Debug)]
pub struct PodNames {
    dir: PathBuf,
    names: HashMap<String, String>,
    listed: Option<Instant>,
}

impl Default for PodNames {
    fn default() -> Self {
        Self::new(POD_LOG_DIR)
    }
}

impl PodNames {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            names: HashMap::new(),
            listed: None,
        }
    }

    /// `namespace/name` of the pod with `uid`, if the directory names it.
    pub fn name(&mut self, uid: &str) -> Option<String> {
        if let Some(name) = self.names.get(uid) {
            return Some(name.clone());
        }
        if self
            .listed
            .is_none_or(|listed| listed.elapsed() >= RELIST_AFTER)
        {
            self.list();
        }
        self.names.get(uid).cloned()
    }

    /// Reads the directory again: pods gone are forgotten.
    fn list(&mut self) {
        self.listed = Some(Instant::now());
        self.names.clear();
        let Ok(entries) = fs::read_dir(&self.dir) else {
            return;
        };
        for entry in entries.flatten().take(MAX_PODS) {
            if let Some((uid, name)) = entry.file_name().to_str().and_then(parse_entry) {
                self.names.insert(uid, name);
            }
        }
    }
}

/// `(uid, "namespace/name")` from `<namespace>_<name>_<uid>`: names and
/// namespaces are DNS labels and subdomains, without `_`.
fn parse_entry(entry: &str) -> Option<(String, String)> {
    let mut parts = entry.split('_');
    let (namespace, name, uid) = (parts.next()?, parts.next()?, parts.next()?);
    let dns = |part: &str| {
        !part.is_empty()
            && part.len() <= 253
            && part.bytes().all(|byte| {
                byte.is_ascii_lowercase() || byte.is_ascii_digit() || b"-.".contains(&byte)
            })
    };
    let uid_well_formed = uid.len() == 36
        && uid
            .bytes()
            .all(|byte| byte == b'-' || byte.is_ascii_hexdigit());
    (parts.next().is_none() && dns(namespace) && dns(name) && uid_well_formed)
        .then(|| (uid.to_owned(), format!("{namespace}/{name}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    const UID: &str = "0c5e6a3f-1b2c-4d5e-8f90-a1b2c3d4e5f6";

    #[test]
    fn pods_are_named_from_their_log_directories() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir(dir.path().join(format!("shop_checkout-7d9f8-x2x4q_{UID}"))).unwrap();
        // Not a pod's directory: ignored.
        fs::create_dir(dir.path().join("lost+found")).unwrap();
        fs::create_dir(dir.path().join(format!("Bad_Name_{UID}"))).unwrap();
        let mut pods = PodNames::new(dir.path());
        assert_eq!(pods.name(UID).as_deref(), Some("shop/checkout-7d9f8-x2x4q"));
        assert_eq!(pods.name("11111111-2222-3333-4444-555555555555"), None);

        // A pod started since is found once the last listing is old enough.
        let later = "11111111-2222-3333-4444-555555555555";
        fs::create_dir(dir.path().join(format!("kube-system_coredns-1_{later}"))).unwrap();
        assert_eq!(pods.name(later), None, "listed again before RELIST_AFTER");
        pods.listed = Some(Instant::now() - RELIST_AFTER);
        assert_eq!(pods.name(later).as_deref(), Some("kube-system/coredns-1"));
    }

    #[test]
    fn without_the_directory_pods_have_no_name() {
        let mut pods = PodNames::new("/nonexistent/pods");
        assert_eq!(pods.name(UID), None);
    }

    #[test]
    fn entries_are_parsed_strictly() {
        assert_eq!(
            parse_entry(&format!("default_web-0_{UID}")),
            Some((UID.to_owned(), "default/web-0".to_owned()))
        );
        assert_eq!(parse_entry(&format!("default_web_0_{UID}")), None);
        assert_eq!(parse_entry("default_web-0_not-a-uid"), None);
        assert_eq!(parse_entry(&format!("_web-0_{UID}")), None);
    }
}
