//! The `melforge` binary. Everything (arguments, logging, exit codes) is in
//! [`melforge::cli`]; this file only calls it.

fn main() -> std::process::ExitCode {
    melforge::runtime::clock::mark_process_start();
    melforge::cli::main()
}
