//! Settings declared once: a [`Setting`] names its key in the file, its flag, its kind (a
//! number with its unit and range, a switch, a path...), its default and its doc line, and
//! says how its value lands in the configuration it belongs to. Everything else is derived
//! from that one declaration, here, for every setting alike:
//! - reading a TOML file ([`load_file`]): unknown keys refused, types checked, ranges checked,
//!   every error naming the file, the line and the key;
//! - the command-line flags ([`Flags`], a clap `Args`), whose `--help` line shows the real
//!   default and the config key;
//! - printing the effective configuration back in the file's own format ([`to_toml`]).
//!
//! The server's settings are in [`crate::config`], a plugin policy's in
//! [`crate::runtime::engine::policy`]; both use this machinery, so a file is read one way.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use toml::Spanned;
use toml::de::{DeTable, DeValue};

/// A value of a setting, in the setting's own unit (milliseconds, MiB...).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    Number(u64),
    Bool(bool),
    Text(String),
    Path(PathBuf),
    Address(SocketAddr),
    List(Vec<String>),
    /// A list of tables, each as key → value text (a policy's granted directories).
    Tables(Vec<BTreeMap<String, String>>),
    /// Not set (an optional setting without a default).
    Unset,
}

impl Value {
    pub(crate) fn number(&self) -> u64 {
        match self {
            Value::Number(n) => *n,
            _ => 0,
        }
    }

    pub(crate) fn bool(&self) -> bool {
        matches!(self, Value::Bool(true))
    }

    pub(crate) fn text(&self) -> String {
        match self {
            Value::Text(t) => t.clone(),
            _ => String::new(),
        }
    }

    pub(crate) fn path(&self) -> Option<PathBuf> {
        match self {
            Value::Path(p) => Some(p.clone()),
            _ => None,
        }
    }

    pub(crate) fn address(&self) -> Option<SocketAddr> {
        match self {
            Value::Address(a) => Some(*a),
            _ => None,
        }
    }

    pub(crate) fn list(&self) -> Vec<String> {
        match self {
            Value::List(l) => l.clone(),
            _ => Vec::new(),
        }
    }

    /// The value as a person writes it in a file or on the command line.
    pub fn display(&self) -> String {
        match self {
            Value::Number(n) => n.to_string(),
            Value::Bool(b) => b.to_string(),
            Value::Text(t) => t.clone(),
            Value::Path(p) => p.display().to_string(),
            Value::Address(a) => a.to_string(),
            Value::List(l) => format!("{l:?}"),
            Value::Tables(t) => format!("{} entries", t.len()),
            Value::Unset => "none".to_owned(),
        }
    }

    fn to_toml(&self) -> Option<toml::Value> {
        Some(match self {
            Value::Number(n) => toml::Value::Integer(i64::try_from(*n).ok()?),
            Value::Bool(b) => toml::Value::Boolean(*b),
            Value::Text(t) => toml::Value::String(t.clone()),
            Value::Path(p) => toml::Value::String(p.display().to_string()),
            Value::Address(a) => toml::Value::String(a.to_string()),
            Value::List(l) => {
                toml::Value::Array(l.iter().cloned().map(toml::Value::String).collect())
            }
            Value::Tables(t) => toml::Value::Array(
                t.iter()
                    .map(|row| {
                        toml::Value::Table(
                            row.iter()
                                .map(|(k, v)| (k.clone(), toml::Value::String(v.clone())))
                                .collect(),
                        )
                    })
                    .collect(),
            ),
            Value::Unset => return None,
        })
    }
}

/// The unit of a number, shown in `--help` and named by the key's suffix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Count,
    Bytes,
    Millis,
    Mib,
}

impl Unit {
    /// The placeholder in `--help`.
    fn placeholder(self) -> &'static str {
        match self {
            Unit::Count => "N",
            Unit::Bytes => "BYTES",
            Unit::Millis => "MS",
            Unit::Mib => "MIB",
        }
    }
}

