//! Negotiating permessage-deflate (RFC 7692 §5, §7.1) from a client's
//! `Sec-WebSocket-Extensions` offers.
//!
//! The server takes the first `permessage-deflate` offer it can honour and declines the rest.
//! An offer with an unknown parameter, a parameter twice, a value out of range, or syntax that
//! does not parse is declined (§5: "MUST decline"), and the next offer is considered; the
//! handshake itself never fails over an extension.
//!
//! What the server answers, whatever was offered:
//! - always `server_no_context_takeover` (§7.1.1.1 allows it unasked): every message the
//!   server sends is compressed on its own, so one compressor per I/O thread serves every
//!   connection, and one compressed frame serves every subscriber of a publish;
//! - `server_max_window_bits=N` when the client asked for it (the same value: accepting means
//!   honouring it; for 8, which zlib cannot produce, the server sends messages uncompressed);
//! - `client_no_context_takeover` and `client_max_window_bits=N` echoed when offered, so the
//!   server knows how much of the client's history its messages may refer to.

use super::Header;

/// The extension's token.
pub(crate) const PERMESSAGE_DEFLATE: &str = "permessage-deflate";

/// The LZ77 window sizes a peer may ask for (RFC 7692 §7.1.2).
pub(crate) const WINDOW_BITS: std::ops::RangeInclusive<u8> = 8..=15;

/// What was agreed for one connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deflate {
    /// The largest window the server's compressor may use.
    pub server_max_window_bits: u8,
    /// The largest window the client's compressor uses: how far back its messages refer.
    pub client_max_window_bits: u8,
    /// The client compresses each message on its own: nothing to keep between messages.
    pub client_no_context_takeover: bool,
    /// Whether the response names `server_max_window_bits` (the client asked for it).
    server_bits_named: bool,
    /// Whether the response names `client_max_window_bits` (the client gave a value).
    client_bits_named: bool,
}

impl Deflate {
    /// The `Sec-WebSocket-Extensions` value that accepts this agreement.
    pub(crate) fn response(&self) -> String {
        let mut out = format!("{PERMESSAGE_DEFLATE}; server_no_context_takeover");
        if self.client_no_context_takeover {
            out.push_str("; client_no_context_takeover");
        }
        if self.server_bits_named {
            out.push_str(&format!(
                "; server_max_window_bits={}",
                self.server_max_window_bits
            ));
        }
        if self.client_bits_named {
            out.push_str(&format!(
                "; client_max_window_bits={}",
                self.client_max_window_bits
            ));
        }
        out
    }
}

/// The first permessage-deflate offer in `headers` the server can honour, if any.
pub fn negotiate(headers: &[Header]) -> Option<Deflate> {
    headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("sec-websocket-extensions"))
        .filter_map(|(_, v)| std::str::from_utf8(v).ok())
        .flat_map(split_list)
        .filter_map(parse_element)
        .filter(|(name, _)| name.eq_ignore_ascii_case(PERMESSAGE_DEFLATE))
        .find_map(|(_, params)| accept(&params))
}

/// One offer's parameters, as written: name and optional (unquoted) value.
type Params = Vec<(String, Option<String>)>;

/// Whether the offer can be accepted, and on what terms.
fn accept(params: &Params) -> Option<Deflate> {
    let mut agreed = Deflate {
        server_max_window_bits: 15,
        client_max_window_bits: 15,
        client_no_context_takeover: false,
        server_bits_named: false,
        client_bits_named: false,
    };
    let mut seen: Vec<String> = Vec::new();
    for (name, value) in params {
        let name = name.to_ascii_lowercase();
        if seen.contains(&name) {
            return None;
        }
        match (name.as_str(), value) {
            ("server_no_context_takeover", None) => {}
            ("client_no_context_takeover", None) => agreed.client_no_context_takeover = true,
            ("server_max_window_bits", Some(v)) => {
                agreed.server_max_window_bits = window_bits(v)?;
                agreed.server_bits_named = true;
            }
            ("client_max_window_bits", None) => {}
            ("client_max_window_bits", Some(v)) => {
                agreed.client_max_window_bits = window_bits(v)?;
                agreed.client_bits_named = true;
            }
            _ => return None,
        }
        seen.push(name);
    }
    Some(agreed)
}

/// A window size: a decimal integer from 8 to 15 without leading zeros (§7.1.2.1).
fn window_bits(value: &str) -> Option<u8> {
    if value.is_empty() || value.len() > 2 || value.starts_with('0') {
        return None;
    }
    if !value.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let bits: u8 = value.parse().ok()?;
    WINDOW_BITS.contains(&bits).then_some(bits)
}

