//! Which origins a plugin may call over HTTP: the `capabilities.http` list of its policy,
//! and the address rules that keep a granted name from reaching the host's own network.
//!
//! A grant is `scheme://host[:port]`: `https://api.example.com`, `http://127.0.0.1:9000`,
//! `https://*.example.org` (any name under `example.org`, not the name itself), or an IPv6
//! literal in brackets. Without a port it means the scheme's default (80, 443). Nothing is
//! granted by default.
//!
//! A name is resolved by the host, and a name that resolves to an address that is not public
//! (loopback, private, link-local, unspecified, shared, documentation, multicast; IPv4-mapped
//! IPv6 is unwrapped first) is refused unless that address itself is granted, for the same
//! scheme and port. So a public name whose DNS answer points at 127.0.0.1 or at a cloud
//! metadata address (169.254.169.254) reaches nothing (DNS rebinding).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// `http` or `https`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Scheme {
    Http,
    Https,
}

impl Scheme {
    pub(crate) fn parse(s: &str) -> Option<Scheme> {
        match s.to_ascii_lowercase().as_str() {
            "http" => Some(Scheme::Http),
            "https" => Some(Scheme::Https),
            _ => None,
        }
    }

    pub(crate) fn default_port(self) -> u16 {
        match self {
            Scheme::Http => 80,
            Scheme::Https => 443,
        }
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }
}

/// The host part of a grant.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Host {
    /// A DNS name, lowercased.
    Name(String),
    /// `*.example.org`, kept as `.example.org`: names that end with it (and are longer).
    Suffix(String),
    Ip(IpAddr),
}

/// One entry of `capabilities.http`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpGrant {
    scheme: Scheme,
    host: Host,
    port: u16,
    /// As written, for messages and `ankh check`.
    text: String,
}

impl std::fmt::Display for HttpGrant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

impl HttpGrant {
    /// Parses `scheme://host[:port]` (a trailing `/` is allowed, nothing else after it).
    pub(crate) fn parse(text: &str) -> Result<HttpGrant, String> {
        let bad = |why: &str| {
            format!(
                "{text:?} is not an HTTP grant ({why}): use \"https://host[:port]\" or \"https://*.domain\""
            )
        };
        let (scheme, rest) = text.split_once("://").ok_or_else(|| bad("no scheme"))?;
        let scheme =
            Scheme::parse(scheme).ok_or_else(|| bad("the scheme must be http or https"))?;
        let authority = rest.strip_suffix('/').unwrap_or(rest);
        if authority.is_empty() {
            return Err(bad("no host"));
        }
        if authority.contains(['/', '?', '#', '@']) {
            return Err(bad("a grant names an origin: no path, query or user"));
        }
        let (host, port) = split_host_port(authority).ok_or_else(|| bad("a bad port"))?;
        let port = port.unwrap_or(scheme.default_port());
        let host = if let Some(v6) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
            Host::Ip(IpAddr::V6(
                v6.parse().map_err(|_| bad("a bad IPv6 address"))?,
            ))
        } else if let Ok(v4) = host.parse::<Ipv4Addr>() {
            Host::Ip(IpAddr::V4(v4))
        } else if let Some(domain) = host.strip_prefix("*.") {
            if !valid_name(domain) {
                return Err(bad("a bad domain after *."));
            }
            Host::Suffix(format!(".{}", domain.to_ascii_lowercase()))
        } else if valid_name(host) {
            Host::Name(host.to_ascii_lowercase())
        } else {
            return Err(bad("a bad host name"));
        };
        Ok(HttpGrant {
            scheme,
            host,
            port,
            text: text.to_owned(),
        })
    }

    /// Whether a request to `host` (a name or an IP literal, as in a URL) matches.
    fn matches(&self, scheme: Scheme, host: &str, port: u16) -> bool {
        if scheme != self.scheme || port != self.port {
            return false;
        }
        match (&self.host, literal(host)) {
            (Host::Ip(granted), Some(ip)) => *granted == ip,
            (Host::Name(name), None) => host.eq_ignore_ascii_case(name),
            (Host::Suffix(suffix), None) => {
                host.len() > suffix.len()
                    && host[host.len() - suffix.len()..].eq_ignore_ascii_case(suffix)
            }
            _ => false,
        }
    }
}

