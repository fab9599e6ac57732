//! Who is at the other end of a plaintext loopback TCP connection (the
//! HTTP listener's with `http_plaintext_loopback`, the gRPC listener's
//! with `tcp_plaintext_loopback`): the uid the kernel recorded for the
//! client's socket (`sock_diag`), and the process that holds that socket,
//! whose group ids count as SO_PEERCRED's do on the Unix socket. The
//! listeners then apply the Unix socket's rules to them.
//!
//! Owns finding those credentials; it must not decide what they may see
//! (see `access`).

use std::net::SocketAddr;

use procfs::process::FDTarget;

mod sock_diag;

use self::sock_diag::SocketOwner;
use crate::service::access::Credentials;

/// The credentials of the client connected from `client` to `server` (a
/// loopback address of this machine), or why they cannot be known.
pub fn credentials(client: SocketAddr, server: SocketAddr) -> Result<Credentials, String> {
    let owner = sock_diag::owner_of(client, server).map_err(|err| {
        format!(
            "forbidden: this plaintext listener answers each local user as the Unix socket \
             does, by who opened the connection, and that could not be found: {err}"
        )
    })?;
    if owner.uid == 0 {
        // Root is root whatever its groups.
        return Ok(Credentials {
            uid: 0,
            gid: 0,
            pid: None,
        });
    }
    holder(owner).ok_or_else(|| {
        format!(
            "forbidden: the connection was opened by user {}, but no process of that user \
             holds it any more, so its groups cannot be known; connect from the process that \
             opened it (or use the Unix socket, e.g. profilerctl)",
            owner.uid
        )
    })
}

/// The credentials of a process of the socket's owner that holds it: its
/// effective ids, as SO_PEERCRED gives them.
fn holder(owner: SocketOwner) -> Option<Credentials> {
    // A process's /proc directory belongs to its effective uid (root's when
    // it is not dumpable): only the owner's own processes are searched.
    procfs::process::all_processes()
        .ok()?
        .flatten()
        .filter(|process| process.uid().is_ok_and(|uid| uid == owner.uid))
        .find(|process| {
            process.fd().is_ok_and(|mut fds| {
                fds.any(|fd| {
                    fd.is_ok_and(
                        |fd| matches!(fd.target, FDTarget::Socket(inode) if inode == owner.inode),
                    )
                })
            })
        })
        .and_then(|process| {
            let status = process.status().ok()?;
            (status.euid == owner.uid).then_some(Credentials {
                uid: owner.uid,
                gid: status.egid,
                pid: u32::try_from(process.pid).ok(),
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_of_this_process_is_its_own() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let server = listener.local_addr().unwrap();
        let connection = std::net::TcpStream::connect(server).unwrap();
        let client = connection.local_addr().unwrap();
        let credentials = credentials(client, server).unwrap();
        assert_eq!(credentials.uid, rustix::process::geteuid().as_raw());
        if credentials.uid != 0 {
            assert_eq!(credentials.pid, Some(std::process::id()));
            assert_eq!(credentials.gid, rustix::process::getegid().as_raw());
        }
        drop(connection);
        let refused = super::credentials(client, server).unwrap_err();
        assert!(
            refused.contains("held by no process") || refused.contains("no TCP socket"),
            "{refused}"
        );
    }
}
