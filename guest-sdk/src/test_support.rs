//! Builders for the unit tests: WIT request records made directly, so no import is called.

use crate::{Request, wit};

/// A request for `path` (raw, may carry `%XX`) on a plugin mounted at `mount`.
pub(crate) fn request(method: &str, mount: &str, path: &str) -> Request {
    Request::new(wit::Request {
        id: "test-1".to_owned(),
        method: method.to_owned(),
        path: path.to_owned(),
        mount: mount.to_owned(),
        query: String::new(),
        headers: Vec::new(),
        body: Vec::new(),
        remote_addr: "127.0.0.1:50000".to_owned(),
        version: wit::HttpVersion::Http11,
    })
}
