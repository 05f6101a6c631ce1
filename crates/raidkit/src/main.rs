//! `raidkit`: the command line. One module per subcommand under `cmd/`; errors print one line
//! plus their cause chain to stderr and exit non-zero.

mod cmd;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// A software RAID controller: pools files, block devices and RAM into arrays of level linear,
/// 0, 1, 10, 5 or 6, with on-disk metadata on every member.
#[derive(Debug, Parser)]
#[command(name = "raidkit", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    Create(cmd::create::Args),
    Examine(cmd::examine::Args),
    Serve(cmd::serve::Args),
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Create(args) => cmd::create::run(args),
        Command::Examine(args) => cmd::examine::run(args),
        Command::Serve(args) => cmd::serve::run(args),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("raidkit: error: {e}");
            for cause in e.chain().skip(1) {
                eprintln!("  caused by: {cause}");
            }
            ExitCode::FAILURE
        }
    }
}
