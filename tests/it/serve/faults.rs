//! serve under the faults an attack pass found: a drop directory deleted or
//! replaced under the running service, and symbolic links in the drop tree.
//! Each test is named after what broke and failed on the code before its fix.

use std::time::Duration;

use super::harness::*;

#[test]
fn a_replaced_drop_directory_is_watched_again_and_nothing_dropped_later_is_lost() {
    let corpus = clips(4, 31);
    let mut svc = Svc::new(100, "");
    svc.start();
    svc.drop_file("TRAINING/LEAK/a.wav", &corpus[0].1);
    svc.wait_rows(1);

    // `mv drop drop.old; mkdir drop`: the old tree must no longer be watched
    // under the drop directory's name, the new one must be.
    let old = svc.root.path().join("drop.old");
    std::fs::rename(&svc.drop, &old).unwrap();
    std::fs::create_dir(&svc.drop).unwrap();
    let lost = wait_for(WAIT, "the loss to be reported", || {
        let s = svc.status();
        s["last_error"].as_str().map(str::to_string)
    });
    assert!(lost.contains("drop directory"), "{lost}");
    svc.drop_file("TRAINING/LEAK/b.wav", &corpus[1].1);
    std::fs::write(old.join("TRAINING/LEAK/stale.wav"), &corpus[3].1).unwrap();
    svc.wait_rows(2);

    // `rm -rf drop; mkdir drop`, with a file already there when it returns.
    std::fs::remove_dir_all(&svc.drop).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let staged = svc.root.path().join("drop.next");
    std::fs::create_dir_all(staged.join("VALIDATION/PUMP")).unwrap();
    std::fs::write(staged.join("VALIDATION/PUMP/c.wav"), &corpus[2].1).unwrap();
    std::fs::rename(&staged, &svc.drop).unwrap();
    svc.wait_rows(3);
    std::thread::sleep(Duration::from_millis(300));
    let s = svc.status();
    assert_eq!(
        total_rows(&s),
        3,
        "a file in the moved-away tree was ingested: {s}"
    );
    assert_eq!(s["files_rejected"], 0, "{s}");
    svc.shutdown();
    let paths: Vec<String> = splits(&svc.out)
        .values()
        .flat_map(|f| f.path.clone())
        .collect();
    assert_eq!(
        paths,
        [
            "TRAINING/LEAK/a.wav",
            "TRAINING/LEAK/b.wav",
            "VALIDATION/PUMP/c.wav"
        ]
    );
}

#[test]
fn the_startup_scan_and_the_watch_never_follow_symlinks_out_of_the_drop_dir() {
    let corpus = clips(3, 32);
    let mut svc = Svc::new(100, "");
    let outside = svc.root.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    let secret = outside.join("passwd");
    std::fs::write(&secret, b"root:x:0:0:root:/root:/bin/bash\n").unwrap();
    std::fs::write(outside.join("real.wav"), &corpus[0].1).unwrap();
    std::fs::create_dir_all(svc.drop.join("TRAINING/LEAK")).unwrap();
    std::os::unix::fs::symlink(&secret, svc.drop.join("TRAINING/LEAK/passwd.wav")).unwrap();
    std::os::unix::fs::symlink(
        outside.join("real.wav"),
        svc.drop.join("TRAINING/LEAK/link.wav"),
    )
    .unwrap();
    std::os::unix::fs::symlink(&outside, svc.drop.join("TRAINING/linked_dir")).unwrap();
    svc.drop_file("TRAINING/LEAK/good.wav", &corpus[1].1);
    svc.start();
    svc.wait_rows(1);

    // A link renamed in while the service runs is not followed either.
    let staged = svc.root.path().join("stage/live.wav");
    std::os::unix::fs::symlink(outside.join("real.wav"), &staged).unwrap();
    std::fs::rename(&staged, svc.drop.join("TRAINING/LEAK/live.wav")).unwrap();
    svc.drop_file("TRAINING/LEAK/after.wav", &corpus[2].1);
    svc.wait_rows(2);
    std::thread::sleep(Duration::from_millis(300));
    let s = svc.status();
    assert_eq!(total_rows(&s), 2, "{s}");
    assert_eq!(s["files_rejected"], 0, "a link was read: {s}");
    let rejected = std::fs::read_to_string(svc.out.join("rejected.jsonl")).unwrap_or_default();
    assert!(!rejected.contains("root:x"), "{rejected}");
    let log = svc.log();
    assert!(
        log.contains("passwd.wav"),
        "the link is named in the log:\n{log}"
    );
    assert!(!log.contains("root:x"), "{log}");
    assert!(log.contains("live.wav"), "{log}");
    svc.shutdown();
}
