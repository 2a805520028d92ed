//! Who is at the other end of a control connection, and may they send
//! commands: SO_PEERCRED credentials, the policy (root, the service's uid,
//! members of the configured group by primary or supplementary gid), and
//! the group-name lookup.
//!
//! The policy is a pure function of the credentials (and of a supplementary
//! groups lookup passed in), so it is tested with synthetic credentials; the
//! integration tests exercise the real SO_PEERCRED path from a child that
//! drops to another uid.

use std::io;
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;

use super::Error;
use crate::runtime::sys;

/// A peer's SO_PEERCRED credentials.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerCred {
    pub pid: i32,
    pub uid: u32,
    pub gid: u32,
}

/// The credentials of the process at the other end of `stream`.
pub fn peer_cred(stream: &UnixStream) -> io::Result<PeerCred> {
    let cred = sys::peer_credentials(stream.as_fd())?;
    Ok(PeerCred {
        pid: cred.pid,
        uid: cred.uid,
        gid: cred.gid,
    })
}

/// Who may use the socket: root, the service's uid, and (optionally) members
/// of one group: by primary gid or by supplementary groups.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerPolicy {
    pub service_uid: u32,
    /// The group's name (for messages) and gid.
    pub group: Option<(String, u32)>,
}

impl PeerPolicy {
    /// Root, this process's effective uid, and `group` if given.
    pub fn for_this_process(group: Option<(String, u32)>) -> PeerPolicy {
        let service_uid = sys::effective_uid();
        PeerPolicy { service_uid, group }
    }

    /// `Ok` if `peer` may send commands. `supplementary` yields the peer's
    /// supplementary gids (only asked when a group is configured and the
    /// primary gid does not match); see [`supplementary_groups`].
    pub fn check(
        &self,
        peer: PeerCred,
        supplementary: impl FnOnce(i32) -> Vec<u32>,
    ) -> Result<(), Denied> {
        if peer.uid == 0 || peer.uid == self.service_uid {
            return Ok(());
        }
        if let Some((_, gid)) = &self.group
            && (peer.gid == *gid || supplementary(peer.pid).contains(gid))
        {
            return Ok(());
        }
        Err(Denied {
            uid: peer.uid,
            service_uid: self.service_uid,
            group: self.group.as_ref().map(|(name, _)| name.clone()),
        })
    }
}

/// A peer that [`PeerPolicy::check`] refused: who it was and who would have
/// been let in. The sentence goes back to the client and into the log.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "permission denied: uid {uid} may not use this socket (allowed: {})",
    allowed(*.service_uid, .group.as_deref())
)]
pub struct Denied {
    /// The peer's uid.
    pub uid: u32,
    /// The service's own uid (always allowed, as is root).
    pub service_uid: u32,
    /// The configured group's name, when one is allowed.
    pub group: Option<String>,
}

/// Who may use the socket, for [`Denied`]'s sentence.
fn allowed(service_uid: u32, group: Option<&str>) -> String {
    match group {
        Some(name) => format!("root, uid {service_uid}, or members of group {name}"),
        None => format!("root and uid {service_uid}"),
    }
}

/// The supplementary groups of process `pid`, from `/proc/<pid>/status`
/// (`Groups:` line); empty if it cannot be read. The peer's pid is the one
/// SO_PEERCRED recorded at connect time; the process is blocked on our reply,
/// so it is still the same process.
pub fn supplementary_groups(pid: i32) -> Vec<u32> {
    let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return Vec::new();
    };
    parse_groups_line(&text)
}

fn parse_groups_line(status: &str) -> Vec<u32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Groups:"))
        .map(|g| {
            g.split_whitespace()
                .filter_map(|x| x.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The gid of `group`: a number, or a name looked up with getgrnam_r.
pub fn resolve_group(group: &str) -> Result<u32, Error> {
    if let Ok(gid) = group.parse::<u32>() {
        return Ok(gid);
    }
    let unknown = || Error::UnknownGroup {
        name: group.to_string(),
    };
    let name = std::ffi::CString::new(group).map_err(|_| unknown())?;
    match sys::group_id(&name) {
        Ok(Some(gid)) => Ok(gid),
        Ok(None) | Err(_) => Err(unknown()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cred(uid: u32, gid: u32) -> PeerCred {
        PeerCred { pid: 42, uid, gid }
    }

    #[test]
    fn policy_allows_root_and_the_service_uid_only_by_default() {
        let p = PeerPolicy {
            service_uid: 990,
            group: None,
        };
        let none = |_| -> Vec<u32> { panic!("groups are not consulted without a group") };
        assert!(p.check(cred(0, 0), none).is_ok());
        assert!(p.check(cred(990, 990), none).is_ok());
        let e = p.check(cred(1000, 990), none).unwrap_err();
        assert_eq!(
            e,
            Denied {
                uid: 1000,
                service_uid: 990,
                group: None
            }
        );
        assert_eq!(
            e.to_string(),
            "permission denied: uid 1000 may not use this socket (allowed: root and uid 990)"
        );
    }

    #[test]
    fn policy_allows_the_group_by_primary_or_supplementary_gid() {
        let p = PeerPolicy {
            service_uid: 990,
            group: Some(("melforge".into(), 991)),
        };
        assert!(p.check(cred(1000, 991), |_| vec![]).is_ok());
        assert!(
            p.check(cred(1000, 100), |pid| {
                assert_eq!(pid, 42);
                vec![27, 991]
            })
            .is_ok()
        );
        let e = p.check(cred(1001, 100), |_| vec![27]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "permission denied: uid 1001 may not use this socket \
             (allowed: root, uid 990, or members of group melforge)"
        );
    }

    #[test]
    fn groups_line_is_parsed() {
        let s = "Name:\tbash\nUid:\t1000\nGroups:\t4 24 27 \nNgid:\t0\n";
        assert_eq!(parse_groups_line(s), vec![4, 24, 27]);
        assert_eq!(parse_groups_line("Groups:\t\n"), Vec::<u32>::new());
        // Our own process has a readable status.
        let _ = supplementary_groups(std::process::id() as i32);
    }

    #[test]
    fn groups_resolve_by_number_and_name() {
        assert_eq!(resolve_group("1234").unwrap(), 1234);
        assert_eq!(resolve_group("root").unwrap(), 0);
        assert!(matches!(
            resolve_group("no-such-group-melforge"),
            Err(Error::UnknownGroup { .. })
        ));
    }
}
