//! `MemMember`: a sparse RAM member.
//!
//! Memory is allocated in fixed pages of [`PAGE_BYTES`] on first write; a page never written (or
//! trimmed away) reads as zeroes. Pages live in [`SHARD_COUNT`] independently locked shards
//! (page `i` in shard `i % SHARD_COUNT`), so parallel I/O to different pages rarely contends.
//! Memory used is bounded by the member size plus one map entry per written page.

use std::collections::HashMap;
use std::io;
use std::sync::{Mutex, MutexGuard};

use crate::error::{check_member_range, MemberError};
use crate::Member;

/// Allocation unit of a RAM member.
pub const PAGE_BYTES: u64 = 64 * 1024;
/// Number of independently locked page maps.
pub const SHARD_COUNT: usize = 64;

type Page = Box<[u8]>;

/// A sparse in-memory member (`mem:SIZE`).
pub struct MemMember {
    name: String,
    size_bytes: u64,
    shards: Vec<Mutex<HashMap<u64, Page>>>,
}

impl std::fmt::Debug for MemMember {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemMember")
            .field("name", &self.name)
            .field("size_bytes", &self.size_bytes)
            .field("pages_allocated", &self.pages_allocated())
            .finish()
    }
}

impl MemMember {
    /// A new all-zero RAM member of `size_bytes`, called `name`.
    pub fn new(name: &str, size_bytes: u64) -> Result<MemMember, MemberError> {
        if size_bytes == 0 {
            return Err(MemberError::Empty {
                name: name.to_string(),
            });
        }
        let shards = (0..SHARD_COUNT)
            .map(|_| Mutex::new(HashMap::new()))
            .collect();
        Ok(MemMember {
            name: name.to_string(),
            size_bytes,
            shards,
        })
    }

    /// How many pages hold memory (for tests and status).
    pub fn pages_allocated(&self) -> usize {
        (0..SHARD_COUNT).map(|i| self.shard(i as u64).len()).sum()
    }

    fn shard(&self, page_index: u64) -> MutexGuard<'_, HashMap<u64, Page>> {
        let shard = &self.shards[(page_index % SHARD_COUNT as u64) as usize];
        // A panic while holding a shard lock cannot leave a page half-initialised in a way that
        // breaks the map itself (pages are plain bytes), so a poisoned lock is still usable.
        shard.lock().unwrap_or_else(|poison| poison.into_inner())
    }

    /// Calls `f(page_index, offset_in_page, range_in_buffer)` for each page piece of the range.
    fn for_each_piece(
        offset: u64,
        len: u64,
        mut f: impl FnMut(u64, usize, std::ops::Range<usize>),
    ) {
        let mut done = 0u64;
        while done < len {
            let pos = offset + done;
            let page_index = pos / PAGE_BYTES;
            let in_page = pos % PAGE_BYTES;
            let piece = (PAGE_BYTES - in_page).min(len - done);
            f(
                page_index,
                in_page as usize,
                done as usize..(done + piece) as usize,
            );
            done += piece;
        }
        assert_eq!(done, len);
    }

    fn zero_range(&self, offset: u64, len: u64) {
        Self::for_each_piece(offset, len, |page_index, in_page, range| {
            let mut shard = self.shard(page_index);
            if range.len() as u64 == PAGE_BYTES {
                shard.remove(&page_index);
            } else if let Some(page) = shard.get_mut(&page_index) {
                page[in_page..in_page + range.len()].fill(0);
            }
        });
    }
}

impl Member for MemMember {
    fn name(&self) -> &str {
        &self.name
    }

    fn len(&self) -> u64 {
        self.size_bytes
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        check_member_range(self, "read", offset, buf.len() as u64)?;
        Self::for_each_piece(offset, buf.len() as u64, |page_index, in_page, range| {
            let shard = self.shard(page_index);
            let out = &mut buf[range];
            match shard.get(&page_index) {
                Some(page) => out.copy_from_slice(&page[in_page..in_page + out.len()]),
                None => out.fill(0),
            }
        });
        Ok(())
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        check_member_range(self, "write", offset, buf.len() as u64)?;
        Self::for_each_piece(offset, buf.len() as u64, |page_index, in_page, range| {
            let mut shard = self.shard(page_index);
            let page = shard
                .entry(page_index)
                .or_insert_with(|| vec![0u8; PAGE_BYTES as usize].into_boxed_slice());
            let data = &buf[range];
            page[in_page..in_page + data.len()].copy_from_slice(data);
        });
        Ok(())
    }

    fn flush(&self) -> io::Result<()> {
        Ok(())
    }

    fn trim(&self, offset: u64, len: u64) -> io::Result<()> {
        check_member_range(self, "trim", offset, len)?;
        self.zero_range(offset, len);
        Ok(())
    }

    fn write_zeroes(&self, offset: u64, len: u64) -> io::Result<()> {
        check_member_range(self, "write-zeroes", offset, len)?;
        self.zero_range(offset, len);
        Ok(())
    }
}
