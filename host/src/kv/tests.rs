//! The store's contract, checked on both backends alike, and the file backend's own promises:
//! what was acknowledged survives a reopen, one process at a time, a corrupt file refused.

use ankh_test_support::harness::TempDir;
use ankh_test_support::services::Redis;

use super::file::{File, OpenError};
use super::memory::Memory;
use super::*;
use crate::runtime::sandbox::exec::block_on;

fn bounds() -> Bounds {
    Bounds::with_quota(1 << 20)
}

fn set(key: &str, value: &str, expires: Option<Millis>) -> Write {
    Write::Set {
        entries: vec![(key.into(), value.into())],
        expires,
    }
}

/// Runs `check` on a memory backend, a file backend and a Redis backend (each fresh).
fn on_both(tag: &str, check: impl Fn(&dyn Backend)) {
    check(&Memory::default());
    let dir = TempDir::new(tag);
    check(&File::open(&dir.0).unwrap());
    if let Some(server) = Redis::start(tag) {
        check(&super::redis::Redis::open(&server.url()).unwrap());
    }
}

#[test]
fn namespaces_are_separate() {
    on_both("ns", |b| {
        b.write("a", set("k", "1", None), &bounds(), 0)
            .wait()
            .unwrap();
        assert_eq!(
            b.get_many("a", &["k".into()], 0).wait().unwrap(),
            [Some(b"1".to_vec())]
        );
        assert_eq!(b.get_many("b", &["k".into()], 0).wait().unwrap(), [None]);
        assert_eq!(b.usage("a").unwrap(), Usage { keys: 1, bytes: 2 });
        assert_eq!(b.usage("b").unwrap(), Usage::default());
    });
}

#[test]
fn expiry_hides_at_once_and_the_sweep_reclaims() {
    on_both("ttl", |b| {
        b.write("p", set("short", "x", Some(100)), &bounds(), 0)
            .wait()
            .unwrap();
        b.write("p", set("long", "y", Some(1000)), &bounds(), 0)
            .wait()
            .unwrap();
        b.write("p", set("never", "z", None), &bounds(), 0)
            .wait()
            .unwrap();
        assert!(b.exists("p", "short", 99).wait().unwrap());
        assert!(!b.exists("p", "short", 100).wait().unwrap());
        assert_eq!(
            b.get_many("p", &["short".into()], 100).wait().unwrap(),
            [None]
        );
        assert_eq!(
            b.list("p", "", None, 10, 100).wait().unwrap(),
            ["long", "never"]
        );
        // Hidden but still counted, until the sweep.
        assert_eq!(b.usage("p").unwrap().keys, 3);
        assert_eq!(b.sweep(100, usize::MAX).unwrap(), 1);
        assert_eq!(b.usage("p").unwrap(), Usage { keys: 2, bytes: 11 });
        // A key replaced without expiry is not swept under its old expiry.
        b.write("p", set("long", "kept", None), &bounds(), 100)
            .wait()
            .unwrap();
        assert_eq!(b.sweep(5000, usize::MAX).unwrap(), 0);
        assert_eq!(
            b.list("p", "", None, 10, 5000).wait().unwrap(),
            ["long", "never"]
        );
    });
}

#[test]
fn listing_pages_by_prefix_after_a_cursor() {
    on_both("list", |b| {
        for key in ["a/1", "a/2", "a/3", "ab", "b/1"] {
            b.write("p", set(key, "", None), &bounds(), 0)
                .wait()
                .unwrap();
        }
        assert_eq!(
            b.list("p", "a/", None, 2, 0).wait().unwrap(),
            ["a/1", "a/2"]
        );
        assert_eq!(
            b.list("p", "a/", Some("a/2"), 2, 0).wait().unwrap(),
            ["a/3"]
        );
        assert_eq!(b.list("p", "", Some("ab"), 10, 0).wait().unwrap(), ["b/1"]);
        assert!(b.list("q", "", None, 10, 0).wait().unwrap().is_empty());
    });
}

