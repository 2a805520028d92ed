//! SIGHUP / `reload`: re-read the config file while the service runs; apply
//! the `[serve]` settings that can change live, keep the spec the live files
//! were written with, and name what needs a restart or a `rebuild`.

use std::sync::mpsc;

use serde_json::json;

use super::Service;
use crate::app::control::{Reply, notify};
use crate::app::serve::watch::{Ignore, WatchEvent, Watcher};
use crate::config::Config;

impl Service {
    /// SIGHUP / `reload`: re-reads the config; applies the `[serve]` settings
    /// that can change live and names the ones that need a restart or rebuild.
    pub(super) fn reload(
        &mut self,
        watcher: &mut Option<Watcher>,
        watch_tx: &mpsc::SyncSender<WatchEvent>,
    ) -> Reply {
        notify::reloading();
        let new = match Config::load(&self.config_path) {
            Ok(c) => c,
            Err(e) => {
                notify::ready();
                return Reply::error(format!("reload failed, keeping the old config: {e}"));
            }
        };
        let mut needs_restart = Vec::new();
        for (name, same) in [
            ("mel/segmentation", new.spec == self.cfg.spec),
            ("output", new.output == self.cfg.output),
            ("io", new.io == self.cfg.io),
            ("compute", new.compute == self.cfg.compute),
            ("control", new.control == self.cfg.control),
            ("metrics", new.metrics == self.cfg.metrics),
            ("input", new.input == self.cfg.input),
        ] {
            if !same {
                needs_restart.push(name);
            }
        }
        let mut applied = Vec::new();
        match new.serve.clone() {
            Some(s)
                if s.watch_dir == self.serve.watch_dir
                    && s.output_dir == self.serve.output_dir
                    && s.state_dir == self.serve.state_dir =>
            {
                if s.ignore != self.serve.ignore {
                    if let Some(w) = watcher.take() {
                        w.stop();
                    }
                    match Watcher::start(
                        &s.watch_dir,
                        Ignore {
                            patterns: s.ignore.clone(),
                            extensions: self.cfg.input.extensions.clone(),
                        },
                        self.sidecars.clone(),
                        watch_tx.clone(),
                    ) {
                        Ok(w) => *watcher = Some(w),
                        Err(e) => self.note_error(format!("cannot restart the watcher: {e}")),
                    }
                    applied.push("serve.ignore");
                }
                if s != self.serve {
                    applied.push("serve");
                }
                self.intake.set_capacity(s.max_queued_files);
                self.serve = s;
                self.rescan();
            }
            Some(_) => needs_restart.push("serve.watch_dir/output_dir/state_dir"),
            None => needs_restart.push("serve (section missing)"),
        }
        // Keep the live spec: rows must match their files until a rebuild.
        let spec = self.cfg.spec.clone();
        let output = self.cfg.output.clone();
        self.cfg = new;
        self.cfg.spec = spec;
        self.cfg.output = output;
        notify::ready();
        tracing::info!(
            config = %self.config_path.display(),
            applied = ?applied,
            needs_restart = ?needs_restart,
            "Reloaded the config; settings that need a restart (or `rebuild` for mel/output) \
             are listed."
        );
        Reply::ok_with(json!({ "applied": applied, "needs_restart": needs_restart }))
    }
}
