//! One manifest line as an item, or the sentence saying why it is none
//! (`plan::manifest`'s module doc lists the fields read).
//!
//! What a line states is checked here, before any file is touched: JSON
//! (serde_json's nesting limit of 128 turns a line nested 100,000 deep into
//! "the line is not JSON: recursion limit exceeded", never a deep
//! recursion), an object, the fields of a NeMo item or a lhotse cut, and
//! times that are finite numbers (a string such as `"NaN"` is not a
//! number; `1e999` is not JSON, serde_json refusing a number out of
//! range), a positive duration, an offset not negative, and both at most
//! [`MAX_TIME_S`].

use serde_json::{Map, Value};

use crate::model::{Rounding, Segment};

/// One usable line.
pub(super) struct Item {
    /// As written in the manifest.
    pub audio: String,
    pub segment: Option<Segment>,
    pub meta: Map<String, Value>,
    /// A lhotse cut's `id` (a string), unique in its manifest.
    pub cut_id: Option<String>,
}

/// Why a line is left out: its audio path when known, and the sentence.
pub(super) type Bad = (Option<String>, String);

/// A line as an item, or why it is none.
pub(super) fn parse_line(text: &str) -> Result<Item, Bad> {
    let v: Value =
        serde_json::from_str(text).map_err(|e| (None, format!("the line is not JSON: {e}")))?;
    let Value::Object(obj) = v else {
        return Err((None, "the line is JSON but not an object".to_string()));
    };
    if obj.contains_key("recording") {
        cut(obj)
    } else if obj.contains_key("audio_filepath") {
        nemo(obj)
    } else {
        Err((
            None,
            "the line is neither a NeMo item (no `audio_filepath`) nor a lhotse cut (no \
             `recording`)"
                .to_string(),
        ))
    }
}

/// A number field: absent, or a finite number.
fn number(obj: &Map<String, Value>, key: &str, audio: &str) -> Result<Option<f64>, Bad> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_f64()
            .filter(|x| x.is_finite())
            .map(Some)
            .ok_or_else(|| {
                (
                    Some(audio.to_string()),
                    format!(
                        "`{key}` is not a number: {}; expected a finite number of seconds",
                        shown(v)
                    ),
                )
            }),
    }
}

/// `v` as JSON, cut to 80 characters: a reason names the value, not all
/// of a huge one.
fn shown(v: &Value) -> String {
    let s = v.to_string();
    match s.char_indices().nth(80) {
        Some((at, _)) => format!("{}…", &s[..at]),
        None => s,
    }
}

/// The longest offset or duration a line may state: 10^7 s (about 116
/// days). Far beyond any recording, and small enough that a time times any
/// sample rate is an exact sample count (under 2^53); `1e308` would
/// overflow the arithmetic that turns seconds into samples.
pub const MAX_TIME_S: f64 = 1e7;

/// `x` as a reason shows it: plain, or in exponent form when huge.
fn secs(x: f64) -> String {
    if x.abs() < 1e15 {
        format!("{x}")
    } else {
        format!("{x:e}")
    }
}

/// `duration` must be positive and `offset` not negative, both at most
/// [`MAX_TIME_S`].
fn check_times(audio: &str, offset: Option<f64>, duration: Option<f64>) -> Result<(), Bad> {
    let bad = |why: String| Err((Some(audio.to_string()), why));
    if let Some(d) = duration {
        if d <= 0.0 {
            return bad(format!(
                "the duration is {} s; it must be positive",
                secs(d)
            ));
        }
        if d > MAX_TIME_S {
            return bad(format!(
                "the duration is {} s; it must be at most {} s (116 days)",
                secs(d),
                secs(MAX_TIME_S)
            ));
        }
    }
    if let Some(o) = offset {
        if o < 0.0 {
            return bad(format!(
                "the offset is {} s; it must not be negative",
                secs(o)
            ));
        }
        if o > MAX_TIME_S {
            return bad(format!(
                "the offset is {} s; it must be at most {} s (116 days)",
                secs(o),
                secs(MAX_TIME_S)
            ));
        }
    }
    Ok(())
}

/// A NeMo item.
fn nemo(obj: Map<String, Value>) -> Result<Item, Bad> {
    let Some(Value::String(audio)) = obj.get("audio_filepath") else {
        return Err((None, "`audio_filepath` is not a string".to_string()));
    };
    let audio = audio.clone();
    if audio.is_empty() {
        return Err((None, "`audio_filepath` is empty".to_string()));
    }
    let duration = number(&obj, "duration", &audio)?;
    let offset = number(&obj, "offset", &audio)?;
    check_times(&audio, offset, duration)?;
    let segment = match (offset, duration) {
        (Some(offset_s), d) => Some(Segment {
            offset_s,
            duration_s: d,
            ..Segment::default()
        }),
        (None, Some(d)) => Some(Segment {
            expect_s: Some(d),
            ..Segment::default()
        }),
        (None, None) => None,
    };
    Ok(Item {
        audio,
        segment,
        meta: obj,
        cut_id: None,
    })
}

