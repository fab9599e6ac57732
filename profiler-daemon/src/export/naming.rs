//! Which service a process's samples are pushed as (`service_name`): the
//! first of the configured sources that names it — the systemd unit of its
//! cgroup, its container's id, its command name — else the default.
//!
//! Owns the naming rules; it must not read procfs (the cgroup path and the
//! command come with the samples) nor any file (a pod's name comes from the
//! caller's lookup, `pods`).

use serde::{Deserialize, Serialize};

/// Where a service name may come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NameSource {
    /// The systemd unit whose cgroup holds the process, without
    /// `.service` (`/system.slice/nginx.service` → `nginx`).
    Unit,
    /// The container's id (first 12 hex digits) from its cgroup
    /// (`docker-ID.scope`, `cri-containerd-ID.scope`, `crio-ID.scope`,
    /// `libpod-ID.scope`, `/docker/ID`).
    Container,
    /// The Kubernetes pod whose cgroup holds the process (`…-pod<UID>.slice`
    /// under the systemd cgroup driver, `/kubepods/…/pod<UID>/` under
    /// cgroupfs): `pod/<namespace>/<name>` where the kubelet's pod log
    /// directory names its uid (see `export::pods`), else `pod/<uid>`. One
    /// name for all of a pod's containers, across their restarts.
    Pod,
    /// The process's command name.
    Comm,
}

/// The default order.
pub const DEFAULT_SOURCES: &[NameSource] =
    &[NameSource::Unit, NameSource::Container, NameSource::Comm];

/// A pod's `namespace/name` by its uid, where it is known.
pub type PodLookup<'a> = &'a dyn Fn(&str) -> Option<String>;

/// The service name of a process in `cgroup` running `comm`; `pods` names
/// pods by uid.
pub fn service_name(
    sources: &[NameSource],
    default: &str,
    cgroup: &str,
    comm: &str,
    pods: PodLookup<'_>,
) -> String {
    sources
        .iter()
        .find_map(|source| match source {
            NameSource::Unit => unit(cgroup),
            NameSource::Container => container(cgroup).map(|id| format!("container/{id}")),
            NameSource::Pod => pod_uid(cgroup).map(|uid| match pods(&uid) {
                Some(name) => format!("pod/{name}"),
                None => format!("pod/{uid}"),
            }),
            NameSource::Comm => (!comm.is_empty()).then(|| comm.to_owned()),
        })
        .unwrap_or_else(|| default.to_owned())
}

/// The innermost `.service` unit of a cgroup path (user sessions'
/// `user@UID.service` and the like are not services of their own: the
/// innermost unit wins).
fn unit(cgroup: &str) -> Option<String> {
    cgroup
        .rsplit('/')
        .find_map(|part| part.strip_suffix(".service"))
        .filter(|name| !name.is_empty() && !name.starts_with("user@"))
        .map(str::to_owned)
}

/// The uid of the Kubernetes pod whose cgroup holds `cgroup`, with
/// dashes (the systemd driver writes them as underscores).
fn pod_uid(cgroup: &str) -> Option<String> {
    cgroup.split('/').find_map(|part| {
        let part = part.strip_suffix(".slice").unwrap_or(part);
        let (_, uid) = part.rsplit_once("pod")?;
        let uid = uid.replace('_', "-");
        let well_formed = uid.len() == 36
            && uid
                .bytes()
                .all(|byte| byte == b'-' || byte.is_ascii_hexdigit())
            && uid.bytes().filter(|&byte| byte == b'-').count() == 4;
        well_formed.then_some(uid)
    })
}

/// The first 64-hex-digit id in a cgroup path, cut to 12 digits.
fn container(cgroup: &str) -> Option<String> {
    container_id(cgroup).map(|id| id[..12].to_owned())
}

/// The container id (64 hex digits) in a cgroup path, if any.
pub fn container_id(cgroup: &str) -> Option<&str> {
    cgroup.rsplit('/').find_map(|part| {
        let part = part.strip_suffix(".scope").unwrap_or(part);
        let id = part.rsplit(['-', ':']).next()?;
        (id.len() == 64 && id.bytes().all(|byte| byte.is_ascii_hexdigit())).then_some(id)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "4f3a9c1d2b7e8f60a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718";

    fn name(cgroup: &str, comm: &str) -> String {
        service_name(DEFAULT_SOURCES, "other", cgroup, comm, &|_| None)
    }

    #[test]
    fn units_then_containers_then_commands_name_services() {
        assert_eq!(name("/system.slice/nginx.service", "nginx"), "nginx");
        assert_eq!(
            name(&format!("/system.slice/docker-{ID}.scope"), "redis-server"),
            "container/4f3a9c1d2b7e"
        );
        assert_eq!(
            name(
                &format!("/kubepods.slice/kubepods-pod1.slice/cri-containerd-{ID}.scope"),
                "x"
            ),
            "container/4f3a9c1d2b7e"
        );
        assert_eq!(
            name(&format!("/docker/{ID}"), "x"),
            "container/4f3a9c1d2b7e"
        );
        assert_eq!(
            name(
                "/user.slice/user-1000.slice/user@1000.service/app.slice/app.scope",
                "vim"
            ),
            "vim"
        );
        assert_eq!(name("/", "kworker/0:1"), "kworker/0:1");
        let pod = |cgroup: &str| service_name(&[NameSource::Pod], "other", cgroup, "x", &|_| None);
        assert_eq!(
            pod(&format!(
                "/kubepods.slice/kubepods-burstable.slice/\
                 kubepods-burstable-pod0c5e6a3f_1b2c_4d5e_8f90_a1b2c3d4e5f6.slice/\
                 cri-containerd-{ID}.scope"
            )),
            "pod/0c5e6a3f-1b2c-4d5e-8f90-a1b2c3d4e5f6"
        );
        assert_eq!(
            pod(&format!(
                "/kubepods/besteffort/pod0c5e6a3f-1b2c-4d5e-8f90-a1b2c3d4e5f6/{ID}"
            )),
            "pod/0c5e6a3f-1b2c-4d5e-8f90-a1b2c3d4e5f6"
        );
        assert_eq!(pod("/system.slice/podman.service"), "other");
        // Named where the kubelet's directory names the uid.
        let known = |uid: &str| {
            (uid == "0c5e6a3f-1b2c-4d5e-8f90-a1b2c3d4e5f6").then(|| "shop/checkout-0".to_owned())
        };
        assert_eq!(
            service_name(
                &[NameSource::Pod],
                "other",
                &format!("/kubepods/besteffort/pod0c5e6a3f-1b2c-4d5e-8f90-a1b2c3d4e5f6/{ID}"),
                "x",
                &known
            ),
            "pod/shop/checkout-0"
        );
        assert_eq!(name("/", ""), "other");
        assert_eq!(
            service_name(&[NameSource::Unit], "other", "/user.slice", "bash", &|_| {
                None
            }),
            "other"
        );
    }
}
