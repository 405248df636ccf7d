//! The request-head parser on arbitrary bytes: never panics, never claims more input than it
//! was given, agrees with itself on the consumed prefix, and a head it accepts round-trips its
//! method, target and every header (acceptance 15).
#![no_main]

use ankh::limits::Limits;
use ankh::proto::Status;
use ankh::proto::request::parse;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
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
    assert_eq!(raw.method, Some(head.method.as_str()));
    assert_eq!(raw.headers.len(), head.headers.len());
    for (h, (name, value)) in raw.headers.iter().zip(&head.headers) {
        assert_eq!(h.name, name);
        assert_eq!(h.value, value.as_slice());
    }
    let target = raw.path.unwrap();
    if target.starts_with('/') {
        let rebuilt = if head.query.is_empty() && !target.contains('?') {
            head.path.clone()
        } else {
            format!("{}?{}", head.path, head.query)
        };
        assert_eq!(rebuilt, target);
    }
});
