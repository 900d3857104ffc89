//! A room's spatial mode: off, panned or binaural (docs/features/spatial.md).

use std::fmt;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize};
use utoipa::openapi::schema::{ObjectBuilder, OneOfBuilder, SchemaType, Type};
use utoipa::openapi::{RefOr, Schema};

/// How a room places its speakers: not at all, on an arc by panning, or on
/// the arc through a dummy head's impulse responses (for headphones).
/// Written `true` (panned), `false` (off) or by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SpatialMode {
    /// Every voice from the middle, one mono render.
    #[default]
    Off,
    /// Seats on an arc, constant-power panning.
    Panned,
    /// Seats on the arc, rendered through head-related impulse responses.
    Binaural,
}

impl SpatialMode {
    /// Whether speakers sit on seats (panned or binaural).
    pub fn is_spatial(self) -> bool {
        self != Self::Off
    }
}

impl From<bool> for SpatialMode {
    fn from(on: bool) -> Self {
        if on { Self::Panned } else { Self::Off }
    }
}

impl<'de> Deserialize<'de> for SpatialMode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Mode;
        impl Visitor<'_> for Mode {
            type Value = SpatialMode;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(r#"true, false, "off", "panned" or "binaural""#)
            }
            fn visit_bool<E: de::Error>(self, on: bool) -> Result<SpatialMode, E> {
                Ok(on.into())
            }
            fn visit_str<E: de::Error>(self, name: &str) -> Result<SpatialMode, E> {
                // "true" and "false" too: an override (`--set`, the
                // environment) is text, typed like the default ("off").
                match name {
                    "off" | "false" => Ok(SpatialMode::Off),
                    "panned" | "true" => Ok(SpatialMode::Panned),
                    "binaural" => Ok(SpatialMode::Binaural),
                    _ => Err(E::invalid_value(de::Unexpected::Str(name), &self)),
                }
            }
        }
        d.deserialize_any(Mode)
    }
}

impl utoipa::PartialSchema for SpatialMode {
    fn schema() -> RefOr<Schema> {
        let names = ObjectBuilder::new()
            .schema_type(SchemaType::Type(Type::String))
            .enum_values(Some(["off", "panned", "binaural"]));
        let on = ObjectBuilder::new().schema_type(SchemaType::Type(Type::Boolean));
        OneOfBuilder::new()
            .item(names)
            .item(on)
            .description(Some(r#"`"off"`, `"panned"` or `"binaural"`; `true` is `"panned"`, `false` `"off"`"#))
            .into()
    }
}

impl utoipa::ToSchema for SpatialMode {}

#[cfg(test)]
mod tests {
    use super::SpatialMode;

    #[test]
    fn booleans_and_names_are_read_and_a_bad_name_is_told() {
        let read = |s: &str| serde_json::from_str::<SpatialMode>(s);
        assert_eq!(read("true").expect("true"), SpatialMode::Panned);
        assert_eq!(read("false").expect("false"), SpatialMode::Off);
        assert_eq!(read(r#""binaural""#).expect("binaural"), SpatialMode::Binaural);
        assert_eq!(read(r#""true""#).expect("an override's text"), SpatialMode::Panned);
        let err = read(r#""hrtf""#).expect_err("unknown").to_string();
        assert!(err.contains(r#""panned" or "binaural""#), "{err}");
        assert_eq!(serde_json::to_string(&SpatialMode::Binaural).expect("json"), r#""binaural""#);
    }
}
