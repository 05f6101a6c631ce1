//! Test support shared by the workspace's integration tests: what a test does when a tool it
//! needs (nbdkit, qemu-io, …) is missing, or when the machine cannot run it at all; seeded
//! randomness ([`Rng`], [`seed`], [`seeds`], [`SeedGuard`]: `RAIDKIT_SEED` replays); NBD servers
//! started on Unix sockets ([`server`]); TLS certificates made in the test ([`certificates`]).
//!
//! A missing tool fails the test ([`require_tool`] panics with how to install it), so a test
//! can never pass by not running. `RAIDKIT_ALLOW_MISSING_TOOLS=1` turns that into a skip for
//! a developer without the tools: the test prints a `SKIPPED` line and returns. Rust's test
//! harness cannot count skips, so every skip is also appended to the file named by
//! `RAIDKIT_SKIP_LOG` (scripts/test.sh sets it, prints the skips in its summary and, with
//! `CI=true`, fails the run on any skip that is not environment-dependent).
//!
//! [`skip_environment`] records the other kind: a test that cannot run on this machine for a
//! reason no package fixes (not root, no loop device, no IPv6); its reason is listed in the
//! summary and it is allowed in CI.
//!
//! ```
//! if !testsupport::require_tool("sh") {
//!     return; // only reached with RAIDKIT_ALLOW_MISSING_TOOLS=1
//! }
//! ```

use std::io::Write;
use std::path::{Path, PathBuf};

pub mod certificates;
mod seeded;
pub mod server;

pub use seeded::{given_seed, seed, seeds, Rng, SeedGuard};

/// Where `got` first differs from `want` (a byte, or the end of the shorter one); `None` when
/// they are equal. For tests comparing what they read with their model.
pub fn first_difference(got: &[u8], want: &[u8]) -> Option<usize> {
    (got != want).then(|| {
        got.iter()
            .zip(want)
            .position(|(a, b)| a != b)
            .unwrap_or(got.len().min(want.len()))
    })
}

/// Set to `1` to skip (not fail) tests whose tools are missing.
pub const ALLOW_MISSING_TOOLS_VAR: &str = "RAIDKIT_ALLOW_MISSING_TOOLS";
/// The file every skip is appended to (one line: `kind<TAB>test<TAB>reason`).
pub const SKIP_LOG_VAR: &str = "RAIDKIT_SKIP_LOG";

/// Why a test did not run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SkipKind {
    /// A tool is missing and the opt-out is set (a failure in CI).
    MissingTool,
    /// The machine cannot run the test (allowed in CI; the reason is listed).
    Environment,
}

impl SkipKind {
    fn label(self) -> &'static str {
        match self {
            SkipKind::MissingTool => "missing-tool",
            SkipKind::Environment => "environment",
        }
    }
}

/// The settings [`require_tool`] reads from the environment.
#[derive(Clone, Debug, Default)]
pub struct Settings {
    pub allow_missing_tools: bool,
    pub skip_log: Option<PathBuf>,
}

impl Settings {
    pub fn from_env() -> Settings {
        let allow = std::env::var(ALLOW_MISSING_TOOLS_VAR).is_ok_and(|v| v == "1");
        Settings {
            allow_missing_tools: allow,
            skip_log: std::env::var_os(SKIP_LOG_VAR)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from),
        }
    }
}

/// True when `tool` is on `PATH` (or in /usr/sbin, /sbin) and executable. When it is not,
/// panics naming it and how to install it, unless `RAIDKIT_ALLOW_MISSING_TOOLS=1`: then the
/// skip is recorded and this returns false (the caller returns).
pub fn require_tool(tool: &str) -> bool {
    require_tool_with(tool, &Settings::from_env())
}

/// [`require_tool`] for several tools: true when all are there.
pub fn require_tools(tools: &[&str]) -> bool {
    tools.iter().all(|t| require_tool(t))
}