// See: issue 32, finding 6: `increment` of "+5" gave 6 on the file store and an error on
// Redis. One rule on every backend: only the canonical decimal text of a number counts.
#[test]
fn a_counter_is_the_canonical_text_of_a_number_on_every_backend() {
    on_both("counter", |b| {
        let incr = |key: &str| Write::Increment {
            key: key.into(),
            delta: 1,
        };
        for (value, after) in [
            ("5", Ok(6)),
            ("-5", Ok(-4)),
            ("0", Ok(1)),
            ("+5", Err(KvError::NotANumber)),
            ("05", Err(KvError::NotANumber)),
            ("-0", Err(KvError::NotANumber)),
            (" 5", Err(KvError::NotANumber)),
            ("5 ", Err(KvError::NotANumber)),
            ("five", Err(KvError::NotANumber)),
        ] {
            b.write("p", set("n", value, None), &bounds(), 0)
                .wait()
                .unwrap();
            let written = b.write("p", incr("n"), &bounds(), 0).wait();
            assert_eq!(written, after.map(Written::Number), "{value:?}");
        }
    });
}

#[test]
fn concurrent_increments_are_all_counted() {
    on_both("incr", |b| {
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    for _ in 0..50 {
                        let w = Write::Increment {
                            key: "n".into(),
                            delta: 1,
                        };
                        b.write("p", w, &bounds(), 0).wait().unwrap();
                    }
                });
            }
        });
        assert_eq!(
            b.get_many("p", &["n".into()], 0).wait().unwrap(),
            [Some(b"400".to_vec())]
        );
    });
}

#[test]
fn the_file_store_keeps_what_it_acknowledged_across_a_reopen() {
    let dir = TempDir::new("reopen");
    {
        let store = Store::open(&KvBackend::File, &dir.0).unwrap();
        let ns = store.namespace("todo", bounds());
        block_on(ns.set("item/1".into(), b"milk".to_vec(), None)).unwrap();
        block_on(ns.set_many(
            vec![("item/2".into(), b"eggs".to_vec()), ("gone".into(), vec![])],
            None,
        ))
        .unwrap();
        assert!(block_on(ns.delete("gone".into())).unwrap());
        assert_eq!(block_on(ns.increment("next".into(), 3)).unwrap(), 3);
    }
    let store = Store::open(&KvBackend::File, &dir.0).unwrap();
    let ns = store.namespace("todo", bounds());
    assert_eq!(block_on(ns.get("item/1")).unwrap(), Some(b"milk".to_vec()));
    assert_eq!(
        block_on(ns.list_all("item/")).unwrap(),
        ["item/1", "item/2"]
    );
    assert_eq!(block_on(ns.increment("next".into(), 1)).unwrap(), 4);
    assert_eq!(ns.usage().unwrap(), Usage { keys: 3, bytes: 25 });
}

#[test]
fn one_process_at_a_time_and_a_corrupt_file_is_refused() {
    let dir = TempDir::new("lock");
    let first = File::open(&dir.0).unwrap();
    // redb's lock is per open file description, so a second handle in this process stands in
    // for a second process.
    match File::open(&dir.0) {
        Err(OpenError::Locked { .. }) => {}
        other => panic!("expected Locked, got {other:?}"),
    }
    drop(first);
    std::fs::write(dir.0.join(file::DB_FILE), vec![0x5a; 64 * 1024]).unwrap();
    let e = File::open(&dir.0).unwrap_err();
    assert!(
        matches!(e, OpenError::Corrupt { .. } | OpenError::Other { .. }),
        "{e:?}"
    );
    let message = e.to_string();
    assert!(message.contains("kv.redb"), "{message}");
}

