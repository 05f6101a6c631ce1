//! The arrays' statuses in exactly `/proc/mdstat`'s format, so the tools that watch md arrays
//! by parsing that file (node_exporter's mdadm collector, telegraf's mdstat input, scripts and
//! the alert rules written on them) watch raidkit's arrays unchanged once pointed at the file
//! raidkit keeps (`raidkit serve --mdstat PATH`, the daemon's `[daemon] mdstat`) or at
//! `raidkit status --mdstat`.
//!
//! The layout is the kernel's (`md_seq_show`, `status_resync` and the personalities' status in
//! drivers/md): a `Personalities :` line; per array its line, `NAME : active LEVEL MEMBER[N]...`
//! with `(W)` after a write-mostly member, `(F)` after a faulty member, `(S)` after a spare
//! and `(R)` after a replacement being filled (a member judged slow has no md mark: it shows
//! in `raidkit status` and the admin JSON); the size line in 1 KiB blocks with the level's geometry and, for the redundant
//! levels, `[roles/in sync] [UU_U]`; the progress line of a rebuild (`recovery`), resync or
//! scrub (`check`); the bitmap line; then `unused devices: <none>`. What raidkit has no
//! counterpart for is said the md way: the metadata is `super external:raidkit` (not md's),
//! a member being rebuilt is listed with no mark and counted `_` (as md does), a missing role
//! is not listed (as md does), and a repair shows as `resync` (what kernels before 6.12 print
//! for md's `repair`, and what every parser knows).
//!
//! The parsers split lines on whitespace and read a member as `NAME[N](FLAGS)`, so names are
//! printed with whitespace, brackets and parentheses replaced by `_` ([`token`]). They also
//! read a line naming `raid0`, `linear` or `inactive` anywhere as such an array, so a
//! member or array name containing those words misleads them (README "Monitoring").

use volume::VolumeStatus;
use volume::{BitmapStatus, MemberState, MemberStatus, SpeedLimits, TaskKind, TaskStatus};

/// The first line: the levels raidkit runs, as md lists its loaded personalities (with md's
/// trailing space; procfs reads a line's levels from it).
pub const PERSONALITIES: &str =
    "Personalities : [linear] [raid0] [raid1] [raid10] [raid5] [raid6] ";

/// The last line: raidkit keeps no device outside an array.
pub const UNUSED: &str = "unused devices: <none>";

/// Counters of md's write-intent bitmap per 4 KiB page (16-bit counters), for its `pages`.
const BITMAP_COUNTERS_PER_PAGE: u64 = 2048;

/// The whole file for `arrays` (name, status), in the order given.
pub fn render<'a>(arrays: impl IntoIterator<Item = (&'a str, &'a VolumeStatus)>) -> String {
    let mut out = format!("{PERSONALITIES}\n");
    for (name, status) in arrays {
        out += &array(name, status);
    }
    out + UNUSED + "\n"
}

/// One array: its line, the size line, the progress and bitmap lines, and the line that ends
/// it (md's: six spaces, or empty after a bitmap line).
fn array(name: &str, s: &VolumeStatus) -> String {
    let mut out = format!("{} : active {}", token(name), s.level);
    for member in members(&s.members) {
        out += " ";
        out += &member;
    }
    out += &format!(
        "\n      {} blocks super external:raidkit{}\n",
        s.size_bytes / 1024,
        geometry(s)
    );
    if let Some(task) = &s.task {
        out += &format!("      {}\n", progress(task, &s.speed_limits));
    }
    match &s.bitmap {
        Some(bitmap) => out += &format!("      {}\n\n", bitmap_line(bitmap)),
        None => out += "      \n",
    }
    out
}

/// Each listed member as `NAME[N]` with its mark. `N` is the role for a role's member; a
/// spare or a replacement being filled takes the next number after the roles (md's
/// descriptor numbers are unique too). Missing roles are not listed.
fn members(members: &[MemberStatus]) -> Vec<String> {
    let mut next = roles(members).len();
    let mut listed = Vec::new();
    for m in members {
        if m.name.is_empty() || m.state == MemberState::Missing {
            continue;
        }
        let number = match (m.role, m.state) {
            (Some(role), state) if state != MemberState::ReplacementTarget => role,
            _ => {
                next += 1;
                next - 1
            }
        };
        let mark = match m.state {
            MemberState::Faulty => "(F)",
            MemberState::Spare => "(S)",
            MemberState::ReplacementTarget => "(R)",
            MemberState::Active
            | MemberState::Replacing
            | MemberState::Rebuilding
            | MemberState::Missing => "",
        };
        // md prints (W) first, then the state's mark (`md_seq_show`).
        let write_mostly = if m.write_mostly { "(W)" } else { "" };
        listed.push(format!("{}[{number}]{write_mostly}{mark}", token(&m.name)));
    }
    listed
}

