//! A stand-in for a WASI 0.3 HTTP component: it exports `wasi:http/handler@0.3.0-rc-…`, which
//! ankh must refuse at load with a message naming WASI 0.3 (issue 15).

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
