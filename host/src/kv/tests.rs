//! The store's contract, checked on both backends alike, and the file backend's own promises:
//! what was acknowledged survives a reopen, one process at a time, a corrupt file refused.

use std::path::PathBuf;

use super::file::{File, OpenError};
use super::memory::Memory;
use super::*;
use crate::runtime::exec::block_on;

struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!(
            "ankh-kv-{tag}-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn bounds() -> Bounds {
    Bounds::with_quota(1 << 20)
}

fn set(key: &str, value: &str, expires: Option<Millis>) -> Write {
    Write::Set {
        entries: vec![(key.into(), value.into())],
        expires,
    }
}

/// Runs `check` on a memory backend and on a file backend.
fn on_both(tag: &str, check: impl Fn(&dyn Backend)) {
    check(&Memory::default());
    let dir = TempDir::new(tag);
    check(&File::open(&dir.0).unwrap());
}

#[test]
fn namespaces_are_separate() {
    on_both("ns", |b| {
        b.write("a", set("k", "1", None), &bounds(), 0)
            .wait()
            .unwrap();
        assert_eq!(
            b.get_many("a", &["k".into()], 0).unwrap(),
            [Some(b"1".to_vec())]
        );
        assert_eq!(b.get_many("b", &["k".into()], 0).unwrap(), [None]);
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
        assert!(b.exists("p", "short", 99).unwrap());
        assert!(!b.exists("p", "short", 100).unwrap());
        assert_eq!(b.get_many("p", &["short".into()], 100).unwrap(), [None]);
        assert_eq!(b.list("p", "", None, 10, 100).unwrap(), ["long", "never"]);
        // Hidden but still counted, until the sweep.
        assert_eq!(b.usage("p").unwrap().keys, 3);
        assert_eq!(b.sweep(100, usize::MAX).unwrap(), 1);
        assert_eq!(b.usage("p").unwrap(), Usage { keys: 2, bytes: 11 });
        // A key replaced without expiry is not swept under its old expiry.
        b.write("p", set("long", "kept", None), &bounds(), 100)
            .wait()
            .unwrap();
        assert_eq!(b.sweep(5000, usize::MAX).unwrap(), 0);
        assert_eq!(b.list("p", "", None, 10, 5000).unwrap(), ["long", "never"]);
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
        assert_eq!(b.list("p", "a/", None, 2, 0).unwrap(), ["a/1", "a/2"]);
        assert_eq!(b.list("p", "a/", Some("a/2"), 2, 0).unwrap(), ["a/3"]);
        assert_eq!(b.list("p", "", Some("ab"), 10, 0).unwrap(), ["b/1"]);
        assert!(b.list("q", "", None, 10, 0).unwrap().is_empty());
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
            b.get_many("p", &["n".into()], 0).unwrap(),
            [Some(b"400".to_vec())]
        );
    });
}

#[test]
fn the_file_store_keeps_what_it_acknowledged_across_a_reopen() {
    let dir = TempDir::new("reopen");
    {
        let store = Store::open(&StoreConfig::File(dir.0.clone())).unwrap();
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
    let store = Store::open(&StoreConfig::File(dir.0.clone())).unwrap();
    let ns = store.namespace("todo", bounds());
    assert_eq!(ns.get("item/1").unwrap(), Some(b"milk".to_vec()));
    assert_eq!(ns.list_all("item/").unwrap(), ["item/1", "item/2"]);
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
    let (page, cursor) = ns.list_page("x", None, 100).unwrap();
    assert_eq!(
        (page, cursor.as_deref()),
        (vec!["x1".into(), "x2".into()], Some("x2"))
    );
    let (page, cursor) = ns.list_page("x", Some("x2"), 100).unwrap();
    assert_eq!((page, cursor), (vec!["x3".to_owned()], None));
    assert!(matches!(
        ns.list_page("x", Some("y"), 1),
        Err(KvError::Invalid(_))
    ));
    assert_eq!(ns.list_all("x").unwrap().len(), 3);
}
