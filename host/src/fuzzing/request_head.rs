//! The request-head parser on arbitrary bytes: never panics, never claims more input than it
//! was given, agrees with itself on the consumed prefix, and a head it accepts round-trips its
//! method, target and every header (acceptance 15).

use crate::limits::Limits;
use crate::proto::Status;
use crate::proto::request::parse;

/// The target: never panics on any `data`.
pub fn run(data: &[u8]) {
    let limits = Limits::default();
    let Ok(Status::Complete(head, used)) = parse(data, &limits) else {
        return;
    };
    assert!(used <= data.len());
    // The same head parses from exactly the bytes it used.
    match parse(&data[..used], &limits) {
        Ok(Status::Complete(again, n)) => {
            assert_eq!(n, used);
            assert_eq!(again, head);
        }
        other => panic!("prefix parsed differently: {other:?}"),
    }
    // Method and every header come through unchanged, in order.
    let mut slots = vec![httparse::EMPTY_HEADER; limits.max_headers];
    let mut raw = httparse::Request::new(&mut slots);
    assert!(matches!(
        raw.parse(&data[..used]),
        Ok(httparse::Status::Complete(_))
    ));
    assert_eq!(raw.method, Some(&*head.method));
    let target = raw.path.unwrap();
    if target.starts_with('/') || target == "*" {
        assert_eq!(raw.headers.len(), head.headers.len());
        for (h, (name, value)) in raw.headers.iter().zip(&head.headers) {
            assert_eq!(h.name, name);
            assert_eq!(h.value, value.as_slice());
        }
    } else {
        // Absolute form: the target's authority is the Host (RFC 9112 §3.2.2), replacing a
        // Host field or added as one; every other field is unchanged, in order.
        let others = |name: &str| !name.eq_ignore_ascii_case("host");
        let raw_others: Vec<_> = raw.headers.iter().filter(|h| others(h.name)).collect();
        let head_others: Vec<_> = head.headers.iter().filter(|(n, _)| others(n)).collect();
        assert_eq!(raw_others.len(), head_others.len());
        for (h, (name, value)) in raw_others.iter().zip(&head_others) {
            assert_eq!(h.name, name);
            assert_eq!(h.value, value.as_slice());
        }
        let hosts: Vec<_> = head.headers.iter().filter(|(n, _)| !others(n)).collect();
        assert_eq!(hosts.len(), 1);
        let authority = target.split_once("://").unwrap().1;
        let authority = &authority[..authority.find(['/', '?']).unwrap_or(authority.len())];
        assert_eq!(hosts[0].1, authority.as_bytes());
    }
    // The path comes through unchanged unless it had dot segments to remove (RFC 3986 §5.2.4).
    let dotted = target.contains("/.") || target.to_ascii_lowercase().contains("%2e");
    if target.starts_with('/') && !dotted {
        let rebuilt = if head.query.is_empty() && !target.contains('?') {
            head.path.to_string()
        } else {
            format!("{}?{}", head.path, head.query)
        };
        assert_eq!(rebuilt, target);
    }
}
