//! Arrow values of one row as melforge reads them from a parquet batch: the
//! audio column's bytes and path, and the scalar metadata columns as JSON.
//!
//! Which columns are metadata ([`is_scalar`]): strings, booleans, integers,
//! floats, `null`, dates, times, timestamps, and dictionaries of those.
//! How they read: integers as JSON integers (`u64` past `i64::MAX`
//! included), floats as numbers (NaN and infinities as `null`, JSON has
//! neither), dictionary values as the value, dates as `2024-01-31`, times
//! as `HH:MM:SS[.fff]`, timestamps as ISO 8601 (a timestamp with a time zone
//! holds a UTC instant and is written in UTC with `Z`; one without is local
//! time and has no suffix). A null is `null`. Nothing here allocates beyond
//! the value returned, and nothing panics on a column of another type: the
//! accessors answer `None` or `null`.

use arrow_array::Array;
use arrow_array::cast::AsArray;
use arrow_array::types::{
    Date32Type, Date64Type, Float16Type, Float32Type, Float64Type, Int8Type, Int16Type, Int32Type,
    Int64Type, Time32MillisecondType, Time32SecondType, Time64MicrosecondType,
    Time64NanosecondType, TimestampMicrosecondType, TimestampMillisecondType,
    TimestampNanosecondType, TimestampSecondType, UInt8Type, UInt16Type, UInt32Type, UInt64Type,
};
use arrow_schema::{DataType, TimeUnit};
use serde_json::Value;

pub(super) fn is_binary(t: &DataType) -> bool {
    matches!(
        t,
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView
    )
}

pub(super) fn is_string(t: &DataType) -> bool {
    matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View)
}

/// A column whose values become JSON scalars in `Row::meta`.
pub(super) fn is_scalar(t: &DataType) -> bool {
    use DataType as D;
    match t {
        D::Null | D::Boolean | D::Float16 | D::Float32 | D::Float64 => true,
        D::Int8 | D::Int16 | D::Int32 | D::Int64 => true,
        D::UInt8 | D::UInt16 | D::UInt32 | D::UInt64 => true,
        D::Date32 | D::Date64 | D::Timestamp(..) | D::Time32(_) | D::Time64(_) => true,
        D::Dictionary(_, values) => is_scalar(values),
        t => is_string(t),
    }
}

/// The bytes of a binary array's row `i` (`None` when null or not binary).
pub(super) fn binary_at(a: &dyn Array, i: usize) -> Option<&[u8]> {
    if a.is_null(i) {
        return None;
    }
    match a.data_type() {
        DataType::Binary => Some(a.as_binary::<i32>().value(i)),
        DataType::LargeBinary => Some(a.as_binary::<i64>().value(i)),
        DataType::BinaryView => Some(a.as_binary_view().value(i)),
        _ => None,
    }
}

/// The text of a string array's row `i` (`None` when null or not a string).
pub(super) fn string_at(a: &dyn Array, i: usize) -> Option<&str> {
    if a.is_null(i) {
        return None;
    }
    match a.data_type() {
        DataType::Utf8 => Some(a.as_string::<i32>().value(i)),
        DataType::LargeUtf8 => Some(a.as_string::<i64>().value(i)),
        DataType::Utf8View => Some(a.as_string_view().value(i)),
        _ => None,
    }
}

/// Row `i` of a scalar column as JSON ([`is_scalar`]'s types; anything else
/// is `null`).
pub(super) fn scalar_at(a: &dyn Array, i: usize) -> Value {
    use DataType as D;
    if a.is_null(i) {
        return Value::Null;
    }
    let float = |x: f64| serde_json::Number::from_f64(x).map_or(Value::Null, Value::Number);
    let iso = |t: Option<String>| t.map_or(Value::Null, Value::String);
    match a.data_type() {
        D::Boolean => Value::Bool(a.as_boolean().value(i)),
        D::Int8 => a.as_primitive::<Int8Type>().value(i).into(),
        D::Int16 => a.as_primitive::<Int16Type>().value(i).into(),
        D::Int32 => a.as_primitive::<Int32Type>().value(i).into(),
        D::Int64 => a.as_primitive::<Int64Type>().value(i).into(),
        D::UInt8 => a.as_primitive::<UInt8Type>().value(i).into(),
        D::UInt16 => a.as_primitive::<UInt16Type>().value(i).into(),
        D::UInt32 => a.as_primitive::<UInt32Type>().value(i).into(),
        D::UInt64 => a.as_primitive::<UInt64Type>().value(i).into(),
        D::Float16 => float(a.as_primitive::<Float16Type>().value(i).to_f64()),
        D::Float32 => float(f64::from(a.as_primitive::<Float32Type>().value(i))),
        D::Float64 => float(a.as_primitive::<Float64Type>().value(i)),
        D::Date32 => iso(a
            .as_primitive::<Date32Type>()
            .value_as_date(i)
            .map(|d| d.to_string())),
        D::Date64 => iso(a
            .as_primitive::<Date64Type>()
            .value_as_date(i)
            .map(|d| d.to_string())),
        D::Time32(_) | D::Time64(_) => iso(time_at(a, i)),
        D::Timestamp(unit, tz) => iso(timestamp_at(a, unit, tz.is_some(), i)),
        D::Dictionary(..) => {
            let dict = a.as_any_dictionary();
            let key = dict.normalized_keys().get(i).copied();
            key.map_or(Value::Null, |k| scalar_at(dict.values().as_ref(), k))
        }
        t if is_string(t) => string_at(a, i).map_or(Value::Null, |s| Value::String(s.to_owned())),
        _ => Value::Null,
    }
}

/// `HH:MM:SS[.fff…]` of a time column's row `i`.
fn time_at(a: &dyn Array, i: usize) -> Option<String> {
    let t = match a.data_type() {
        DataType::Time32(TimeUnit::Second) => a.as_primitive::<Time32SecondType>().value_as_time(i),
        DataType::Time32(_) => a.as_primitive::<Time32MillisecondType>().value_as_time(i),
        DataType::Time64(TimeUnit::Microsecond) => {
            a.as_primitive::<Time64MicrosecondType>().value_as_time(i)
        }
        DataType::Time64(_) => a.as_primitive::<Time64NanosecondType>().value_as_time(i),
        _ => None,
    };
    t.map(|t| t.format("%H:%M:%S%.f").to_string())
}

/// ISO 8601 of a timestamp column's row `i`; with a time zone the instant is
/// stored in UTC, so it is written in UTC with `Z`.
fn timestamp_at(a: &dyn Array, unit: &TimeUnit, zoned: bool, i: usize) -> Option<String> {
    let t = match unit {
        TimeUnit::Second => a.as_primitive::<TimestampSecondType>().value_as_datetime(i),
        TimeUnit::Millisecond => a
            .as_primitive::<TimestampMillisecondType>()
            .value_as_datetime(i),
        TimeUnit::Microsecond => a
            .as_primitive::<TimestampMicrosecondType>()
            .value_as_datetime(i),
        TimeUnit::Nanosecond => a
            .as_primitive::<TimestampNanosecondType>()
            .value_as_datetime(i),
    };
    let zone = if zoned { "Z" } else { "" };
    t.map(|t| format!("{}{zone}", t.format("%Y-%m-%dT%H:%M:%S%.f")))
}
