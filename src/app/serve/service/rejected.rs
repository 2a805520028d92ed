//! serve's `<output_dir>/rejected.jsonl`: one JSON line per rejected file,
//! appended durably before the journal commits the rejections.
//!
//! Order at a commit: the lines are appended and `fdatasync`ed (and the
//! output directory fsynced when the file is new), then the journal commits,
//! then the post-commit actions run (a quarantine move of the rejected file).
//! A power loss therefore never keeps a rejection in the journal, or a moved
//! file, without its line; a crash between the append and the commit repeats
//! the line when the file is rejected again after the restart (at least once,
//! never lost).

use std::io::Write as _;
use std::path::Path;

use crate::compute::Rejection;

/// Appends one line per rejection to the file at `path` and makes it durable.
pub(super) fn append_durably(path: &Path, rejections: &[Rejection]) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    // Empty: just created (or never written), so its name may not be durable yet.
    let new = f.metadata()?.len() == 0;
    let mut buf = Vec::new();
    for r in rejections {
        serde_json::to_writer(&mut buf, r)?;
        buf.push(b'\n');
    }
    f.write_all(&buf)?;
    f.sync_data()?;
    if new && let Some(dir) = path.parent() {
        crate::runtime::durable::sync_dir(dir)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compute::RejectKind;

    fn rej(path: &str) -> Rejection {
        Rejection {
            path: path.into(),
            kind: RejectKind::BadPath,
            reason: "r".into(),
            line: None,
        }
    }

    #[test]
    fn appends_one_line_per_rejection() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("rejected.jsonl");
        append_durably(&p, &[rej("a.wav"), rej("b.wav")]).unwrap();
        append_durably(&p, &[rej("c.wav")]).unwrap();
        let text = std::fs::read_to_string(&p).unwrap();
        let paths: Vec<String> = text
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["path"].to_string())
            .collect();
        assert_eq!(paths, ["\"a.wav\"", "\"b.wav\"", "\"c.wav\""]);
    }

    #[test]
    fn a_missing_directory_is_an_error() {
        let d = tempfile::tempdir().unwrap();
        assert!(append_durably(&d.path().join("no/rejected.jsonl"), &[rej("a.wav")]).is_err());
    }
}
