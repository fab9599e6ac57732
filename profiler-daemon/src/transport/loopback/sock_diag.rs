//! The kernel's record of who opened a TCP socket on this machine, asked
//! over `NETLINK_SOCK_DIAG` as `ss -e` asks it: for a loopback connection,
//! the uid and inode of the client's own socket (the end whose local
//! address is the connection's source).
//!
//! Owns the netlink request and the reading of its answer; it must not
//! decide what that uid may see (see `access`).

use std::net::{IpAddr, SocketAddr};

use rustix::net::{
    AddressFamily, RecvFlags, SendFlags, SocketFlags, SocketType, netlink, recv, send, socket_with,
};

/// `SOCK_DIAG_BY_FAMILY`: the request's type, and its answer's.
const SOCK_DIAG_BY_FAMILY: u16 = 20;
/// `NLMSG_ERROR`: the kernel's error (or acknowledgement) message.
const NLMSG_ERROR: u16 = 2;
/// `NLM_F_REQUEST`, without `NLM_F_DUMP`: one socket, looked up exactly.
const NLM_F_REQUEST: u16 = 1;
const IPPROTO_TCP: u8 = 6;
/// `struct nlmsghdr`.
const HEADER_BYTES: usize = 16;
/// `struct inet_diag_req_v2`: family, protocol, ext, pad, states, and the
/// 48 bytes of `struct inet_diag_sockid`.
const REQUEST_BYTES: usize = HEADER_BYTES + 56;
/// `struct inet_diag_msg` (72 bytes): family, state, timer, retrans, the
/// socket id, expires, rqueue, wqueue, then the uid and the inode.
const ANSWER_BYTES: usize = HEADER_BYTES + 72;
const ANSWER_UID: usize = HEADER_BYTES + 64;
const ANSWER_INODE: usize = HEADER_BYTES + 68;
/// `INET_DIAG_NOCOOKIE`: look the socket up by its addresses alone.
const NO_COOKIE: u32 = u32::MAX;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SockDiagError {
    #[error("the kernel could not be asked who opened it (NETLINK_SOCK_DIAG): {0}")]
    Netlink(rustix::io::Errno),
    #[error("the kernel holds no TCP socket from {client} to {server} (the client may have left)")]
    NotFound {
        client: SocketAddr,
        server: SocketAddr,
    },
    #[error(
        "the client's socket from {client} to {server} is held by no process any more (it \
         was closed)"
    )]
    Closed {
        client: SocketAddr,
        server: SocketAddr,
    },
    #[error("the kernel's answer (NETLINK_SOCK_DIAG) could not be read: {0}")]
    Malformed(&'static str),
}

/// Who opened a socket, as the kernel recorded it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SocketOwner {
    pub uid: u32,
    /// The socket's inode (`socket:[INODE]` in `/proc/PID/fd`).
    pub inode: u64,
}

/// The owner of the TCP socket whose local end is `client` and remote end
/// `server`: the client's own socket of a connection to `server`.
pub fn owner_of(client: SocketAddr, server: SocketAddr) -> Result<SocketOwner, SockDiagError> {
    let socket = socket_with(
        AddressFamily::NETLINK,
        SocketType::DGRAM,
        SocketFlags::CLOEXEC,
        Some(netlink::SOCK_DIAG),
    )
    .map_err(SockDiagError::Netlink)?;
    send(&socket, &request(client, server), SendFlags::empty()).map_err(SockDiagError::Netlink)?;
    // The kernel answers a sock_diag request while it is sent: the answer
    // is queued when `send` returns, so nothing waits here.
    let mut answer = [0_u8; 512];
    let (_, received) =
        recv(&socket, &mut answer[..], RecvFlags::DONTWAIT).map_err(SockDiagError::Netlink)?;
    owner_in(&answer[..received.min(answer.len())], client, server)
}

