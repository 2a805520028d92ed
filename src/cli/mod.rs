//! The `melforge` command line: argument parsing, logging set-up, dispatch to
//! the commands in [`crate::app`], and exit codes.
//!
//! Owns everything user-facing that is not a command's own report: the clap
//! definitions (flags, help texts), which command runs, how a failure is shown
//! (`error: …` on stderr, or an `ERROR` event under `--log-format json`) and
//! the exit status (0 success, 1 failure or `build --strict` with rejections,
//! 2 for usage errors, from clap, 130 for a `build` or `merge` stopped by
//! SIGINT/SIGTERM, which prints one line instead of an error:
//! "interrupted after N of M files; nothing written"). [`logging`] owns the subscriber. The
//! binary's `main` only calls [`main`]. `anyhow` is used here and nowhere else
//! in the library.

mod features;
pub mod logging;

use logging::LogFormat;

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::error::ErrorKind;
use clap::{CommandFactory, Parser, Subcommand, ValueEnum};

use crate::app::build;
use crate::app::interrupt::{self, Stopped};
use crate::app::progress::Progress;
use crate::config::Config;
use crate::frames::RowLayout;

#[derive(Parser)]
#[command(
    name = "melforge",
    version,
    about = "Turn audio corpora (trees, NeMo and lhotse manifests, WebDataset shards, parquet) into feature datasets in HDF5: librosa log-mel, Kaldi fbank and MFCC, Whisper log-mel"
)]
struct Cli {
    /// Log level (error, warn, info, debug, trace); RUST_LOG overrides.
    #[arg(long, global = true, default_value = "info")]
    log_level: String,
    /// Log format on stderr: text, or json (one object per line, for journald
    /// and log shippers); default $MELFORGE_LOG_FORMAT, else text.
    #[arg(long, global = true, value_enum)]
    log_format: Option<LogFormat>,
    #[command(subcommand)]
    command: Command,
}

/// `build --progress`.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ProgressArg {
    /// A bar when stderr is a terminal (and logs are text, and no --json).
    Auto,
    Bar,
    /// One JSON object per line on stderr (files done, rejected, bytes,
    /// rate, ETA); fields in `app::progress`.
    Json,
    None,
}

#[derive(Clone, Copy, ValueEnum)]
enum BackendArg {
    Auto,
    Cpu,
    Cuda,
}

impl BackendArg {
    /// The `compute.backend` value it sets.
    fn name(self) -> &'static str {
        match self {
            BackendArg::Auto => "auto",
            BackendArg::Cpu => "cpu",
            BackendArg::Cuda => "cuda",
        }
    }
}

#[derive(Clone, Copy, ValueEnum)]
enum SynthKind {
    Machine,
    Speech,
}

