//! What the volume benchmarks share.

/// A second engine array over `v`'s data areas, with `missing` left out: the benchmarks
/// time degraded reads and rebuild steps on it without touching the volume's own state.
pub fn view(v: &volume::Volume, missing: Option<usize>) -> engine::Array {
    let a = v.array();
    let g = a.geometry();
    let config = engine::ArrayConfig {
        level: g.level(),
        chunk_bytes: g.chunk_bytes(),
        member_count: g.member_count(),
        member_data_bytes: (0..g.member_count())
            .map(|r| g.member_data_bytes(r))
            .collect(),
    };
    let members = (0..g.member_count())
        .map(|r| (Some(r) != missing).then(|| a.member(r).expect("member")))
        .collect();
    engine::Array::new(config, members).expect("array view")
}
