//! Text written once or more per request (request ids, peer addresses, the access line's
//! numbers and timestamp), written without the formatting machinery. Each writes exactly
//! what the `Display` it replaces writes; the tests hold them to it.

use std::net::SocketAddr;
use std::time::{SystemTime, UNIX_EPOCH};

/// Appends `{id:016x}`.
pub(crate) fn push_hex_id(out: &mut String, id: u64) {
    out.push_str(std::str::from_utf8(&hex_digits(id)).unwrap_or_default());
}

/// Appends `{id:032x}`: a trace id.
pub(crate) fn push_trace_id(out: &mut String, id: u128) {
    push_hex_id(out, (id >> 64) as u64);
    push_hex_id(out, id as u64);
}

/// `{id:016x}`, as bytes.
pub(crate) fn hex_digits(id: u64) -> [u8; 16] {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    std::array::from_fn(|i| DIGITS[((id >> ((15 - i) * 4)) & 0xf) as usize])
}

/// `{id:016x}`.
pub(crate) fn hex_id(id: u64) -> String {
    let mut out = String::with_capacity(16);
    push_hex_id(&mut out, id);
    out
}

/// The longest text of a socket address: `[`, an IPv6 address (39), `%`, a scope id (10),
/// `]:` and a port (5).
pub(crate) const ADDRESS_MAX: usize = 58;

/// Hands `addr.to_string()` to `use_text`. IPv4 (the common case) is written digit by digit
/// into a buffer on the stack: `Display` for socket addresses was 1% of a hello-world load.
pub(crate) fn with_address<R>(addr: SocketAddr, use_text: impl FnOnce(&str) -> R) -> R {
    let SocketAddr::V4(v4) = addr else {
        return use_text(&addr.to_string());
    };
    // "255.255.255.255:65535"
    let mut text = [0u8; 21];
    let mut len = 0;
    let mut put = |byte: u8| {
        text[len] = byte;
        len += 1;
    };
    let digit = |n: u32| b'0' + (n % 10) as u8;
    for (i, octet) in v4.ip().octets().into_iter().enumerate() {
        if i > 0 {
            put(b'.');
        }
        let n = u32::from(octet);
        if n >= 100 {
            put(digit(n / 100));
        }
        if n >= 10 {
            put(digit(n / 10));
        }
        put(digit(n));
    }
    put(b':');
    let port = u32::from(v4.port());
    for power in [10_000, 1_000, 100, 10] {
        if port >= power {
            put(digit(port / power));
        }
    }
    put(digit(port));
    use_text(std::str::from_utf8(&text[..len]).unwrap_or_default())
}

/// Appends `addr.to_string()`.
pub(crate) fn push_address(out: &mut String, addr: SocketAddr) {
    with_address(addr, |text| out.push_str(text));
}

/// `addr.to_string()`, as [`push_address`] writes it.
pub(crate) fn address_text(addr: SocketAddr) -> String {
    let mut out = String::with_capacity(21);
    push_address(&mut out, addr);
    out
}

/// Appends `n` in decimal.
pub(crate) fn push_decimal(out: &mut String, n: u64) {
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
pub(crate) fn push_timestamp(out: &mut String) {
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
        for id in [1u128, 0x4bf9_2f35_77b3_4da6_a3ce_929d_0e0e_4736, u128::MAX] {
            let mut out = String::new();
            push_trace_id(&mut out, id);
            assert_eq!(out, format!("{id:032x}"));
        }
        for addr in [
            "127.0.0.1:8080",
            "0.0.0.0:0",
            "255.255.255.255:65535",
            "10.20.3.4:51234",
            "1.10.100.0:10000",
            "9.99.109.200:1009",
            "[::1]:443",
            "[::ffff:255.255.255.255]:65535",
            "[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff%4294967295]:65535",
        ] {
            let addr: SocketAddr = addr.parse().unwrap();
            assert_eq!(address_text(addr), addr.to_string());
            assert_eq!(with_address(addr, str::to_owned), addr.to_string());
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
