//! The power-loss rules of [`crate::model`] checked on the plain data
//! structure, without FUSE.

use std::ffi::OsStr;

use crate::model::{Body, CrashMode, Model, ROOT};

fn os(s: &str) -> &OsStr {
    OsStr::new(s)
}

fn file(m: &Model, dir: u64, name: &str) -> Option<Vec<u8>> {
    let ino = m.lookup(dir, os(name)).ok()?;
    match m.get(ino)? {
        Body::File(b) => Some(b.clone()),
        Body::Dir(_) => None,
    }
}

#[test]
fn nothing_unsynced_survives_a_crash() {
    let mut m = Model::new();
    let f = m.create(ROOT, os("a"), false).unwrap();
    m.write(f, 0, b"hello").unwrap();
    m.check().unwrap();
    let c = m.crash(CrashMode::Whole);
    assert_eq!(c.lookup(ROOT, os("a")), Err(libc::ENOENT));
}

#[test]
fn fsync_of_the_file_alone_does_not_keep_its_name() {
    let mut m = Model::new();
    let f = m.create(ROOT, os("a"), false).unwrap();
    m.write(f, 0, b"hello").unwrap();
    m.fsync(f).unwrap();
    assert_eq!(
        m.crash(CrashMode::Whole).lookup(ROOT, os("a")),
        Err(libc::ENOENT)
    );
    m.fsync(ROOT).unwrap();
    assert_eq!(
        file(&m.crash(CrashMode::Whole), ROOT, "a").unwrap(),
        b"hello"
    );
}

#[test]
fn fsync_of_the_dir_alone_keeps_the_name_with_no_data() {
    let mut m = Model::new();
    let f = m.create(ROOT, os("a"), false).unwrap();
    m.write(f, 0, b"hello").unwrap();
    m.fsync(ROOT).unwrap();
    assert_eq!(file(&m.crash(CrashMode::Whole), ROOT, "a").unwrap(), b"");
}

#[test]
fn writes_after_the_last_fsync_are_lost() {
    let mut m = Model::new();
    let f = m.create(ROOT, os("a"), false).unwrap();
    m.write(f, 0, b"hello").unwrap();
    m.fsync(f).unwrap();
    m.fsync(ROOT).unwrap();
    m.write(f, 5, b" world").unwrap();
    m.write(f, 0, b"J").unwrap();
    m.check().unwrap();
    assert_eq!(file(&m, ROOT, "a").unwrap(), b"Jello world");
    assert_eq!(
        file(&m.crash(CrashMode::Whole), ROOT, "a").unwrap(),
        b"hello"
    );
}

#[test]
fn a_rename_needs_the_directory_fsync() {
    let mut m = Model::new();
    let f = m.create(ROOT, os("a.tmp"), false).unwrap();
    m.write(f, 0, b"new").unwrap();
    m.fsync(f).unwrap();
    m.fsync(ROOT).unwrap();
    m.rename(ROOT, os("a.tmp"), ROOT, os("a"), false).unwrap();
    let c = m.crash(CrashMode::Whole);
    assert!(file(&c, ROOT, "a").is_none());
    assert_eq!(file(&c, ROOT, "a.tmp").unwrap(), b"new");
    m.fsync(ROOT).unwrap();
    let c = m.crash(CrashMode::Whole);
    assert_eq!(file(&c, ROOT, "a").unwrap(), b"new");
    assert!(file(&c, ROOT, "a.tmp").is_none());
}

#[test]
fn a_rename_over_a_file_keeps_the_old_one_until_durable() {
    let mut m = Model::new();
    let old = m.create(ROOT, os("j"), false).unwrap();
    m.write(old, 0, b"old").unwrap();
    m.fsync(old).unwrap();
    let new = m.create(ROOT, os("j.tmp"), false).unwrap();
    m.write(new, 0, b"new").unwrap();
    m.fsync(new).unwrap();
    m.fsync(ROOT).unwrap();
    m.rename(ROOT, os("j.tmp"), ROOT, os("j"), false).unwrap();
    assert_eq!(file(&m, ROOT, "j").unwrap(), b"new");
    assert_eq!(file(&m.crash(CrashMode::Whole), ROOT, "j").unwrap(), b"old");
    assert_eq!(m.rename(ROOT, os("j"), ROOT, os("j"), true), Ok(()));
}