/// What a setting holds, and how text becomes that.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    /// A whole number within `min..=max`.
    Number { unit: Unit, min: u64, max: u64 },
    /// On or off.
    Switch,
    /// Free text, parsed where it lands (the setting's `apply`).
    Text,
    /// A number from 0 to 1 (a share), kept as the text given.
    Fraction,
    /// One of these words.
    Choice(&'static [&'static str]),
    /// A path; from a file, relative to the file's directory.
    Path,
    /// `IP:PORT`, or `NAME:PORT` resolved.
    Address,
    /// A list of strings, parsed where they land (the setting's `apply`).
    List,
    /// A list of tables with these string keys, which must all be given but the optional
    /// ones.
    Tables {
        keys: &'static [&'static str],
        optional: &'static [&'static str],
    },
}

/// How a setting is given on the command line.
#[derive(Debug, Clone, Copy)]
pub enum Flag {
    /// Only in the file.
    None,
    /// `--long VALUE` (and `-s VALUE`).
    Value {
        long: &'static str,
        short: Option<char>,
    },
    /// `--long` turns a switch that is on by default off.
    Off(&'static str),
    /// `--long` turns a switch that is off by default on.
    On(&'static str),
    /// `--long [VALUE]`: without a value, `missing`.
    OptionalValue {
        long: &'static str,
        missing: &'static str,
    },
}

/// One setting of a configuration `C`.
pub struct Setting<C> {
    /// `key` at the top of the file, or `section.key`.
    pub key: &'static str,
    pub flag: Flag,
    pub kind: Kind,
    /// One line for `--help` and the docs.
    pub doc: &'static str,
    /// The value when neither the file nor a flag gives one.
    pub default: fn() -> Value,
    /// Puts a value into the configuration, parsing it if it is text: this is the one place
    /// a value is parsed, so an error says why the text does not fit.
    pub apply: fn(&mut C, Value) -> Result<(), String>,
    /// Reads it back, for `--print-config`.
    pub read: fn(&C) -> Value,
}

impl<C> Clone for Setting<C> {
    fn clone(&self) -> Self {
        Setting {
            key: self.key,
            flag: self.flag,
            kind: self.kind,
            doc: self.doc,
            default: self.default,
            apply: self.apply,
            read: self.read,
        }
    }
}

impl<C> std::fmt::Debug for Setting<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Setting").field("key", &self.key).finish()
    }
}

