//! The tracing subscriber every command logs through: level from `RUST_LOG`
//! when set, else `--log-level`; human-readable lines on stderr.

/// Installs the global subscriber. Call once, before anything logs.
pub fn init(level: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .init();
}
