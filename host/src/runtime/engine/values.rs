//! Configuration values and secrets: what a plugin reads through `wasi:config/store` (and
//! the SDK's `config::get`).
//!
//! A plugin declares each value in its policy (`[[config]]`: a name, a default, whether it is
//! secret, whether it is required), and sees only those, resolved when it loads. The first
//! source that gives a value wins:
//!
//! 1. the environment variable `ANKH_VAR_<PLUGIN>__<NAME>` (both upper-cased, every character
//!    but a letter or a digit written `_`);
//! 2. the secrets file (`--secrets FILE`: a TOML table per plugin, `[shorten] api_key = "..."`)
//!    or directory (`--secrets DIR`: the file `DIR/<plugin>/<name>`, one trailing newline
//!    dropped), which ankh refuses to read while any of its files is readable by its group or
//!    by others;
//! 3. the server's config file (`[[values]] plugin = "...", name = "...", value = "..."`);
//! 4. the policy's default (a secret has none: it does not belong in a file beside the code).
//!
//! A required value that no source gives refuses that plugin's load, with the name and the
//! places looked at; the other plugins keep serving. Values are re-read on SIGHUP and when the
//! secrets file or the config file changes; a plugin whose values changed is reloaded as when
//! its file changes (its running calls finish on the version that started them).
//!
//! A secret's value never leaves the sandbox by the host's hand: it is in no log line, error,
//! metric, `ankh check` or `--print-config` output, and the plugin's own log lines have it
//! masked (`***`) wherever it occurs.

use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use wasmtime_wasi_config::WasiConfigVariables;

use crate::limits::{CONFIG_VALUE_MAX_BYTES, CONFIG_VALUES_PER_PLUGIN, SECRETS_FILE_MAX_BYTES};

/// The prefix of the environment variables that give plugins' values.
pub const ENV_PREFIX: &str = "ANKH_VAR_";

/// What masks a secret in a plugin's log lines.
pub(crate) const MASK: &str = "***";

/// One value a plugin's policy declares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Declared {
    pub name: String,
    /// Used when no source gives the value (never for a secret).
    pub default: Option<String>,
    /// Never logged, printed or counted; masked in the plugin's log lines.
    pub secret: bool,
    /// Without a value from any source, the plugin is refused.
    pub required: bool,
}

impl Declared {
    /// The declaration as the policy file gives it (a secret has no default to show).
    pub(crate) fn row(&self) -> BTreeMap<String, String> {
        let mut row = BTreeMap::from([("name".to_owned(), self.name.clone())]);
        if let Some(default) = &self.default {
            row.insert("default".to_owned(), default.clone());
        }
        if self.secret {
            row.insert("secret".to_owned(), "true".to_owned());
        }
        if self.required {
            row.insert("required".to_owned(), "true".to_owned());
        }
        row
    }
}

/// The `[[config]]` entries of a policy, checked: names `[a-z][a-z0-9_]*` without `__`, each
/// once, at most [`CONFIG_VALUES_PER_PLUGIN`]; a secret has no default.
pub(crate) fn declare(rows: &[BTreeMap<String, String>]) -> Result<Vec<Declared>, String> {
    if rows.len() > CONFIG_VALUES_PER_PLUGIN {
        return Err(format!(
            "{} values declared; at most {CONFIG_VALUES_PER_PLUGIN}",
            rows.len()
        ));
    }
    let mut out: Vec<Declared> = Vec::with_capacity(rows.len());
    for row in rows {
        let name = row["name"].clone();
        if !valid_name(&name) {
            return Err(format!(
                "{name:?} is not a value name: use lower-case letters, digits and single underscores, starting with a letter (at most 64)"
            ));
        }
        if out.iter().any(|d| d.name == name) {
            return Err(format!("{name} is declared twice"));
        }
        let secret = row.get("secret").is_some_and(|v| v == "true");
        let default = row.get("default").cloned();
        if secret && default.is_some() {
            return Err(format!(
                "{name} is secret and has a default: a secret's value comes from the secrets file or the environment, not from a file beside the plugin"
            ));
        }
        if default
            .as_ref()
            .is_some_and(|d| d.len() > CONFIG_VALUE_MAX_BYTES)
        {
            return Err(format!(
                "{name}'s default is longer than {CONFIG_VALUE_MAX_BYTES} bytes"
            ));
        }
        out.push(Declared {
            name,
            default,
            secret,
            required: row.get("required").is_some_and(|v| v == "true"),
        });
    }
    Ok(out)
}

fn valid_name(name: &str) -> bool {
    name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        && !name.contains("__")
}

