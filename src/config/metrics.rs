//! The `[metrics]` section: where the Prometheus endpoint listens (read by
//! `app::metrics`) → validated [`MetricsConfig`].
//!
//! Invariant of the validated form: `listen` is a socket address (`IP:port`;
//! IPv6 as `[::1]:9464`), or `None` when the key is absent, which turns the
//! endpoint off. Names are not resolved: a metrics port is bound before any
//! DNS is trustworthy at boot, and `localhost` would hide which family binds.

use std::net::SocketAddr;

use serde::Deserialize;

use super::{Ctx, Error};

/// `[metrics]` as written by users.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMetrics {
    /// Address the Prometheus text exposition is served on at `/metrics`
    /// during `serve` and `build`, e.g. "127.0.0.1:9464" (absent: no endpoint).
    pub listen: Option<String>,
}

/// Validated metrics settings.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct MetricsConfig {
    pub listen: Option<SocketAddr>,
}

impl MetricsConfig {
    pub(super) fn from_raw(m: &RawMetrics, cx: &Ctx) -> Result<MetricsConfig, Error> {
        let listen = m
            .listen
            .as_deref()
            .map(|s| {
                s.trim().parse::<SocketAddr>().map_err(|e| {
                    cx.invalid(
                        "metrics.listen",
                        format!("{s:?} ({e}); expected IP:port, e.g. \"127.0.0.1:9464\""),
                    )
                })
            })
            .transpose()?;
        Ok(MetricsConfig { listen })
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    #[test]
    fn absent_is_off_and_an_address_parses() {
        assert_eq!(Config::parse("", "t").unwrap().metrics.listen, None);
        let c = Config::parse("[metrics]\nlisten = \"127.0.0.1:9464\"\n", "t").unwrap();
        assert_eq!(c.metrics.listen, Some("127.0.0.1:9464".parse().unwrap()));
        let c = Config::parse("[metrics]\nlisten = \"[::1]:0\"\n", "t").unwrap();
        assert!(c.metrics.listen.unwrap().is_ipv6());
    }

    #[test]
    fn a_bad_address_names_the_key_and_line() {
        for bad in ["localhost:9464", "127.0.0.1", "127.0.0.1:99999", ""] {
            let text = format!("[output]\n\n[metrics]\nlisten = \"{bad}\"\n");
            let e = Config::parse(&text, "f.toml").unwrap_err().to_string();
            assert!(
                e.starts_with("f.toml:4: invalid value for `metrics.listen`"),
                "{bad}: {e}"
            );
            assert!(e.contains("expected IP:port"), "{e}");
        }
    }
}
