//! `ankh new NAME`: a plugin crate from a template that builds with `ankh build` untouched.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

const CARGO_TOML: &str = include_str!("../../templates/plugin/Cargo.toml.tmpl");
const LIB_RS: &str = include_str!("../../templates/plugin/lib.rs.tmpl");

/// Creates `dir/name` and returns its path. `sdk` is the guest SDK's directory (default: the
/// one next to this host's sources).
pub(crate) fn create(name: &str, dir: &Path, sdk: Option<&Path>) -> anyhow::Result<PathBuf> {
    let valid = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
        && name.as_bytes()[0].is_ascii_lowercase();
    if !valid {
        bail!(
            "invalid plugin name {name:?}: use lowercase letters, digits, '-' and '_', starting with a letter"
        );
    }
    let sdk = match sdk {
        Some(p) => p.to_owned(),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../guest-sdk"),
    };
    let sdk = std::fs::canonicalize(&sdk)
        .with_context(|| format!("guest SDK not found at {} (pass --sdk PATH)", sdk.display()))?;
    let root = dir.join(name);
    if root.exists() {
        bail!("{} already exists", root.display());
    }
    std::fs::create_dir_all(root.join("src"))
        .with_context(|| format!("cannot create {}", root.display()))?;
    let fill = |template: &str| {
        template
            .replace("{{name}}", name)
            .replace("{{sdk}}", &sdk.display().to_string())
    };
    std::fs::write(root.join("Cargo.toml"), fill(CARGO_TOML))?;
    std::fs::write(root.join("src/lib.rs"), fill(LIB_RS))?;
    Ok(root)
}
