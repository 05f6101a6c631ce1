//! A secret that grants access: read from a file the operator makes, which only its owner may
//! read (`--dashboard-token-file`, which enables the dashboard's actions; `--admin-token-file`,
//! without which the admin API on TCP does not start), compared in constant time.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// Shortest token accepted (bytes, after trimming white space).
pub const TOKEN_BYTES_MIN: usize = 16;
/// Longest token accepted.
pub const TOKEN_BYTES_MAX: usize = 1024;

/// A secret that grants access.
#[derive(Clone)]
pub struct Token(Vec<u8>);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(..)")
    }
}

const MAKE_ONE: &str = "make one with: (umask 077; head -c 24 /dev/urandom | base64 > FILE)";

impl Token {
    /// The token in `text` (white space around it ignored).
    pub fn new(text: &str) -> Result<Token, String> {
        let token = text.trim();
        if token.len() < TOKEN_BYTES_MIN || token.len() > TOKEN_BYTES_MAX {
            return Err(format!(
                "the token is {} bytes; it must be {TOKEN_BYTES_MIN} to \
                 {TOKEN_BYTES_MAX} ({MAKE_ONE})",
                token.len()
            ));
        }
        if token.bytes().any(|b| !(0x21..0x7f).contains(&b)) {
            return Err(format!(
                "the token must be printable ASCII without spaces, as it is sent \
                 in an HTTP header ({MAKE_ONE})"
            ));
        }
        Ok(Token(token.as_bytes().to_vec()))
    }

    /// Reads the token from `path`, which only its owner may read (as an ssh key); `what` names
    /// it in errors ("the dashboard token file").
    pub fn from_file(path: &Path, what: &str) -> Result<Token, String> {
        let name = path.display();
        let meta =
            std::fs::metadata(path).map_err(|e| format!("cannot read {what} {name}: {e}"))?;
        if meta.permissions().mode() & 0o077 != 0 {
            return Err(format!(
                "{what} {name} can be read by other users (mode {:o}): chmod 600 {name}",
                meta.permissions().mode() & 0o777
            ));
        }
        let text =
            std::fs::read_to_string(path).map_err(|e| format!("cannot read {what} {name}: {e}"))?;
        Token::new(&text).map_err(|e| format!("{name}: {e}"))
    }

    /// The secret itself, for a client to send.
    pub fn expose(&self) -> &[u8] {
        &self.0
    }

    /// True when `given` is the token. The time taken depends on the token's length only,
    /// not on where `given` differs.
    pub fn matches(&self, given: &[u8]) -> bool {
        let mut diff = u8::from(given.len() != self.0.len());
        for (i, &want) in self.0.iter().enumerate() {
            let got = given.get(i).copied().unwrap_or(!want);
            diff |= std::hint::black_box(want ^ got);
        }
        diff == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_token_itself_matches() {
        let token = Token::new(" 0123456789abcdefXYZ\n").unwrap();
        assert!(token.matches(b"0123456789abcdefXYZ"));
        assert!(!token.matches(b"0123456789abcdefXY"), "a prefix");
        assert!(!token.matches(b"0123456789abcdefXYZ0"), "longer");
        assert!(!token.matches(b"0123456789abcdefXYz"), "last byte");
        assert!(!token.matches(b"1123456789abcdefXYZ"), "first byte");
        assert!(!token.matches(b""));
        // A NUL-padded guess of the right length is not the token either.
        assert!(!token.matches(&[0u8; 19]));
    }

    #[test]
    fn short_spaced_or_unprintable_tokens_are_refused() {
        assert!(Token::new("short").unwrap_err().contains("16 to 1024"));
        assert!(Token::new("0123456789 abcdef")
            .unwrap_err()
            .contains("printable"));
        assert!(Token::new("0123456789abcdé0").is_err());
        assert!(Token::new(&"x".repeat(1025)).is_err());
    }

    #[test]
    fn a_token_file_others_can_read_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "0123456789abcdef0123\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let refused = Token::from_file(&path, "the token file").unwrap_err();
        assert!(refused.contains("chmod 600"), "{refused}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(Token::from_file(&path, "the token file")
            .unwrap()
            .matches(b"0123456789abcdef0123"));
        let missing = Token::from_file(&dir.path().join("nope"), "the token file").unwrap_err();
        assert!(missing.contains("nope"), "{missing}");
    }
}
