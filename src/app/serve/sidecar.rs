//! A dropped file's sidecar: the optional JSON object next to it that
//! supplies its row's metadata, stored in the split file's `meta` dataset
//! as a manifest build stores a manifest line's fields (docs/FORMAT.md).
//!
//! For `<dir>/clip.mp3` the sidecar is `<dir>/clip.mp3.json`, else
//! `<dir>/clip.json`; the first that exists is read, once, when the file is
//! taken on. So a sidecar must be in place before its audio file appears
//! (move it in first, as the audio itself is moved in whole); until a
//! `.json` name has appeared anywhere in the drop tree, none is looked for
//! ([`Seen`]). `.json` is no
//! input extension, so a sidecar is never ingested as audio. A sidecar that
//! exists and cannot supply metadata (unreadable, over [`MAX_BYTES`], not
//! JSON, not an object) rejects its file as `bad_sidecar` with the reason:
//! ingesting it without the metadata its owner attached would lose it
//! silently. Fix the sidecar and touch the audio file to have it taken on
//! again.
//!
//! A sidecar follows its file: when serve deletes or moves a file after its
//! commit (`serve.on_success`) or moves a rejected one to the quarantine,
//! the sidecar beside it ([`beside`]) is deleted or moved with it, under the
//! matching name.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Largest sidecar read (1 MiB): metadata, not a payload.
pub const MAX_BYTES: u64 = 1 << 20;

/// Whether the drop tree has held a sidecar's name (`*.json`) since serve
/// started: until it has, no dropped file can have a sidecar, and none is
/// looked for. Looking costs two failed `open`s per file on the loop thread
/// (about 8 µs per file on a 2-core VM when the names are new, as each
/// dropped file's are): a sixth of the loop's time at 20,000 files/s.
///
/// The watcher notes every `.json` name its events carry and the tree
/// walks note every `.json` name a directory lists before they report that
/// directory's files. A sidecar is in place before its audio file appears
/// (the contract above), so its name is noted before the file is taken on:
/// inotify delivers one watch's events in order, and the channel from the
/// watcher thread orders the flag before the file's event. Once set, it
/// stays set.
#[derive(Clone, Debug, Default)]
pub struct Seen(Arc<AtomicBool>);

impl Seen {
    /// Notes `name` (a file name in the drop tree).
    pub fn note(&self, name: &str) {
        if name.ends_with(".json") && !self.any() {
            self.0.store(true, Ordering::Release);
        }
    }

    /// Whether a sidecar's name has been seen.
    pub fn any(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// The sidecar paths of the dropped file `abs`, in the order they are
/// tried.
pub fn candidates(abs: &Path) -> [PathBuf; 2] {
    let mut full = abs.as_os_str().to_os_string();
    full.push(".json");
    [PathBuf::from(full), abs.with_extension("json")]
}

/// The sidecar of the dropped file `abs` that exists now, if any.
pub fn beside(abs: &Path) -> Option<PathBuf> {
    candidates(abs)
        .into_iter()
        .find(|c| c != abs && c.symlink_metadata().is_ok_and(|m| m.is_file()))
}

/// Where the sidecar `side` of `abs` goes when `abs` moves to `to`: the
/// same kind of name beside `to`.
pub fn moved_to(abs: &Path, side: &Path, to: &Path) -> PathBuf {
    let [full, _] = candidates(abs);
    let [to_full, to_stem] = candidates(to);
    if side == full { to_full } else { to_stem }
}

/// Why a sidecar cannot supply its file's metadata (the rejection's
/// reason).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot open its sidecar {}: {source}", path.display())]
    Open {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "its sidecar {} is not a regular file but {kind}; expected one JSON object in a file",
        path.display()
    )]
    NotAFile {
        path: PathBuf,
        kind: crate::reader::FileKind,
    },
    #[error("cannot read its sidecar {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "its sidecar {} is larger than {MAX_BYTES} bytes; a sidecar holds one JSON object of \
         metadata",
        path.display()
    )]
    TooLarge { path: PathBuf },
    #[error("its sidecar {} is not JSON ({source}); expected one JSON object", path.display())]
    NotJson {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error(
        "its sidecar {} holds JSON {found}, not an object; expected one JSON object",
        path.display()
    )]
    NotObject { path: PathBuf, found: &'static str },
}