impl<C> Setting<C> {
    /// The flag's long name, if it has one.
    pub fn long(&self) -> Option<&'static str> {
        match self.flag {
            Flag::Value { long, .. }
            | Flag::Off(long)
            | Flag::On(long)
            | Flag::OptionalValue { long, .. } => Some(long),
            Flag::None => None,
        }
    }

    /// What `--help` says: the doc line, the real default and the key in the file.
    pub(crate) fn help(&self) -> String {
        let mut help = self.doc.to_owned();
        let default = (self.default)();
        match (&self.flag, &default) {
            (Flag::Off(_) | Flag::On(_), _) => {}
            (_, Value::Unset) => {}
            (_, default) => {
                let _ = write!(help, " [default: {}]", default.display());
            }
        }
        if let Kind::Number { min, max, .. } = self.kind {
            let _ = write!(help, " [range: {min}-{max}]");
        }
        let _ = write!(help, " [config: {}]", self.key);
        help
    }

    /// Parses text given for this setting (a flag's value), or says why it is wrong.
    fn parse_text(&self, text: &str) -> Result<Value, String> {
        match self.kind {
            Kind::Number { min, max, .. } => {
                let n: u64 = text
                    .trim()
                    .parse()
                    .map_err(|_| format!("must be a whole number, got {text:?}"))?;
                within(n, min, max)
            }
            Kind::Switch => match text {
                "true" => Ok(Value::Bool(true)),
                "false" => Ok(Value::Bool(false)),
                _ => Err(format!("must be true or false, got {text:?}")),
            },
            Kind::Text => Ok(Value::Text(text.to_owned())),
            Kind::Fraction => match text.trim().parse::<f64>() {
                Ok(share) if (0.0..=1.0).contains(&share) => Ok(Value::Text(text.trim().to_owned())),
                _ => Err(format!("must be a number from 0 to 1, got {text:?}")),
            },
            Kind::Choice(words) => {
                if words.contains(&text) {
                    Ok(Value::Text(text.to_owned()))
                } else {
                    Err(format!("must be {}, got {text:?}", one_of(words)))
                }
            }
            Kind::Path => Ok(Value::Path(PathBuf::from(text))),
            Kind::Address => resolve(text).map(Value::Address).map_err(|why| {
                format!(
                    "invalid address {text:?}: expected IP:PORT or HOST:PORT, e.g. 127.0.0.1:8080 ({why})"
                )
            }),
            Kind::List => Ok(Value::List(vec![text.to_owned()])),
            Kind::Tables { .. } => Err("cannot be given as a flag".to_owned()),
        }
    }

    /// Reads this setting's value from a file.
    fn parse_toml(&self, value: &Spanned<DeValue<'_>>, base: &Path) -> Result<Value, String> {
        let found = value.get_ref();
        let wrong = || {
            format!(
                "expected {}, found {}",
                self.kind.expected(),
                found.type_str()
            )
        };
        match self.kind {
            Kind::Number { min, max, .. } => {
                let n = found
                    .as_integer()
                    .and_then(|i| u64::from_str_radix(i.as_str(), i.radix()).ok())
                    .ok_or_else(|| match found.as_integer() {
                        Some(i) => format!("must be between {min} and {max}, got {i}"),
                        None => wrong(),
                    })?;
                within(n, min, max)
            }
            Kind::Switch => found.as_bool().map(Value::Bool).ok_or_else(wrong),
            Kind::Path => {
                let text = found.as_str().ok_or_else(wrong)?;
                let path = PathBuf::from(text);
                Ok(Value::Path(if path.is_relative() {
                    base.join(path)
                } else {
                    path
                }))
            }
            Kind::List => {
                let items = found.as_array().ok_or_else(wrong)?;
                let mut out = Vec::with_capacity(items.len());
                for item in items {
                    let text = item.get_ref().as_str().ok_or_else(|| {
                        format!(
                            "expected a list of strings, found {}",
                            item.get_ref().type_str()
                        )
                    })?;
                    out.push(text.to_owned());
                }
                Ok(Value::List(out))
            }
            Kind::Tables { keys, optional } => {
                let items = found.as_array().ok_or_else(wrong)?;
                let mut out = Vec::with_capacity(items.len());
                for item in items {
                    let table = item.get_ref().as_table().ok_or_else(|| {
                        format!(
                            "expected a list of tables, found {}",
                            item.get_ref().type_str()
                        )
                    })?;
                    let mut row = BTreeMap::new();
                    for (k, v) in table {
                        let k = k.get_ref();
                        if !keys.contains(&k.as_ref()) {
                            return Err(format!("unknown field `{k}`, expected {}", one_of(keys)));
                        }
                        let v = match v.get_ref() {
                            DeValue::String(s) => s.to_string(),
                            DeValue::Boolean(b) => b.to_string(),
                            other => {
                                return Err(format!(
                                    "`{k}`: expected a string or a boolean, found {}",
                                    other.type_str()
                                ));
                            }
                        };
                        row.insert(k.to_string(), v);
                    }
                    if let Some(missing) = keys
                        .iter()
                        .find(|k| !optional.contains(k) && !row.contains_key(**k))
                    {
                        return Err(format!("missing field `{missing}`"));
                    }
                    out.push(row);
                }
                Ok(Value::Tables(out))
            }
            Kind::Text | Kind::Choice(_) | Kind::Address => {
                let text = found.as_str().ok_or_else(wrong)?;
                self.parse_text(text)
            }
            Kind::Fraction => {
                let text = found
                    .as_float()
                    .map(|f| f.as_str())
                    .or_else(|| found.as_integer().map(|i| i.as_str()))
                    .ok_or_else(wrong)?;
                self.parse_text(text)
            }
        }
    }
}

