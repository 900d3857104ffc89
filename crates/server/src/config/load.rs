//! The layers: the defaults as a TOML table, the file laid over them
//! (unknown keys refused), then the `TUTTI_*` variables and `key=value`
//! overrides, each leaf typed like the default it replaces.

use std::path::Path;

use super::Config;
use super::error::{ConfigError, parse_err};

impl Config {
    /// Builds the configuration: defaults, then `file` (if any), then the
    /// `TUTTI_*` variables among `env`, then `overrides` (`key.path=value`),
    /// then validation.
    pub fn load(
        file: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
        overrides: &[(String, String)],
    ) -> Result<Self, ConfigError> {
        let mut table = toml::Table::try_from(Config::default()).map_err(|e| parse_err("defaults", e))?;
        if let Some(path) = file {
            let origin = path.display().to_string();
            let text =
                std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: origin.clone(), source })?;
            let over: toml::Table = text.parse().map_err(|e| parse_err(&origin, e))?;
            merge(&mut table, over, "", &origin)?;
        }
        let mut leaves = Vec::new();
        collect_leaves(&table, "", &mut leaves);
        let env: Vec<(String, String)> = env.into_iter().filter(|(k, _)| k.starts_with("TUTTI_")).collect();
        for path in &leaves {
            let name = env_name(path);
            if let Some((_, value)) = env.iter().find(|(k, _)| *k == name) {
                set(&mut table, path, value, &format!("environment variable {name}"))?;
            }
        }
        for (path, value) in overrides {
            if !leaves.contains(path) {
                return Err(ConfigError::UnknownKey { origin: "command line".to_owned(), key: path.clone() });
            }
            set(&mut table, path, value, &format!("--{}", path.replace(['.', '_'], "-")))?;
        }
        let cfg: Config = table.try_into().map_err(|e| parse_err("configuration", e))?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// The `TUTTI_*` variables in `env` that name no key (likely typos).
    pub fn unknown_env(env: impl IntoIterator<Item = (String, String)>) -> Vec<String> {
        let mut leaves = Vec::new();
        if let Ok(table) = toml::Table::try_from(Config::default()) {
            collect_leaves(&table, "", &mut leaves);
        }
        let known: Vec<String> = leaves.iter().map(|p| env_name(p)).collect();
        env.into_iter().map(|(k, _)| k).filter(|k| k.starts_with("TUTTI_") && !known.contains(k)).collect()
    }
}

/// `room.max_speakers` → `TUTTI_ROOM_MAX_SPEAKERS`.
fn env_name(path: &str) -> String {
    format!("TUTTI_{}", path.replace('.', "_").to_ascii_uppercase())
}

fn collect_leaves(table: &toml::Table, prefix: &str, out: &mut Vec<String>) {
    for (k, v) in table {
        let path = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
        match v {
            toml::Value::Table(t) => collect_leaves(t, &path, out),
            _ => out.push(path),
        }
    }
}

/// Settings whose value is a word (a mode) and may also be `true`/`false`.
const BOOL_OR_WORD: &[&str] = &["room.spatial"];

/// Lays `over` on `base`, refusing keys `base` does not have.
fn merge(base: &mut toml::Table, over: toml::Table, prefix: &str, origin: &str) -> Result<(), ConfigError> {
    for (k, v) in over {
        let path = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
        match (base.get_mut(&k), v) {
            (None, _) => return Err(ConfigError::UnknownKey { origin: origin.to_owned(), key: path }),
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => merge(b, o, &path, origin)?,
            (Some(toml::Value::Table(_)), _) => {
                return Err(parse_err(origin, format!("'{path}' is a section ([{path}]), not a value")));
            }
            (Some(toml::Value::Float(slot)), toml::Value::Integer(i)) => *slot = i as f64,
            // A mode that was once an on/off switch: `true`/`false` still say on and off.
            (Some(slot @ toml::Value::String(_)), toml::Value::Boolean(on))
                if BOOL_OR_WORD.contains(&path.as_str()) =>
            {
                *slot = toml::Value::String(on.to_string());
            }
            (Some(slot), v) => {
                if std::mem::discriminant(slot) != std::mem::discriminant(&v) {
                    let want = slot.type_str();
                    return Err(parse_err(origin, format!("'{path}' must be {} {want}", article(want))));
                }
                *slot = v;
            }
        }
    }
    Ok(())
}

fn article(word: &str) -> &'static str {
    if word.starts_with(['a', 'e', 'i', 'o', 'u']) { "an" } else { "a" }
}

/// Sets the leaf at `path` from text, typed like the default it replaces.
fn set(table: &mut toml::Table, path: &str, text: &str, origin: &str) -> Result<(), ConfigError> {
    let mut keys = path.split('.').peekable();
    let mut t = table;
    while let Some(k) = keys.next() {
        if keys.peek().is_none() {
            let slot = t
                .get_mut(k)
                .ok_or_else(|| ConfigError::UnknownKey { origin: origin.to_owned(), key: path.to_owned() })?;
            let bad = |what: &str| parse_err(origin, format!("'{text}' is not {what}"));
            *slot = match slot {
                toml::Value::String(_) => toml::Value::String(text.to_owned()),
                toml::Value::Integer(_) => toml::Value::Integer(text.trim().parse().map_err(|_| bad("an integer"))?),
                toml::Value::Float(_) => toml::Value::Float(text.trim().parse().map_err(|_| bad("a number"))?),
                toml::Value::Boolean(_) => toml::Value::Boolean(text.trim().parse().map_err(|_| bad("true or false"))?),
                // A list: TOML (`["a", "b"]`), or words separated by commas (`a,b`; empty = none).
                toml::Value::Array(_) => match format!("v = {text}").parse::<toml::Table>() {
                    Ok(mut t) if text.trim_start().starts_with('[') => t.remove("v").ok_or_else(|| bad("a list"))?,
                    _ if text.trim_start().starts_with('[') => return Err(bad("a list like [\"a\", \"b\"]")),
                    _ => toml::Value::Array(
                        text.split(',')
                            .map(str::trim)
                            .filter(|w| !w.is_empty())
                            .map(|w| toml::Value::String(w.to_owned()))
                            .collect(),
                    ),
                },
                _ => return Err(bad("a supported value")),
            };
            return Ok(());
        }
        t = match t.get_mut(k) {
            Some(toml::Value::Table(inner)) => inner,
            _ => return Err(ConfigError::UnknownKey { origin: origin.to_owned(), key: path.to_owned() }),
        };
    }
    Err(ConfigError::UnknownKey { origin: origin.to_owned(), key: path.to_owned() })
}
