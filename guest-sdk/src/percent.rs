//! Percent-decoding of request paths and `application/x-www-form-urlencoded` query strings.
//!
//! Contract: decoding never fails. A `%` that is not followed by two hex digits is kept as
//! it is, and byte sequences that are not UTF-8 after decoding become U+FFFD (lossy). Clients
//! send all sorts of targets, and a handler should see *something* rather than an error for a
//! malformed one; routes written in plain UTF-8 still match the well-formed encodings.

use std::borrow::Cow;

/// Decodes `%XX` escapes in a path segment (`+` stays a `+`, as RFC 3986 says for paths).
pub(crate) fn decode_path(raw: &str) -> Cow<'_, str> {
    decode(raw, false)
}

/// Decodes one query-string key or value: `+` is a space, then `%XX` escapes.
pub(crate) fn decode_query(raw: &str) -> Cow<'_, str> {
    decode(raw, true)
}

/// Splits a raw query string into decoded `(key, value)` pairs, in order.
///
/// Empty pieces (`a=1&&b=2`, a trailing `&`) are skipped; a piece without `=` has an empty
/// value.
pub(crate) fn query_pairs(query: &str) -> impl Iterator<Item = (Cow<'_, str>, Cow<'_, str>)> {
    query
        .split('&')
        .filter(|piece| !piece.is_empty())
        .map(|piece| {
            let (key, value) = piece.split_once('=').unwrap_or((piece, ""));
            (decode_query(key), decode_query(value))
        })
}

fn decode(raw: &str, plus_is_space: bool) -> Cow<'_, str> {
    let needs_work = raw
        .bytes()
        .any(|b| b == b'%' || (plus_is_space && b == b'+'));
    if !needs_work {
        return Cow::Borrowed(raw);
    }
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => match (bytes.get(i + 1), bytes.get(i + 2)) {
                (Some(&hi), Some(&lo)) if hi.is_ascii_hexdigit() && lo.is_ascii_hexdigit() => {
                    out.push((hex_value(hi) << 4) | hex_value(lo));
                    i += 3;
                    continue;
                }
                _ => out.push(b'%'),
            },
            b'+' if plus_is_space => out.push(b' '),
            other => out.push(other),
        }
        i += 1;
    }
    match String::from_utf8(out) {
        Ok(text) => Cow::Owned(text),
        Err(err) => Cow::Owned(String::from_utf8_lossy(err.as_bytes()).into_owned()),
    }
}

/// The value of one ASCII hex digit; the caller has checked `is_ascii_hexdigit`.
fn hex_value(digit: u8) -> u8 {
    match digit {
        b'0'..=b'9' => digit - b'0',
        b'a'..=b'f' => digit - b'a' + 10,
        _ => digit - b'A' + 10,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_decoding() {
        assert_eq!(decode_path("plain"), "plain");
        assert_eq!(decode_path("a%20b+c"), "a b+c");
        assert_eq!(
            decode_path("%E3%81%93%E3%82%93%E3%81%AB%E3%81%A1%E3%81%AF"),
            "こんにちは"
        );
        assert_eq!(decode_path("%2f%2F"), "//");
    }

    #[test]
    fn malformed_escapes_are_kept() {
        assert_eq!(decode_path("100%"), "100%");
        assert_eq!(decode_path("%zz%4"), "%zz%4");
        assert_eq!(decode_path("%FF"), "\u{FFFD}");
    }

    #[test]
    fn query_decoding() {
        assert_eq!(decode_query("a+b%20c%2B"), "a b c+");
        let pairs: Vec<_> = query_pairs("a=1&&b&c=x%3Dy&a=2&")
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
        let expected = [("a", "1"), ("b", ""), ("c", "x=y"), ("a", "2")];
        assert_eq!(
            pairs,
            expected.map(|(k, v)| (k.to_owned(), v.to_owned())).to_vec()
        );
    }
}