/// Splits a header value at the commas that separate list elements (not those inside a
/// quoted string).
fn split_list(value: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut start, mut quoted, mut escaped) = (0, false, false);
    for (i, c) in value.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            ',' if !quoted => {
                out.push(&value[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&value[start..]);
    out.into_iter()
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .collect()
}

/// `extension-token *( ";" extension-param )` (RFC 6455 §9.1), or `None` when it does not
/// parse (the offer is then declined).
fn parse_element(element: &str) -> Option<(String, Params)> {
    let mut parts = split_params(element)?.into_iter();
    let name = parts.next()?;
    if !is_token(name) {
        return None;
    }
    let mut params = Vec::new();
    for part in parts {
        let (key, value) = match part.split_once('=') {
            Some((k, v)) => (k.trim(), Some(v.trim())),
            None => (part, None),
        };
        if !is_token(key) {
            return None;
        }
        let value = match value {
            None => None,
            Some(v) if v.starts_with('"') => Some(unquote(v)?),
            Some(v) if is_token(v) => Some(v.to_owned()),
            Some(_) => return None,
        };
        params.push((key.to_owned(), value));
    }
    Some((name.to_owned(), params))
}

/// Splits at the semicolons outside quoted strings; `None` for an unterminated quote.
fn split_params(element: &str) -> Option<Vec<&str>> {
    let mut out = Vec::new();
    let (mut start, mut quoted, mut escaped) = (0, false, false);
    for (i, c) in element.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            ';' if !quoted => {
                out.push(element[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    if quoted {
        return None;
    }
    out.push(element[start..].trim());
    Some(out)
}

/// A quoted-string's content (RFC 9110 §5.6.4), whose unescaped value must itself be a token
/// (RFC 6455 §9.1).
fn unquote(quoted: &str) -> Option<String> {
    let inner = quoted.strip_prefix('"')?.strip_suffix('"')?;
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.push(chars.next()?),
            '"' => return None,
            c => out.push(c),
        }
    }
    is_token(&out).then_some(out)
}

/// `token` (RFC 9110 §5.6.2).
fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offer(values: &[&str]) -> Option<String> {
        let headers: Vec<Header> = values
            .iter()
            .map(|v| ("Sec-WebSocket-Extensions".to_owned(), v.as_bytes().to_vec()))
            .collect();
        negotiate(&headers).map(|d| d.response())
    }

    #[test]
    fn what_browsers_and_autobahn_offer() {
        // Chromium and Firefox.
        assert_eq!(
            offer(&["permessage-deflate; client_max_window_bits"]).as_deref(),
            Some("permessage-deflate; server_no_context_takeover")
        );
        assert_eq!(
            offer(&["permessage-deflate"]).as_deref(),
            Some("permessage-deflate; server_no_context_takeover")
        );
        assert_eq!(
            offer(&["permessage-deflate; client_no_context_takeover; server_max_window_bits=9"])
                .as_deref(),
            Some(
                "permessage-deflate; server_no_context_takeover; client_no_context_takeover; server_max_window_bits=9"
            )
        );
        assert_eq!(
            offer(&["permessage-deflate; server_no_context_takeover; client_max_window_bits=10"])
                .as_deref(),
            Some("permessage-deflate; server_no_context_takeover; client_max_window_bits=10")
        );
        let d = negotiate(&[(
            "sec-websocket-extensions".into(),
            b"permessage-deflate; client_max_window_bits=12; client_no_context_takeover".to_vec(),
        )])
        .unwrap();
        assert_eq!(d.client_max_window_bits, 12);
        assert!(d.client_no_context_takeover);
        assert_eq!(d.server_max_window_bits, 15);
    }

    #[test]
    fn offers_are_taken_in_order_and_bad_ones_declined() {
        // Each of these is declined; the plain offer after it is taken.
        for bad in [
            "permessage-deflate; server_max_window_bits", // value required
            "permessage-deflate; server_max_window_bits=16", // out of range
            "permessage-deflate; server_max_window_bits=7", // out of range
            "permessage-deflate; server_max_window_bits=010", // leading zero
            "permessage-deflate; client_max_window_bits=abc", // not a number
            "permessage-deflate; server_no_context_takeover=1", // no value allowed
            "permessage-deflate; client_no_context_takeover; client_no_context_takeover", // twice
            "permessage-deflate; Server_Max_Window_Bits=10; server_max_window_bits=10", // twice
            "permessage-deflate; mystery",                // unknown
            "permessage-deflate; server_max_window_bits=\"1 0\"", // quoted, not a token
            "permessage-deflate; =10",                    // no name
            "x-webkit-deflate-frame",                     // another extension
        ] {
            assert_eq!(
                offer(&[&format!(
                    "{bad}, permessage-deflate; client_no_context_takeover"
                )])
                .as_deref(),
                Some("permessage-deflate; server_no_context_takeover; client_no_context_takeover"),
                "{bad}"
            );
            // Alone, nothing is agreed: the connection is plain.
            assert_eq!(offer(&[bad]), None, "{bad}");
        }
        // A quoted value is unquoted (RFC 7692 §5.1 / RFC 6455 §9.1).
        assert_eq!(
            offer(&["permessage-deflate; server_max_window_bits=\"10\""]).as_deref(),
            Some("permessage-deflate; server_no_context_takeover; server_max_window_bits=10")
        );
        // Offers across several header lines are one list.
        assert_eq!(
            offer(&[
                "foo; a=\"x,y\"",
                "permessage-deflate; server_max_window_bits=12"
            ])
            .as_deref(),
            Some("permessage-deflate; server_no_context_takeover; server_max_window_bits=12")
        );
        // An unterminated quote runs to the end of the line: nothing after it is an offer.
        assert_eq!(
            offer(&["permessage-deflate; server_max_window_bits=\"10, permessage-deflate"]),
            None
        );
        assert_eq!(offer(&[]), None);
        assert_eq!(offer(&[",,;;\"\\"]), None);
    }

    #[test]
    fn arbitrary_input_never_panics() {
        let bytes: Vec<u8> = (0u8..=255).collect();
        for start in 0..bytes.len() {
            for len in [1, 3, 7, 20] {
                let end = (start + len).min(bytes.len());
                let mut value = b"permessage-deflate; ".to_vec();
                value.extend_from_slice(&bytes[start..end]);
                let _ = negotiate(&[("sec-websocket-extensions".into(), value)]);
            }
        }
    }
}
