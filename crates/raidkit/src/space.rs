//! The space sparse member files need on their filesystems, for `create` and `serve --create`:
//! a warning when they could outgrow it (writes to the array would then fail with "no space"),
//! and `--preallocate`, which reserves every member file's blocks up front (fallocate).
//!
//! Members on the same filesystem (same `st_dev`) are counted together: four 100 MiB sparse
//! files on a 200 MiB filesystem need 400 MiB of it, not 100 MiB each.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::units::human_bytes;

/// The member files on one filesystem and what they still need of it.
#[derive(Debug)]
struct OnFilesystem {
    fs: member::FilesystemSpace,
    files: Vec<(PathBuf, u64)>,
    /// Bytes the files can still allocate (their length less what they hold).
    growth_bytes: u64,
}

/// Regular member files among `specs` (`mem:`, NBD URIs and block devices are skipped),
/// grouped by filesystem.
fn by_filesystem(specs: &[String]) -> anyhow::Result<Vec<OnFilesystem>> {
    let mut groups: BTreeMap<u64, OnFilesystem> = BTreeMap::new();
    for spec in specs {
        let path = Path::new(spec);
        let Ok(meta) = std::fs::metadata(path) else {
            continue;
        };
        if !meta.is_file() {
            continue;
        }
        let fs = member::filesystem_of(path)
            .with_context(|| format!("member {spec}: cannot read its filesystem's free space"))?;
        let allocated = member::allocated_bytes(path)?;
        let group = groups.entry(fs.device).or_insert_with(|| OnFilesystem {
            fs,
            files: Vec::new(),
            growth_bytes: 0,
        });
        group.growth_bytes += meta.len().saturating_sub(allocated);
        group.files.push((path.to_path_buf(), meta.len()));
    }
    Ok(groups.into_values().collect())
}

fn describe(g: &OnFilesystem) -> String {
    let kind = match g.fs.fs_type.is_empty() {
        true => String::new(),
        false => format!(" ({})", g.fs.fs_type),
    };
    format!("{}{kind}", g.fs.mount_point.display())
}

/// Creates an array with `create` on the member files `members` and `spares`, checked
/// ([`check_preallocation`]) before and preallocated or warned about ([`after_create`]) after.
pub fn create_with<T>(
    members: &[String],
    spares: &[String],
    preallocate: bool,
    create: impl FnOnce() -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let files: Vec<String> = members.iter().chain(spares).cloned().collect();
    if preallocate {
        check_preallocation(&files)?;
    }
    let created = create()?;
    after_create(&files, preallocate)?;
    Ok(created)
}

/// Before create with `--preallocate`: refuses when a filesystem cannot hold its member files
/// whole (nothing is written yet).
pub fn check_preallocation(specs: &[String]) -> anyhow::Result<()> {
    for g in by_filesystem(specs)? {
        if g.growth_bytes > g.fs.free_bytes {
            anyhow::bail!(
                "--preallocate: the {} member file(s) on filesystem {} need {} more, but only {} \
                 is free; free space there, make the members smaller (--size), or leave out \
                 --preallocate to create them sparse",
                g.files.len(),
                describe(&g),
                human_bytes(g.growth_bytes),
                human_bytes(g.fs.free_bytes)
            );
        }
    }
    Ok(())
}

/// After create: with `preallocate`, reserves every member file's blocks; without, warns
/// (on stderr) about each filesystem the sparse members could outgrow.
pub fn after_create(specs: &[String], preallocate: bool) -> anyhow::Result<()> {
    for g in by_filesystem(specs)? {
        if preallocate {
            for (path, len) in &g.files {
                member::preallocate(path, 0, *len).with_context(|| {
                    format!(
                        "--preallocate: cannot reserve the {} of member {} on filesystem {}",
                        human_bytes(*len),
                        path.display(),
                        describe(&g)
                    )
                })?;
            }
            println!(
                "preallocated {} member file(s) on {}",
                g.files.len(),
                describe(&g)
            );
        } else if g.growth_bytes > g.fs.free_bytes {
            eprintln!(
                "raidkit: warning: the {} sparse member file(s) on filesystem {} can grow by {} \
                 but only {} is free there: once it is full, writes to the array fail with \"no \
                 space left on device\" (no member is failed; they succeed again when space is \
                 freed). Create with --preallocate to reserve the space now.",
                g.files.len(),
                describe(&g),
                human_bytes(g.growth_bytes),
                human_bytes(g.fs.free_bytes)
            );
        }
    }
    Ok(())
}
