//! [`ParamValue`]: one recorded recipe parameter (a dataset's root attribute),
//! typed so a writer can store integers, reals and flags as such.

use std::fmt;

/// The value of one recipe parameter.
#[derive(Clone, Debug, PartialEq)]
pub enum ParamValue {
    Int(i64),
    Real(f64),
    Bool(bool),
    Text(&'static str),
}

impl fmt::Display for ParamValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParamValue::Int(v) => write!(f, "{v}"),
            ParamValue::Real(v) => write!(f, "{v:?}"),
            ParamValue::Bool(v) => write!(f, "{v}"),
            ParamValue::Text(v) => f.write_str(v),
        }
    }
}