#[derive(Subcommand)]
enum Command {
    /// Write a deterministic synthetic corpus: machine sounds (10 s int16 mono
    /// clips, 4096 Hz by default, in TRAINING|VALIDATION|TESTING/<LABEL>/
    /// folders, WAV or FLAC), or speech-like utterances (`--kind speech`: 2 to
    /// 20 s at 16 kHz in train|dev|test/<speaker>/, WAV).
    Synth {
        /// Directory to create the corpus in.
        dir: PathBuf,
        /// Number of clips.
        #[arg(long, default_value_t = 1000)]
        files: u64,
        /// Seed; the same seed gives byte-identical files.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// File container: 16-bit PCM WAV, or 16-bit FLAC.
        #[arg(long, value_enum, default_value_t = crate::synth::Format::Wav)]
        format: crate::synth::Format,
        /// Sample rate in Hz (10 s per clip); other than 4096, a build needs
        /// `[input] resample = "soxr_hq"`. Speech: 16000 unless given.
        #[arg(long)]
        rate: Option<u32>,
        /// What the corpus sounds like: machine sounds (10 s clips in
        /// TRAINING|VALIDATION|TESTING/<LABEL>/), or speech-like utterances
        /// of 2 to 20 s (train|dev|test/<speaker>/, WAV only).
        #[arg(long, value_enum, default_value_t = SynthKind::Machine)]
        kind: SynthKind,
    },
    /// Build one HDF5 file per split from a tree of audio files, from NeMo /
    /// lhotse manifests (one split per manifest, named after its stem), or
    /// from stored corpora (WebDataset shards, Hugging Face parquet, lhotse
    /// Shar; one split each), with each split's CMVN statistics beside it.
    Build {
        /// Input directory (split/label folders, see docs/FORMAT.md), one
        /// or more manifests (`.json`/`.jsonl`, gzipped or not), or stored
        /// corpora, one split each: WebDataset tar shards
        /// ('data/train-{000000..000127}.tar', quoted: melforge expands the
        /// braces) or Hugging Face parquet files ('data/train-*.parquet').
        #[arg(required = true, num_args = 1..)]
        input: Vec<PathBuf>,
        /// The split of a stored corpus given as one pattern (default: the
        /// pattern's stem, e.g. `train` for 'train-{000000..000127}.tar').
        #[arg(long)]
        split: Option<String>,
        /// NeMo tarred audio: the tar shards (NeMo's
        /// `tarred_audio_filepaths`, e.g. 'audio_{0..511}.tar', quoted) whose
        /// members the manifests' `audio_filepath`s name.
        #[arg(long, value_name = "PATTERN")]
        tarred_audio: Option<String>,
        /// Output directory: <split>.h5, its CMVN statistics
        /// (<split>.global_cmvn, WeNet's; <split>.feats_stats.npz, ESPnet's),
        /// rejected.jsonl and, for manifests, the manifest written back with
        /// each row's place (<split>.jsonl); with --lhotse also
        /// <split>.cuts.jsonl.gz.
        #[arg(long)]
        out: PathBuf,
        /// TOML config (defaults: the reference dataset; see config/melforge.toml).
        #[arg(long)]
        config: Option<PathBuf>,
        /// Compute backend; overrides compute.backend.
        #[arg(long, value_enum)]
        backend: Option<BackendArg>,
        /// The recipe; overrides features.recipe: librosa, kaldi-fbank,
        /// kaldi-mfcc, whisper, or lhotse-fbank (kaldi-fbank with the
        /// defaults of lhotse's FbankConfig).
        #[arg(long)]
        recipe: Option<String>,
        /// Also write OUT/<split>.cuts.jsonl.gz, lhotse cuts whose features
        /// lhotse loads itself (storage numpy_hdf5: a view per row in the
        /// split file); sets output.lhotse. Kaldi recipes with snip_edges
        /// false.
        #[arg(long)]
        lhotse: bool,
        /// Exit with status 1 if any file is rejected.
        #[arg(long)]
        strict: bool,
        /// Print the final report as JSON on stdout.
        #[arg(long)]
        json: bool,
        /// Build only shard K of N (0 ≤ K < N) of the sorted walk, or of
        /// each manifest's lines (a contiguous block), into
        /// <split>.shard-K-of-N.h5; join the shards with `melforge merge`.
        #[arg(long, value_name = "K/N")]
        shard: Option<crate::app::merge::shard::Shard>,
        /// Progress display on stderr: auto, bar, json (one event per line,
        /// for programs), none.
        #[arg(long, value_enum, default_value = "auto")]
        progress: ProgressArg,
    },
    /// Join the files of a sharded build (`build --shard K/N`, all K) into
    /// <split>.h5 (HDF5 virtual datasets over the shards), rejected.jsonl
    /// and, for manifests, the written-back <split>.jsonl.
    Merge {
        /// The output directory the shards were built into.
        out: PathBuf,
        /// Write standalone files with the rows copied instead of virtual datasets.
        #[arg(long)]
        copy: bool,
        /// Print the report as JSON on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Show what a split file holds: recipe and parameters, rows and frames
    /// per row, the value range, rejections by kind; `--row I --png FILE`
    /// draws a row.
    Inspect {
        /// A split file, e.g. OUT/TRAINING.h5.
        file: PathBuf,
        /// The row to draw (with --png).
        #[arg(long, requires = "png")]
        row: Option<usize>,
        /// Write row --row (default 0) as a PNG image here.
        #[arg(long)]
        png: Option<PathBuf>,
        /// Print the report as JSON on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Measure one stage alone: the readers (and optionally fio), the
    /// configured recipe's compute, the HDF5 writer, or the decoders.
    Bench {
        #[command(subcommand)]
        what: BenchCommand,
    },
    /// Run the drop-directory service: watch [serve] watch_dir and append new
    /// files to <output_dir>/<split>.h5 (SWMR), with a control socket.
    Serve {
        /// TOML config with a [serve] section (see config/serve.toml).
        #[arg(long)]
        config: PathBuf,
    },
    /// Send a command to a running `melforge serve` over its control socket.
    Ctl(crate::app::control::client::CtlArgs),
    /// Compute one file's features under a config's recipe and write them as
    /// a float32 .npy (the reference's shape): what a build stores for it.
    Features(features::FeaturesArgs),
    /// Decode one audio file to raw mono float32 at its own rate (what the
    /// mel transform starts from before resampling), for checks against
    /// other decoders; prints the rate and length as JSON.
    #[command(hide = true)]
    Decode(crate::app::decode::DecodeArgs),
    /// Validate a config file and print the resolved settings.
    CheckConfig {
        /// The TOML file to check.
        file: PathBuf,
    },
}

#[derive(Subcommand)]
enum BenchCommand {
    /// Files/s, MiB/s and per-file latency of whole-file reads: cold and warm
    /// cache, direct and buffered, uring and psync engines.
    Io(crate::app::bench_io::IoArgs),
    /// Clips/s of the compute stage alone (WAV decode + log-mel on the CPU
    /// backend, in memory), in all and per thread: for sizing machines.
    Mel(crate::app::bench_mel::MelArgs),
    /// Rows/s of the HDF5 writer alone (synthetic rows in memory, both chunk
    /// paths) against a plain `pwrite` of the same bytes: the writer's figure
    /// on any machine, beside h5py's (scripts/bench-writer-h5py.py).
    Write(crate::app::bench_write::WriteArgs),
    /// Decode speed per core of each container (MP3, Vorbis, Opus, AAC,
    /// FLAC, WAV) over the files of a folder, in memory, one thread.
    Decode(crate::app::bench_decode::DecodeBenchArgs),
}

/// `println!` for a command's results: see [`emit`].
macro_rules! outln {
    ($($arg:tt)*) => {
        emit(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `print!` for a command's results: see [`emit`].
macro_rules! out {
    ($($arg:tt)*) => {
        emit(format_args!($($arg)*))
    };
}

/// The exit status of a command whose reader went away (128 + SIGPIPE, what
/// a shell reports for a filter the signal ended).
const EXIT_BROKEN_PIPE: i32 = 141;

/// Writes a command's results on stdout. A reader that went away
/// (`melforge … | head`) ends the process quietly, as SIGPIPE ends a Unix
/// filter, where `println!` would panic (Rust ignores SIGPIPE, so the write
/// fails with EPIPE); results are printed after the work is done and
/// durable, so nothing is lost. Any other write error is the command's.
fn emit(args: std::fmt::Arguments<'_>) -> anyhow::Result<()> {
    use std::io::Write;
    let mut o = std::io::stdout().lock();
    match o.write_fmt(args).and_then(|()| o.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
            std::process::exit(EXIT_BROKEN_PIPE)
        }
        Err(e) => Err(anyhow::Error::new(e).context("cannot write to standard output")),
    }
}

/// Prints a bench report as pretty JSON, or as its text.
fn print_report(
    report: &(impl serde::Serialize + std::fmt::Display),
    json: bool,
) -> anyhow::Result<()> {
    if json {
        outln!("{}", serde_json::to_string_pretty(report)?)
    } else {
        out!("{report}")
    }
}

/// The command table: each command's steps are a function of their own.
fn run(cli: Cli, format: LogFormat) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Synth {
            dir,
            files,
            seed,
            format,
            rate,
            kind,
        } => synth(&dir, files, seed, format, rate, kind)?,
        Command::Bench { what } => bench(what)?,
        Command::Serve { config } => crate::app::serve::run(&config)?,
        Command::Merge { out, copy, json } => merge(&out, copy, json)?,
        Command::Ctl(args) => crate::app::control::client::main(&args)?,
        Command::Features(args) => features::run(&args)?,
        Command::Decode(args) => outln!(
            "{}",
            serde_json::to_string(&crate::app::decode::run(&args)?)?
        )?,
        Command::Inspect {
            file,
            row,
            png,
            json,
        } => inspect(&file, row, png.as_deref(), json)?,
        Command::CheckConfig { file } => check_config(&file)?,
        Command::Build {
            input,
            out,
            config,
            backend,
            recipe,
            lhotse,
            strict,
            json,
            shard,
            progress,
            split,
            tarred_audio,
        } => {
            let over = overrides(recipe, lhotse, backend);
            let cfg = Config::load_with(config.as_deref(), &over)?;
            let opts = build::Options {
                progress: progress_for(progress, json, format),
                telemetry: None,
            };
            let input = match tarred_audio {
                Some(shards) => {
                    if !input.iter().all(|p| p.is_file()) {
                        anyhow::bail!(
                            "--tarred-audio reads NeMo manifests: every input must be a \
                             manifest file"
                        );
                    }
                    build::Input::Tarred {
                        manifests: input,
                        shards,
                    }
                }
                None => build::Input::resolve(&input, split.as_deref())?,
            };
            if split.is_some() && !matches!(input, build::Input::Stored(_)) {
                anyhow::bail!(
                    "--split names the split of a stored corpus (tar shards or parquet files); a \
                     tree's splits are its folders and a manifest's its file name"
                );
            }
            let done = build::build_input(&input, &out, &cfg, &opts, shard)?;
            print_build(&done, json)?;
            if strict && !done.rejected.is_empty() {
                strict_failure(&done, format);
                return Ok(ExitCode::FAILURE);
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `melforge synth`.
fn synth(
    dir: &std::path::Path,
    files: u64,
    seed: u64,
    format: crate::synth::Format,
    rate: Option<u32>,
    kind: SynthKind,
) -> anyhow::Result<()> {
    let t = std::time::Instant::now();
    let written = match kind {
        SynthKind::Machine => {
            let rate = rate.unwrap_or(crate::synth::SAMPLE_RATE);
            crate::synth::generate_as(dir, files, seed, crate::synth::Encoding { format, rate })
        }
        SynthKind::Speech => {
            anyhow::ensure!(
                format == crate::synth::Format::Wav,
                "synth --kind speech writes WAV files only"
            );
            let rate = rate.unwrap_or(crate::app::synth_speech::SPEECH_RATE);
            crate::app::synth_speech::generate(dir, files, seed, rate)
        }
    }
    .with_context(|| format!("cannot write the corpus into {}", dir.display()))?;
    tracing::info!(
        files = written.len(),
        dir = %dir.display(),
        elapsed_ms = t.elapsed().as_millis() as u64,
        "Wrote the synthetic corpus."
    );
    Ok(())
}

/// `melforge inspect FILE [--row I --png F]`.
fn inspect(
    file: &std::path::Path,
    row: Option<usize>,
    png: Option<&std::path::Path>,
    json: bool,
) -> anyhow::Result<()> {
    let report = crate::app::inspect::inspect(file)?;
    print_report(&report, json)?;
    if let Some(png) = png {
        let row = row.unwrap_or(0);
        let (w, h) = crate::app::inspect::draw_row(file, row, png)?;
        tracing::info!(row, width = w, height = h, png = %png.display(), "Drew the row.");
    }
    Ok(())
}

/// `melforge bench io|mel|write`.
fn bench(what: BenchCommand) -> anyhow::Result<()> {
    match what {
        BenchCommand::Io(args) => match crate::app::bench_io::main(&args) {
            // Its table went to a reader that left: as `emit` does.
            Err(crate::app::bench_io::Error::Output(e))
                if e.kind() == std::io::ErrorKind::BrokenPipe =>
            {
                std::process::exit(EXIT_BROKEN_PIPE)
            }
            r => {
                r?;
                Ok(())
            }
        },
        BenchCommand::Mel(args) => print_report(&crate::app::bench_mel::run(&args)?, args.json),
        BenchCommand::Write(args) => print_report(&crate::app::bench_write::run(&args)?, args.json),
        BenchCommand::Decode(args) => {
            print_report(&crate::app::bench_decode::run(&args)?, args.json)
        }
    }
}

/// `melforge merge`: joins the shards and prints what it wrote.
fn merge(out: &std::path::Path, copy: bool, json: bool) -> anyhow::Result<()> {
    let done = crate::app::merge::merge(out, copy)?;
    if json {
        return outln!("{}", serde_json::to_string_pretty(&done)?);
    }
    for o in &done.outputs {
        outln!("{}: {} rows → {}", o.split, o.rows, o.path.display())?;
    }
    for m in &done.manifests {
        outln!("manifest written back → {}", m.display())?;
    }
    outln!(
        "{} shards merged ({}); {} rejection(s) in {}",
        done.shards,
        done.mode,
        done.rejected,
        done.rejected_log.display()
    )
}

/// `melforge check-config`: validates the file and prints the resolved
/// settings and the shape of a file's row under the configured recipe.
fn check_config(file: &std::path::Path) -> anyhow::Result<()> {
    let cfg = Config::load(file)?;
    // The group must exist on this host, as serve will need it.
    if let Some(group) = &cfg.control.group {
        crate::app::control::peer::resolve_group(group)
            .with_context(|| file.display().to_string())?;
    }
    outln!("{} is valid. Resolved settings:", file.display())?;
    outln!(
        "{}",
        toml::to_string_pretty(&cfg).context("cannot print the config")?
    )?;
    match crate::recipes::build(&cfg)?.layout() {
        RowLayout::Frames(l) => outln!("# per file: {}", row_shape(l)),
        RowLayout::Fixed(s) => {
            outln!(
                "# per file: librosa log-mel of shape ({}, {}, {}, {}), {} segments",
                s.n_long(),
                s.n_short(),
                s.n_mels,
                s.n_frames(),
                s.n_long() * s.n_short()
            )
        }
    }
}

/// A frame recipe's row as `check-config` prints it: its frames and what
/// decides their count.
fn row_shape(l: &crate::frames::FrameLayout) -> String {
    let frames = match (l.padded_frames, l.max_samples) {
        (Some(p), _) => format!("{p} frames once padded (stored without the padding)"),
        (None, Some(n)) => format!(
            "one frame per {} s of at most the first {n} samples",
            l.frame_step_seconds
        ),
        (None, None) => format!("one frame per {} s of audio", l.frame_step_seconds),
    };
    format!(
        "{} rows of (frames, {}) at {} Hz: {frames}",
        l.recipe, l.bins, l.sample_rate
    )
}

/// What `build`'s flags set over the config file's keys.
fn overrides(
    recipe: Option<String>,
    lhotse: bool,
    backend: Option<BackendArg>,
) -> crate::config::Overrides {
    crate::config::Overrides {
        recipe,
        lhotse,
        backend: backend.map(|b| b.name().to_owned()),
    }
}

/// `build --progress`, `auto` resolved.
fn progress_for(arg: ProgressArg, json: bool, format: LogFormat) -> Progress {
    match arg {
        ProgressArg::Json => Progress::Json,
        ProgressArg::Bar => Progress::Bar,
        ProgressArg::None => Progress::None,
        // The bar would break JSON lines on stderr.
        ProgressArg::Auto
            if !json && format == LogFormat::Text && std::io::stderr().is_terminal() =>
        {
            Progress::Bar
        }
        ProgressArg::Auto => Progress::None,
    }
}

/// A build's rejections in the log, and its results on stdout.
fn print_build(done: &build::Outcomes, json: bool) -> anyhow::Result<()> {
    for r in &done.rejected {
        match r.line {
            Some(line) => {
                tracing::warn!(line, path = %r.path, reason = %r.reason, "Rejected a manifest line.")
            }
            None => tracing::warn!(path = %r.path, reason = %r.reason, "Rejected a file."),
        }
    }
    let unlisted = done
        .report
        .files_rejected
        .saturating_sub(done.rejected.len() as u64);
    if unlisted > 0 {
        tracing::warn!(
            more = unlisted,
            log = %done.rejected_log.display(),
            "More manifest lines were left out than are logged here; every one is in the rejection log."
        );
    }
    if json {
        return outln!("{}", serde_json::to_string_pretty(done)?);
    }
    for o in &done.outputs {
        outln!("{}: {} rows → {}", o.split, o.rows, o.path.display())?;
    }
    for m in &done.manifests {
        outln!("manifest written back → {}", m.display())?;
    }
    for c in &done.cuts {
        outln!("lhotse cuts → {}", c.display())?;
    }
    out!("{}{}", done.report, done.startup_s)?;
    if !done.rejected.is_empty() {
        outln!(
            "{} file(s) rejected; reasons in {}",
            done.report.files_rejected,
            done.rejected_log.display()
        )?;
    }
    Ok(())
}

/// `build --strict` with rejections: says so (the exit status is 1).
fn strict_failure(done: &build::Outcomes, format: LogFormat) {
    let first = &done.rejected[0];
    if json_errors(format) {
        tracing::error!(
            files = done.report.files_rejected,
            path = %first.path,
            reason = %first.reason,
            "Files were rejected and --strict was given."
        );
    } else {
        eprintln!(
            "error: {} file(s) rejected and --strict was given (first: {}: {})",
            done.report.files_rejected, first.path, first.reason
        );
    }
}

/// Parses the command line, sets up logging, runs the command and returns
/// its exit status.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let env = std::env::var_os(logging::FORMAT_ENV);
    let format = LogFormat::resolve(cli.log_format, env.as_deref())
        .unwrap_or_else(|why| Cli::command().error(ErrorKind::InvalidValue, why).exit());
    logging::init(&cli.log_level, format);
    // `build --json` promises a JSON document on stdout, failure included.
    let json_out = matches!(cli.command, Command::Build { json: true, .. });
    // Ctrl-C and SIGTERM stop `build` and `merge` cleanly (app::interrupt).
    if matches!(cli.command, Command::Build { .. } | Command::Merge { .. })
        && let Err(e) = interrupt::install()
    {
        tracing::warn!(error = %e, "Cannot handle SIGINT/SIGTERM; a signal will kill the command.");
    }
    match run(cli, format) {
        Ok(code) => code,
        Err(e) if stopped(&e).is_some() => {
            let line = e.to_string();
            if json_out {
                let doc = serde_json::json!({ "ok": false, "error": line, "interrupted": true });
                let _ = outln!("{doc}");
            }
            if json_errors(format) {
                tracing::error!(error = line, "The command was interrupted.");
            } else {
                eprintln!("{line}");
            }
            ExitCode::from(interrupt::EXIT_CODE)
        }
        Err(e) => {
            let error = describe(&e);
            if json_out {
                let _ = outln!("{}", serde_json::json!({ "ok": false, "error": error }));
            }
            if json_errors(format) {
                tracing::error!(error, "The command failed.");
            } else {
                eprintln!("error: {error}");
            }
            ExitCode::FAILURE
        }
    }
}

/// The stop, when `e` is a command stopped by a signal.
fn stopped(e: &anyhow::Error) -> Option<&Stopped> {
    match (
        e.downcast_ref::<build::Error>(),
        e.downcast_ref::<crate::app::merge::Error>(),
    ) {
        (Some(build::Error::Interrupted(s)), _) => Some(s),
        (_, Some(crate::app::merge::Error::Interrupted(s))) => Some(s),
        _ => None,
    }
}

/// The error and its causes as one line, `outer: cause: …`, leaving out a
/// cause whose text the line already holds (most of our errors name their
/// source in their own message, so anyhow's `{:#}` would print it twice).
fn describe(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

/// Whether a fatal error goes out as a JSON log event rather than the plain
/// `error: …` line (which would be the one non-JSON line on stderr). Falls
/// back to the plain line when the filter would drop the event.
fn json_errors(format: LogFormat) -> bool {
    format == LogFormat::Json && tracing::enabled!(tracing::Level::ERROR)
}
