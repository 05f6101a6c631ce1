//! AFL++ target: see `raidkit_fuzz::bitmap`.
fn main() {
    afl::fuzz!(|data: &[u8]| raidkit_fuzz::bitmap(data));
}