/// A lhotse MonoCut.
fn cut(obj: Map<String, Value>) -> Result<Item, Bad> {
    let rec = obj.get("recording").and_then(Value::as_object);
    let source = rec
        .and_then(|r| r.get("sources"))
        .and_then(Value::as_array)
        .and_then(|s| s.first())
        .and_then(Value::as_object)
        .ok_or((None, "the cut's recording has no `sources`".to_string()))?;
    let kind = source.get("type").and_then(Value::as_str).unwrap_or("file");
    let Some(Value::String(audio)) = source.get("source") else {
        return Err((
            None,
            "the recording's first source has no `source` path".into(),
        ));
    };
    if kind != "file" {
        return Err((
            Some(audio.clone()),
            format!("the recording's source is of type `{kind}`; only `file` is read"),
        ));
    }
    let audio = audio.clone();
    if let Some(name) = foreign_transform(rec) {
        return Err((
            Some(audio),
            format!(
                "the recording has the transform `{name}`; melforge reads the source's audio \
                 and applies none but resampling (`Resample`, to the recipe's rate under \
                 input.resample)"
            ),
        ));
    }
    let start = number(&obj, "start", &audio)?.unwrap_or(0.0);
    let duration = number(&obj, "duration", &audio)?
        .ok_or((Some(audio.clone()), "the cut has no `duration`".to_string()))?;
    check_times(&audio, Some(start), Some(duration))?;
    let channel = match obj.get("channel") {
        None | Some(Value::Null) => 0,
        Some(Value::Array(a)) if a.len() == 1 => channel_of(&a[0], &audio)?,
        Some(Value::Array(a)) => {
            return Err((
                Some(audio),
                format!("the cut spans {} channels; one is read", a.len()),
            ));
        }
        Some(v) => channel_of(v, &audio)?,
    };
    let meta = cut_meta(&obj);
    let cut_id = obj.get("id").and_then(Value::as_str).map(str::to_string);
    Ok(Item {
        audio,
        cut_id,
        segment: Some(Segment {
            offset_s: start,
            duration_s: Some(duration),
            channel: Some(channel),
            expect_s: None,
            base_frame: 0,
            lossy: None,
            rounding: Rounding::Lhotse,
        }),
        meta,
    })
}

/// The name of the first of the recording's `transforms` that is not a
/// `Resample` (lhotse's speed or volume perturbation, reverberation, …),
/// whose audio a row of the source's samples would silently not be.
fn foreign_transform(rec: Option<&Map<String, Value>>) -> Option<String> {
    let transforms = rec?.get("transforms")?.as_array()?;
    transforms.iter().find_map(|t| {
        let name = t.get("name").and_then(Value::as_str).unwrap_or("?");
        (name != "Resample").then(|| name.to_string())
    })
}

/// A lhotse cut's metadata: its `id`, `start`, `duration` and `channel`,
/// its recording's id as `recording_id`, the first supervision's `text`,
/// `speaker` and `language`, and its `custom` fields (lhotse Shar's cuts
/// too, `plan::shar`).
pub fn cut_meta(obj: &Map<String, Value>) -> Map<String, Value> {
    let rec = obj.get("recording").and_then(Value::as_object);
    let mut meta = Map::new();
    for key in ["id", "start", "duration", "channel"] {
        if let Some(v) = obj.get(key) {
            meta.insert(key.to_string(), v.clone());
        }
    }
    if let Some(id) = rec.and_then(|r| r.get("id")) {
        meta.insert("recording_id".to_string(), id.clone());
    }
    let sup = obj
        .get("supervisions")
        .and_then(Value::as_array)
        .and_then(|s| s.first())
        .and_then(Value::as_object);
    for key in ["text", "speaker", "language"] {
        if let Some(v) = sup.and_then(|s| s.get(key)) {
            meta.insert(key.to_string(), v.clone());
        }
    }
    if let Some(Value::Object(custom)) = obj.get("custom") {
        for (k, v) in custom {
            meta.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }
    meta
}

fn channel_of(v: &Value, audio: &str) -> Result<u16, Bad> {
    v.as_u64()
        .and_then(|c| u16::try_from(c).ok())
        .ok_or_else(|| {
            (
                Some(audio.to_string()),
                format!("the channel {v} is not an index"),
            )
        })
}
