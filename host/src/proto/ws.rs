//! The WebSocket opening handshake (RFC 6455 §4.2): checking the client's request and writing
//! the `101 Switching Protocols` answer. Framing after the handshake is [`super::frame`]'s, driven by
//! the connection (see `net::ws`); permessage-deflate is negotiated by [`super::ws_extension`].

use base64::Engine;

use super::{Header, Version, has_token, header};

/// Why a request cannot be upgraded, with the status that answers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal {
    pub status: u16,
    pub message: &'static str,
}

fn refuse(status: u16, message: &'static str) -> Refusal {
    Refusal { status, message }
}

impl Refusal {
    /// The headers that must go with the answer: a 426 names the protocol and the version
    /// the client must upgrade to (RFC 9110 §15.5.22, RFC 6455 §4.4).
    pub(crate) fn headers(&self) -> &'static [(&'static str, &'static str)] {
        if self.status == 426 {
            &[
                ("upgrade", "websocket"),
                ("connection", "upgrade"),
                ("sec-websocket-version", "13"),
            ]
        } else {
            &[]
        }
    }
}

/// Checks a WebSocket upgrade request and returns the `Sec-WebSocket-Accept` value.
pub(crate) fn accept_key(
    method: &str,
    version: Version,
    headers: &[Header],
) -> Result<String, Refusal> {
    if method != "GET" {
        return Err(refuse(400, "a WebSocket upgrade must use GET"));
    }
    if version == Version::Http10 {
        // RFC 6455 §4.1: the opening handshake is an HTTP/1.1 (or later) request.
        return Err(refuse(400, "a WebSocket upgrade needs HTTP/1.1"));
    }
    let connection_upgrade = headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("connection"))
        .any(|(_, v)| has_token(v, "upgrade"));
    if !connection_upgrade {
        return Err(refuse(
            400,
            "a WebSocket upgrade needs `Connection: Upgrade`",
        ));
    }
    let upgrade_websocket = headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("upgrade"))
        .any(|(_, v)| has_token(v, "websocket"));
    if !upgrade_websocket {
        return Err(refuse(
            400,
            "a WebSocket upgrade needs `Upgrade: websocket`",
        ));
    }
    match header(headers, "sec-websocket-version").map(<[u8]>::trim_ascii) {
        Some(b"13") => {}
        _ => return Err(refuse(426, "only WebSocket version 13 is supported")),
    }
    let key = header(headers, "sec-websocket-key")
        .map(<[u8]>::trim_ascii)
        .ok_or(refuse(400, "missing Sec-WebSocket-Key"))?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(key)
        .map_err(|_| refuse(400, "Sec-WebSocket-Key is not base64"))?;
    if decoded.len() != 16 {
        return Err(refuse(400, "Sec-WebSocket-Key must encode 16 bytes"));
    }
    Ok(tungstenite::handshake::derive_accept_key(key))
}

/// The protocols the client offered in `Sec-WebSocket-Protocol`.
pub(crate) fn offered_protocols(headers: &[Header]) -> Vec<String> {
    headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("sec-websocket-protocol"))
        .flat_map(|(_, v)| v.split(|&b| b == b','))
        .filter_map(|p| std::str::from_utf8(p.trim_ascii()).ok())
        .filter(|p| !p.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The `101 Switching Protocols` response, with the subprotocol and the extensions agreed.
/// `extra` headers come from the plugin and must already be validated.
pub(crate) fn switching_protocols(
    accept: &str,
    protocol: Option<&str>,
    extensions: Option<&str>,
    extra: &[Header],
) -> Vec<u8> {
    let mut out = Vec::with_capacity(192);
    out.extend_from_slice(b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: Upgrade\r\nsec-websocket-accept: ");
    out.extend_from_slice(accept.as_bytes());
    out.extend_from_slice(b"\r\n");
    if let Some(p) = protocol {
        out.extend_from_slice(b"sec-websocket-protocol: ");
        out.extend_from_slice(p.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    if let Some(e) = extensions {
        out.extend_from_slice(b"sec-websocket-extensions: ");
        out.extend_from_slice(e.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    for (name, value) in extra {
        let lower = name.to_ascii_lowercase();
        if lower.starts_with("sec-websocket-")
            || [
                "upgrade",
                "connection",
                "content-length",
                "transfer-encoding",
            ]
            .contains(&lower.as_str())
        {
            continue;
        }
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(pairs: &[(&str, &str)]) -> Vec<Header> {
        pairs
            .iter()
            .map(|(n, v)| ((*n).to_owned(), v.as_bytes().to_vec()))
            .collect()
    }

    const GOOD: &[(&str, &str)] = &[
        ("Host", "a"),
        ("Connection", "keep-alive, Upgrade"),
        ("Upgrade", "websocket"),
        ("Sec-WebSocket-Version", "13"),
        ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
    ];

    #[test]
    fn accepts_the_rfc_example() {
        assert_eq!(
            accept_key("GET", Version::Http11, &h(GOOD)).unwrap(),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
    }

    #[test]
    fn refusals() {
        let accept =
            |method: &str, headers: &[Header]| accept_key(method, Version::Http11, headers);
        assert_eq!(accept("POST", &h(GOOD)).unwrap_err().status, 400);
        assert_eq!(
            accept_key("GET", Version::Http10, &h(GOOD))
                .unwrap_err()
                .status,
            400
        );
        let mut v = h(GOOD);
        v[3].1 = b"8".to_vec();
        let r = accept("GET", &v).unwrap_err();
        assert_eq!(r.status, 426);
        assert!(r.headers().contains(&("upgrade", "websocket")));
        assert!(r.headers().contains(&("sec-websocket-version", "13")));
        let mut v = h(GOOD);
        v[4].1 = b"c2hvcnQ=".to_vec();
        assert_eq!(accept("GET", &v).unwrap_err().status, 400);
        let mut v = h(GOOD);
        v[1].1 = b"keep-alive".to_vec();
        assert_eq!(accept("GET", &v).unwrap_err().status, 400);
        let mut v = h(GOOD);
        v[2].1 = b"h2c".to_vec();
        assert_eq!(accept("GET", &v).unwrap_err().status, 400);
    }

    #[test]
    fn protocols_offered() {
        let v = h(&[
            ("Sec-WebSocket-Protocol", "chat, superchat"),
            ("sec-websocket-protocol", "v3"),
        ]);
        assert_eq!(offered_protocols(&v), vec!["chat", "superchat", "v3"]);
    }
}