impl Kind {
    fn expected(&self) -> &'static str {
        match self {
            Kind::Number { .. } => "a whole number",
            Kind::Switch => "true or false",
            Kind::Text | Kind::Choice(_) | Kind::Path | Kind::Address => "a string",
            Kind::Fraction => "a number from 0 to 1",
            Kind::List => "a list of strings",
            Kind::Tables { .. } => "a list of tables",
        }
    }
}

fn within(n: u64, min: u64, max: u64) -> Result<Value, String> {
    if n < min || n > max {
        return Err(format!("must be between {min} and {max}, got {n}"));
    }
    Ok(Value::Number(n))
}

fn one_of(words: &[&str]) -> String {
    let quoted: Vec<String> = words.iter().map(|w| format!("{w:?}")).collect();
    match quoted.as_slice() {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} or {last}", init.join(", ")),
    }
}

/// `IP:PORT`, or `NAME:PORT` resolved as every server resolves its listen address (the first
/// IPv4 address of the name, else its first address).
pub(crate) fn resolve(text: &str) -> Result<SocketAddr, String> {
    if let Ok(addr) = text.parse() {
        return Ok(addr);
    }
    if !text.contains(':') {
        return Err("no port".to_owned());
    }
    let addrs: Vec<SocketAddr> = std::net::ToSocketAddrs::to_socket_addrs(text)
        .map_err(|e| e.to_string())?
        .collect();
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or(addrs.first())
        .copied()
        .ok_or_else(|| "the name has no address".to_owned())
}

/// Where a value came from: the default, a line of a file, or a flag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Origin {
    Default,
    File { path: PathBuf, line: usize },
    Flag(&'static str),
}

impl Origin {
    /// How an error names the place: `ankh.toml:7: limits.queue_depth`, or `--queue-depth`.
    pub(crate) fn describe(&self, key: &str) -> String {
        match self {
            Origin::File { path, line } => format!("{}:{line}: {key}", path.display()),
            Origin::Flag(long) => format!("--{long}"),
            Origin::Default => key.to_owned(),
        }
    }
}

/// A setting's value could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingsError {
    /// The file is not TOML.
    #[error("invalid config file {path}: {message}")]
    Syntax { path: PathBuf, message: String },
    /// A value (or key) is wrong; `place` says where (`file:line: key`, or `--flag`).
    #[error("{place}: {message}")]
    Value { place: String, message: String },
}