/// The environment variable that gives `plugin`'s value `name`.
pub fn env_name(plugin: &str, name: &str) -> String {
    let upper = |s: &str| -> String {
        s.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_uppercase()
                } else {
                    '_'
                }
            })
            .collect()
    };
    format!("{ENV_PREFIX}{}__{}", upper(plugin), upper(name))
}

/// A plugin's values, resolved: what its stores read, and its secrets to mask in its logs.
#[derive(Clone, Default)]
pub(crate) struct Resolved {
    pub(crate) vars: Arc<WasiConfigVariables>,
    pub(crate) secrets: Arc<[String]>,
}

impl std::fmt::Debug for Resolved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resolved").finish_non_exhaustive()
    }
}

/// Values by plugin, then name.
type Table = HashMap<String, HashMap<String, String>>;

/// The sources of values besides the environment and the policies: the secrets file and the
/// server's config file, as last read.
pub struct Sources {
    secrets: Option<PathBuf>,
    config_file: Option<PathBuf>,
    read: RwLock<Read>,
}

#[derive(Default)]
struct Read {
    secrets: Table,
    file: Table,
}

impl std::fmt::Debug for Sources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sources")
            .field("secrets", &self.secrets)
            .field("config_file", &self.config_file)
            .finish_non_exhaustive()
    }
}

impl Sources {
    /// No secrets file and no config file: the environment and the defaults only.
    pub fn none() -> Sources {
        Sources {
            secrets: None,
            config_file: None,
            read: RwLock::default(),
        }
    }

    /// Reads the secrets file (or directory) now, beside the values the config file gave
    /// (`values`, its `[[values]]` rows as the server's configuration read them): an error
    /// names the file and why, never a value.
    pub fn new(
        secrets: Option<PathBuf>,
        config_file: Option<PathBuf>,
        values: &[BTreeMap<String, String>],
    ) -> anyhow::Result<Sources> {
        let read = Read {
            secrets: read_secrets(secrets.as_deref())?,
            file: by_plugin(values),
        };
        Ok(Sources {
            secrets,
            config_file,
            read: RwLock::new(read),
        })
    }

    /// The files a change to which re-reads the values.
    pub(crate) fn files(&self) -> impl Iterator<Item = &Path> {
        self.secrets
            .iter()
            .chain(&self.config_file)
            .map(PathBuf::as_path)
    }

    /// Reads both files again; on an error, the values read before stay.
    pub(crate) fn reread(&self) -> anyhow::Result<()> {
        let secrets = read_secrets(self.secrets.as_deref())?;
        let file = match &self.config_file {
            Some(path) => by_plugin(&crate::config::file_values(path)?),
            None => Table::new(),
        };
        *self.read.write().unwrap_or_else(|e| e.into_inner()) = Read { secrets, file };
        Ok(())
    }

    /// A digest of everything that could give `plugin` a value: it changes when one of its
    /// values does. Never shown.
    pub(crate) fn fingerprint(&self, plugin: &str) -> u64 {
        let read = self.read.read().unwrap_or_else(|e| e.into_inner());
        let mut h = std::collections::hash_map::DefaultHasher::new();
        for table in [&read.secrets, &read.file] {
            let mut entries: Vec<_> = table.get(plugin).into_iter().flatten().collect();
            entries.sort();
            entries.hash(&mut h);
        }
        h.finish()
    }

    /// `plugin`'s declared values, each from the first source that gives it.
    pub(crate) fn resolve(&self, plugin: &str, declared: &[Declared]) -> Result<Resolved, String> {
        let read = self.read.read().unwrap_or_else(|e| e.into_inner());
        let from = |table: &Table, name: &str| table.get(plugin).and_then(|m| m.get(name)).cloned();
        let mut vars = WasiConfigVariables::new();
        let mut secrets = Vec::new();
        for d in declared {
            let env = env_name(plugin, &d.name);
            let value = match std::env::var(&env) {
                Ok(value) => Some(value),
                Err(std::env::VarError::NotUnicode(_)) => {
                    return Err(format!("value {} ({env}) is not UTF-8", d.name));
                }
                Err(std::env::VarError::NotPresent) => from(&read.secrets, &d.name)
                    .or_else(|| {
                        let value = from(&read.file, &d.name);
                        if value.is_some() && d.secret {
                            tracing::warn!(
                                "the secret {} of plugin {plugin} is given in the config file: prefer --secrets (a file only its owner reads) or {env}",
                                d.name
                            );
                        }
                        value
                    })
                    .or_else(|| d.default.clone()),
            };
            let Some(value) = value else {
                if d.required {
                    return Err(format!(
                        "the required value {} is given nowhere (looked in {env}, {}, {} and the policy's default)",
                        d.name,
                        self.secrets
                            .as_ref()
                            .map_or("no secrets file".to_owned(), |p| format!(
                                "the secrets at {}",
                                p.display()
                            )),
                        self.config_file
                            .as_ref()
                            .map_or("no config file".to_owned(), |p| format!("{}", p.display())),
                    ));
                }
                continue;
            };
            if value.len() > CONFIG_VALUE_MAX_BYTES {
                return Err(format!(
                    "value {} is {} bytes, over {CONFIG_VALUE_MAX_BYTES}",
                    d.name,
                    value.len()
                ));
            }
            if d.secret && !value.is_empty() {
                secrets.push(value.clone());
            }
            vars.insert(d.name.clone(), value);
        }
        Ok(Resolved {
            vars: Arc::new(vars),
            secrets: secrets.into(),
        })
    }
}

