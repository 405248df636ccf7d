//! Content negotiation for compressed responses (RFC 9110 §12.5.3) and the compression itself.

use flate2::Compression;
use flate2::write::{GzEncoder, ZlibEncoder};
use std::io::Write;

use crate::limits::{GZIP_LEVEL, GZIP_MIN_BYTES};

/// A content coding the host can apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Coding {
    Gzip,
    Deflate,
}

impl Coding {
    /// The token for `Content-Encoding`.
    pub(crate) fn token(self) -> &'static str {
        match self {
            Coding::Gzip => "gzip",
            Coding::Deflate => "deflate",
        }
    }
}

/// The coding to use for a client that sent `accept` as `Accept-Encoding`: gzip when its
/// q-value is positive and not lower than deflate's, else deflate when positive, else none.
/// `*` stands for any coding not listed by name.
pub(crate) fn negotiate(accept: Option<&[u8]>) -> Option<Coding> {
    let accept = accept?;
    let (mut gzip, mut deflate, mut star) = (None, None, None);
    for item in accept.split(|&b| b == b',') {
        let mut parts = item.split(|&b| b == b';');
        let name = parts.next().unwrap_or_default().trim_ascii();
        let q = parts
            .find_map(|p| {
                let p = p.trim_ascii();
                (p.len() >= 2 && p[..2].eq_ignore_ascii_case(b"q=")).then(|| parse_q(&p[2..]))
            })
            .unwrap_or(1000);
        if name.eq_ignore_ascii_case(b"gzip") || name.eq_ignore_ascii_case(b"x-gzip") {
            gzip = Some(q);
        } else if name.eq_ignore_ascii_case(b"deflate") {
            deflate = Some(q);
        } else if name == b"*" {
            star = Some(q);
        }
    }
    let gzip = gzip.or(star).unwrap_or(0);
    let deflate = deflate.or(star).unwrap_or(0);
    if gzip > 0 && gzip >= deflate {
        Some(Coding::Gzip)
    } else if deflate > 0 {
        Some(Coding::Deflate)
    } else {
        None
    }
}

/// A q-value in thousandths; anything malformed counts as 0 (not acceptable).
fn parse_q(v: &[u8]) -> u16 {
    let text = std::str::from_utf8(v).unwrap_or("x");
    match text.parse::<f32>() {
        Ok(q) if (0.0..=1.0).contains(&q) => (q * 1000.0).round() as u16,
        _ => 0,
    }
}

/// True when a body of this type and size is worth compressing: big enough, and not a format
/// that is compressed already.
pub(crate) fn compressible(content_type: Option<&[u8]>, len: usize) -> bool {
    if len <= GZIP_MIN_BYTES {
        return false;
    }
    let Some(ct) = content_type else {
        return false;
    };
    let ct = ct.trim_ascii().to_ascii_lowercase();
    let essence = ct
        .split(|&b| b == b';')
        .next()
        .unwrap_or_default()
        .trim_ascii();
    let precompressed = [
        &b"image/"[..],
        b"video/",
        b"audio/",
        b"font/woff",
        b"application/zip",
        b"application/gzip",
        b"application/x-gzip",
        b"application/zstd",
        b"application/x-bzip2",
        b"application/x-7z-compressed",
        b"application/x-rar-compressed",
        b"application/octet-stream",
        b"application/pdf",
        b"application/wasm",
    ];
    // SVG is text, even though it is an image type.
    essence == b"image/svg+xml" || !precompressed.iter().any(|p| essence.starts_with(p))
}

/// Compresses `body` with `coding`.
pub fn compress(coding: Coding, body: &[u8]) -> Vec<u8> {
    let out = Vec::with_capacity(body.len() / 3 + 64);
    let level = Compression::new(GZIP_LEVEL);
    let result = match coding {
        Coding::Gzip => {
            let mut e = GzEncoder::new(out, level);
            e.write_all(body).and_then(|()| e.finish())
        }
        Coding::Deflate => {
            let mut e = ZlibEncoder::new(out, level);
            e.write_all(body).and_then(|()| e.finish())
        }
    };
    // Writing into a Vec cannot fail.
    result.unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiation_honours_q_values() {
        assert_eq!(negotiate(Some(b"gzip")), Some(Coding::Gzip));
        assert_eq!(negotiate(Some(b"gzip, deflate, br")), Some(Coding::Gzip));
        assert_eq!(negotiate(Some(b"deflate")), Some(Coding::Deflate));
        assert_eq!(negotiate(Some(b"gzip;q=0, deflate")), Some(Coding::Deflate));
        assert_eq!(negotiate(Some(b"gzip;q=0")), None);
        assert_eq!(negotiate(Some(b"GZIP; Q=0.000")), None);
        assert_eq!(
            negotiate(Some(b"gzip;q=0.5, deflate;q=0.8")),
            Some(Coding::Deflate)
        );
        assert_eq!(negotiate(Some(b"*")), Some(Coding::Gzip));
        assert_eq!(negotiate(Some(b"*;q=0, deflate")), Some(Coding::Deflate));
        assert_eq!(negotiate(Some(b"identity")), None);
        assert_eq!(negotiate(Some(b"br")), None);
        assert_eq!(negotiate(None), None);
        assert_eq!(negotiate(Some(b"gzip;q=abc")), None);
    }

    #[test]
    fn types_and_sizes() {
        assert!(compressible(Some(b"text/plain"), 2000));
        assert!(compressible(Some(b"application/json; charset=utf-8"), 2000));
        assert!(compressible(Some(b"image/svg+xml"), 2000));
        assert!(!compressible(Some(b"text/plain"), 860));
        assert!(!compressible(Some(b"image/png"), 2000));
        assert!(!compressible(Some(b"Application/Zip"), 2000));
        assert!(!compressible(None, 2000));
    }

    #[test]
    fn round_trips() {
        use std::io::Read;
        let body = b"hello hello hello hello ".repeat(100);
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(&compress(Coding::Gzip, &body)[..])
            .read_to_end(&mut out)
            .unwrap();
        assert_eq!(out, body);
        let mut out = Vec::new();
        flate2::read::ZlibDecoder::new(&compress(Coding::Deflate, &body)[..])
            .read_to_end(&mut out)
            .unwrap();
        assert_eq!(out, body);
    }
}
