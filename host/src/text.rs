//! Text written once or more per request (request ids, peer addresses, the access line's
//! numbers and timestamp), appended to a `String` without the formatting machinery. Each
//! writes exactly what the `Display` it replaces writes; the tests hold them to it.

use std::net::SocketAddr;
use std::time::{SystemTime, UNIX_EPOCH};

/// Appends `{id:016x}`.
pub fn push_hex_id(out: &mut String, id: u64) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    out.extend(
        (0..16)
            .rev()
            .map(|i| DIGITS[((id >> (i * 4)) & 0xf) as usize] as char),
    );
}

/// `{id:016x}`.
pub fn hex_id(id: u64) -> String {
    let mut out = String::with_capacity(16);
    push_hex_id(&mut out, id);
    out
}

/// Appends `addr.to_string()`, IPv4 (the common case) digit by digit: `Display` for socket
/// addresses was 1% of a hello-world load.
pub fn push_address(out: &mut String, addr: SocketAddr) {
    let SocketAddr::V4(v4) = addr else {
        use std::fmt::Write as _;
        let _ = write!(out, "{addr}");
        return;
    };
    for (i, octet) in v4.ip().octets().into_iter().enumerate() {
        if i > 0 {
            out.push('.');
        }
        push_decimal(out, u64::from(octet));
    }
    out.push(':');
    push_decimal(out, u64::from(v4.port()));
}

/// `addr.to_string()`, as [`push_address`] writes it.
pub fn address_text(addr: SocketAddr) -> String {
    let mut out = String::with_capacity(21);
    push_address(&mut out, addr);
    out
}

/// Appends `n` in decimal.
pub fn push_decimal(out: &mut String, n: u64) {
    out.push_str(itoa::Buffer::new().format(n));
}

thread_local! {
    /// The whole second of the last timestamp, and its text up to the seconds.
    static SECOND: std::cell::RefCell<(u64, String)> = const {
        std::cell::RefCell::new((u64::MAX, String::new()))
    };
}

/// Appends the time now as tracing-subscriber's `SystemTime` writes it
/// (`2026-12-01T07:46:30.151581Z`). The date and time up to the second are formatted by
/// tracing-subscriber once per second and thread, and only the microseconds per call: the
/// whole timestamp through its formatter was 1.5% of a hello-world load, access log on.
pub fn push_timestamp(out: &mut String) {
    use tracing_subscriber::fmt::format::Writer;
    use tracing_subscriber::fmt::time::FormatTime;

    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let second = since.as_secs();
    SECOND.with_borrow_mut(|(cached, text)| {
        if *cached != second {
            // The formatter reads the clock itself: its text is that of `second` when the
            // clock reads `second` on both sides of it; at the turn of a second, try again
            // on the next call.
            text.clear();
            let _ = tracing_subscriber::fmt::time::SystemTime.format_time(&mut Writer::new(text));
            text.truncate(SECONDS_LEN);
            let after = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default()
                .as_secs();
            *cached = if after == second { second } else { u64::MAX };
        }
        out.push_str(text);
    });
    out.push('.');
    let mut digits = itoa::Buffer::new();
    let micros = digits.format(since.subsec_micros());
    out.extend(std::iter::repeat_n('0', 6 - micros.len()));
    out.push_str(micros);
    out.push('Z');
}

/// `2026-12-01T07:46:30`.
const SECONDS_LEN: usize = 19;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_addresses_and_numbers_read_as_formatting_writes_them() {
        for id in [0, 1, 0xdead_beef, u64::MAX] {
            assert_eq!(hex_id(id), format!("{id:016x}"));
        }
        for addr in [
            "127.0.0.1:8080",
            "0.0.0.0:0",
            "255.255.255.255:65535",
            "10.20.3.4:51234",
            "[::1]:443",
        ] {
            let addr: SocketAddr = addr.parse().unwrap();
            assert_eq!(address_text(addr), addr.to_string());
        }
        for n in [0, 7, 10, 404, u64::MAX] {
            let mut out = String::new();
            push_decimal(&mut out, n);
            assert_eq!(out, n.to_string());
        }
    }

    #[test]
    fn timestamps_read_as_tracing_writes_them() {
        use tracing_subscriber::fmt::format::Writer;
        use tracing_subscriber::fmt::time::FormatTime;

        for _ in 0..3 {
            let mut ours = String::new();
            push_timestamp(&mut ours);
            let mut theirs = String::new();
            let _ = tracing_subscriber::fmt::time::SystemTime
                .format_time(&mut Writer::new(&mut theirs));
            assert_eq!(ours.len(), theirs.len(), "{ours} against {theirs}");
            assert_eq!(ours.len(), 27, "{ours}");
            // Taken microseconds apart: the same second, except right at its turn.
            let (ours_s, theirs_s) = (&ours[..SECONDS_LEN], &theirs[..SECONDS_LEN]);
            assert!(
                ours_s == theirs_s || ours[17..19] != theirs[17..19],
                "{ours} against {theirs}"
            );
            assert!(ours.ends_with('Z') && ours.as_bytes()[SECONDS_LEN] == b'.');
            assert!(
                ours[SECONDS_LEN + 1..26]
                    .bytes()
                    .all(|b| b.is_ascii_digit())
            );
        }
    }
}