/// The config file's `[[values]]` rows (`plugin`, `name`, `value`), by plugin and name.
fn by_plugin(rows: &[BTreeMap<String, String>]) -> Table {
    let mut table = Table::new();
    for row in rows {
        table
            .entry(row["plugin"].clone())
            .or_default()
            .insert(row["name"].clone(), row["value"].clone());
    }
    table
}

/// Reads a secrets file (TOML, a table per plugin) or directory (`DIR/<plugin>/<name>`),
/// refusing any file its group or others may read; none: nothing.
fn read_secrets(path: Option<&Path>) -> anyhow::Result<Table> {
    let Some(path) = path else {
        return Ok(Table::new());
    };
    let meta = std::fs::metadata(path)
        .map_err(|e| anyhow::anyhow!("cannot read the secrets at {}: {e}", path.display()))?;
    if !meta.is_dir() {
        let text = read_private(path)?;
        let doc: toml::Table = text.parse().map_err(|e: toml::de::Error| {
            // The parser's message quotes the line, which may hold a secret: only where.
            let line = e
                .span()
                .map(|s| 1 + text[..s.start.min(text.len())].matches('\n').count());
            anyhow::anyhow!(
                "the secrets file {} is not valid TOML{}",
                path.display(),
                line.map_or(String::new(), |l| format!(" (line {l})"))
            )
        })?;
        let mut table = Table::new();
        for (plugin, values) in doc {
            let toml::Value::Table(values) = values else {
                anyhow::bail!(
                    "the secrets file {}: `{plugin}` is not a table of a plugin's values",
                    path.display()
                );
            };
            let mut out = HashMap::new();
            for (name, value) in values {
                let toml::Value::String(value) = value else {
                    anyhow::bail!(
                        "the secrets file {}: {plugin}.{name} is not a string",
                        path.display()
                    );
                };
                out.insert(name, value);
            }
            table.insert(plugin, out);
        }
        return Ok(table);
    }
    let mut table = Table::new();
    let list = |dir: &Path| -> anyhow::Result<Vec<std::fs::DirEntry>> {
        let mut entries = std::fs::read_dir(dir)
            .map_err(|e| anyhow::anyhow!("cannot read the secrets at {}: {e}", dir.display()))?
            .collect::<Result<Vec<_>, _>>()?;
        entries.sort_by_key(std::fs::DirEntry::file_name);
        Ok(entries)
    };
    for plugin in list(path)? {
        let Some(name) = plugin.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        // Kubernetes' secret volumes keep their own entries (`..data`) beside the files.
        if name.starts_with('.') || !plugin.path().is_dir() {
            continue;
        }
        let mut out = HashMap::new();
        for file in list(&plugin.path())? {
            let Some(key) = file.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            if key.starts_with('.') || !file.path().is_file() {
                continue;
            }
            let mut value = read_private(&file.path())?;
            if value.ends_with('\n') {
                value.pop();
            }
            out.insert(key, value);
        }
        table.insert(name, out);
    }
    Ok(table)
}

/// A file's text, if only its owner may read it and it is not too large.
fn read_private(path: &Path) -> anyhow::Result<String> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(path)
        .map_err(|e| anyhow::anyhow!("cannot read the secrets at {}: {e}", path.display()))?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        anyhow::bail!(
            "refusing to read the secrets at {}: its group or others may read it (mode {mode:03o}); `chmod 600` it",
            path.display()
        );
    }
    if meta.len() > SECRETS_FILE_MAX_BYTES {
        anyhow::bail!(
            "the secrets at {} are {} bytes, over {SECRETS_FILE_MAX_BYTES}",
            path.display(),
            meta.len()
        );
    }
    let bytes = std::fs::read(path)
        .map_err(|e| anyhow::anyhow!("cannot read the secrets at {}: {e}", path.display()))?;
    String::from_utf8(bytes)
        .map_err(|_| anyhow::anyhow!("the secrets at {} are not UTF-8", path.display()))
}

