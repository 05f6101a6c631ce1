//! Where the metadata areas go on every member: between the superblock and the data, after
//! the write-intent bitmap (which stays first, at 8192), one after another, each 4 KiB-aligned
//! (docs/FORMAT.md "Member layout"). The one place `create` decides it.

use crate::bitmap::{BitmapRef, BITMAP_OFFSET};
use crate::superblock::DATA_OFFSET_DEFAULT;

/// Alignment of every metadata area.
const AREA_ALIGN: u64 = 4096;
/// A grown data offset is rounded up to this.
const DATA_OFFSET_ALIGN: u64 = 1 << 20;

/// One metadata area `create` places: its name (for messages) and its length in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AreaRequest {
    pub name: &'static str,
    pub bytes: u64,
}

/// Where the areas went.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetadataLayout {
    /// The start of each requested area, in the order asked.
    pub offsets: Vec<u64>,
    /// The data offset: the one given, or (the default one given) grown to fit the areas.
    pub data_offset_bytes: u64,
}

/// Places `areas` in this order (used map, bad-block list, reshape backup, checksums) after
/// the bitmap (or after the superblock without one). When they do not fit below
/// `data_offset_bytes`: the default offset grows to the next MiB past them; an offset the
/// user gave is refused, naming what needs the room.
pub fn metadata_layout(
    bitmap: Option<&BitmapRef>,
    areas: &[AreaRequest],
    data_offset_bytes: u64,
) -> Result<MetadataLayout, String> {
    let mut at = bitmap.map_or(BITMAP_OFFSET, |b| b.offset_bytes + b.bytes);
    let mut offsets = Vec::with_capacity(areas.len());
    for area in areas {
        at = at.div_ceil(AREA_ALIGN) * AREA_ALIGN;
        offsets.push(at);
        at += area.bytes;
    }
    if at <= data_offset_bytes {
        return Ok(MetadataLayout {
            offsets,
            data_offset_bytes,
        });
    }
    if data_offset_bytes != DATA_OFFSET_DEFAULT {
        let names: Vec<&str> = areas.iter().map(|a| a.name).collect();
        return Err(format!(
            "data offset {data_offset_bytes} leaves no room for the metadata ({}{} end at byte {at}); \
             give --data-offset {} or more",
            if bitmap.is_some() { "bitmap, " } else { "" },
            names.join(", "),
            at.div_ceil(DATA_OFFSET_ALIGN) * DATA_OFFSET_ALIGN
        ));
    }
    Ok(MetadataLayout {
        offsets,
        data_offset_bytes: at.div_ceil(DATA_OFFSET_ALIGN) * DATA_OFFSET_ALIGN,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn areas_follow_the_bitmap_aligned_and_grow_only_the_default_offset() {
        let bitmap = BitmapRef {
            offset_bytes: BITMAP_OFFSET,
            bytes: 4096,
            region_bytes: 64 << 20,
        };
        let areas = [
            AreaRequest {
                name: "used map",
                bytes: 100,
            },
            AreaRequest {
                name: "other",
                bytes: 8192,
            },
        ];
        let l = metadata_layout(Some(&bitmap), &areas, DATA_OFFSET_DEFAULT).unwrap();
        assert_eq!(l.offsets, vec![12288, 16384]);
        assert_eq!(l.data_offset_bytes, DATA_OFFSET_DEFAULT);
        let l = metadata_layout(None, &areas, DATA_OFFSET_DEFAULT).unwrap();
        assert_eq!(l.offsets, vec![8192, 12288]);
        let big = [AreaRequest {
            name: "big",
            bytes: 2 << 20,
        }];
        let l = metadata_layout(Some(&bitmap), &big, DATA_OFFSET_DEFAULT).unwrap();
        assert_eq!(l.data_offset_bytes, 3 << 20);
        let e = metadata_layout(Some(&bitmap), &big, 2 << 20).unwrap_err();
        assert!(
            e.contains("big") && e.contains("--data-offset 3145728"),
            "{e}"
        );
    }
}
