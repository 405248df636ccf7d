//! Route patterns: parsing (rejecting bad ones at registration) and matching against the
//! decoded segments of a request's route path.
//!
//! The syntax is documented on [`Router`](crate::Router): a pattern starts with `/` and is
//! split on `/` into segments, each a literal, a wildcard (`*`, `*.txt`, `img-*`, `*draft*`),
//! `**`, or a capture (`{id}`, and its alias).
//!
//! Invariants the matcher relies on:
//! - wildcards and captures never match an empty segment, so `/items/*` matches `/items/3`
//!   but not `/items/`, and `/files/**` does not match `/files/` or `/files//x`;
//! - a trailing slash is significant: `/items` and `/items/` are different paths, and the
//!   pattern `/items/` matches only the latter (the one exception is the mount point itself,
//!   which [`Request::route_path`](crate::Request::route_path) always reports as `/`);
//! - `**` is never directly followed by `*`, `**` or a capture, so what it swallowed is never
//!   ambiguous with what comes next; when a literal follows it, the shortest match wins;
//! - capture names are unique within a pattern.

use std::fmt;

/// A parsed route pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Pattern {
    source: String,
    segments: Vec<Segment>,
}

/// One `/`-separated piece of a pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    /// Exactly this text (possibly empty, for a trailing slash).
    Literal(String),
    /// `*`: any one non-empty segment.
    Any,
    /// `text*`
    Prefix(String),
    /// `*text`
    Suffix(String),
    /// `*text*`
    Contains(String),
    /// `**`: one or more non-empty segments.
    Rest,
    /// `{name}`, or the alias with a leading `@`.
    Capture(String),
}

/// Why a route pattern was rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PatternError {
    pattern: String,
    kind: PatternErrorKind,
}

/// The rule a rejected pattern broke; see [`PatternError::kind`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PatternErrorKind {
    /// The pattern is the empty string.
    Empty,
    /// The pattern does not start with `/`.
    NoLeadingSlash,
    /// `**` is directly followed by `*`, `**` or a capture.
    AmbiguousAfterDoubleStar,
    /// A capture without a name: `{}`.
    EmptyCaptureName,
    /// Two captures share a name.
    DuplicateCaptureName,
}

impl PatternError {
    /// The pattern as it was given.
    pub fn pattern(&self) -> &str {
        &self.pattern
    }

    /// Which rule it broke.
    pub fn kind(&self) -> PatternErrorKind {
        self.kind
    }
}

impl fmt::Display for PatternError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let reason = match self.kind {
            PatternErrorKind::Empty => "a pattern cannot be empty",
            PatternErrorKind::NoLeadingSlash => "a pattern must start with `/`",
            PatternErrorKind::AmbiguousAfterDoubleStar => {
                "`**` cannot be followed by `*`, `**` or a capture"
            }
            PatternErrorKind::EmptyCaptureName => "a capture needs a name",
            PatternErrorKind::DuplicateCaptureName => "two captures have the same name",
        };
        write!(f, "invalid route pattern {:?}: {reason}", self.pattern)
    }
}

impl std::error::Error for PatternError {}

impl Pattern {
    /// Parses and validates `source`.
    pub(crate) fn parse(source: &str) -> Result<Self, PatternError> {
        let fail = |kind| {
            Err(PatternError {
                pattern: source.to_owned(),
                kind,
            })
        };
        let Some(rest) = source.strip_prefix('/') else {
            return fail(if source.is_empty() {
                PatternErrorKind::Empty
            } else {
                PatternErrorKind::NoLeadingSlash
            });
        };
        let segments: Vec<Segment> = rest.split('/').map(Segment::parse).collect();
        let mut names = Vec::new();
        for (i, segment) in segments.iter().enumerate() {
            if let Segment::Capture(name) = segment {
                if name.is_empty() {
                    return fail(PatternErrorKind::EmptyCaptureName);
                }
                if names.contains(&name) {
                    return fail(PatternErrorKind::DuplicateCaptureName);
                }
                names.push(name);
            }
            if *segment == Segment::Rest
                && matches!(
                    segments.get(i + 1),
                    Some(Segment::Any | Segment::Rest | Segment::Capture(_))
                )
            {
                return fail(PatternErrorKind::AmbiguousAfterDoubleStar);
            }
        }
        Ok(Self {
            source: source.to_owned(),
            segments,
        })
    }