#[test]
fn an_unlink_is_undone_by_a_crash_before_the_dir_fsync() {
    let mut m = Model::new();
    let d = m.create(ROOT, os("drop"), true).unwrap();
    let f = m.create(d, os("x.wav"), false).unwrap();
    m.write(f, 0, b"RIFF").unwrap();
    m.fsync(f).unwrap();
    m.fsync(d).unwrap();
    m.fsync(ROOT).unwrap();
    m.unlink(d, os("x.wav"), false).unwrap();
    assert!(file(&m, d, "x.wav").is_none());
    assert_eq!(
        file(&m.crash(CrashMode::Whole), d, "x.wav").unwrap(),
        b"RIFF"
    );
    m.fsync(d).unwrap();
    assert!(file(&m.crash(CrashMode::Whole), d, "x.wav").is_none());
}

#[test]
fn a_new_directory_needs_its_parent_fsync() {
    let mut m = Model::new();
    let d = m.create(ROOT, os("out"), true).unwrap();
    let f = m.create(d, os("f"), false).unwrap();
    m.fsync(f).unwrap();
    m.fsync(d).unwrap();
    let c = m.crash(CrashMode::Whole);
    assert_eq!(c.lookup(ROOT, os("out")), Err(libc::ENOENT));
    m.fsync(ROOT).unwrap();
    let c = m.crash(CrashMode::Whole);
    let d2 = c.lookup(ROOT, os("out")).unwrap();
    assert!(c.lookup(d2, os("f")).is_ok());
}

#[test]
fn a_move_across_directories_is_durable_per_directory() {
    let mut m = Model::new();
    let a = m.create(ROOT, os("a"), true).unwrap();
    let b = m.create(ROOT, os("b"), true).unwrap();
    let f = m.create(a, os("f"), false).unwrap();
    m.fsync(f).unwrap();
    m.fsync(a).unwrap();
    m.fsync(ROOT).unwrap();
    m.rename(a, os("f"), b, os("g"), false).unwrap();
    m.check().unwrap();
    m.fsync(b).unwrap();
    // Only the target is durable: the file has both names after a crash.
    let c = m.crash(CrashMode::Whole);
    assert!(c.lookup(a, os("f")).is_ok() && c.lookup(b, os("g")).is_ok());
    m.fsync(a).unwrap();
    let c = m.crash(CrashMode::Whole);
    assert!(c.lookup(a, os("f")).is_err() && c.lookup(b, os("g")).is_ok());
}

#[test]
fn truncate_is_durable_with_the_file_fsync() {
    let mut m = Model::new();
    let f = m.create(ROOT, os("a"), false).unwrap();
    m.write(f, 0, b"0123456789").unwrap();
    m.fsync(f).unwrap();
    m.fsync(ROOT).unwrap();
    m.truncate(f, 4).unwrap();
    assert_eq!(file(&m, ROOT, "a").unwrap(), b"0123");
    assert_eq!(
        file(&m.crash(CrashMode::Whole), ROOT, "a").unwrap(),
        b"0123456789"
    );
    m.fsync(f).unwrap();
    assert_eq!(
        file(&m.crash(CrashMode::Whole), ROOT, "a").unwrap(),
        b"0123"
    );
}

#[test]
fn torn_crashes_keep_a_prefix_of_the_pending_ops_in_order() {
    let mut m = Model::new();
    let f = m.create(ROOT, os("log"), false).unwrap();
    m.fsync(ROOT).unwrap();
    m.fsync(f).unwrap();
    for k in 0..8u8 {
        m.write(f, u64::from(k) * 4, &[b'a' + k; 4]).unwrap();
    }
    let full = file(&m, ROOT, "log").unwrap();
    let mut lens = std::collections::BTreeSet::new();
    for seed in 0..200 {
        let c = m.crash(CrashMode::Torn { seed });
        let got = file(&c, ROOT, "log").unwrap();
        // Appends in order: what survives is a prefix of the live bytes.
        assert_eq!(got[..], full[..got.len()], "seed {seed}");
        lens.insert(got.len());
    }
    // Both extremes and torn writes in the middle occur.
    assert!(lens.contains(&0) && lens.contains(&32), "{lens:?}");
    assert!(lens.iter().any(|l| l % 4 != 0), "no torn write: {lens:?}");
    // Same seed, same image.
    let a = m.crash(CrashMode::Torn { seed: 7 });
    let b = m.crash(CrashMode::Torn { seed: 7 });
    assert_eq!(file(&a, ROOT, "log"), file(&b, ROOT, "log"));
}

