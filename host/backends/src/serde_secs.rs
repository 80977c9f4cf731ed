//! Durations as (fractional) seconds in configuration files, for `#[serde(with = ...)]`.
//!
//! `1.5` reads as 1.5 s and a [`Duration`] writes as its seconds; a negative, infinite or
//! out-of-range number is an error naming the value. [`RetryPolicy`](crate::http::RetryPolicy)
//! (with the `http` feature) and `flowbox::Limits` load their durations this way.
//!
//! ```
//! use std::time::Duration;
//!
//! #[derive(serde::Serialize, serde::Deserialize)]
//! struct Config {
//!     #[serde(with = "flowbox_backends::serde_secs")]
//!     timeout: Duration,
//! }
//!
//! let config: Config = serde_json::from_str(r#"{"timeout": 2.5}"#).unwrap();
//! assert_eq!(config.timeout, Duration::from_millis(2500));
//! assert_eq!(serde_json::to_string(&config).unwrap(), r#"{"timeout":2.5}"#);
//! assert!(serde_json::from_str::<Config>(r#"{"timeout": -1}"#).is_err());
//! ```

use std::time::Duration;

use serde::{Deserialize, Deserializer, Serializer, de::Error};

/// Writes `value` as a number of seconds (fractional when it has a fraction).
pub fn serialize<S: Serializer>(value: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_f64(value.as_secs_f64())
}

/// Reads a number of seconds; one that is no duration is an error saying so.
pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
    let secs = f64::deserialize(deserializer)?;
    Duration::try_from_secs_f64(secs)
        .map_err(|e| D::Error::custom(format!("invalid duration {secs} s: {e}")))
}