    /// The pattern as it was registered.
    pub(crate) fn as_str(&self) -> &str {
        &self.source
    }

    /// Matches the decoded path `segments`; on success returns the captures in pattern order.
    pub(crate) fn matches(&self, segments: &[String]) -> Option<Vec<(String, String)>> {
        let mut captures = Vec::new();
        match_from(&self.segments, segments, &mut captures).then_some(captures)
    }
}

impl Segment {
    fn parse(text: &str) -> Self {
        if text == "**" {
            Self::Rest
        } else if text == "*" {
            Self::Any
        } else if let Some(name) = text.strip_prefix('@') {
            Self::Capture(name.to_owned())
        } else if let Some(name) = text.strip_prefix('{').and_then(|t| t.strip_suffix('}')) {
            Self::Capture(name.to_owned())
        } else if let Some(inner) = text.strip_prefix('*').and_then(|t| t.strip_suffix('*')) {
            Self::Contains(inner.to_owned())
        } else if let Some(suffix) = text.strip_prefix('*') {
            Self::Suffix(suffix.to_owned())
        } else if let Some(prefix) = text.strip_suffix('*') {
            Self::Prefix(prefix.to_owned())
        } else {
            Self::Literal(text.to_owned())
        }
    }

    /// Whether this single-segment matcher accepts `text`; `Rest` is handled by `match_from`.
    fn accepts(&self, text: &str) -> bool {
        match self {
            Self::Literal(literal) => literal == text,
            Self::Any | Self::Capture(_) | Self::Rest => !text.is_empty(),
            Self::Prefix(prefix) => text.starts_with(prefix.as_str()),
            Self::Suffix(suffix) => text.ends_with(suffix.as_str()),
            Self::Contains(inner) => text.contains(inner.as_str()),
        }
    }
}