/// The values a file or the flags gave, with where each came from.
pub(crate) type Given = Vec<(&'static str, Value, Origin)>;

/// Reads `text` (the file at `path`) against `settings`: every key must be one of them, in its
/// section; relative paths are taken from `path`'s directory.
pub(crate) fn load_file<C>(
    settings: &[Setting<C>],
    path: &Path,
    text: &str,
) -> Result<Given, SettingsError> {
    let root = DeTable::parse(text).map_err(|e| SettingsError::Syntax {
        path: path.to_owned(),
        message: e.to_string().trim_end().to_owned(),
    })?;
    let base = path.parent().unwrap_or(Path::new("."));
    let at = |span: std::ops::Range<usize>| Origin::File {
        path: path.to_owned(),
        line: 1 + text.as_bytes()[..span.start.min(text.len())]
            .iter()
            .filter(|&&b| b == b'\n')
            .count(),
    };
    let sections: Vec<&str> = settings
        .iter()
        .filter_map(|s| s.key.split_once('.').map(|(section, _)| section))
        .collect();
    let mut given = Vec::new();
    let mut visit = |prefix: &str, table: &DeTable<'_>| -> Result<(), SettingsError> {
        for (key, value) in table {
            let name = key.get_ref().as_ref();
            let full = if prefix.is_empty() {
                name.to_owned()
            } else {
                format!("{prefix}.{name}")
            };
            if prefix.is_empty() && sections.contains(&name) && value.get_ref().is_table() {
                continue; // a section: visited below
            }
            let Some(setting) = settings.iter().find(|s| s.key == full) else {
                let known: Vec<&str> = settings
                    .iter()
                    .filter_map(|s| match s.key.split_once('.') {
                        Some((section, key)) if section == prefix => Some(key),
                        None if prefix.is_empty() => Some(s.key),
                        _ => None,
                    })
                    .chain(sections.iter().copied().filter(|_| prefix.is_empty()))
                    .collect::<std::collections::BTreeSet<_>>()
                    .into_iter()
                    .collect();
                return Err(SettingsError::Value {
                    place: at(key.span()).describe(&full),
                    message: format!(
                        "unknown field `{name}`, expected one of: {}",
                        known.join(", ")
                    ),
                });
            };
            let origin = at(value.span());
            let value =
                setting
                    .parse_toml(value, base)
                    .map_err(|message| SettingsError::Value {
                        place: origin.describe(setting.key),
                        message,
                    })?;
            given.push((setting.key, value, origin));
        }
        Ok(())
    };
    visit("", root.get_ref())?;
    let mut seen = std::collections::BTreeSet::new();
    for section in sections.iter().copied() {
        if !seen.insert(section) {
            continue;
        }
        if let Some(value) = root.get_ref().get(section) {
            let Some(table) = value.get_ref().as_table() else {
                return Err(SettingsError::Value {
                    place: at(value.span()).describe(section),
                    message: format!("expected a table, found {}", value.get_ref().type_str()),
                });
            };
            visit(section, table)?;
        }
    }
    Ok(given)
}

/// The effective configuration in the file's own format: every setting, by section, in the
/// order they are declared.
pub(crate) fn to_toml<C>(settings: &[Setting<C>], config: &C) -> String {
    let mut top = String::new();
    let mut sections: Vec<(&str, String)> = Vec::new();
    for setting in settings {
        let Some(mut value) = (setting.read)(config).to_toml() else {
            continue;
        };
        // A share is kept as its text, and written as the number it is.
        if let (Kind::Fraction, toml::Value::String(text)) = (setting.kind, &value)
            && let Ok(share) = text.parse()
        {
            value = toml::Value::Float(share);
        }
        let (section, key) = match setting.key.split_once('.') {
            Some((section, key)) => (Some(section), key),
            None => (None, setting.key),
        };
        let line = format!("{key} = {value}\n");
        match section {
            None => top.push_str(&line),
            Some(section) => match sections.iter_mut().find(|(s, _)| *s == section) {
                Some((_, lines)) => lines.push_str(&line),
                None => sections.push((section, line)),
            },
        }
    }
    for (section, lines) in sections {
        top.push_str(&format!("\n[{section}]\n{lines}"));
    }
    top
}

/// The flags of a list of settings, for clap: one argument per setting that has a flag.
#[derive(Debug, Clone, Default)]
pub struct Flags {
    /// `(long name, value text)` for each flag given; a switch turned off gives `"false"`.
    pub given: Vec<(&'static str, String)>,
}

impl Flags {
    /// The clap arguments of `settings`.
    pub fn args<C>(settings: &[Setting<C>]) -> Vec<clap::Arg> {
        settings
            .iter()
            .filter_map(|s| {
                let arg = match s.flag {
                    Flag::None => return None,
                    Flag::Value { long, short } => {
                        let mut arg = clap::Arg::new(long)
                            .long(long)
                            .value_name(s.placeholder())
                            .action(clap::ArgAction::Set);
                        if let Some(short) = short {
                            arg = arg.short(short);
                        }
                        arg
                    }
                    Flag::Off(long) | Flag::On(long) => clap::Arg::new(long)
                        .long(long)
                        .action(clap::ArgAction::SetTrue),
                    Flag::OptionalValue { long, missing } => clap::Arg::new(long)
                        .long(long)
                        .value_name(s.placeholder())
                        .num_args(0..=1)
                        .default_missing_value(missing)
                        .action(clap::ArgAction::Set),
                };
                Some(arg.help(s.help()))
            })
            .collect()
    }