/// `text` with every secret in `secrets` replaced by [`MASK`].
pub(crate) fn mask<'a>(text: &'a str, secrets: &[String]) -> std::borrow::Cow<'a, str> {
    let mut out = std::borrow::Cow::Borrowed(text);
    for secret in secrets {
        if out.contains(secret.as_str()) {
            out = std::borrow::Cow::Owned(out.replace(secret.as_str(), MASK));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(entries: &[&[(&str, &str)]]) -> Vec<BTreeMap<String, String>> {
        entries
            .iter()
            .map(|e| {
                e.iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect()
            })
            .collect()
    }

    #[test]
    fn declarations_are_checked() {
        let ok = declare(&rows(&[
            &[
                ("name", "api_key"),
                ("secret", "true"),
                ("required", "true"),
            ],
            &[("name", "greeting"), ("default", "hi")],
        ]))
        .unwrap();
        assert_eq!(ok.len(), 2);
        assert!(ok[0].secret && ok[0].required && ok[0].default.is_none());
        for (bad, why) in [
            (vec![&[("name", "Api")][..]], "not a value name"),
            (vec![&[("name", "a__b")][..]], "not a value name"),
            (
                vec![&[("name", "a")][..], &[("name", "a")][..]],
                "declared twice",
            ),
            (
                vec![&[("name", "k"), ("secret", "true"), ("default", "x")][..]],
                "secret and has a default",
            ),
        ] {
            let e = declare(&rows(&bad)).unwrap_err();
            assert!(e.contains(why), "{e}");
        }
    }

    #[test]
    fn env_names_are_upper_case_with_a_double_underscore() {
        assert_eq!(
            env_name("url-shortener", "api_key"),
            "ANKH_VAR_URL_SHORTENER__API_KEY"
        );
    }

    #[test]
    fn secrets_are_masked_wherever_they_occur() {
        let secrets = vec!["s3cr3t".to_owned()];
        assert_eq!(mask("key=s3cr3t and s3cr3t!", &secrets), "key=*** and ***!");
        assert!(matches!(
            mask("nothing", &secrets),
            std::borrow::Cow::Borrowed(_)
        ));
    }

    #[test]
    fn a_secrets_file_others_may_read_is_refused_and_its_errors_hold_no_value() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("ankh-secrets-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("secrets.toml");
        std::fs::write(&file, "[p]\nkey = \"hunter2\"\n").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = Sources::new(Some(file.clone()), None, &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("mode 644"), "{e}");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        let sources = Sources::new(Some(file.clone()), None, &[]).unwrap();
        let declared = declare(&rows(&[&[("name", "key"), ("secret", "true")]])).unwrap();
        let resolved = sources.resolve("p", &declared).unwrap();
        assert_eq!(&*resolved.secrets, ["hunter2".to_owned()]);
        // Another plugin sees nothing of it.
        assert!(sources.resolve("q", &declared).unwrap().secrets.is_empty());
        std::fs::write(&file, "[p]\nkey = \"hunter2\n").unwrap();
        let e = sources.reread().unwrap_err().to_string();
        assert!(!e.contains("hunter2") && e.contains("line 2"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_value_over_its_bound_refuses_the_plugin_without_quoting_it() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("ankh-secrets-big-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("secrets.toml");
        let big = "z".repeat(CONFIG_VALUE_MAX_BYTES + 1);
        std::fs::write(&file, format!("[p]\nkey = \"{big}\"\n")).unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        let sources = Sources::new(Some(file), None, &[]).unwrap();
        let declared = declare(&rows(&[&[("name", "key"), ("secret", "true")]])).unwrap();
        let e = sources.resolve("p", &declared).unwrap_err();
        assert!(e.contains("value key is 65537 bytes, over 65536"), "{e}");
        assert!(!e.contains("zzz"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_secrets_directory_holds_a_file_per_value() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("ankh-secrets-dir-{}", std::process::id()));
        let plugin = dir.join("p");
        std::fs::create_dir_all(&plugin).unwrap();
        // Kubernetes' own entries are skipped.
        std::fs::create_dir_all(dir.join("..data")).unwrap();
        let key = plugin.join("key");
        std::fs::write(&key, "hunter2\n").unwrap();
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o400)).unwrap();
        let sources = Sources::new(Some(dir.clone()), None, &[]).unwrap();
        let declared = declare(&rows(&[&[("name", "key"), ("secret", "true")]])).unwrap();
        let resolved = sources.resolve("p", &declared).unwrap();
        // One trailing newline dropped.
        assert_eq!(&*resolved.secrets, ["hunter2".to_owned()]);
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o440)).unwrap();
        let e = sources.reread().unwrap_err().to_string();
        assert!(e.contains("mode 440"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