#[test]
fn namespace_checks_sizes_and_pages() {
    let store = Store::memory();
    let ns = store.namespace(
        "p",
        Bounds {
            batch_keys: 3,
            page_keys: 2,
            ..Bounds::with_quota(1 << 20)
        },
    );
    assert_eq!(
        block_on(ns.set("k".repeat(1025), vec![], None)),
        Err(KvError::TooLarge)
    );
    assert_eq!(
        block_on(ns.set("k".into(), vec![0; (1 << 20) + 1], None)),
        Err(KvError::TooLarge)
    );
    assert!(matches!(
        block_on(ns.set("k".into(), vec![], Some(0))),
        Err(KvError::Invalid(_))
    ));
    assert_eq!(
        block_on(ns.delete_many(vec!["a".into(), "b".into(), "c".into(), "d".into()])),
        Err(KvError::TooLarge)
    );
    for key in ["x1", "x2", "x3", "y"] {
        block_on(ns.set(key.into(), vec![], None)).unwrap();
    }
    let (page, cursor) = block_on(ns.list_page("x", None, 100)).unwrap();
    assert_eq!(
        (page, cursor.as_deref()),
        (vec!["x1".into(), "x2".into()], Some("x2"))
    );
    let (page, cursor) = block_on(ns.list_page("x", Some("x2"), 100)).unwrap();
    assert_eq!((page, cursor), (vec!["x3".to_owned()], None));
    assert!(matches!(
        block_on(ns.list_page("x", Some("y"), 1)),
        Err(KvError::Invalid(_))
    ));
    assert_eq!(block_on(ns.list_all("x")).unwrap().len(), 3);
}

/// The rules of every write, on every backend alike (the Redis backend runs them in Lua).
#[test]
fn every_backend_applies_the_same_rules() {
    on_both("rules", |b| {
        let tight = Bounds {
            max_bytes: 40,
            max_keys: 3,
            ..bounds()
        };
        let write = |w: Write, now: Millis| b.write("r", w, &tight, now).wait();
        let get = |key: &str, now: Millis| {
            b.get_many("r", &[key.to_owned()], now)
                .wait()
                .unwrap()
                .pop()
                .flatten()
        };
        // The last of a key given twice wins, and the batch counts once.
        let many = Write::Set {
            entries: vec![
                ("a".into(), b"1".to_vec()),
                ("b".into(), b"22".to_vec()),
                ("a".into(), b"333".to_vec()),
            ],
            expires: None,
        };
        assert_eq!(write(many, 0), Ok(Written::Stored));
        assert_eq!(get("a", 0), Some(b"333".to_vec()));
        assert_eq!(b.usage("r").unwrap(), Usage { keys: 2, bytes: 7 });
        // Over the bytes quota: refused whole, nothing changed.
        let big = Write::Set {
            entries: vec![("c".into(), b"x".to_vec()), ("d".into(), vec![b'y'; 40])],
            expires: None,
        };
        assert_eq!(write(big, 0), Err(KvError::Full));
        assert_eq!(get("c", 0), None);
        assert_eq!(b.usage("r").unwrap(), Usage { keys: 2, bytes: 7 });
        // Over the key count.
        assert_eq!(write(set("c", "", None), 0), Ok(Written::Stored));
        assert_eq!(write(set("d", "", None), 0), Err(KvError::Full));
        // Compare-and-swap: on the live value, absent as `None`.
        let swap = |key: &str, expected: Option<&str>, value: &str| Write::Swap {
            key: key.into(),
            expected: expected.map(|e| e.as_bytes().to_vec()),
            value: value.as_bytes().to_vec(),
            expires: None,
        };
        assert_eq!(
            write(swap("a", Some("1"), "x"), 0),
            Ok(Written::Swapped(false))
        );
        assert_eq!(
            write(swap("a", Some("333"), "4"), 0),
            Ok(Written::Swapped(true))
        );
        assert_eq!(write(swap("a", None, "5"), 0), Ok(Written::Swapped(false)));
        assert_eq!(get("a", 0), Some(b"4".to_vec()));
        // Increments: decimal text, exact at the edge, refused past it.
        let incr = |key: &str, delta: i64| Write::Increment {
            key: key.into(),
            delta,
        };
        assert_eq!(write(incr("a", 38), 0), Ok(Written::Number(42)));
        assert_eq!(write(incr("b", 1), 0), Ok(Written::Number(23)));
        assert_eq!(write(set("b", "text", None), 0), Ok(Written::Stored));
        assert_eq!(write(incr("b", 1), 0), Err(KvError::NotANumber));
        assert_eq!(get("b", 0), Some(b"text".to_vec()));
        assert_eq!(
            write(set("a", &i64::MAX.to_string(), None), 0),
            Ok(Written::Stored)
        );
        assert_eq!(write(incr("a", 1), 0), Err(KvError::Overflow));
        assert_eq!(write(incr("a", -1), 0), Ok(Written::Number(i64::MAX - 1)));
        // Deleting counts the live keys only; an expired one is gone and uncounted.
        assert_eq!(write(set("c", "v", Some(10)), 0), Ok(Written::Stored));
        let delete = Write::Delete {
            keys: vec!["c".into(), "b".into(), "b".into(), "nope".into()],
        };
        assert_eq!(write(delete, 10), Ok(Written::Deleted(1)));
        assert_eq!(b.usage("r").unwrap().keys, 1);
        // An expired counter starts again from zero, without its expiry.
        assert_eq!(write(set("t", "7", Some(10)), 0), Ok(Written::Stored));
        assert_eq!(write(incr("t", 1), 10), Ok(Written::Number(1)));
        assert_eq!(b.sweep(1_000_000, usize::MAX).unwrap(), 0);
        assert_eq!(get("t", 1_000_000), Some(b"1".to_vec()));
    });
}

