//! Which `Host` a request to the HTTP listener may name: the address the
//! connection came in on (on a loopback address also `localhost`,
//! `127.0.0.1` and `[::1]`), with the listener's port, or a name of
//! `http_allowed_hosts`. A page whose own name a DNS record points at the
//! listener (DNS rebinding) names its own host, and is refused.
//!
//! Owns host names, their parsing and their matching; it must not answer
//! requests (see `guard`).

use std::net::{IpAddr, Ipv6Addr, SocketAddr};

/// A name of `http_allowed_hosts`: a host, with any port or with one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AllowedHost {
    /// Lower case; an IPv6 address in brackets, as `Host` writes it.
    name: String,
    port: Option<u16>,
}

impl AllowedHost {
    /// `host` or `host:port`, e.g. `profiler.example.com`,
    /// `10.1.2.3:6060`, `[fd00::1]:6060`; the error says what is wrong.
    pub fn parse(text: &str) -> Result<Self, String> {
        let (name, port) = split(text).ok_or_else(|| {
            format!(
                "{} is not a host name or host:port (e.g. profiler.example.com or \
                 10.1.2.3:6060; no scheme, path or wildcard)",
                crate::quote(text)
            )
        })?;
        Ok(Self { name, port })
    }
}

/// The Host names a connection that came in on `local` answers without
/// `http_allowed_hosts`, each with its port, for messages.
pub fn own_hosts(local: SocketAddr) -> Vec<String> {
    own_names(local)
        .into_iter()
        .map(|name| format!("{name}:{}", local.port()))
        .collect()
}

/// The host names of the address `local` (port aside).
fn own_names(local: SocketAddr) -> Vec<String> {
    let ip = local.ip().to_canonical();
    let mut names = vec![ip_name(ip)];
    if ip.is_loopback() {
        for alias in ["localhost", "127.0.0.1", "[::1]"] {
            if !names.iter().any(|name| name == alias) {
                names.push(alias.to_owned());
            }
        }
    }
    names
}

/// An address as `Host` writes it.
fn ip_name(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(ip) => ip.to_string(),
        IpAddr::V6(ip) => format!("[{ip}]"),
    }
}

/// Whether a request naming `host` may be answered on a connection that
/// came in on `local` (over TLS: `tls`, whose default port is 443).
pub fn admits(host: &str, local: SocketAddr, tls: bool, allowed: &[AllowedHost]) -> bool {
    let Some((name, port)) = split(host) else {
        return false;
    };
    let port = port.unwrap_or(if tls { 443 } else { 80 });
    (port == local.port() && own_names(local).contains(&name))
        || allowed
            .iter()
            .any(|allowed| allowed.name == name && allowed.port.is_none_or(|only| only == port))
}

/// A `Host` value's name (lower case, an IPv6 address in brackets and in
/// its usual form) and port, if it is one.
fn split(host: &str) -> Option<(String, Option<u16>)> {
    let (name, port) = if let Some(rest) = host.strip_prefix('[') {
        let (address, after) = rest.split_once(']')?;
        let address: Ipv6Addr = address.parse().ok()?;
        let port = match after {
            "" => None,
            _ => Some(after.strip_prefix(':')?),
        };
        (format!("[{address}]"), port)
    } else {
        let (name, port) = match host.split_once(':') {
            Some((name, port)) => (name, Some(port)),
            None => (host, None),
        };
        let valid = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_');
        if name.is_empty() || name.len() > 253 || !name.chars().all(valid) {
            return None;
        }
        (name.to_ascii_lowercase(), port)
    };
    let port = match port {
        None => None,
        Some(port) if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) => {
            Some(port.parse().ok()?)
        }
        Some(_) => return None,
    };
    Some((name, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn local(address: &str) -> SocketAddr {
        address.parse().unwrap()
    }

    #[test]
    fn a_loopback_listener_answers_its_address_and_localhost_with_its_port() {
        let at = local("127.0.0.1:6060");
        for host in [
            "127.0.0.1:6060",
            "localhost:6060",
            "LocalHost:6060",
            "[::1]:6060",
            "[0:0:0:0:0:0:0:1]:6060",
        ] {
            assert!(admits(host, at, false, &[]), "{host}");
        }
        for host in [
            "attacker.example:6060",
            "127.0.0.1:6061",
            "localhost",
            "127.0.0.1",
            "",
            "localhost:6060/",
            "localhost:6060:1",
            "localhost:",
            "[::1",
            "[::2]:6060",
            "localhost.attacker.example:6060",
        ] {
            assert!(!admits(host, at, false, &[]), "{host}");
        }
        // The scheme's default port is implied.
        assert!(admits("localhost", local("127.0.0.1:80"), false, &[]));
        assert!(admits("localhost", local("127.0.0.1:443"), true, &[]));
        assert!(!admits("localhost", local("127.0.0.1:443"), false, &[]));
        assert_eq!(
            own_hosts(at),
            ["127.0.0.1:6060", "localhost:6060", "[::1]:6060"]
        );
    }

    #[test]
    fn another_address_answers_only_itself_and_the_allowed_names() {
        let at = local("10.1.2.3:6060");
        assert!(admits("10.1.2.3:6060", at, true, &[]));
        assert!(!admits("localhost:6060", at, true, &[]));
        let allowed = [
            AllowedHost::parse("Profiler.Example.com").unwrap(),
            AllowedHost::parse("proxy.example:8443").unwrap(),
            AllowedHost::parse("[fd00::1]:6060").unwrap(),
        ];
        assert!(admits("profiler.example.com", at, true, &allowed));
        assert!(admits("profiler.example.com:9999", at, true, &allowed));
        assert!(admits("proxy.example:8443", at, true, &allowed));
        assert!(!admits("proxy.example", at, true, &allowed));
        assert!(admits("[fd00::1]:6060", at, true, &allowed));
        assert!(!admits("other.example.com", at, true, &allowed));
        let v6 = local("[::1]:6060");
        assert!(admits("[::1]:6060", v6, false, &[]));
        assert!(admits("127.0.0.1:6060", v6, false, &[]));
    }

    #[test]
    fn allowed_hosts_are_names_or_names_with_ports() {
        for bad in [
            "",
            "http://example.com",
            "example.com/path",
            "*.example.com",
            "example.com:port",
            "example.com:70000",
            "[not-v6]:1",
            "a b",
        ] {
            let message = AllowedHost::parse(bad).unwrap_err();
            assert!(message.contains("is not a host name"), "{bad}: {message}");
        }
        let long = AllowedHost::parse(&"x/".repeat(5000)).unwrap_err();
        assert!(long.len() < 300, "{long}");
    }
}
