//! AFL++ target: see `raidkit_fuzz::member_replies`.
fn main() {
    afl::fuzz!(|data: &[u8]| raidkit_fuzz::member_replies(data));
}