/// The request for the socket from `client` to `server`.
fn request(client: SocketAddr, server: SocketAddr) -> [u8; REQUEST_BYTES] {
    let mut bytes = [0_u8; REQUEST_BYTES];
    bytes[0..4].copy_from_slice(&(REQUEST_BYTES as u32).to_ne_bytes());
    bytes[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    bytes[6..8].copy_from_slice(&NLM_F_REQUEST.to_ne_bytes());
    // Sequence number and port id 0: one request on a socket of its own.
    let body = &mut bytes[HEADER_BYTES..];
    body[0] = family(client);
    body[1] = IPPROTO_TCP;
    // Every state: the connection is established, but ask for any.
    body[4..8].copy_from_slice(&u32::MAX.to_ne_bytes());
    let id = &mut body[8..];
    id[0..2].copy_from_slice(&client.port().to_be_bytes());
    id[2..4].copy_from_slice(&server.port().to_be_bytes());
    id[4..20].copy_from_slice(&address(client.ip()));
    id[20..36].copy_from_slice(&address(server.ip()));
    // Any interface; no cookie.
    id[40..44].copy_from_slice(&NO_COOKIE.to_ne_bytes());
    id[44..48].copy_from_slice(&NO_COOKIE.to_ne_bytes());
    bytes
}

/// `AF_INET` or `AF_INET6`, as the kernel numbers them.
fn family(address: SocketAddr) -> u8 {
    match address {
        SocketAddr::V4(_) => AddressFamily::INET.as_raw() as u8,
        SocketAddr::V6(_) => AddressFamily::INET6.as_raw() as u8,
    }
}

/// An address as `inet_diag_sockid` holds it: network order, an IPv4
/// address in the first four bytes.
fn address(ip: IpAddr) -> [u8; 16] {
    let mut bytes = [0_u8; 16];
    match ip {
        IpAddr::V4(ip) => bytes[..4].copy_from_slice(&ip.octets()),
        IpAddr::V6(ip) => bytes.copy_from_slice(&ip.octets()),
    }
    bytes
}

/// The owner in the kernel's answer to [`request`]`(client, server)`.
fn owner_in(
    answer: &[u8],
    client: SocketAddr,
    server: SocketAddr,
) -> Result<SocketOwner, SockDiagError> {
    let u16_at = |at: usize| u16::from_ne_bytes([answer[at], answer[at + 1]]);
    let u32_at = |at: usize| {
        u32::from_ne_bytes([answer[at], answer[at + 1], answer[at + 2], answer[at + 3]])
    };
    if answer.len() < HEADER_BYTES + 4 {
        return Err(SockDiagError::Malformed("it is shorter than a message"));
    }
    match u16_at(4) {
        NLMSG_ERROR => {
            let errno = -(u32_at(HEADER_BYTES) as i32);
            if errno == rustix::io::Errno::NOENT.raw_os_error() {
                Err(SockDiagError::NotFound { client, server })
            } else {
                Err(SockDiagError::Netlink(
                    rustix::io::Errno::from_raw_os_error(errno),
                ))
            }
        }
        SOCK_DIAG_BY_FAMILY if answer.len() >= ANSWER_BYTES => {
            let id = HEADER_BYTES + 4;
            let ports = (
                u16::from_be_bytes([answer[id], answer[id + 1]]),
                u16::from_be_bytes([answer[id + 2], answer[id + 3]]),
            );
            if answer[HEADER_BYTES] != family(client) || ports != (client.port(), server.port()) {
                return Err(SockDiagError::Malformed("it names another socket"));
            }
            // A socket closed by its process (orphaned, or in TIME_WAIT)
            // has no inode, and the kernel gives it uid 0: it is nobody's.
            let inode = u64::from(u32_at(ANSWER_INODE));
            if inode == 0 {
                return Err(SockDiagError::Closed { client, server });
            }
            Ok(SocketOwner {
                uid: u32_at(ANSWER_UID),
                inode,
            })
        }
        SOCK_DIAG_BY_FAMILY => Err(SockDiagError::Malformed("the socket's record is cut short")),
        _ => Err(SockDiagError::Malformed("it is of an unknown type")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLIENT: &str = "127.0.0.1:45678";
    const SERVER: &str = "127.0.0.1:6060";

    fn addresses() -> (SocketAddr, SocketAddr) {
        (CLIENT.parse().unwrap(), SERVER.parse().unwrap())
    }

    #[test]
    fn the_request_names_the_clients_socket_by_its_addresses() {
        let (client, server) = addresses();
        let bytes = request(client, server);
        assert_eq!(u32::from_ne_bytes(bytes[0..4].try_into().unwrap()), 72);
        assert_eq!(u16::from_ne_bytes([bytes[4], bytes[5]]), 20);
        assert_eq!(bytes[16], libc::AF_INET as u8);
        assert_eq!(bytes[17], libc::IPPROTO_TCP as u8);
        // Source port and address first: the client's end.
        assert_eq!(&bytes[24..26], &45678_u16.to_be_bytes());
        assert_eq!(&bytes[26..28], &6060_u16.to_be_bytes());
        assert_eq!(&bytes[28..32], &[127, 0, 0, 1]);
        assert_eq!(&bytes[44..48], &[127, 0, 0, 1]);
        assert_eq!(&bytes[64..72], &[0xff; 8]);
        let v6 = request(
            "[::1]:45678".parse().unwrap(),
            "[::1]:6060".parse().unwrap(),
        );
        assert_eq!(v6[16], libc::AF_INET6 as u8);
        assert_eq!(v6[43], 1);
    }

    /// An answer as the kernel writes it for `uid` and `inode`.
    fn answer(uid: u32, inode: u32) -> Vec<u8> {
        let (client, server) = addresses();
        let mut bytes = vec![0_u8; ANSWER_BYTES];
        bytes[0..4].copy_from_slice(&(ANSWER_BYTES as u32).to_ne_bytes());
        bytes[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
        bytes[16] = libc::AF_INET as u8;
        bytes[20..22].copy_from_slice(&client.port().to_be_bytes());
        bytes[22..24].copy_from_slice(&server.port().to_be_bytes());
        bytes[ANSWER_UID..ANSWER_UID + 4].copy_from_slice(&uid.to_ne_bytes());
        bytes[ANSWER_INODE..ANSWER_INODE + 4].copy_from_slice(&inode.to_ne_bytes());
        bytes
    }

    #[test]
    fn the_answer_gives_the_owner_or_says_why_not() {
        let (client, server) = addresses();
        assert_eq!(
            owner_in(&answer(65534, 4242), client, server),
            Ok(SocketOwner {
                uid: 65534,
                inode: 4242
            })
        );
        assert_eq!(
            owner_in(&answer(0, 0), client, server),
            Err(SockDiagError::Closed { client, server })
        );
        let mut other = answer(0, 1);
        other[20..22].copy_from_slice(&1_u16.to_be_bytes());
        assert!(matches!(
            owner_in(&other, client, server),
            Err(SockDiagError::Malformed(_))
        ));
        assert!(matches!(
            owner_in(&answer(0, 1)[..40], client, server),
            Err(SockDiagError::Malformed(_))
        ));
        let mut error = vec![0_u8; 36];
        error[4..6].copy_from_slice(&NLMSG_ERROR.to_ne_bytes());
        error[16..20].copy_from_slice(&(-libc::ENOENT).to_ne_bytes());
        assert_eq!(
            owner_in(&error, client, server),
            Err(SockDiagError::NotFound { client, server })
        );
    }

    #[test]
    fn the_kernel_names_the_owner_of_a_loopback_connection() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let server = listener.local_addr().unwrap();
        let connection = std::net::TcpStream::connect(server).unwrap();
        let client = connection.local_addr().unwrap();
        let owner = owner_of(client, server).unwrap();
        assert_eq!(owner.uid, rustix::process::geteuid().as_raw());
        let fd = std::os::fd::AsRawFd::as_raw_fd(&connection);
        let link = std::fs::read_link(format!("/proc/self/fd/{fd}")).unwrap();
        assert_eq!(link.to_string_lossy(), format!("socket:[{}]", owner.inode));
        drop(connection);
        assert!(matches!(
            owner_of(client, server),
            Err(SockDiagError::Closed { .. } | SockDiagError::NotFound { .. })
        ));
        let gone: SocketAddr = "127.0.0.1:1".parse().unwrap();
        assert!(matches!(
            owner_of(gone, server),
            Err(SockDiagError::NotFound { .. })
        ));
    }
}