/// The members that hold a role (a replacement being filled does not yet).
fn roles(members: &[MemberStatus]) -> Vec<&MemberStatus> {
    members
        .iter()
        .filter(|m| m.role.is_some() && m.state != MemberState::ReplacementTarget)
        .collect()
}

/// `[4/3] [UU_U]`: roles, roles in sync, and per role `U` (in sync) or `_` (missing, faulty
/// or being rebuilt), as md's redundant levels print it.
pub fn sync_summary(members: &[MemberStatus]) -> String {
    let roles = roles(members);
    let in_sync =
        |m: &MemberStatus| matches!(m.state, MemberState::Active | MemberState::Replacing);
    let up = roles.iter().filter(|m| in_sync(m)).count();
    let letters: String = roles
        .iter()
        .map(|m| if in_sync(m) { 'U' } else { '_' })
        .collect();
    format!("[{}/{up}] [{letters}]", roles.len())
}

/// The level's part of the size line, as its md personality prints it.
fn geometry(s: &VolumeStatus) -> String {
    let chunk_k = s.chunk_bytes / 1024;
    let sync = sync_summary(&s.members);
    match s.level.as_str() {
        "linear" => format!(" {chunk_k}k rounding"),
        "raid0" => format!(" {chunk_k}k chunks"),
        "raid1" => format!(" {sync}"),
        // md's near layout with 2 copies ("K" is raid10's own spelling).
        "raid10" => format!(" {chunk_k}K chunks 2 near-copies {sync}"),
        // Algorithm 2 is md's left-symmetric, the layout raidkit's RAID 5 and 6 use.
        "raid5" => format!(" level 5, {chunk_k}k chunk, algorithm 2 {sync}"),
        "raid6" => format!(" level 6, {chunk_k}k chunk, algorithm 2 {sync}"),
        _ => format!(" {sync}"),
    }
}

/// md's name for the work: a rebuild or replace is `recovery`, a scrub `check`.
fn action(kind: TaskKind) -> &'static str {
    match kind {
        TaskKind::Rebuild | TaskKind::Replace => "recovery",
        TaskKind::Scrub => "check",
        TaskKind::Repair | TaskKind::Resync | TaskKind::InitialSync => "resync",
    }
}

/// `[==>..................]  recovery = 12.6% (37043392/292945152) finish=127.5min
/// speed=33440K/sec`: the bar in twentieths, the per-mille done (at most 999, as md), the
/// member's KiB done and to
/// do, the time left and the member rate. Before a rate is measured the time left is the
/// longest it can take, at the minimum speed limit (md never prints a line without both); a
/// task paused outside the background window keeps its position at speed 0, its time left
/// counted the same way.
pub fn progress(task: &TaskStatus, limits: &SpeedLimits) -> String {
    let total = task.total_bytes.max(1);
    let done = task.done_bytes.min(total);
    // At most 99.9 %, as md (which divides by total + 1): "100.0%" would leave no space
    // after the `=`, and procfs's `= (.+)%` would not match.
    let per_milli = (u128::from(done) * 1000 / u128::from(total)).min(999) as u64;
    let filled = (per_milli / 50) as usize;
    let bar = format!("{}>{}", "=".repeat(filled), ".".repeat(20 - filled));
    let left = total - done;
    let (rate, eta) = match task.paused {
        Some(_) => (0, None),
        None => (task.bytes_per_sec, task.eta_secs),
    };
    let secs = eta.unwrap_or(left / limits.min_bytes_per_sec.max(1));
    format!(
        "[{bar}]  {} ={:3}.{}% ({}/{}) finish={}.{}min speed={}K/sec",
        action(task.kind),
        per_milli / 10,
        per_milli % 10,
        done / 1024,
        total / 1024,
        secs / 60,
        secs % 60 / 6,
        rate / 1024
    )
}

/// `bitmap: 1/8 pages [4KB], 65536KB chunk`: md counts its bitmap in pages of 2048 regions
/// and the pages it holds in memory; raidkit holds the whole bitmap, so the pages "held" are
/// those that can hold a dirty region (at most one per dirty region: non-zero exactly when a
/// region is dirty).
fn bitmap_line(b: &BitmapStatus) -> String {
    let pages = b.regions.div_ceil(BITMAP_COUNTERS_PER_PAGE);
    let held = b.dirty_regions.min(pages);
    let chunk = match b.region_bytes {
        bytes if bytes >= 1024 => format!("{}KB", bytes / 1024),
        bytes => format!("{bytes}B"),
    };
    format!(
        "bitmap: {held}/{pages} pages [{}KB], {chunk} chunk",
        held * 4
    )
}

/// `name` as one field the parsers read back: whitespace, brackets and parentheses (which
/// would split it or read as a member's number or flags) become `_`.
pub fn token(name: &str) -> String {
    name.chars()
        .map(|c| match c {
            '[' | ']' | '(' | ')' => '_',
            c if c.is_whitespace() => '_',
            c => c,
        })
        .collect()
}

#[cfg(test)]
mod tests;