    /// The flags given, from clap's matches.
    pub fn from_matches<C>(settings: &[Setting<C>], matches: &clap::ArgMatches) -> Flags {
        let mut given = Vec::new();
        for s in settings {
            match s.flag {
                Flag::None => {}
                Flag::Value { long, .. } | Flag::OptionalValue { long, .. } => {
                    if let Some(v) = matches.get_one::<String>(long) {
                        given.push((long, v.clone()));
                    }
                }
                Flag::Off(long) => {
                    if matches.get_flag(long) {
                        given.push((long, "false".to_owned()));
                    }
                }
                Flag::On(long) => {
                    if matches.get_flag(long) {
                        given.push((long, "true".to_owned()));
                    }
                }
            }
        }
        Flags { given }
    }

    /// Parses the values given against `settings`.
    pub(crate) fn parse<C>(&self, settings: &[Setting<C>]) -> Result<Given, SettingsError> {
        let mut out = Vec::new();
        for (long, text) in &self.given {
            let Some(setting) = settings.iter().find(|s| s.long() == Some(*long)) else {
                continue;
            };
            let value = setting
                .parse_text(text)
                .map_err(|message| SettingsError::Value {
                    place: format!("--{long}"),
                    message,
                })?;
            out.push((setting.key, value, Origin::Flag(long)));
        }
        Ok(out)
    }
}

impl<C> Setting<C> {
    fn placeholder(&self) -> &'static str {
        match self.kind {
            Kind::Number { unit, .. } => unit.placeholder(),
            Kind::Path => "PATH",
            Kind::Address => "ADDR",
            Kind::Choice(_) | Kind::Text | Kind::List | Kind::Tables { .. } => "VALUE",
            Kind::Fraction => "SHARE",
            Kind::Switch => "BOOL",
        }
    }
}

/// Builds a configuration: the defaults of `settings`, then each layer of values in turn
/// (the file, then the flags), applied into `config`. Returns where each key's value came
/// from, for errors found later; a value its setting cannot take is refused with its place.
pub(crate) fn layer<C>(
    settings: &[Setting<C>],
    config: &mut C,
    layers: &[Given],
) -> Result<BTreeMap<&'static str, Origin>, SettingsError> {
    let mut origins = BTreeMap::new();
    for setting in settings {
        (setting.apply)(config, (setting.default)()).map_err(|message| SettingsError::Value {
            place: format!("the default of {}", setting.key),
            message,
        })?;
        origins.insert(setting.key, Origin::Default);
    }
    for layer in layers {
        for (key, value, origin) in layer {
            if let Some(setting) = settings.iter().find(|s| s.key == *key) {
                (setting.apply)(config, value.clone()).map_err(|message| SettingsError::Value {
                    place: origin.describe(setting.key),
                    message,
                })?;
                origins.insert(setting.key, origin.clone());
            }
        }
    }
    Ok(origins)
}

/// Sets `slot` to `value`: the `apply` of a setting whose value needs no parsing.
pub(crate) fn set<T>(slot: &mut T, value: T) -> Result<(), String> {
    *slot = value;
    Ok(())
}

/// Parses `text` into `slot`: the `apply` of a setting whose text is a typed value.
pub(crate) fn parse_into<T: std::str::FromStr<Err = String>>(
    slot: &mut T,
    text: &str,
) -> Result<(), String> {
    *slot = text.parse()?;
    Ok(())
}

/// Whether a plugin's policy may give its own value for a server setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Override {
    /// The server's value holds for every plugin.
    Never,
    /// A policy may lower it (a smaller number), never raise it past the server's.
    Lower,
    /// A policy may set any value within the setting's range.
    Any,
}
