//! `raidkit`: the command line. One module per subcommand under `cmd/`; errors print one line
//! plus their cause chain to stderr and exit non-zero.
//!
//! The operator commands (`status`, `fail`, `remove`, `add`, `replace`, `scrub`,
//! `speed-limit`) talk to a running `raidkit serve --admin PATH` through `admin_client`;
//! the `admin` crate is the other end, run inside `serve`, and owns the status they decode
//! (`admin::status::Status`).

mod admin_client;
mod client_limits;
mod cmd;
mod journal_args;
mod key_args;
mod log;
mod progress;
mod space;
mod units;

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
    Bench(Box<cmd::bench::Args>),
    Plan(Box<cmd::plan::Args>),
    Examine(cmd::examine::Args),
    Serve(Box<cmd::serve::Args>),
    Daemon(cmd::daemon::Args),
    Journal(cmd::journal::Args),
    Key(cmd::key::Args),
    Status(cmd::status::Args),
    Iostat(cmd::iostat::Args),
    Monitor(cmd::monitor::Args),
    Reload(cmd::reload::Args),
    Fail(cmd::manage::FailArgs),
    Remove(cmd::manage::RemoveArgs),
    Add(cmd::manage::AddArgs),
    Replace(cmd::manage::ReplaceArgs),
    Scrub(cmd::manage::ScrubArgs),
    Grow(cmd::grow::Args),
    #[command(name = "speed-limit")]
    SpeedLimit(cmd::manage::SpeedArgs),
    /// Print the shell completion script for SHELL (bash, zsh, fish, elvish, powershell).
    Completions {
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff), e.g. `raidkit man > /usr/local/share/man/man8/raidkit.8`.
    Man,
}

fn run(cli: Cli) -> anyhow::Result<()> {
    // RAIDKIT_CRYPT (the XTS implementation of encrypted arrays) is read once, here: a value
    // that cannot be had is refused before anything is opened.
    crypt::Implementation::chosen().map_err(anyhow::Error::msg)?;
    match cli.command {
        Command::Create(args) => cmd::create::run(args),
        Command::Bench(args) => cmd::bench::run(*args),
        Command::Plan(args) => cmd::plan::run(*args),
        Command::Examine(args) => cmd::examine::run(args),
        Command::Serve(args) => cmd::serve::run(*args),
        Command::Daemon(args) => cmd::daemon::run(args),
        Command::Journal(args) => cmd::journal::run(args),
        Command::Key(args) => cmd::key::run(args),
        Command::Status(args) => cmd::status::run(args),
        Command::Iostat(args) => cmd::iostat::run(args),
        Command::Monitor(args) => cmd::monitor::run(args),
        Command::Reload(args) => cmd::reload::run(args),
        Command::Fail(args) => cmd::manage::fail(args),
        Command::Remove(args) => cmd::manage::remove(args),
        Command::Add(args) => cmd::manage::add(args),
        Command::Replace(args) => cmd::manage::replace(args),
        Command::Scrub(args) => cmd::manage::scrub(args),
        Command::Grow(args) => cmd::grow::run(args),
        Command::SpeedLimit(args) => cmd::manage::speed(args),
        Command::Completions { shell } => {
            use clap::CommandFactory;
            clap_complete::generate(
                shell,
                &mut Cli::command(),
                "raidkit",
                &mut std::io::stdout(),
            );
            Ok(())
        }
        Command::Man => {
            use clap::CommandFactory;
            let page = clap_mangen::Man::new(Cli::command()).section("8");
            page.render(&mut std::io::stdout())?;
            Ok(())
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            for line in error_lines(&e) {
                eprintln!("{line}");
            }
            ExitCode::FAILURE
        }
    }
}

/// `e` and its causes, one line each; a cause whose text the line before already holds (an
/// error that both says its source and returns it from `source()`) is not said twice.
fn error_lines(e: &anyhow::Error) -> Vec<String> {
    let mut lines = vec![format!("raidkit: error: {e}")];
    let mut said = e.to_string();
    for cause in e.chain().skip(1) {
        let text = cause.to_string();
        if !said.contains(&text) {
            lines.push(format!("  caused by: {text}"));
        }
        said = text;
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Says(&'static str, Option<std::io::Error>);

    impl std::fmt::Display for Says {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }

    impl std::error::Error for Says {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_ref().map(|e| e as _)
        }
    }

    #[test]
    fn a_cause_already_said_is_not_repeated() {
        let io = || std::io::Error::other("disk on fire");
        let e = anyhow::Error::new(Says("member m2: disk on fire", Some(io())))
            .context("assembling the array");
        assert_eq!(
            error_lines(&e),
            [
                "raidkit: error: assembling the array",
                "  caused by: member m2: disk on fire"
            ]
        );
        let e = anyhow::Error::new(Says("member m2: cannot read", Some(io())))
            .context("assembling the array");
        assert_eq!(
            error_lines(&e),
            [
                "raidkit: error: assembling the array",
                "  caused by: member m2: cannot read",
                "  caused by: disk on fire"
            ]
        );
    }
}