#[test]
fn torn_crashes_never_invent_names_or_bytes() {
    let mut m = Model::new();
    let f = m.create(ROOT, os("a"), false).unwrap();
    m.write(f, 0, b"xyz").unwrap();
    m.rename(ROOT, os("a"), ROOT, os("b"), false).unwrap();
    m.unlink(ROOT, os("b"), false).unwrap();
    for seed in 0..100 {
        let c = m.crash(CrashMode::Torn { seed });
        // Each prefix of [Link a, Rename a->b, Unlink b] on the root.
        let a = file(&c, ROOT, "a");
        let b = file(&c, ROOT, "b");
        assert!(a.is_none() || b.is_none(), "seed {seed}: two names");
        for got in [a, b].into_iter().flatten() {
            assert!(b"xyz".starts_with(&got), "seed {seed}: {got:?}");
        }
    }
}

#[test]
fn freeze_takes_the_image_at_the_chosen_boundary() {
    let mut m = Model::new();
    m.freeze_at(3, CrashMode::Whole);
    let f = m.create(ROOT, os("a"), false).unwrap(); // 1
    m.write(f, 0, b"v1").unwrap();
    m.fsync(f).unwrap(); // 2
    assert!(m.frozen().is_none());
    m.fsync(ROOT).unwrap(); // 3: image taken here
    m.write(f, 0, b"v2").unwrap();
    m.fsync(f).unwrap(); // 4: after the power loss, not in the image
    let img = m.frozen().unwrap();
    assert_eq!(file(img, ROOT, "a").unwrap(), b"v1");
    let names: Vec<_> = m.boundaries().iter().map(|b| b.what).collect();
    assert_eq!(names, ["create", "fsync", "fsyncdir", "fsync"]);
}

#[test]
fn errors_match_posix() {
    let mut m = Model::new();
    let d = m.create(ROOT, os("d"), true).unwrap();
    m.create(d, os("f"), false).unwrap();
    assert_eq!(m.create(ROOT, os("d"), false), Err(libc::EEXIST));
    assert_eq!(m.unlink(ROOT, os("d"), true), Err(libc::ENOTEMPTY));
    assert_eq!(m.unlink(ROOT, os("d"), false), Err(libc::EISDIR));
    assert_eq!(m.unlink(d, os("f"), true), Err(libc::ENOTDIR));
    assert_eq!(
        m.rename(ROOT, os("d"), d, os("x"), false),
        Err(libc::EINVAL)
    );
    m.create(ROOT, os("g"), false).unwrap();
    assert_eq!(
        m.rename(ROOT, os("g"), ROOT, os("d"), false),
        Err(libc::EISDIR)
    );
    assert_eq!(m.rename(d, os("f"), ROOT, os("g"), true), Err(libc::EEXIST));
    assert_eq!(m.lookup(ROOT, os("nope")), Err(libc::ENOENT));
    m.check().unwrap();
}

/// Through the kernel: std::fs calls on a mount reach the model with the
/// rules above (fsync of the file, then of the directory).
#[test]
fn a_mounted_fs_follows_the_rules() {
    use std::io::Write;
    if let Err(why) = crate::available() {
        eprintln!("SKIPPED: {why}");
        return;
    }
    let mnt = std::env::temp_dir().join(format!("powerfs-unit-{}", std::process::id()));
    std::fs::create_dir_all(&mnt).unwrap();
    let fs = crate::PowerFs::mount(&mnt, Model::new()).unwrap();
    std::fs::create_dir(mnt.join("d")).unwrap();
    let mut f = std::fs::File::create(mnt.join("d/kept")).unwrap();
    f.write_all(b"durable").unwrap();
    f.sync_all().unwrap();
    std::fs::File::open(mnt.join("d"))
        .unwrap()
        .sync_all()
        .unwrap();
    std::fs::File::open(&mnt).unwrap().sync_all().unwrap();
    f.write_all(b" and lost").unwrap();
    std::fs::write(mnt.join("d/lost"), b"x").unwrap();
    std::fs::rename(mnt.join("d/lost"), mnt.join("d/lost2")).unwrap();
    assert_eq!(
        std::fs::read(mnt.join("d/kept")).unwrap(),
        b"durable and lost"
    );
    drop(f);
    let whats: Vec<_> = fs.with(|m| m.boundaries().iter().map(|b| b.what).collect());
    assert_eq!(
        whats,
        [
            "mkdir", "create", "fsync", "fsyncdir", "fsyncdir", "create", "rename"
        ]
    );
    let image = fs.power_loss(CrashMode::Whole);
    let fs = crate::PowerFs::mount(&mnt, image).unwrap();
    assert_eq!(std::fs::read(mnt.join("d/kept")).unwrap(), b"durable");
    let names: Vec<_> = std::fs::read_dir(mnt.join("d"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["kept"]);
    drop(fs);
    std::fs::remove_dir(&mnt).unwrap();
}
