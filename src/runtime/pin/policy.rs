//! The pin policy as the user writes it: `"auto"`, `"off"` or an explicit CPU
//! list such as `"0,2,4-7"` (config keys `io.pin` / `compute.pin`).
//!
//! Owns parsing ([`PinPolicy::from_str`], errors that name the bad part) and
//! the inverse spelling ([`compact_list`], used by `Display`, so a policy
//! prints back to a string that parses to the same policy). Pure: no system
//! calls, nothing about which CPUs exist (that check is
//! [`super::validate_cores`]).

use std::fmt;
use std::str::FromStr;

/// Largest CPU id accepted in an explicit list (Linux supports at most 8192).
pub(super) const MAX_CPU_ID: usize = 8191;

/// How the user wants threads placed (config key `io.pin` / `compute.pin`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub enum PinPolicy {
    /// Let [`plan`](super::plan) choose from the machine's topology.
    Auto,
    /// Do not pin; the kernel schedules freely.
    Off,
    /// Explicit logical CPU ids (OS indices), used round robin.
    Cores(Vec<usize>),
}

/// A pin policy string that does not parse; the message names the bad part.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ParsePinPolicyError(String);

const EXPECTED: &str = r#"expected "auto", "off" or a CPU list like "0,2,4-7""#;

impl FromStr for PinPolicy {
    type Err = ParsePinPolicyError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |msg: String| Err(ParsePinPolicyError(msg));
        let text = s.trim();
        if text.is_empty() {
            return err(format!("empty pin policy; {EXPECTED}"));
        }
        if text.eq_ignore_ascii_case("auto") {
            return Ok(PinPolicy::Auto);
        }
        if text.eq_ignore_ascii_case("off") {
            return Ok(PinPolicy::Off);
        }
        let mut cpus: Vec<usize> = Vec::new();
        for item in text.split(',').map(str::trim) {
            if item.is_empty() {
                return err(format!("empty entry in CPU list {text:?}; {EXPECTED}"));
            }
            let parse_id = |part: &str| -> Result<usize, ParsePinPolicyError> {
                let id: usize = part.trim().parse().map_err(|_| {
                    ParsePinPolicyError(format!(
                        "{item:?} is not a CPU number or range (in {text:?}); {EXPECTED}"
                    ))
                })?;
                if id > MAX_CPU_ID {
                    return Err(ParsePinPolicyError(format!(
                        "CPU {id} is out of range (at most {MAX_CPU_ID}) in {text:?}"
                    )));
                }
                Ok(id)
            };
            let (lo, hi) = match item.split_once('-') {
                Some((a, b)) => (parse_id(a)?, parse_id(b)?),
                None => {
                    let id = parse_id(item)?;
                    (id, id)
                }
            };
            if lo > hi {
                return err(format!(
                    "range {item:?} is reversed in {text:?}; write it low-high"
                ));
            }
            for id in lo..=hi {
                if cpus.contains(&id) {
                    return err(format!("CPU {id} is listed twice in {text:?}"));
                }
                cpus.push(id);
            }
        }
        Ok(PinPolicy::Cores(cpus))
    }
}

impl fmt::Display for PinPolicy {
    /// The config spelling, which parses back to the same policy.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PinPolicy::Auto => f.write_str("auto"),
            PinPolicy::Off => f.write_str("off"),
            PinPolicy::Cores(cpus) => f.write_str(&compact_list(cpus)),
        }
    }
}

/// `[0, 2, 4, 5, 6, 7]` → `"0,2,4-7"` (runs of consecutive ids as ranges).
pub(super) fn compact_list(cpus: &[usize]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
            j += 1;
        }
        parts.push(if j > i {
            format!("{}-{}", cpus[i], cpus[j])
        } else {
            cpus[i].to_string()
        });
        i = j + 1;
    }
    parts.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_err(s: &str) -> String {
        s.parse::<PinPolicy>().unwrap_err().to_string()
    }

    #[test]
    fn parse_valid_policies() {
        assert_eq!("auto".parse(), Ok(PinPolicy::Auto));
        assert_eq!(" AUTO ".parse(), Ok(PinPolicy::Auto));
        assert_eq!("off".parse(), Ok(PinPolicy::Off));
        assert_eq!("Off".parse(), Ok(PinPolicy::Off));
        assert_eq!("3".parse(), Ok(PinPolicy::Cores(vec![3])));
        assert_eq!("4-4".parse(), Ok(PinPolicy::Cores(vec![4])));
        assert_eq!(
            "0,2,4-7".parse(),
            Ok(PinPolicy::Cores(vec![0, 2, 4, 5, 6, 7]))
        );
        assert_eq!(" 1 , 3 - 4 ".parse(), Ok(PinPolicy::Cores(vec![1, 3, 4])));
        assert_eq!(
            "5,1".parse(),
            Ok(PinPolicy::Cores(vec![5, 1])),
            "order is kept"
        );
    }

    #[test]
    fn parse_invalid_policies_say_why() {
        assert!(parse_err("").contains("empty pin policy"));
        assert!(parse_err("   ").contains("expected \"auto\""));
        assert!(parse_err("fast").contains("\"fast\" is not a CPU number or range"));
        assert!(parse_err("0;1").contains("\"0;1\" is not a CPU number"));
        assert!(parse_err("1-").contains("\"1-\" is not a CPU number or range"));
        assert!(parse_err("-1").contains("\"-1\" is not a CPU number or range"));
        assert!(parse_err("7-4").contains("range \"7-4\" is reversed"));
        assert!(parse_err("0,,1").contains("empty entry in CPU list \"0,,1\""));
        assert!(parse_err("0,").contains("empty entry"));
        assert!(parse_err("0-3,2").contains("CPU 2 is listed twice"));
        assert!(parse_err("99999").contains("CPU 99999 is out of range"));
    }

    #[test]
    fn policy_display_round_trips() {
        for s in ["auto", "off", "0,2,4-7", "5,1", "3"] {
            let p: PinPolicy = s.parse().unwrap();
            assert_eq!(p.to_string(), s);
            assert_eq!(p.to_string().parse::<PinPolicy>().unwrap(), p);
        }
    }

    #[test]
    fn compact_list_makes_ranges() {
        assert_eq!(compact_list(&[0, 2, 4, 5, 6, 7]), "0,2,4-7");
        assert_eq!(compact_list(&[]), "");
        assert_eq!(compact_list(&[3, 2]), "3,2");
    }
}
