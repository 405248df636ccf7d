//! The `Date` header value, formatted at most once a second per thread.

use std::cell::RefCell;
use std::time::{SystemTime, UNIX_EPOCH};

thread_local! {
    static CACHE: RefCell<(u64, String)> = const { RefCell::new((u64::MAX, String::new())) };
}

/// Appends the current time as an IMF-fixdate (RFC 9110 §5.6.7) to `out`.
pub(crate) fn append_now(out: &mut Vec<u8>) {
    let now = SystemTime::now();
    let secs = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    CACHE.with(|cache| {
        let mut cache = cache.borrow_mut();
        if cache.0 != secs {
            *cache = (secs, httpdate::fmt_http_date(now));
        }
        out.extend_from_slice(cache.1.as_bytes());
    });
}

#[cfg(test)]
mod tests {
    #[test]
    fn formats_an_imf_fixdate() {
        let mut out = Vec::new();
        super::append_now(&mut out);
        let text = String::from_utf8(out).unwrap();
        assert!(text.ends_with(" GMT"), "{text}");
        assert!(httpdate::parse_http_date(&text).is_ok(), "{text}");
    }
}