/// The metadata of the dropped file `abs`: `Ok(None)` when it has no
/// sidecar, `Ok(Some(text))` (the object, compact JSON) when it has one,
/// `Err` when its sidecar cannot be used.
pub fn read(abs: &Path) -> Result<Option<Box<str>>, Error> {
    for path in candidates(abs) {
        if path == abs {
            continue; // a file named `x.json` is its own stem's name
        }
        // Only a regular file is opened, non-blocking: a FIFO named like a
        // sidecar must not hang the service (`reader::open_regular`).
        match crate::reader::open_regular(&path) {
            Ok((f, _)) => return parse(path, f).map(Some),
            Err(crate::reader::Error::Stat(e) | crate::reader::Error::Open(e))
                if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(crate::reader::Error::NotAFile(kind)) => {
                return Err(Error::NotAFile { path, kind });
            }
            Err(crate::reader::Error::Stat(source) | crate::reader::Error::Open(source)) => {
                return Err(Error::Open { path, source });
            }
            Err(e) => {
                return Err(Error::Open {
                    path,
                    source: std::io::Error::other(e),
                });
            }
        }
    }
    Ok(None)
}

/// Fuzz entry point (`melforge::fuzzing` lists it): `data` as a sidecar's
/// bytes. It gives the object as compact JSON, which reads back as itself,
/// or a rejection that says what was expected.
#[cfg(feature = "test-hooks")]
#[doc(hidden)]
pub fn fuzz_sidecar(data: &[u8]) {
    match parse(PathBuf::from("clip.wav.json"), data) {
        Ok(text) => {
            let again = parse(PathBuf::from("again.json"), text.as_bytes())
                .expect("the compact JSON of an object reads back");
            assert_eq!(again, text, "compact JSON is a fixed point");
            assert!(text.starts_with('{') && text.ends_with('}'));
        }
        Err(e) => {
            let says = e.to_string();
            assert!(
                says.contains("expected one JSON object") || says.contains("larger than"),
                "{says}"
            );
            assert!(matches!(
                e,
                Error::NotJson { .. } | Error::NotObject { .. } | Error::TooLarge { .. }
            ));
        }
    }
}

/// The sidecar `path`'s object, from `f` (read up to [`MAX_BYTES`] + 1).
fn parse(path: PathBuf, f: impl Read) -> Result<Box<str>, Error> {
    let mut text = Vec::new();
    if let Err(source) = f.take(MAX_BYTES + 1).read_to_end(&mut text) {
        return Err(Error::Read { path, source });
    }
    if text.len() as u64 > MAX_BYTES {
        return Err(Error::TooLarge { path });
    }
    let value: serde_json::Value = match serde_json::from_slice(&text) {
        Ok(v) => v,
        Err(source) => return Err(Error::NotJson { path, source }),
    };
    if !value.is_object() {
        let found = kind(&value);
        return Err(Error::NotObject { path, found });
    }
    Ok(value.to_string().into_boxed_str())
}