/// Backtracking matcher: only `**` ever needs to try more than one split.
fn match_from(pattern: &[Segment], path: &[String], captures: &mut Vec<(String, String)>) -> bool {
    let Some((first, pattern_rest)) = pattern.split_first() else {
        return path.is_empty();
    };
    if *first == Segment::Rest {
        // Try swallowing 1, 2, ... segments; stop at the first empty one, which `**` refuses.
        for taken in 1..=path.len() {
            if path[taken - 1].is_empty() {
                return false;
            }
            let mark = captures.len();
            if match_from(pattern_rest, &path[taken..], captures) {
                return true;
            }
            captures.truncate(mark);
        }
        return false;
    }
    let Some((segment, path_rest)) = path.split_first() else {
        return false;
    };
    if !first.accepts(segment) {
        return false;
    }
    if let Segment::Capture(name) = first {
        captures.push((name.clone(), segment.clone()));
    }
    match_from(pattern_rest, path_rest, captures)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Splits a decoded test path the way `Request` does.
    fn segments(path: &str) -> Vec<String> {
        path.strip_prefix('/')
            .expect("test paths start with /")
            .split('/')
            .map(str::to_owned)
            .collect()
    }

    fn matches(pattern: &str, path: &str) -> bool {
        Pattern::parse(pattern)
            .unwrap()
            .matches(&segments(path))
            .is_some()
    }

    fn captures(pattern: &str, path: &str) -> Vec<(String, String)> {
        Pattern::parse(pattern)
            .unwrap()
            .matches(&segments(path))
            .expect("pattern should match")
    }

    fn kind(pattern: &str) -> PatternErrorKind {
        Pattern::parse(pattern).unwrap_err().kind()
    }

    #[test]
    fn literals() {
        assert!(matches("/", "/"));
        assert!(matches("/items", "/items"));
        assert!(!matches("/items", "/item"));
        assert!(!matches("/items", "/items/1"));
        assert!(!matches("/items/1", "/items"));
        assert!(matches("/a*b", "/a*b"), "a star in the middle is a literal");
        assert!(!matches("/a*b", "/axb"));
    }

    #[test]
    fn trailing_slash_is_significant() {
        assert!(!matches("/items", "/items/"));
        assert!(!matches("/items/", "/items"));
        assert!(matches("/items/", "/items/"));
        assert!(
            !matches("/items/*", "/items/"),
            "`*` never matches an empty segment"
        );
    }

    #[test]
    fn single_star() {
        assert!(matches("/*", "/anything"));
        assert!(!matches("/*", "/"));
        assert!(matches("/a/*/c", "/a/b/c"));
        assert!(!matches("/a/*/c", "/a/b/x/c"), "`*` is exactly one segment");
        assert!(!matches("/a/*", "/a"));
    }

    #[test]
    fn partial_wildcards() {
        assert!(matches("/files/*.txt", "/files/notes.txt"));
        assert!(matches("/files/*.txt", "/files/.txt"));
        assert!(!matches("/files/*.txt", "/files/notes.md"));
        assert!(matches("/img-*", "/img-1.png"));
        assert!(!matches("/img-*", "/x-img-1.png"));
        assert!(matches("/*draft*", "/my-draft-2"));
        assert!(matches("/*draft*", "/draft"));
        assert!(!matches("/*draft*", "/final"));
        assert!(
            !matches("/*.txt", "/a/b.txt"),
            "partial wildcards stay in one segment"
        );
    }

    #[test]
    fn double_star() {
        assert!(matches("/static/**", "/static/a"));
        assert!(matches("/static/**", "/static/a/b/c.css"));
        assert!(!matches("/static/**", "/static"));
        assert!(!matches("/static/**", "/static/"));
        assert!(!matches("/static/**", "/static/a/"));
        assert!(matches("/**/edit", "/a/b/edit"));
        assert!(!matches("/**/edit", "/edit"));
        assert!(matches("/a/**/z", "/a/b/c/z"));
        assert!(matches("/**/*.txt", "/x/y/z.txt"));
        assert!(!matches("/**/*.txt", "/z.txt"));
    }

    #[test]
    fn double_star_backtracks() {
        assert!(matches("/**/b/c", "/a/b/b/c"));
        assert_eq!(
            captures("/**/b/@x", "/a/b/b/c"),
            [("x".to_owned(), "c".to_owned())]
        );
    }

    #[test]
    fn captures_both_syntaxes() {
        assert_eq!(
            captures("/users/@user/posts/{post}", "/users/ann/posts/7"),
            [
                ("user".to_owned(), "ann".to_owned()),
                ("post".to_owned(), "7".to_owned())
            ]
        );
        assert!(!matches("/users/@id", "/users/"));
        assert!(!matches("/users/{id}", "/users/a/b"));
    }

    #[test]
    fn invalid_patterns() {
        assert_eq!(kind(""), PatternErrorKind::Empty);
        assert_eq!(kind("items"), PatternErrorKind::NoLeadingSlash);
        assert_eq!(kind("/**/*"), PatternErrorKind::AmbiguousAfterDoubleStar);
        assert_eq!(kind("/**/**"), PatternErrorKind::AmbiguousAfterDoubleStar);
        assert_eq!(kind("/**/@id"), PatternErrorKind::AmbiguousAfterDoubleStar);
        assert_eq!(
            kind("/a/**/{id}"),
            PatternErrorKind::AmbiguousAfterDoubleStar
        );
        assert_eq!(kind("/a/@"), PatternErrorKind::EmptyCaptureName);
        assert_eq!(kind("/a/{}"), PatternErrorKind::EmptyCaptureName);
        assert_eq!(kind("/@a/{a}"), PatternErrorKind::DuplicateCaptureName);
        assert!(
            Pattern::parse("/**/x/*").is_ok(),
            "`*` after a literal is fine"
        );
        let message = Pattern::parse("nope").unwrap_err().to_string();
        assert!(message.contains("\"nope\""), "{message}");
    }
}
