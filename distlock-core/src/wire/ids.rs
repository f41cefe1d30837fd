//! Owner and request ids: short ASCII strings made on every acquire and release, kept inline
//! (no allocation) and sent as bytes.

use std::fmt;

/// An owner or request id, made on every acquire and release: kept inline (no allocation).
#[derive(Clone, Copy)]
pub(crate) struct ShortId {
    len: u8,
    buf: [u8; ShortId::CAPACITY],
}

impl ShortId {
    /// The longest id: `d2:` + 32 hex digits of the client id + `:` + 16 hex digits.
    const CAPACITY: usize = 56;

    /// `<prefix><sep><n in hex>` (a prefix longer than 38 bytes is cut, which the client's own
    /// ids never are).
    pub(crate) fn with_counter(prefix: &str, sep: u8, n: u64) -> ShortId {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut buf = [0u8; ShortId::CAPACITY];
        let head = prefix.len().min(ShortId::CAPACITY - 17);
        buf[..head].copy_from_slice(&prefix.as_bytes()[..head]);
        buf[head] = sep;
        let mut len = head + 1;
        let digits = (64 - n.leading_zeros()).div_ceil(4).max(1);
        for i in (0..digits).rev() {
            buf[len] = HEX[((n >> (i * 4)) & 0xf) as usize];
            len += 1;
        }
        ShortId {
            len: len as u8,
            buf,
        }
    }
}

impl ShortId {
    /// The id's bytes (ASCII), as it goes on the wire.
    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.buf[..usize::from(self.len)]
    }

    /// The id as text (only ASCII is ever written, see `with_counter`).
    pub(crate) fn as_str(&self) -> &str {
        std::str::from_utf8(self.as_bytes()).unwrap_or("")
    }
}

impl fmt::Debug for ShortId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

#[cfg(test)]
mod tests {
    use super::ShortId;

    #[test]
    fn ids_are_prefix_separator_and_hex_counter() {
        assert_eq!(ShortId::with_counter("abc", b':', 0).as_str(), "abc:0");
        assert_eq!(ShortId::with_counter("abc", b':', 255).as_str(), "abc:ff");
        assert_eq!(
            ShortId::with_counter("", b'h', u64::MAX).as_bytes(),
            b"hffffffffffffffff"
        );
        let client = format!("d2:{}", "f".repeat(32));
        let owner = ShortId::with_counter(&client, b':', u64::MAX);
        assert_eq!(owner.as_str(), format!("{client}:{}", "f".repeat(16)));
    }
}