fn kind(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A number the default float parser rounded 1 ULP off (…665e52 where
    /// the value is …666e52): the compact JSON did not read back as itself
    /// (the `sidecar` fuzz target, fuzz/corpus/sidecar/float_not_a_fixed_point).
    #[test]
    fn compact_json_reads_back_as_itself_for_a_long_number() {
        let text = br#"{"a":66466666366666666652664666663666666666666666662269767}"#;
        let once = parse(PathBuf::from("a.json"), &text[..]).unwrap();
        let twice = parse(PathBuf::from("b.json"), once.as_bytes()).unwrap();
        assert_eq!(once, twice);
        // The value is the correctly rounded one (Rust's own parser's).
        let exact: f64 = "66466666366666666652664666663666666666666666662269767"
            .parse()
            .unwrap();
        let v: serde_json::Value = serde_json::from_str(&once).unwrap();
        assert_eq!(v["a"].as_f64(), Some(exact), "{once}");
    }

    #[test]
    fn the_full_name_wins_over_the_stem_and_none_is_no_metadata() {
        let d = tempfile::tempdir().unwrap();
        let audio = d.path().join("clip.mp3");
        assert!(read(&audio).unwrap().is_none());
        std::fs::write(d.path().join("clip.json"), r#"{"text": "stem"}"#).unwrap();
        assert_eq!(read(&audio).unwrap().as_deref(), Some(r#"{"text":"stem"}"#));
        std::fs::write(
            d.path().join("clip.mp3.json"),
            "{\"text\": \"ça va\", \"speaker\": 7}\n",
        )
        .unwrap();
        assert_eq!(
            read(&audio).unwrap().as_deref(),
            Some(r#"{"speaker":7,"text":"ça va"}"#)
        );
    }

    #[test]
    fn a_sidecar_moves_under_the_matching_name() {
        let d = tempfile::tempdir().unwrap();
        let audio = d.path().join("a.flac");
        let to = Path::new("/q/sub/a.flac");
        assert_eq!(beside(&audio), None);
        std::fs::write(d.path().join("a.json"), "{}").unwrap();
        let side = beside(&audio).unwrap();
        assert_eq!(moved_to(&audio, &side, to), Path::new("/q/sub/a.json"));
        std::fs::write(d.path().join("a.flac.json"), "{}").unwrap();
        let side = beside(&audio).unwrap();
        assert_eq!(side, d.path().join("a.flac.json"));
        assert_eq!(moved_to(&audio, &side, to), Path::new("/q/sub/a.flac.json"));
    }

    #[test]
    fn a_sidecar_that_cannot_be_used_says_where_and_what_was_expected() {
        let d = tempfile::tempdir().unwrap();
        let audio = d.path().join("a.wav");
        let side = d.path().join("a.wav.json");
        for (text, says) in [
            ("{\"text\": ", "is not JSON"),
            ("[1, 2]", "holds JSON an array, not an object"),
            ("\"hi\"", "holds JSON a string, not an object"),
            ("", "is not JSON"),
        ] {
            std::fs::write(&side, text).unwrap();
            let e = read(&audio).unwrap_err().to_string();
            assert!(e.contains(says), "{text:?}: {e}");
            assert!(e.contains(&side.display().to_string()), "{e}");
            assert!(e.contains("expected one JSON object"), "{e}");
        }
        let big = format!("{{\"x\": \"{}\"}}", "a".repeat(MAX_BYTES as usize));
        std::fs::write(&side, big).unwrap();
        assert!(
            read(&audio)
                .unwrap_err()
                .to_string()
                .contains("larger than 1048576 bytes")
        );
        std::fs::remove_file(&side).unwrap();
        std::fs::create_dir(&side).unwrap();
        let e = read(&audio).unwrap_err().to_string();
        assert!(e.contains("is not a regular file but a directory"), "{e}");
        std::fs::remove_dir(&side).unwrap();
    }

    /// Regression: a FIFO named like a sidecar was opened blocking, and the
    /// open waited for a writer for ever, stopping the service's intake.
    #[test]
    fn a_fifo_sidecar_is_refused_without_blocking() {
        let d = tempfile::tempdir().unwrap();
        let audio = d.path().join("a.wav");
        let side = d.path().join("a.wav.json");
        let c = std::ffi::CString::new(side.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: `c` is a NUL-terminated path that outlives the call.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        let e = read(&audio).unwrap_err().to_string();
        assert!(e.contains("is not a regular file but a FIFO"), "{e}");
        assert!(e.contains(&side.display().to_string()), "{e}");
    }
}