/// Named buckets (`wasi:keyvalue`'s `open` of any name): each a key space of its own, the
/// plain key space never sees their keys, and all of them count against the one quota. On
/// every backend, since each orders and stores the prefixed keys itself.
#[test]
fn buckets_are_key_spaces_apart_under_one_quota() {
    let dir = TempDir::new("buckets");
    let redis = Redis::start("buckets");
    let mut stores = vec![
        Store::memory(),
        Store::open(&KvBackend::File, &dir.0).unwrap(),
    ];
    if let Some(server) = &redis {
        stores.push(Store::open(&KvBackend::Redis(server.url()), &dir.0).unwrap());
    }
    for store in stores {
        let plain = store.namespace("p", Bounds::with_quota(400));
        let cache = plain.bucket("in_memory").unwrap();
        let other = plain.bucket("sessions").unwrap();
        block_on(plain.set("k".into(), b"plain".to_vec(), None)).unwrap();
        block_on(cache.set("k".into(), b"cache".to_vec(), None)).unwrap();
        block_on(cache.set("z".into(), b"1".to_vec(), None)).unwrap();
        assert_eq!(block_on(plain.get("k")).unwrap(), Some(b"plain".to_vec()));
        assert_eq!(block_on(cache.get("k")).unwrap(), Some(b"cache".to_vec()));
        assert_eq!(block_on(other.get("k")).unwrap(), None);
        assert!(!block_on(other.exists("z")).unwrap());
        // Listings: each space its own keys, named as the plugin named them.
        assert_eq!(block_on(plain.list_all("")).unwrap(), ["k"]);
        assert_eq!(block_on(cache.list_all("")).unwrap(), ["k", "z"]);
        assert_eq!(
            block_on(cache.list_page("", Some("k"), 10)).unwrap().0,
            ["z"]
        );
        assert!(block_on(other.list_all("")).unwrap().is_empty());
        assert_eq!(block_on(other.increment("n".into(), 2)).unwrap(), 2);
        block_on(other.delete_many(vec!["k".into(), "n".into()])).unwrap();
        assert_eq!(
            block_on(cache.get_many(&["k".into(), "n".into()]))
                .unwrap()
                .len(),
            2
        );
        // One quota: a bucket fills what the plain space may still write.
        let big = vec![0u8; 300];
        block_on(other.set("big".into(), big.clone(), None)).unwrap();
        assert_eq!(
            block_on(plain.set("big".into(), big, None)),
            Err(KvError::Full)
        );
        // The bucket prefix is reserved in the plain space; a bucket name is printable.
        assert!(matches!(
            block_on(plain.set("\0in_memory\0k".into(), vec![], None)),
            Err(KvError::Invalid(_))
        ));
        for bad in ["", "a b", "tab\t", &"b".repeat(65), "é"] {
            assert!(plain.bucket(bad).is_err(), "{bad:?}");
        }
    }
}
