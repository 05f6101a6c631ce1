//! AFL++ target: see `raidkit_fuzz::superblock`.
fn main() {
    afl::fuzz!(|data: &[u8]| raidkit_fuzz::superblock(data));
}
