//! AFL++ target: see `raidkit_fuzz::config`.
fn main() {
    afl::fuzz!(|data: &[u8]| raidkit_fuzz::config(data));
}