/// [`require_tool`] with explicit settings.
pub fn require_tool_with(tool: &str, settings: &Settings) -> bool {
    if find_tool(tool).is_some() {
        return true;
    }
    let reason = format!(
        "{tool} is missing: install it with scripts/install-deps.sh \
         (or set {ALLOW_MISSING_TOOLS_VAR}=1 to skip)"
    );
    if !settings.allow_missing_tools {
        panic!("{reason}");
    }
    record(SkipKind::MissingTool, &test_name(), &reason, settings);
    false
}

/// Records that the running test cannot run on this machine (`reason` says why, e.g. "losetup
/// needs root"); the caller returns. Listed in scripts/test.sh's summary; allowed in CI.
pub fn skip_environment(reason: &str) {
    record(
        SkipKind::Environment,
        &test_name(),
        reason,
        &Settings::from_env(),
    );
}

/// Prints the `SKIPPED` line and appends the skip to the log, if one is set.
pub fn record(kind: SkipKind, test: &str, reason: &str, settings: &Settings) {
    assert!(!reason.contains('\n') && !test.contains('\t'));
    println!("SKIPPED ({}) {test}: {reason}", kind.label());
    eprintln!("SKIPPED ({}) {test}: {reason}", kind.label());
    let Some(path) = &settings.skip_log else {
        return;
    };
    let line = format!("{}\t{test}\t{}\n", kind.label(), reason.replace('\t', " "));
    // One short O_APPEND write per skip: lines from parallel tests do not interleave.
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .and_then(|mut f| f.write_all(line.as_bytes()));
    if let Err(e) = written {
        panic!("cannot record a skip in {}: {e}", path.display());
    }
}

/// The path of `tool`, searched like a shell would (plus /usr/sbin and /sbin).
pub fn find_tool(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let extra = [PathBuf::from("/usr/sbin"), PathBuf::from("/sbin")];
    std::env::split_paths(&path)
        .chain(extra)
        .map(|dir| dir.join(tool))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The running test's name (libtest names each test's thread after it).
fn test_name() -> String {
    std::thread::current()
        .name()
        .filter(|n| *n != "main")
        .unwrap_or("(unnamed test)")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    const ABSENT: &str = "raidkit-no-such-tool-7f3a";

    #[test]
    fn a_present_tool_is_found() {
        assert!(find_tool("sh").is_some());
        assert!(require_tool_with("sh", &Settings::default()));
    }

    #[test]
    fn a_missing_tool_fails_the_test_without_the_opt_out() {
        let dir = tempfile::tempdir().unwrap();
        let settings = Settings {
            allow_missing_tools: false,
            skip_log: Some(dir.path().join("skips")),
        };
        let err = std::panic::catch_unwind(|| require_tool_with(ABSENT, &settings))
            .expect_err("a missing tool must fail the test");
        let msg = err.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(msg.contains(ABSENT), "{msg}");
        assert!(msg.contains("scripts/install-deps.sh"), "{msg}");
        assert!(msg.contains(ALLOW_MISSING_TOOLS_VAR), "{msg}");
        assert!(
            !dir.path().join("skips").exists(),
            "a failure is not a skip"
        );
    }

    #[test]
    fn with_the_opt_out_a_missing_tool_is_a_counted_skip() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("skips");
        let settings = Settings {
            allow_missing_tools: true,
            skip_log: Some(log.clone()),
        };
        assert!(!require_tool_with(ABSENT, &settings));
        assert!(!require_tool_with(ABSENT, &settings));
        record(SkipKind::Environment, "t", "needs root", &settings);
        let text = std::fs::read_to_string(&log).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(lines[0].starts_with("missing-tool\t"), "{text}");
        assert!(lines[0].contains(ABSENT), "{text}");
        assert!(
            lines[0].contains("with_the_opt_out"),
            "the test's name: {text}"
        );
        assert_eq!(lines[2], "environment\tt\tneeds root");
    }
}