/// `host` and an optional port, or `None` for a port that is not a number.
fn split_host_port(authority: &str) -> Option<(&str, Option<u16>)> {
    let (host, port) = if authority.starts_with('[') {
        match authority.find(']') {
            Some(end) => {
                let (host, rest) = authority.split_at(end + 1);
                (host, rest.strip_prefix(':'))
            }
            None => return Some((authority, None)),
        }
    } else {
        match authority.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    match port {
        None => Some((host, None)),
        Some(p) => p.parse().ok().filter(|p| *p != 0).map(|p| (host, Some(p))),
    }
}

/// A host name of letters, digits and hyphens in dot-separated labels.
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

/// The IP address `host` spells, if it is a literal (IPv6 in brackets or not).
pub(crate) fn literal(host: &str) -> Option<IpAddr> {
    let bare = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    bare.parse().ok()
}

/// A plugin's grants.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HttpGrants(Vec<HttpGrant>);

impl HttpGrants {
    pub(crate) fn new(grants: Vec<HttpGrant>) -> Self {
        HttpGrants(grants)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &HttpGrant> {
        self.0.iter()
    }

    /// The grant a request to `scheme://host:port` falls under, if any.
    pub(crate) fn allows(&self, scheme: Scheme, host: &str, port: u16) -> Option<&HttpGrant> {
        self.0.iter().find(|g| g.matches(scheme, host, port))
    }

    /// Whether `ip`, reached for `scheme` on `port`, may be connected to: a public address,
    /// or one granted as a literal.
    pub(crate) fn may_connect(&self, scheme: Scheme, ip: IpAddr, port: u16) -> bool {
        let ip = unmapped(ip);
        is_public(ip)
            || self
                .0
                .iter()
                .any(|g| g.scheme == scheme && g.port == port && g.host == Host::Ip(ip))
    }
}

/// An IPv4-mapped IPv6 address (`::ffff:a.b.c.d`) as the IPv4 address it maps.
fn unmapped(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// Whether `ip` is an address on the public internet: not loopback, private, link-local,
/// unspecified, shared (CGNAT), benchmarking, documentation, reserved, multicast or broadcast.
pub(crate) fn is_public(ip: IpAddr) -> bool {
    match unmapped(ip) {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => is_public_v6(v6),
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    !(ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_broadcast()
        || ip.is_documentation()
        || ip.is_multicast()
        || a == 0
        // Shared address space (RFC 6598), benchmarking (RFC 2544), IETF protocol
        // assignments (RFC 6890), reserved (240/4).
        || (a == 100 && (64..128).contains(&b))
        || (a == 198 && (b == 18 || b == 19))
        || (a == 192 && b == 0 && c == 0)
        || a >= 240)
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    let s = ip.segments();
    // 6to4 (2002::/16) carries an IPv4 address in its next 32 bits: it is public only if that
    // address is.
    if s[0] == 0x2002 {
        let [a, b] = s[1].to_be_bytes();
        let [c, d] = s[2].to_be_bytes();
        return is_public_v4(Ipv4Addr::new(a, b, c, d));
    }
    !(ip.is_unspecified()
        // IPv4-compatible addresses (::a.b.c.d, ::/96, deprecated by RFC 4291).
        || s[..6] == [0; 6]
        || ip.is_loopback()
        || ip.is_multicast()
        // Unique local (fc00::/7), link-local (fe80::/10), site-local (fec0::/10, deprecated),
        // documentation (2001:db8::/32), NAT64 (64:ff9b::/96 and the local-use
        // 64:ff9b:1::/48 within 64:ff9b::/32) and discard prefixes.
        || (s[0] & 0xfe00) == 0xfc00
        || (s[0] & 0xffc0) == 0xfe80
        || (s[0] & 0xffc0) == 0xfec0
        || (s[0] == 0x2001 && s[1] == 0x0db8)
        || (s[0] == 0x0064 && s[1] == 0xff9b)
        || (s[0] == 0x0100 && s[1..4] == [0, 0, 0]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grants(list: &[&str]) -> HttpGrants {
        HttpGrants::new(list.iter().map(|g| HttpGrant::parse(g).unwrap()).collect())
    }

    #[test]
    fn grants_parse_and_match_as_written() {
        let g = grants(&[
            "https://api.example.com",
            "http://127.0.0.1:9000",
            "https://*.example.org/",
            "http://[::1]:8080",
        ]);
        assert!(g.allows(Scheme::Https, "api.example.com", 443).is_some());
        assert!(g.allows(Scheme::Https, "API.Example.com", 443).is_some());
        assert!(
            g.allows(Scheme::Http, "api.example.com", 80).is_none(),
            "scheme"
        );
        assert!(
            g.allows(Scheme::Https, "api.example.com", 8443).is_none(),
            "port"
        );
        assert!(
            g.allows(Scheme::Https, "evil-api.example.com", 443)
                .is_none()
        );
        assert!(g.allows(Scheme::Http, "127.0.0.1", 9000).is_some());
        assert!(g.allows(Scheme::Http, "127.0.0.1", 9001).is_none());
        assert!(g.allows(Scheme::Https, "a.b.example.org", 443).is_some());
        assert!(
            g.allows(Scheme::Https, "example.org", 443).is_none(),
            "not the apex"
        );
        assert!(g.allows(Scheme::Https, "badexample.org", 443).is_none());
        assert!(g.allows(Scheme::Http, "[::1]", 8080).is_some());
        assert!(g.allows(Scheme::Http, "::1", 8080).is_some());
    }

    #[test]
    fn bad_grants_are_refused_with_a_reason() {
        for bad in [
            "api.example.com",
            "ftp://x.org",
            "https://",
            "https://x.org/path",
            "https://user@x.org",
            "https://x.org:0",
            "https://x.org:99999",
            "https://*.",
            "https://x_y.org",
            "https://[::1",
        ] {
            let e = HttpGrant::parse(bad).unwrap_err();
            assert!(e.contains("is not an HTTP grant"), "{bad}: {e}");
        }
    }

    #[test]
    fn only_public_addresses_or_literal_grants_are_reached() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "0.0.0.0",
            "100.64.0.1",
            "255.255.255.255",
            "::1",
            "::",
            "fe80::1",
            "fd00::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
        ] {
            assert!(!is_public(ip.parse().unwrap()), "{ip}");
        }
        for ip in [
            "93.184.216.34",
            "1.1.1.1",
            "2606:4700::1111",
            "::ffff:1.1.1.1",
        ] {
            assert!(is_public(ip.parse().unwrap()), "{ip}");
        }
        let g = grants(&["http://localhost:9000", "http://127.0.0.1:9000"]);
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        assert!(g.may_connect(Scheme::Http, lo, 9000));
        assert!(g.may_connect(Scheme::Http, "::ffff:127.0.0.1".parse().unwrap(), 9000));
        assert!(!g.may_connect(Scheme::Http, lo, 9001));
        assert!(!g.may_connect(Scheme::Https, lo, 9000));
        let g = grants(&["http://localhost:9000"]);
        assert!(
            !g.may_connect(Scheme::Http, lo, 9000),
            "a name is no literal grant"
        );
    }

    // See: issue 32, finding 6: three IPv6 forms of private IPv4 addresses passed as public.
    #[test]
    fn ipv6_addresses_that_carry_a_private_ipv4_are_not_public() {
        for text in [
            "::127.0.0.1",
            "::10.0.0.1",
            "::8.8.8.8",
            "2002:7f00:1::",
            "2002:a00:1::1",
            "2002:c0a8:101::",
            "64:ff9b:1::a00:1",
            "64:ff9b::7f00:1",
        ] {
            let ip: IpAddr = text.parse().unwrap();
            assert!(!is_public(ip), "{text}");
        }
        for text in ["2002:808:808::", "2606:4700::1111", "8.8.8.8"] {
            let ip: IpAddr = text.parse().unwrap();
            assert!(is_public(ip), "{text}");
        }
    }
}
