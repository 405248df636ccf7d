//! A component that exports a release candidate's `wasi:http/handler@0.3.0-rc-…` with a plain
//! function: ankh must refuse it at load, naming that version and the one it serves.

wit_bindgen::generate!({
    path: "wit",
    world: "p3",
});

struct P3;

impl exports::wasi::http::handler::Guest for P3 {
    fn handle(request: u32) -> u32 {
        request
    }
}

export!(P3);
