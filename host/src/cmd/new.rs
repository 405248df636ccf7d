//! `ankh new NAME`: a plugin crate from a template that builds with `ankh build` untouched;
//! with `--schedule`, a scheduled job too, and the policy that declares its schedule.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

const CARGO_TOML: &str = include_str!("../../templates/plugin/Cargo.toml.tmpl");
const LIB_RS: &str = include_str!("../../templates/plugin/lib.rs.tmpl");

/// What `--schedule` puts in place of the template's export: a job and the export with it.
const JOBS_RS: &str = include_str!("../../templates/plugin/jobs.rs.tmpl");

/// The policy `--schedule` writes as `DIR/NAME.toml`.
const POLICY_TOML: &str = include_str!("../../templates/plugin/policy.toml.tmpl");

/// The template's export line, which `--schedule` replaces.
const EXPORT: &str = "ankh_guest::export_plugin!(router);\n";

/// Creates `dir/name` and returns its path. `sdk` is the guest SDK's directory (default: the
/// one next to this host's sources). `schedule`: with a scheduled job, and `dir/name.toml`.
pub(crate) fn create(
    name: &str,
    dir: &Path,
    sdk: Option<&Path>,
    schedule: bool,
) -> anyhow::Result<PathBuf> {
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
    let policy = dir.join(format!("{name}.toml"));
    if schedule && policy.exists() {
        bail!("{} already exists", policy.display());
    }
    std::fs::create_dir_all(root.join("src"))
        .with_context(|| format!("cannot create {}", root.display()))?;
    let fill = |template: &str| {
        template
            .replace("{{name}}", name)
            .replace("{{sdk}}", &sdk.display().to_string())
    };
    std::fs::write(root.join("Cargo.toml"), fill(CARGO_TOML))?;
    let mut lib = fill(LIB_RS);
    if schedule {
        debug_assert!(lib.contains(EXPORT), "the template exports its router");
        lib = lib.replace(EXPORT, &fill(JOBS_RS));
        std::fs::write(&policy, fill(POLICY_TOML))
            .with_context(|| format!("cannot write {}", policy.display()))?;
    }
    std::fs::write(root.join("src/lib.rs"), lib)?;
    Ok(root)
}
